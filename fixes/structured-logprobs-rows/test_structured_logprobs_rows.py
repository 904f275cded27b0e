"""A structured-output step's logprobs are keyed by its logits rows, under sync and async
scheduling (CPU; needs torch and numpy).

With a structured request in the step, ``sample_tokens`` samples every logits row in one call
and hands ``_build_logprobs_output`` the request ids ``decode_req_ids + prompt_req_ids`` — one
per request, not one per row. A prompt chunk that gets no logits row (sync scheduling, on the
first structured step: ``_extract_prefill_batch_contents`` reads last step's
``use_structured_output``) leaves one id too many: the next prompt's logprobs land on it and the
last id indexes past the rows — an ``IndexError`` in ``sample_tokens``, which ends EngineCore and
every request in flight.

The runner's own code runs the steps (see engine_step.py): D0 and D1 decode; P1, a 40-token
prompt, arrives with S2, a JSON-constrained 8-token prompt, on the first structured step; P1 is
prefilled in chunks of 16, 16 and 8. Every request that gets a token must get the logprobs of
its own row, and no step may raise.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/structured-logprobs-rows``
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vllm_gaudi_stubs import INPUT_BATCH_REL, RUNNER_REL, SamplingParams

_root = os.environ.get("GAUDI_FIXES_VLLM_GAUDI_ROOT") or os.environ.get("GAUDI_FIXES_ROOT")
if not _root:
    pytest.skip("GAUDI_FIXES_ROOT is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(_root)
if not (ROOT / INPUT_BATCH_REL).is_file() or not (ROOT / RUNNER_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} / {RUNNER_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

from engine_step import Engine  # noqa: E402 - after the skip: it needs the tree

PARAMS = {rid: SamplingParams(temperature=0.0, logprobs=1) for rid in ("D0", "D1", "P1", "S2")}
PROMPT_LEN = {"D0": 6, "D1": 9, "P1": 40, "S2": 8}
# (scheduled tokens, a structured request in the step, arrivals, finished)
STEPS = [
    ({"D0": 6, "D1": 9}, False, ["D0", "D1"], []),
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 8}, True, ["P1", "S2"], []),  # the first structured step
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 1}, True, [], []),
    ({"D0": 1, "D1": 1, "P1": 8, "S2": 1}, True, [], []),
]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_structured_logprobs_follow_their_rows(use_async: bool):
    engine = Engine(ROOT, use_async, PARAMS, PROMPT_LEN)
    mode = "async scheduling" if use_async else "sync scheduling"
    wrong = []
    for number, (scheduled, grammar, added, finished) in enumerate(STEPS):
        result = engine.step(scheduled, grammar, added, finished)
        if result.error is not None:
            rows = ", ".join(f"{rid} {n} row(s)" for rid, n in result.rows.items())
            pytest.fail(f"step {number} ({'structured' if result.structured else 'plain'}, prompt chunks: {rows}) "
                        f"raised in sample_tokens under {mode}: {type(result.error).__name__}: {result.error} — "
                        "on a server this ends EngineCore and every request in flight")
        index = engine.batch.req_id_to_index
        for rid, tokens in result.returned.items():
            if not tokens:
                continue
            got = result.logprobs.logprob_token_ids[index[rid]][0] if result.logprobs is not None else None
            if got != tokens[0]:
                wrong.append(f"step {number}: {rid} sampled {tokens[0]}, its logprobs are for token {got}")
    assert not wrong, f"under {mode} logprobs are given to the wrong requests:\n" + "\n".join(wrong)
