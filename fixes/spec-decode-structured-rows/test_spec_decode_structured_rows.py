"""Structured output with speculative decoding gives vLLM's GPU path's tokens (CPU; needs torch,
numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives vllm_gaudi's real ``InputBatch``, the runner's real ``_update_states``,
``_prepare_spec_decode_inputs``, ``sample_tokens``' decode-sampling statement, its structured-output
block and ``apply_grammar_bitmask`` (xgrammar's CPU kernel contract), vLLM's real ``Sampler`` and
``RejectionSampler`` with vllm_gaudi's ``rejection_sample`` (the spec ``harness.Harness``, sync
scheduling). X and Z follow a grammar (a token set), Y has none; X, Y and later Z decode greedily
with drafts equal to their continuation (under the grammar for X and Z), in differing counts (one
step without drafts for Y), all accepted or with a wrong first draft, in a bucket of 2 beside Z's
prefill (Z's grammar row with it) and a bucket of 4 padded after 3 decodes. The scheduler's
bitmask has vLLM's layout: per structured request, in order, one row per draft and one for the
bonus token. Each request must get the tokens vLLM's GPU path gives for the same step
(``spec_decode.gpu_step`` with the grammar applied to each row of X and Z, then its
``RejectionSampler``).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/spec-decode-structured-rows``
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

PROMPTS, STEPS = spec_decode.SCENARIO_PROMPTS, spec_decode.SCENARIO_STEPS  # see spec_decode.py
STRUCTURED = ("X", "Z")
GRAMMAR = [t for t in range(harness.VOCAB) if t % 5 == 2]  # the tokens a structured request may emit
ALLOWED = torch.zeros(harness.VOCAB, dtype=torch.bool)
ALLOWED[GRAMMAR] = True


def _structured(context: list[int]) -> bool:
    return any(context[:len(PROMPTS[rid])] == PROMPTS[rid] for rid in STRUCTURED)


def gpu_row(context: list[int]) -> torch.Tensor:
    """The row vLLM's GPU path samples after `context`: the model's, with the grammar of a
    structured request applied."""
    row = spec_decode.context_row(context)
    return row.masked_fill(~ALLOWED, float("-inf")) if _structured(context) else row


def grammar_output(rows: dict[str, int]) -> types.SimpleNamespace:
    """The scheduler's GrammarOutput in vLLM's layout: `rows[rid]` rows (1 + drafts) per structured
    request, in order; bit ``t % 32`` of word ``t // 32`` set where token ``t`` is allowed."""
    word = np.zeros((harness.VOCAB + 31) // 32, dtype=np.uint32)
    for t in GRAMMAR:
        word[t // 32] |= np.uint32(1 << (t % 32))
    bitmask = np.stack([word for rid in rows for _ in range(rows[rid])]).view(np.int32)
    return types.SimpleNamespace(structured_output_request_ids=list(rows), grammar_bitmask=bitmask)


def _run(root):  # noqa: F811
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4), grammar=True))
    for rid in PROMPTS:
        h.add(rid, PROMPTS[rid], temperature=0.0, max_tokens=64)
    h.step({"X": len(PROMPTS["X"]), "Y": len(PROMPTS["Y"])}, grammar_output=grammar_output({"X": 1}))
    h.step({"X": 1, "Y": 1}, grammar_output=grammar_output({"X": 1}))
    steps = []
    for number, (prefill, counts, wrong) in enumerate(STEPS, start=3):
        drafts = {rid: spec_decode.greedy(h.scheduler.requests[rid].tokens, n, gpu_row) for rid, n in counts.items()}
        if wrong:
            drafts[wrong][0] = (drafts[wrong][0] + 1) % harness.VOCAB
        want = dict(zip(counts, spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid],
                                   list(h.scheduler.requests[rid].output), drafts[rid]) for rid in counts
        ], gpu_row)))
        scheduled = {rid: 1 + n for rid, n in counts.items()}
        if prefill:
            scheduled["Z"] = len(PROMPTS["Z"])
            want["Z"] = [int(gpu_row(PROMPTS["Z"]).argmax())]
        rows = {rid: scheduled[rid] if rid in counts else 1 for rid in STRUCTURED if rid in scheduled}
        try:
            step = h.step(scheduled, grammar_output(rows), drafts={rid: d for rid, d in drafts.items() if d})
        except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
            pytest.fail(f"speculative-decoding step {number} with structured-output requests {STRUCTURED} raised "
                        f"{type(e).__name__}: {e} (an exception in sample_tokens ends EngineCore)")
        steps.append((number, drafts, want, step.returned))
    return steps


@pytest.fixture(scope="module")
def steps(root):  # noqa: F811
    return _run(root)


def test_structured_requests_follow_their_grammar_on_spec_steps(steps):
    for number, drafts, want, got in steps:
        for rid in STRUCTURED:
            bad = [t for t in got.get(rid, []) if t not in GRAMMAR]
            assert not bad, (
                f"speculative-decoding step {number} (drafts {drafts}): structured-output request {rid} got "
                f"{got.get(rid)}, tokens {bad} violate its grammar")


def test_spec_steps_with_a_structured_request_give_gpu_tokens(steps):
    for number, drafts, want, got in steps:
        for rid, tokens in want.items():
            kind = "with a grammar" if rid in STRUCTURED else "without a grammar"
            if got.get(rid) != tokens:
                pytest.fail(f"speculative-decoding step {number} (drafts {drafts}): request {rid} {kind} got "
                            f"{got.get(rid)}, where vLLM's GPU path gives {tokens} (its drafts checked "
                            "and its bonus token kept)")


def test_stand_in(root):  # noqa: F811
    """``greedy_rejection_sample`` keeps the Triton kernel's contract on this test's shapes."""
    out = spec_decode.greedy_rejection_sample(
        torch.tensor([3, 4, 9]), [2, 0, 1], 2, torch.tensor([2, 2, 3]), None,
        torch.nn.functional.one_hot(torch.tensor([3, 5, 8]), 10).float(), torch.tensor([7, 6, 2]),
        types.SimpleNamespace(all_greedy=True))
    assert out.tolist() == [[3, 5, -1], [6, -1, -1], [8, -1, -1]]
