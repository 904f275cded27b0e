"""A prompt chunk that does not finish its prompt returns no token, under sync and async
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
