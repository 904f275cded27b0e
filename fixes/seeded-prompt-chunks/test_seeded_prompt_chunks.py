"""A seeded request gives the same tokens whatever the chunking of its prompt, and whatever the
chunking of a recompute after preemption (CPU; needs torch, numpy and vLLM's pure-Python deps:
_support/requirements.txt).

Drives vllm_gaudi's real ``_update_states``, ``InputBatch``, ``_extract_prefill_batch_contents``,
``_run_sampling`` / ``_prepare_sampling`` and ``sample_tokens``' pieces with vLLM's real
scheduler-output dataclasses and vLLM's own ``TopKTopPSampler`` drawing each seeded row from the
``torch.Generator`` it is handed (harness.py). Under async scheduling, and on a structured-output
step under sync scheduling, a chunk that does not finish its prompt still gets one logits row; it
is sampled, with the request's generator, and its token is dropped. Each such draw moved the
generator on, so the request's first token, and every one after it, depended on how many chunks
its prompt took: ``seed`` was not reproducible under load.

S (seed 1234, temperature 1) has a 24-token prompt; D, greedy, decodes beside it. The reference
computes S's prompt in one chunk; the case computes it in three chunks of 8. The second test
preempts S after 4 tokens of output and resumes it with its block-aligned prefix-cache hit, the
rest recomputed in two chunks; the reference is the same schedule unpreempted.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/seeded-prompt-chunks``
"""

from __future__ import annotations

import types

import pytest
from fixtures import root  # noqa: F401  (pytest fixture)

import harness

PROMPT = 24
DECODES = 6
SEED = 1234
# (scheduling, every step has a structured-output request)
MODES = [("sync", False), ("sync", True), ("async", False)]
MODE_IDS = ["sync", "sync-structured", "async"]
# a step with a structured-output request (no bitmask rows: only the runner's path changes)
GRAMMAR = types.SimpleNamespace(structured_output_request_ids=[], grammar_bitmask=None)


def _describe(mode: str, structured: bool) -> str:
    return f"{mode} scheduling" + (" with a structured-output request in every step" if structured else "")


def _new(root, mode: str) -> harness.Harness:  # noqa: F811
    h = harness.Harness(root, mode)
    h.add("S", harness.prompt(PROMPT, 3), temperature=1.0, seed=SEED, max_tokens=64)
    h.add("D", harness.prompt(6, 4), temperature=0.0, max_tokens=64)
    return h


def _chunked(root, mode: str, structured: bool, chunks: list[int]) -> list[int]:  # noqa: F811
    h, g = _new(root, mode), GRAMMAR if structured else None
    h.step({"D": 6, "S": chunks[0]}, g)
    for n in chunks[1:]:
        h.step({"D": 1, "S": n}, g)
    while len(h.output("S")) < DECODES:
        h.step({"D": 1, "S": 1}, g)
    return h.output("S")[:DECODES]


@pytest.mark.parametrize("mode,structured", MODES, ids=MODE_IDS)
def test_seeded_tokens_do_not_depend_on_prompt_chunking(root, mode, structured):  # noqa: F811
    one = _chunked(root, mode, structured, [PROMPT])
    three = _chunked(root, mode, structured, [8, 8, 8])
    assert three == one, (
        f"request S (seed {SEED}) returned {three} when its {PROMPT}-token prompt was computed in three chunks of 8 "
        f"and {one} when it was computed in one, under {_describe(mode, structured)}: the same seed must give the "
        f"same tokens whatever the chunking (a discarded row of an unfinished chunk drew from S's generator)")


def _resumed(root, mode: str, structured: bool, preempt: bool) -> list[int]:  # noqa: F811
    h, g = _new(root, mode), GRAMMAR if structured else None
    h.step({"D": 6, "S": PROMPT}, g)
    for _ in range(3):
        h.step({"D": 1, "S": 1}, g)  # S has 4 tokens of output
    if preempt:
        h.scheduler.preempt("S")
        h.step({"D": 1}, g)
        rest = len(h.scheduler.requests["S"].tokens) - h.scheduler.hit("S")
        assert rest > 2, "the resume must recompute more than one token for two chunks"
        h.step({"D": 1, "S": rest - rest // 2}, g)  # the first chunk does not reach S's end
        h.step({"D": 1, "S": rest // 2}, g)
    else:
        h.step({"D": 1}, g)
    while len(h.output("S")) < DECODES + 2:
        h.step({"D": 1, "S": 1}, g)
    return h.output("S")[:DECODES + 2]


@pytest.mark.parametrize("mode,structured", MODES, ids=MODE_IDS)
def test_seeded_tokens_after_a_resume_recomputed_in_chunks(root, mode, structured):  # noqa: F811
    plain = _resumed(root, mode, structured, preempt=False)
    resumed = _resumed(root, mode, structured, preempt=True)
    assert resumed == plain, (
        f"request S (seed {SEED}) returned {resumed} after it was preempted and resumed with a prefix-cache hit, its "
        f"recompute in two chunks, and {plain} unpreempted, under {_describe(mode, structured)}: the same seed must "
        f"give the same tokens whether or not the request was preempted")
