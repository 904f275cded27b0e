"""bad_words reach the sampler on their request's row of each call (CPU; needs torch and numpy).

Drives vllm_gaudi's real ``_update_states`` with vLLM's scheduler output, the real ``InputBatch`` and
the runner's own ``_run_sampling`` / ``_prepare_sampling`` (harness.py), and hands each sampler
call's metadata, as the call gets it, to vLLM's REAL ``apply_bad_words``
(``vllm/v1/sample/ops/bad_words.py``), the function the sampler calls.

The sampler indexes ``bad_words_token_ids`` by the row of the call's logits. The scenario is the
issue's: D0 and D1 are decoding when P2 (``bad_words`` -> token 9) arrives with P3 and P4, so P2
sits at persistent row 2 while the runner samples decodes and prefills in separate calls whose rows
are their own. The step is run under each choice the runner may make: a decode bucket of 2 or of
4, each prompt in its own prefill call or P2, P3 and P4 merged in one; then D0, P3 and P4 finish,
``_update_states`` condenses P2 to row 0, and P2 decodes first in a padded bucket of 4.

Rule checked: token 9 is banned on P2's real row of every call that samples P2, and on no other
row. Padding rows (the runner pads a bucket by repeating the call's first request) get no ban:
their tokens are discarded, and a ban there is one more device op per padding row in
``apply_bad_words``' loop — the same rule the padding rows' generators follow.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/bad-words-rows``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness

BANNED = 9
BAD_WORDS = {"P2": [[BANNED]]}
PROMPT_LEN = 8


@dataclass
class Call:
    name: str
    rows: list[str]  # the request of each logits row, padding included
    real: int  # rows[:real] are the call's requests; the rest is padding
    # What the sampler banned on each row when it ran (the batch's dicts change on later steps),
    # or the exception it raised.
    banned: Optional[dict[int, list[list[int]]]] = None
    error: Optional[IndexError] = None


def _run(root, decode_bucket: int, merge: bool) -> list[Call]:  # noqa: F811
    """The scenario with decode buckets of `decode_bucket` and (`merge`) the prompts of a step in
    one prefill call; every sampler call of steps 2 and 3, banned rows read as the call ran."""
    h = harness.Harness(root, "sync")
    h.decode_bucket = lambda n: max(n, decode_bucket)
    if merge:
        h.runner._can_merge_prefill_contents = lambda lhs, rhs: True
    from vllm.v1.sample.ops.bad_words import apply_bad_words  # the tree's, imported by the harness's vllm
    for n, rid in enumerate(("D0", "D1", "P2", "P3", "P4")):
        h.add(rid, harness.prompt(PROMPT_LEN, n), temperature=0.8)
        # as SamplingParams.update_from_tokenizer sets it for bad_words
        h.scheduler.requests[rid].params._bad_words_token_ids = BAD_WORDS.get(rid)
    calls: list[Call] = []
    step = [0]
    sample = h.runner.sampler

    def record(logits: torch.Tensor, sampling_metadata: Any) -> Any:
        md, rows = sampling_metadata, h.model.owners(logits)
        call = Call(f"step {step[0]} sampler call of rows {rows}", rows, len(dict.fromkeys(rows)))
        banned = logits.clone()
        try:
            apply_bad_words(banned, md.bad_words_token_ids, md.output_token_ids)
            call.banned = {i: [[t] for t in torch.nonzero(torch.isinf(banned[i])).flatten().tolist()]
                           for i in range(len(rows)) if torch.isinf(banned[i]).any()}
        except IndexError as err:
            call.error = err
        if step[0] > 1:
            calls.append(call)
        return sample(logits, sampling_metadata=md)

    h.runner.sampler = record
    step[0] = 1  # D0 and D1 arrive and prefill
    h.step({"D0": PROMPT_LEN, "D1": PROMPT_LEN})
    step[0] = 2  # D0, D1 decode; P2 (bad_words), P3, P4 arrive at rows 2, 3, 4 and prefill
    h.step({"D0": 1, "D1": 1, "P2": PROMPT_LEN, "P3": PROMPT_LEN, "P4": PROMPT_LEN})
    assert h.batch.req_ids[:5] == ["D0", "D1", "P2", "P3", "P4"], h.batch.req_ids
    for rid in ("D0", "P3", "P4"):
        h.scheduler.finish(rid)
    step[0] = 3  # _update_states condenses P2 to row 0; P2 and D1 decode
    h.step({"P2": 1, "D1": 1})
    assert h.batch.req_ids[:2] == ["P2", "D1"], h.batch.req_ids
    return calls


@pytest.fixture(scope="module")
def calls(root) -> dict[str, Call]:  # noqa: F811
    by_bucket = {bucket: _run(root, bucket, merge=False) for bucket in (2, 4)}
    merged = _run(root, 2, merge=True)
    def decode(run: list[Call]) -> Call:  # step 2's decode call
        return next(c for c in run if c.name.startswith("step 2") and c.rows[0] == "D0")

    return {"decode": decode(by_bucket[2]), "decode padded": decode(by_bucket[4]),
            "own prefill": next(c for c in by_bucket[2] if c.rows == ["P2"]),
            "merged prefill": next(c for c in merged if c.rows[0] == "P2"),
            "first in padded bucket": by_bucket[4][-1]}

def _check(call: Call) -> None:
    if call.error is not None:
        pytest.fail(f"{call.name}: the sampler's apply_bad_words raised IndexError: {call.error} — P2's bad_words "
                    f"are keyed by its persistent row, not by this {len(call.rows)}-row call's rows; an exception "
                    f"in the sampler ends EngineCore")
    banned = call.banned
    wrong = []
    for i, rid in enumerate(call.rows):
        want = BAD_WORDS.get(rid) if i < call.real else None
        got = banned.get(i)
        what = rid if i < call.real else f"padding copy of {rid}"
        if want and not got:
            wrong.append(f"row {i} ({what}) asked bad_words {want} but was not banned")
        elif got and i >= call.real:
            wrong.append(f"row {i} ({what}) was banned token(s) {got}: padding rows get no ban")
        elif got and not want:
            wrong.append(f"row {i} ({what}) was banned token(s) {got} from another request's bad_words")
        elif got and sorted(got) != sorted(want):
            wrong.append(f"row {i} ({what}) was banned {got}, asked {want}")
    assert not wrong, f"{call.name}:\n" + "\n".join(wrong)


def test_decode_call_without_bad_words(calls: dict[str, Call]):
    """P2 arrives while D0 and D1 decode: their decode call bans nothing and does not crash."""
    _check(calls["decode"])


def test_own_prefill_call(calls: dict[str, Call]):
    """P2's own prefill call (one row) bans token 9 on its row 0."""
    _check(calls["own prefill"])


def test_merged_prefill_call(calls: dict[str, Call]):
    """A prefill call of P2, P3, P4 bans token 9 on P2's row, not on P4's."""
    _check(calls["merged prefill"])


def test_padded_decode_buckets(calls: dict[str, Call]):
    """Padded decode buckets: the ban only on P2's real row (none in D0/D1's call, not on padding)."""
    _check(calls["decode padded"])
    _check(calls["first in padded bucket"])


def test_scenario_exercises_the_trigger(calls: dict[str, Call]):
    """P2's persistent row differs from its row in the prefill calls; step 2 pads with copies of P2."""
    assert calls["own prefill"].rows == ["P2"] and calls["merged prefill"].rows == ["P2", "P3", "P4"]
    assert calls["decode"].rows == ["D0", "D1"]
    assert calls["decode padded"].rows == ["D0", "D1", "D0", "D0"]
    assert calls["first in padded bucket"].rows == ["P2", "D1", "P2", "P2"]
