"""A prompt chunk that does not finish its prompt returns no token, and on a structured-output
step has its logits row, so the step's logprobs are keyed by their rows; under sync and async
scheduling (CPU; needs torch and numpy).

``_extract_prefill_batch_contents`` forces one logits row for an unfinished prompt chunk when
``use_async_scheduling or use_structured_output`` (as vLLM's GPU runner has a row for every
request), and only async scheduling discarded it (``invalid_req_indices``); the flag it reads is
still the previous step's. With sync scheduling (spec decode, ``--no-async-scheduling``) and a
structured request in this step or the previous one, the user got a token predicted mid-prompt
and the next chunk was computed after it. vLLM's GPU runner discards such rows.

The runner's own code runs the steps (see engine_step.py): D0 (JSON-constrained) and D1 decode
while P1, a 40-token prompt, is prefilled in chunks of 16, 16 and 8 — the first chunk in a
structured step, the second in the step after D0 finished, the third completes the prompt.

The logprobs: with a structured request in the step, ``sample_tokens`` samples every logits row
in one call and hands ``_build_logprobs_output`` the ids ``decode_req_ids + prompt_req_ids``, one
per request. Pristine vllm_gaudi sets ``use_structured_output`` only after ``_prepare_inputs`` read
it: on the first structured step under sync scheduling an unfinished chunk has no row, the list has
one id too many, the next prompt's logprobs land on the chunk's request and the last id indexes
past the rows — an ``IndexError`` in ``sample_tokens``, which ends EngineCore and every request in
flight (the grammar bitmask, placed by batch index, misses its row the same way: ``gaudi-fixes
conform`` shows it). Here D0 and D1 decode; P1, a 40-token prompt, arrives with S2, a
JSON-constrained 8-token prompt, on the first structured step, P1 in chunks of 16, 16 and 8; every
request that gets a token must get the logprobs of its own row, and no step may raise.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/unfinished-prompt-no-token``
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

PARAMS = {"D0": SamplingParams(temperature=0.0), "D1": SamplingParams(temperature=0.0),
          "P1": SamplingParams(temperature=0.0)}
PROMPT_LEN = {"D0": 6, "D1": 9, "P1": 40}
# (scheduled tokens, a structured request in the step, arrivals, finished)
STEPS = [
    ({"D0": 6, "D1": 9}, True, ["D0", "D1"], []),
    ({"D0": 1, "D1": 1, "P1": 16}, True, ["P1"], []),  # P1's first chunk in a structured step
    ({"D1": 1, "P1": 16}, False, [], ["D0"]),  # the next chunk right after it
    ({"D1": 1, "P1": 8}, False, [], []),  # the prompt is done: its first token
    ({"D1": 1, "P1": 1}, False, [], []),
]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_unfinished_prompt_returns_no_token(use_async: bool):
    engine = Engine(ROOT, use_async, PARAMS, PROMPT_LEN)
    mode = "async scheduling" if use_async else "sync scheduling"
    wrong, computed = [], 0
    for number, (scheduled, grammar, added, finished) in enumerate(STEPS):
        result = engine.step(scheduled, grammar, added, finished)
        assert result.error is None, (f"step {number} raised in sample_tokens under {mode} (on a server this ends "
                                      f"EngineCore): {type(result.error).__name__}: {result.error}")
        for rid, tokens in result.returned.items():
            if rid != "P1":
                if len(tokens) != 1:
                    wrong.append(f"step {number}: {rid} returned {tokens}, want one token")
                continue
            computed += scheduled["P1"]
            want = 1 if computed >= PROMPT_LEN["P1"] else 0
            if len(tokens) != want:
                what = (f"a token predicted mid-prompt: {tokens}" if want == 0 else f"{tokens}, want one token")
                wrong.append(f"step {number}: P1 ({computed} of its {PROMPT_LEN['P1']} prompt tokens computed"
                             f"{', a structured step' if result.structured else ''}) returned {what}")
    assert not wrong, (f"under {mode} an unfinished prompt chunk returned a sampled token (the user receives a token "
                       "predicted mid-prompt and the next chunk is computed after it):\n" + "\n".join(wrong))


LOGPROBS_PARAMS = {rid: SamplingParams(temperature=0.0, logprobs=1) for rid in ("D0", "D1", "P1", "S2")}
LOGPROBS_PROMPT_LEN = {"D0": 6, "D1": 9, "P1": 40, "S2": 8}
# (scheduled tokens, a structured request in the step, arrivals, finished)
LOGPROBS_STEPS = [
    ({"D0": 6, "D1": 9}, False, ["D0", "D1"], []),
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 8}, True, ["P1", "S2"], []),  # the first structured step
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 1}, True, [], []),
    ({"D0": 1, "D1": 1, "P1": 8, "S2": 1}, True, [], []),
]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_structured_logprobs_follow_their_rows(use_async: bool):
    engine = Engine(ROOT, use_async, LOGPROBS_PARAMS, LOGPROBS_PROMPT_LEN)
    mode = "async scheduling" if use_async else "sync scheduling"
    wrong = []
    for number, (scheduled, grammar, added, finished) in enumerate(LOGPROBS_STEPS):
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
