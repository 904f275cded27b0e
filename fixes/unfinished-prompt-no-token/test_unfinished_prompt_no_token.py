"""A prompt chunk that does not finish its prompt returns no token, and on a structured-output
step has its logits row, so the step's logprobs are keyed by their rows; under sync and async
scheduling (CPU; needs torch and numpy).

``_extract_prefill_batch_contents`` forces one logits row for an unfinished prompt chunk when
``use_async_scheduling or use_structured_output`` (as vLLM's GPU runner has a row for every
request), and only async scheduling discarded it (``invalid_req_indices``); the flag it reads is
still the previous step's. With sync scheduling (spec decode, ``--no-async-scheduling``) and a
structured request in this step or the previous one, the user got a token predicted mid-prompt
and the next chunk was computed after it. vLLM's GPU runner discards such rows.

vllm_gaudi's own ``_update_states`` and ``sample_tokens`` pieces run the steps, driven by vLLM's
scheduler output (harness.py): D0 (JSON-constrained) and D1 decode while P1, a 40-token prompt, is
prefilled in chunks of 16, 16 and 8 — the first chunk in a structured step, the second in the step
after D0 finished, the third completes the prompt.

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

import types

import pytest
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness

PROMPT_LEN = {"D0": 6, "D1": 9, "P1": 40}
# (scheduled tokens, a structured request in the step, finished before the step)
STEPS = [
    ({"D0": 6, "D1": 9}, True, []),
    ({"D0": 1, "D1": 1, "P1": 16}, True, []),  # P1's first chunk in a structured step
    ({"D1": 1, "P1": 16}, False, ["D0"]),  # the next chunk right after it
    ({"D1": 1, "P1": 8}, False, []),  # the prompt is done: its first token
    ({"D1": 1, "P1": 1}, False, []),
]


def _grammar(structured: bool) -> object:
    """The step's GrammarOutput when a structured request is in it (its bitmask is not this
    test's subject: the harness's ``apply_grammar_bitmask`` is a no-op)."""
    return types.SimpleNamespace(structured_output_request_ids=[]) if structured else None


def _run(h: harness.Harness, number: int, scheduled: dict[str, int], structured: bool, mode: str):
    try:
        return h.step(scheduled, grammar_output=_grammar(structured))
    except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
        pytest.fail(f"step {number} ({'structured' if structured else 'plain'}, scheduled {scheduled}) raised in "
                    f"sample_tokens under {mode} scheduling: {type(e).__name__}: {e} — on a server this ends "
                    "EngineCore and every request in flight")


def test_unfinished_prompt_returns_no_token(root, mode):  # noqa: F811
    h = harness.Harness(root, mode)
    for n, rid in enumerate(PROMPT_LEN):
        h.add(rid, harness.prompt(PROMPT_LEN[rid], n), temperature=0.0)
    wrong, computed = [], 0
    for number, (scheduled, structured, finished) in enumerate(STEPS):
        for rid in finished:
            h.scheduler.finish(rid)
        step = _run(h, number, scheduled, structured, mode)
        for rid, tokens in step.returned.items():
            if rid != "P1":
                if len(tokens) != 1:
                    wrong.append(f"step {number}: {rid} returned {tokens}, want one token")
                continue
            computed += scheduled["P1"]
            want = 1 if computed >= PROMPT_LEN["P1"] else 0
            if len(tokens) != want:
                what = (f"a token predicted mid-prompt: {tokens}" if want == 0 else f"{tokens}, want one token")
                wrong.append(f"step {number}: P1 ({computed} of its {PROMPT_LEN['P1']} prompt tokens computed"
                             f"{', a structured step' if step.structured else ''}) returned {what}")
    assert not wrong, (f"under {mode} scheduling an unfinished prompt chunk returned a sampled token (the user "
                       "receives a token predicted mid-prompt and the next chunk is computed after it):\n"
                       + "\n".join(wrong))


LOGPROBS_PROMPT_LEN = {"D0": 6, "D1": 9, "P1": 40, "S2": 8}
# (scheduled tokens, a structured request in the step)
LOGPROBS_STEPS = [
    ({"D0": 6, "D1": 9}, False),
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 8}, True),  # the first structured step
    ({"D0": 1, "D1": 1, "P1": 16, "S2": 1}, True),
    ({"D0": 1, "D1": 1, "P1": 8, "S2": 1}, True),
]


def test_structured_logprobs_follow_their_rows(root, mode):  # noqa: F811
    h = harness.Harness(root, mode)
    for n, rid in enumerate(LOGPROBS_PROMPT_LEN):
        h.add(rid, harness.prompt(LOGPROBS_PROMPT_LEN[rid], n), temperature=0.0, logprobs=1)
    wrong = []
    for number, (scheduled, structured) in enumerate(LOGPROBS_STEPS):
        step = _run(h, number, scheduled, structured, mode)
        index = h.batch.req_id_to_index
        for rid, tokens in step.returned.items():
            if not tokens:
                continue
            got = step.logprobs.logprob_token_ids[index[rid]][0] if step.logprobs is not None else None
            if got != tokens[0]:
                wrong.append(f"step {number}: {rid} sampled {tokens[0]}, its logprobs are for token {got}")
    assert not wrong, f"under {mode} scheduling logprobs are given to the wrong requests:\n" + "\n".join(wrong)
