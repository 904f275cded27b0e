"""A spec-decode request with fewer drafts than the step's most keeps its bonus token on HPU
(CPU; needs torch, numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives the real ``InputBatch``, the runner's real ``_update_states``, ``_prepare_spec_decode_inputs``
(HPU pads every request's draft rows to the step's most drafts) and decode-sampling statement,
vLLM's real ``Sampler`` and ``RejectionSampler`` with vllm_gaudi's ``rejection_sample``
(spec_decode.py; sync scheduling). Greedy requests A, B, C decode with drafts equal to their own
greedy continuation (all accepted) in differing counts — 3, 1, 2 (a bucket of 4 padded after 3
decodes), then 1, 3, 0 — and with a wrong last draft for C, then A; each step's tokens per request are held
against vLLM's GPU path for the same step (compact layout, one metadata row per request, vLLM's
``RejectionSampler``; a torch stand-in for its Triton greedy kernel).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/rejection-sample-padding``
"""

from __future__ import annotations

import pytest
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

PROMPTS = {"A": harness.prompt(6, 7), "B": harness.prompt(5, 8), "C": harness.prompt(4, 9)}
# Each spec step: draft count per request, and the request whose last draft is wrong.
STEPS = (
    ({"A": 3, "B": 1, "C": 2}, None),  # bucket 4, padded after 3 decodes
    ({"A": 1, "B": 3, "C": 0}, None),  # C with no drafts beside others
    ({"A": 2, "B": 1, "C": 3}, "C"),
    ({"A": 3, "B": 2, "C": 1}, "A"),
)


@pytest.fixture(scope="module")
def steps(root):  # noqa: F811
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    for rid, p in PROMPTS.items():
        h.add(rid, p, temperature=0.0, max_tokens=64)
    h.step({rid: len(p) for rid, p in PROMPTS.items()})
    out = []
    for number, (counts, wrong) in enumerate(STEPS, start=2):
        drafts = {rid: spec_decode.greedy(h.scheduler.requests[rid].tokens, n) for rid, n in counts.items() if n}
        if wrong:
            drafts[wrong][-1] = (drafts[wrong][-1] + 1) % harness.VOCAB
        want = spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid],
                                   list(h.scheduler.requests[rid].output), drafts.get(rid, [])) for rid in counts
        ], spec_decode.context_row)
        try:
            step = h.step({rid: 1 + n for rid, n in counts.items()}, drafts=drafts)
        except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
            pytest.fail(f"speculative-decoding step {number} raised {type(e).__name__}: {e}")
        out.append((number, counts, drafts, dict(zip(counts, want)), step.returned))
    return out


def test_every_request_gets_the_gpu_paths_tokens(steps):
    for number, counts, drafts, want, got in steps:
        most = max(counts.values())
        for rid, tokens in want.items():
            lost = (len(got.get(rid) or []) == len(tokens) - 1 and got.get(rid) == tokens[:-1])
            why = (f" — its bonus token lost: {counts[rid]} drafts, fewer than the step's most ({most})"
                   if lost else "")
            assert got.get(rid) == tokens, (
                f"step {number} (drafts {drafts}): request {rid} got {got.get(rid)} where vLLM's GPU path gives "
                f"{tokens}{why}")
