"""min_tokens holds back a request's stop token on speculative-decoding steps too, and no step
raises (CPU; needs torch, numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives vllm_gaudi's real ``InputBatch`` with vLLM's real ``MinTokensLogitsProcessor`` (built by
``build_logitsprocs`` with a speculative config, as vLLM builds it), the runner's real
``_update_states``, ``_prepare_spec_decode_inputs`` (the HPU layout of the draft rows) and
``sample_tokens``' decode-sampling statement, vLLM's real ``Sampler`` and ``RejectionSampler`` with
vllm_gaudi's ``rejection_sample`` (spec_decode.py; sync scheduling: vllm_gaudi turns async off with
a speculative config). Greedy requests B (plain, row 0), A (``min_tokens=4``, stop token 9; the
model prefers 9 after A's context, row 1) and later C (plain) are prefilled, decode once without
drafts, then with drafts: the drafter proposes each request's greedy continuation without min_tokens (A's drafts are
its stop token, which min_tokens must reject), with differing counts, in a bucket of 2 holding
exactly the batch (the call's rows are rows 0..1), beside C's prefill, and in a bucket of 4 padded
after 3 decodes, with a wrong first draft for C, then for B. A must not say 9 among its first 4
tokens, no step may raise, and each step's tokens for A are held against vLLM's GPU path for the
same step (``spec_decode.gpu_step``: compact layout, one metadata row per request, the real
processor and rejection sampler, a torch stand-in for its Triton greedy kernel).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/logitsprocs-batch-updates``
"""

from __future__ import annotations

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

STOP = 9
MIN_TOKENS = 4
PROMPTS = {"A": harness.prompt(6, 1), "B": harness.prompt(5, 2), "C": harness.prompt(7, 3)}


def model(context: list[int]) -> torch.Tensor:
    row = spec_decode.context_row(context)
    if context[:len(PROMPTS["A"])] == PROMPTS["A"]:
        row[STOP] += 50.0  # A's context prefers its stop token
    return row


# Steps after the prefill of B and A: C's prompt (or None), then each decode's draft count, and
# the request whose first draft is wrong.
STEPS = (
    # bucket 2, no padding: the call's rows are rows 0..1; in vLLM's compact layout A's 2 rows to
    # hold back would be B's padding rows
    (False, {"B": 1, "A": 3}, None),
    (True, {"B": 2, "A": 2}, None),  # C's prefill in the same step
    (False, {"B": 1, "A": 3, "C": 2}, "C"),  # bucket 4, padded after 3 decodes
    (False, {"B": 2, "A": 2, "C": 2}, "B"),
)


def _run(root):  # noqa: F811
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4), row=model))
    h.add("B", PROMPTS["B"], temperature=0.0, max_tokens=32)
    h.add("A", PROMPTS["A"], temperature=0.0, min_tokens=MIN_TOKENS, stop_token_ids=[STOP], max_tokens=32)
    h.add("C", PROMPTS["C"], temperature=0.0, max_tokens=32)
    h.step({"B": len(PROMPTS["B"]), "A": len(PROMPTS["A"])})
    h.step({"B": 1, "A": 1})  # a decode without drafts: A has 2 of its 4 tokens, 2 to hold back
    steps = []
    for number, (prefill, counts, wrong) in enumerate(STEPS, start=3):
        drafts = {rid: spec_decode.greedy(h.scheduler.requests[rid].tokens, n, model) for rid, n in counts.items()}
        if wrong:
            drafts[wrong][0] = (drafts[wrong][0] + 1) % harness.VOCAB
        before = {rid: list(h.scheduler.requests[rid].output) for rid in counts}
        want = spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid], before[rid], drafts[rid])
            for rid in counts
        ], model)
        scheduled = {rid: 1 + n for rid, n in counts.items()}
        if prefill:
            scheduled["C"] = len(PROMPTS["C"])
        try:
            step = h.step(scheduled, drafts=drafts)
        except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
            pytest.fail(f"speculative-decoding step {number} with a min_tokens request raised {type(e).__name__}: "
                        f"{e} (an exception in sample_tokens ends EngineCore)")
        steps.append((number, drafts, dict(zip(counts, want)), step.returned))
    return h, steps


@pytest.fixture(scope="module")
def run(root):  # noqa: F811
    return _run(root)


def test_min_tokens_request_is_held_back_on_spec_steps(run):
    h, _ = run
    said = h.output("A")
    early = said[:MIN_TOKENS]
    assert STOP not in early, (
        f"min_tokens={MIN_TOKENS} request was not held back from its stop token {STOP} with speculative decoding: "
        f"it said {said}, {STOP} as token #{early.index(STOP) + 1}")


def test_min_tokens_request_gets_the_gpu_paths_tokens(run):
    """Step by step, the min_tokens request's tokens are those vLLM's GPU path gives for the same
    drafts (the other requests' are spec-decode-rows' subject: a request with fewer drafts than
    the step's most loses its bonus token on HPU)."""
    _, steps = run
    for number, drafts, want, got in steps:
        assert got.get("A") == want["A"], (
            f"step {number} (drafts {drafts}): the min_tokens={MIN_TOKENS} request got {got.get('A')} where vLLM's "
            f"GPU path gives {want['A']}")


def test_stand_in_keeps_the_kernels_contract():
    """The torch stand-in for vLLM's Triton greedy kernel: target argmax up to and including the
    first mismatch; bonus only when all drafts matched; -1 elsewhere; compact layout."""
    md = type("M", (), {"all_greedy": True})()
    logits = torch.full((5, 8), -1.0)
    for row, tok in enumerate([3, 4, 5, 6, 1]):
        logits[row, tok] = 1.0
    out = spec_decode.greedy_rejection_sample(torch.tensor([3, 4, 5, 0, 1], dtype=torch.int32), [2, 0, 3], 3,
                                              torch.tensor([2, 2, 5]), None, logits,
                                              torch.tensor([[7], [2], [6]]), md)
    assert out.tolist() == [[3, 4, 7, -1], [2, -1, -1, -1], [5, 6, -1, -1]]
