"""logprobs come back for every token of a speculative-decoding step, as on vLLM's GPU path (CPU;
needs torch, numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives vllm_gaudi's real ``InputBatch``, the runner's real ``_update_states``,
``_prepare_spec_decode_inputs``, ``sample_tokens``' decode-sampling statement and
``_build_logprobs_output``, vLLM's real ``Sampler`` and ``RejectionSampler`` (its logprobs) with
vllm_gaudi's ``rejection_sample`` (the spec ``harness.Harness``; sync scheduling). Greedy X and Y
(``logprobs=3``) and later Z (plain) decode with drafts equal to their greedy continuation, in
differing counts (one step without drafts for Y), all accepted or with a wrong first draft, in a
bucket of 2 holding exactly the batch (beside Z's prefill) and a bucket of 4 padded after 3
decodes. Each token a request gets must come with its logprobs row, as vLLM's GPU path returns it
(the default ``logprobs_mode``, raw logprobs: the sampled token and the top 3 of
``log_softmax`` of the model's row for the position that produced the token), found the way vLLM's
scheduler finds it (``LogprobsLists.slice_request``: ``cu_num_generated_tokens``).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/spec-decode-logprobs``
"""

from __future__ import annotations

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

LOGPROBS = 3
PROMPTS, STEPS = spec_decode.SCENARIO_PROMPTS, spec_decode.SCENARIO_STEPS  # see spec_decode.py


def _run(root):  # noqa: F811
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    h.add("X", PROMPTS["X"], temperature=0.0, max_tokens=64, logprobs=LOGPROBS)
    h.add("Y", PROMPTS["Y"], temperature=0.0, max_tokens=64, logprobs=LOGPROBS)
    h.add("Z", PROMPTS["Z"], temperature=0.0, max_tokens=64)
    h.step({"X": len(PROMPTS["X"]), "Y": len(PROMPTS["Y"])})
    h.step({"X": 1, "Y": 1})
    steps = []
    for number, (prefill, counts, wrong) in enumerate(STEPS, start=3):
        before = {rid: list(h.scheduler.requests[rid].tokens) for rid in counts}
        drafts = {rid: spec_decode.greedy(before[rid], n) for rid, n in counts.items()}
        if wrong:
            drafts[wrong][0] = (drafts[wrong][0] + 1) % harness.VOCAB
        scheduled = {rid: 1 + n for rid, n in counts.items()}
        if prefill:
            scheduled["Z"] = len(PROMPTS["Z"])
        step = h.step(scheduled, drafts={rid: d for rid, d in drafts.items() if d})
        batch = h.batch
        out = h.runner._build_logprobs_output(step.ns["logprobs_segments"], max(batch.req_id_to_index.values()) + 1)
        steps.append((number, before, drafts, step.returned, out, dict(batch.req_id_to_index)))
    return steps


@pytest.fixture(scope="module")
def steps(root):  # noqa: F811
    return _run(root)


def test_every_token_of_a_spec_step_has_its_logprobs(steps):
    for number, before, drafts, returned, out, index in steps:
        for rid in ("X", "Y"):
            tokens = returned[rid]
            assert out is not None, (
                f"speculative-decoding step {number} (drafts {drafts}): request {rid} asked for logprobs={LOGPROBS} "
                f"and got its {len(tokens)} token(s) {tokens} without any logprobs")
            cu = out.cu_num_generated_tokens
            start = cu[index[rid]] if cu is not None else index[rid]
            rows = out.logprob_token_ids[start:start + len(tokens)]
            values = out.logprobs[start:start + len(tokens)]
            for j, token in enumerate(tokens):
                row = spec_decode.context_row(before[rid] + drafts[rid][:j])
                want = torch.log_softmax(row.float(), dim=-1)
                top = want.topk(LOGPROBS).indices.tolist()
                got_ids = [int(t) for t in rows[j]] if j < len(rows) else None
                assert got_ids == [token, *top], (
                    f"speculative-decoding step {number} (drafts {drafts}): request {rid}'s token #{j + 1} of "
                    f"{tokens} came with the logprobs of tokens {got_ids}, where vLLM's GPU path gives "
                    f"{[token, *top]} (the sampled token, then the top {LOGPROBS})")
                assert abs(float(values[j][0]) - float(want[token])) < 1e-4, (
                    f"speculative-decoding step {number}: request {rid}'s token {token} has logprob "
                    f"{float(values[j][0]):.4f}, vLLM's GPU path {float(want[token]):.4f}")


def test_one_token_of_a_lone_spec_request_has_its_logprobs(root):  # noqa: F811
    """One request with logprobs decoding alone, its one draft wrong: one token of its two
    positions (the step's logprobs segment holds the request once, then an unused position)."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    h.add("X", PROMPTS["X"], temperature=0.0, max_tokens=64, logprobs=LOGPROBS)
    h.step({"X": len(PROMPTS["X"])})
    h.step({"X": 1})
    before = list(h.scheduler.requests["X"].tokens)
    draft = [(spec_decode.greedy(before, 1)[0] + 1) % harness.VOCAB]
    try:
        step = h.step({"X": 2}, drafts={"X": draft})
        out = h.runner._build_logprobs_output(step.ns["logprobs_segments"], max(h.batch.req_id_to_index.values()) + 1)
    except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
        pytest.fail(f"a speculative-decoding step of request X alone (logprobs={LOGPROBS}, its draft {draft} wrong) "
                    f"raised {type(e).__name__}: {e} (an exception in sample_tokens ends EngineCore)")
    tokens = step.returned["X"]
    want = torch.log_softmax(spec_decode.context_row(before).float(), dim=-1).topk(LOGPROBS).indices.tolist()
    got = [int(t) for t in out.logprob_token_ids[0]]
    assert len(tokens) == 1 and got == [tokens[0], *want], (
        f"request X alone, its draft {draft} wrong: got {tokens} with the logprobs of tokens {got}, where vLLM's "
        f"GPU path gives {[tokens[0], *want]}")
