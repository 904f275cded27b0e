"""allowed_token_ids whitelists stay with their requests (CPU; needs torch and numpy).

The harness (harness.py) runs the steps: vLLM's scheduler output through the runner's own
``_update_states`` (remove / add / condense / refresh) into the REAL ``InputBatch``, then
``sample_tokens``' reordering and one ``_prepare_sampling`` per sampler call (the prompts of a
step merged in one prefill call), with the real ``async_h2d_copy`` / ``async_h2d_update`` on
device "cpu"; each call's mask is read as the call is made.

The main scenario: five requests, two of them restricted with ``allowed_token_ids``, go through
five steps:
1. arrivals A (long prompt, unrestricted), R (long prompt, ``[3, 5]``), U (short, unrestricted),
   Q (short, ``[7]``); U and Q finish their prefill;
2. U and Q decode behind A's and R's last chunks: the runner swaps A with Q (unrestricted row
   first) and R with U (restricted row first), with no arrival;
3. U and A finish: ``condense`` moves R from row 2 to row 1;
4. N (unrestricted) arrives and is placed on row 2, the row ``condense`` emptied;
5. nothing moves.
The condense scenario is the issue's, without swaps: D, B and C (``[9, 11]``), with C's row moved by
``condense`` when A finishes and the unrestricted E placed on the row it emptied.
Every row handed to the sampler must carry its own request's whitelist (or none). On pristine
vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/allowed-token-ids-rows``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness

VOCAB = 64

# request -> (allowed_token_ids, prompt length)
REQUESTS: dict[str, tuple[Optional[list[int]], int]] = {
    "A": (None, 48),
    "R": ([3, 5], 48),
    "U": (None, 8),
    "Q": ([7], 8),
    "N": (None, 8),
    # The condense scenario.
    "B": (None, 8),
    "C": ([9, 11], 8),
    "D": (None, 8),
    "E": (None, 8),
}


def allowed(rid: str) -> set[int]:
    """The tokens request `rid` may be sampled from: what it asked for, else the vocabulary."""
    ids, _ = REQUESTS[rid]
    return set(ids) if ids else set(range(VOCAB))


@dataclass
class Call:
    step: int
    kind: str  # decode | prefill
    rows: list[str]
    # The tokens each row may be sampled from, as the sampler sees them: the mask marks the
    # tokens it fills with -inf (True); no mask means every token.
    allowed: list[set[int]]


@dataclass
class Step:
    number: int
    swaps: list[tuple[int, int]] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)  # the batch's rows at sampling time
    calls: list[Call] = field(default_factory=list)


def _allowed_sets(logits: torch.Tensor, metadata: Any) -> list[set[int]]:
    mask = metadata.allowed_token_ids_mask
    if mask is None:
        return [set(range(VOCAB)) for _ in range(logits.shape[0])]
    assert mask.shape == (logits.shape[0], VOCAB), f"a mask of shape {tuple(mask.shape)} for {logits.shape[0]} rows"
    return [set(torch.nonzero(~mask[i]).flatten().tolist()) for i in range(logits.shape[0])]


def _run(root, plan: list[tuple[dict[str, int], tuple[str, ...]]]) -> list[Step]:  # noqa: F811
    """`plan`: per step, the scheduled tokens and the requests finished before it."""
    h = harness.Harness(root, "sync", vocab=VOCAB)
    h.decode_bucket = lambda n: 1 << (n - 1).bit_length()
    h.runner._can_merge_prefill_contents = lambda lhs, rhs: True  # one prefill call per step
    h.sampler.watch = _allowed_sets
    for n, rid in enumerate(dict.fromkeys(r for scheduled, _ in plan for r in scheduled)):
        ids, length = REQUESTS[rid]
        h.add(rid, [(11 * i + n) % VOCAB for i in range(length)], temperature=1.0, allowed_token_ids=ids)
    swaps = h.record_swaps()
    steps = []
    for number, (scheduled, finished) in enumerate(plan, start=1):
        for rid in finished:
            h.scheduler.finish(rid)
        del swaps[:]
        before = len(h.sampler.calls)
        out = h.step(scheduled)
        record = Step(number, list(swaps), list(h.batch.req_ids))
        for c in h.sampler.calls[before:]:
            rows = h.model.owners(c["logits"])
            kind = "decode" if out.rows.get(rows[0]) is None else "prefill"
            record.calls.append(Call(number, kind, rows, c["seen"]))
        steps.append(record)
    return steps


@pytest.fixture(scope="module")
def steps(root) -> list[Step]:  # noqa: F811
    return _run(root, [
        # A and R prefill their first chunk of 24; U and Q prefill whole.
        ({"A": 24, "R": 24, "U": 8, "Q": 8}, ()),
        # U and Q are decodes behind A's and R's last chunks: swap(A, Q), swap(R, U).
        ({"A": 24, "R": 24, "U": 1, "Q": 1}, ()),
        # U and A finish; condense moves R into U's row.
        ({"R": 1, "Q": 1}, ("U", "A")),
        # N arrives on the row condense emptied.
        ({"R": 1, "Q": 1, "N": 8}, ()),
        # Nothing moves.
        ({"R": 1, "Q": 1, "N": 1}, ()),
    ])


@pytest.fixture(scope="module")
def condense_steps(root) -> list[Step]:  # noqa: F811
    return _run(root, [
        ({"D": 8, "B": 8, "C": 8}, ()),
        # D finishes; condense moves C (row 2) to row 0.
        ({"B": 1, "C": 1}, ("D", )),
        # E arrives on row 2.
        ({"B": 1, "C": 1, "E": 8}, ()),
        ({"B": 1, "C": 1, "E": 1}, ()),
    ])


def _describe(tokens: set[int]) -> str:
    if tokens == set(range(VOCAB)):
        return "the whole vocabulary"
    return f"only {sorted(tokens)}" if tokens else "no token at all"


def _wrong_rows(calls: list[Call]) -> list[str]:
    wrong = []
    for call in calls:
        for i, rid in enumerate(call.rows):
            if call.allowed[i] != allowed(rid):
                owner = [o for o, (ids, _) in REQUESTS.items() if ids and set(ids) == call.allowed[i]]
                whose = f" (request {owner[0]}'s whitelist)" if owner and owner[0] != rid else ""
                wrong.append(f"step {call.step} {call.kind} row {i}: request {rid} asked for "
                             f"{_describe(allowed(rid))} but was sampled from {_describe(call.allowed[i])}{whose}")
    return wrong


def test_scenario_swaps_condenses_and_refills(steps: list[Step]):
    """The scenario reaches both swap orders, a condense that moves a restricted request and an
    arrival on the row it emptied."""
    assert steps[1].swaps == [(0, 3), (1, 2)], steps[1].swaps
    assert steps[1].rows == ["Q", "U", "R", "A"], steps[1].rows
    assert steps[2].rows == ["Q", "R"], steps[2].rows
    assert steps[3].rows == ["Q", "R", "N"], steps[3].rows
    assert sorted((c.kind, c.rows) for c in steps[1].calls) == [("decode", ["Q", "U"]), ("prefill", ["R", "A"])]
    assert sorted((c.kind, c.rows) for c in steps[3].calls) == [("decode", ["Q", "R"]), ("prefill", ["N"])]


def test_condense_scenario_refills_the_emptied_row(condense_steps: list[Step]):
    assert [s.swaps for s in condense_steps] == [[], [], [], []]
    assert [s.rows for s in condense_steps] == [["D", "B", "C"], ["C", "B"], ["C", "B", "E"], ["C", "B", "E"]]


def test_swap_keeps_each_whitelist_with_its_request(steps: list[Step]):
    """Step 2 swaps A (no whitelist) with Q ([7]) and R ([3, 5]) with U (none)."""
    wrong = _wrong_rows(steps[1].calls)
    assert not wrong, "after swap_states, rows were sampled under another request's whitelist:\n" + "\n".join(wrong)


def test_arrival_on_a_condensed_row_has_no_stale_whitelist(condense_steps: list[Step]):
    """E lands on row 2, which condense emptied when it moved C to row 0."""
    wrong = _wrong_rows([call for step in condense_steps for call in step.calls])
    assert not wrong, ("a request added after condense was sampled under the whitelist of the request that "
                       "left its row:\n" + "\n".join(wrong))


def test_every_row_every_step(steps: list[Step]):
    wrong = _wrong_rows([call for step in steps for call in step.calls])
    assert not wrong, "rows sampled under another request's whitelist:\n" + "\n".join(wrong)
