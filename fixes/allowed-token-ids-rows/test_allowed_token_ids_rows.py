"""allowed_token_ids whitelists stay with their requests (CPU; needs torch and numpy).

Drives the REAL ``InputBatch`` of ``$GAUDI_FIXES_ROOT/vllm_gaudi/v1/worker/hpu_input_batch.py``
through the HPU runner's own sequence — ``_update_states``' remove / add / condense / refresh,
then ``sample_tokens``' ``_ensure_decodes_first`` and one ``_prepare_sampling`` per sampler call,
those runner functions lifted from the real ``hpu_model_runner.py`` — with vLLM's imports stubbed
and the real ``async_h2d_copy`` / ``async_h2d_update`` on device "cpu" (see vllm_gaudi_stubs.py).

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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from vllm_gaudi_stubs import (
    INPUT_BATCH_REL,
    UTILS_REL,
    H2DRecorder,
    Runner,
    SamplingParams,
    SchedulerOutput,
    load_input_batch,
)

ROOT_ENV = "GAUDI_FIXES_ROOT"
VOCAB = 64

if not os.environ.get(ROOT_ENV):
    pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(os.environ[ROOT_ENV])
if not (ROOT / INPUT_BATCH_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

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


class Scenario:
    def __init__(self, root: Path):
        self.h2d = H2DRecorder(root / UTILS_REL)
        self.module = load_input_batch(root, self.h2d)
        self.batch = self.module.InputBatch(
            max_num_reqs=8,
            max_model_len=256,
            max_num_batched_tokens=512,
            device=torch.device("cpu"),
            pin_memory=False,
            vocab_size=VOCAB,
            block_sizes=[128],
            kernel_block_sizes=[128],
        )
        self.runner = Runner(root, self.batch)
        self.swaps: list[tuple[int, int]] = []
        swap_states = self.batch.swap_states

        def recording_swap(i1: int, i2: int) -> None:
            self.swaps.append((i1, i2))
            swap_states(i1, i2)

        self.batch.swap_states = recording_swap

    def request(self, rid: str) -> Any:
        ids, length = REQUESTS[rid]
        return self.module.CachedRequestState(
            req_id=rid,
            prompt_token_ids=[(11 * i + len(rid)) % VOCAB for i in range(length)],
            mm_features=[],
            sampling_params=SamplingParams(temperature=1.0, allowed_token_ids=ids),
            generator=None,
            block_ids=[[0]],
            num_computed_tokens=0,
            output_token_ids=[],
        )

    def step(self, number: int, scheduled: dict[str, int], completes: set[str], added=(), finished=()) -> Step:
        """One engine step: HPUModelRunner._update_states' batch edits (removals, arrivals into
        the emptied rows first, condense, refresh), then sample_tokens' reordering and sampler
        calls. `completes`: prompts whose chunk finishes (they have logits)."""
        batch, runner = self.batch, self.runner
        removed: list[int] = []
        for rid in finished:
            runner.requests.pop(rid)
            index = batch.remove_request(rid)
            assert index is not None
            removed.append(index)
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        batch_changed = len(removed) > 0 or len(added) > 0
        removed = sorted(removed, reverse=True)
        for state in added:
            runner.requests[state.req_id] = state
            batch.add_request(state, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)
        if batch_changed:
            batch.refresh_sampling_metadata()
        record = Step(number)
        del self.swaps[:]
        sched = SchedulerOutput(num_scheduled_tokens=scheduled)
        runner._ensure_decodes_first(sched)
        record.swaps = list(self.swaps)
        record.rows = list(batch.req_ids)
        decodes = [rid for i, rid in enumerate(batch.req_ids) if not runner._is_prompt(i, sched)]
        prompts = [rid for i, rid in enumerate(batch.req_ids) if runner._is_prompt(i, sched)]
        if decodes:
            pad_to = 1 << (len(decodes) - 1).bit_length()  # a decode bucket
            metadata = runner._prepare_sampling(batch_changed, decodes, pad_to)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(decodes, pad_to)]
            record.calls.append(self._call(number, "decode", rows, metadata))
        logits_requests = [rid for rid in prompts if rid in completes]
        if logits_requests:
            metadata = runner._prepare_sampling(batch_changed, prompts, len(logits_requests), logits_requests)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(prompts, len(logits_requests),
                                                                                  logits_requests)]
            record.calls.append(self._call(number, "prefill", rows, metadata))
        for rid, n in scheduled.items():
            runner.requests[rid].num_computed_tokens += n
        for call in record.calls:
            for rid in dict.fromkeys(call.rows):
                runner.requests[rid].output_token_ids.append(number)
        return record

    @staticmethod
    def _call(number: int, kind: str, rows: list[str], metadata: Any) -> Call:
        mask = metadata.allowed_token_ids_mask
        if mask is None:
            sets = [set(range(VOCAB)) for _ in rows]
        else:
            assert mask.shape == (len(rows), VOCAB), f"step {number} {kind}: mask of shape {tuple(mask.shape)}"
            sets = [set(torch.nonzero(~mask[i]).flatten().tolist()) for i in range(len(rows))]
        return Call(number, kind, rows, sets)

    def run(self) -> list[Step]:
        r = self.request
        return [
            # A and R prefill their first chunk of 24; U and Q prefill whole.
            self.step(1, {"A": 24, "R": 24, "U": 8, "Q": 8}, completes={"U", "Q"},
                      added=[r("A"), r("R"), r("U"), r("Q")]),
            # U and Q are decodes behind A's and R's last chunks: swap(A, Q), swap(R, U).
            self.step(2, {"A": 24, "R": 24, "U": 1, "Q": 1}, completes={"A", "R"}),
            # U and A finish; condense moves R into U's row.
            self.step(3, {"R": 1, "Q": 1}, completes=set(), finished=("U", "A")),
            # N arrives on the row condense emptied.
            self.step(4, {"R": 1, "Q": 1, "N": 8}, completes={"N"}, added=[r("N")]),
            # Nothing moves.
            self.step(5, {"R": 1, "Q": 1, "N": 1}, completes=set()),
        ]

    def run_condense(self) -> list[Step]:
        r = self.request
        return [
            self.step(1, {"D": 8, "B": 8, "C": 8}, completes={"D", "B", "C"}, added=[r("D"), r("B"), r("C")]),
            # D finishes; condense moves C (row 2) to row 0.
            self.step(2, {"B": 1, "C": 1}, completes=set(), finished=("D", )),
            # E arrives on row 2.
            self.step(3, {"B": 1, "C": 1, "E": 8}, completes={"E"}, added=[r("E")]),
            self.step(4, {"B": 1, "C": 1, "E": 1}, completes=set()),
        ]


@pytest.fixture(scope="module")
def steps() -> list[Step]:
    return Scenario(ROOT).run()


@pytest.fixture(scope="module")
def condense_steps() -> list[Step]:
    return Scenario(ROOT).run_condense()


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
    assert [(c.kind, c.rows) for c in steps[1].calls] == [("decode", ["Q", "U"]), ("prefill", ["R", "A"])]
    assert [(c.kind, c.rows) for c in steps[3].calls] == [("decode", ["Q", "R"]), ("prefill", ["N"])]


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
