"""Sampling parameters follow their requests through swap_states (CPU; needs torch and numpy).

Drives the REAL ``InputBatch`` of ``$GAUDI_FIXES_ROOT/vllm_gaudi/v1/worker/hpu_input_batch.py``
through the HPU runner's own sequence — ``_update_states``' add / condense / refresh, then
``sample_tokens``' ``_ensure_decodes_first`` and ``ensure_multi_token_decodes_last`` and one
``_prepare_sampling`` per sampler call, those runner functions lifted from the real
``hpu_model_runner.py`` — with vLLM's imports stubbed and the real ``async_h2d_copy`` /
``async_h2d_update`` on device "cpu" (see vllm_gaudi_stubs.py).

The scenario is the chunked-prefill one of the fix page: D0 decodes while P1's long prompt is
prefilled in two chunks and P2's short prompt finishes in one, so on step 2 P2 is a decode
behind the still-prefilling P1 and the runner swaps them; on step 3 D0 comes back with three
tokens to catch up and is moved behind the decodes; step 4 changes nothing. No request is
added or removed after step 1, so steps 2-4 build the sampler's metadata with
``skip_copy=True``. Every value handed to the sampler must be the value its request asked for.
On pristine vllm_gaudi v0.26.0 these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/swap-states-sampling-params``
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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
VOCAB = 1000
# topk-subset-sampler's windows (seed page), written out independently of the patched code.
TOPK_WINDOWS = (64, 128, 256, 512, 1024)
SAMPLING_EPS = 1e-5

if not os.environ.get(ROOT_ENV):
    pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(os.environ[ROOT_ENV])
if not (ROOT / INPUT_BATCH_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

# (temperature, top_p, top_k) from the issue, plus distinct penalties and prompt lengths.
REQUESTS = {
    "D0": (SamplingParams(temperature=0.7, top_p=0.9, top_k=20, frequency_penalty=0.1, presence_penalty=0.2,
                          repetition_penalty=1.1), 12),
    "P1": (SamplingParams(temperature=1.0, top_p=0.8, top_k=200, frequency_penalty=0.3, presence_penalty=0.0,
                          repetition_penalty=1.3), 48),
    "P2": (SamplingParams(temperature=0.5, top_p=0.95, top_k=40, frequency_penalty=0.0, presence_penalty=0.5,
                          repetition_penalty=1.05), 8),
}
PROMPTS = {rid: [(7 * n + 3 * i + 1) % VOCAB for i in range(length)] for n, (rid, (_, length)) in enumerate(REQUESTS.items())}


@dataclass
class Call:
    """One sampler call: the requests of its rows (padding included) and what it was handed."""

    step: int
    kind: str  # decode | prefill
    rows: list[str]
    metadata: Any


@dataclass
class Step:
    number: int
    batch_changed: bool
    swaps: list[tuple[int, int]] = field(default_factory=list)
    # (destination tensor, rows) of every host-to-device row update during the sampler calls.
    updates: list[tuple[torch.Tensor, list[int]]] = field(default_factory=list)
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

    def request(self, rid: str, num_computed_tokens: int, output_token_ids: list[int]):
        params, _ = REQUESTS[rid]
        return self.module.CachedRequestState(
            req_id=rid,
            prompt_token_ids=PROMPTS[rid],
            mm_features=[],
            sampling_params=params,
            generator=None,
            block_ids=[[0]],
            num_computed_tokens=num_computed_tokens,
            output_token_ids=output_token_ids,
        )

    def step(self, number: int, scheduled: dict[str, int], completes: set[str], added=()) -> Step:
        """One engine step: HPUModelRunner._update_states' tail, then sample_tokens' reordering
        and sampler calls. `completes`: prompts whose chunk finishes (they have logits)."""
        batch, runner = self.batch, self.runner
        # _update_states: existing requests' progress, then arrivals, then refresh on a change.
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        batch_changed = len(added) > 0
        for state in added:
            runner.requests[state.req_id] = state
            batch.add_request(state, None)
        if batch_changed:
            batch.refresh_sampling_metadata()
        record = Step(number, batch_changed)
        # sample_tokens
        del self.swaps[:]
        sched = SchedulerOutput(num_scheduled_tokens=scheduled)
        runner._ensure_decodes_first(sched)
        runner.ensure_multi_token_decodes_last(batch, sched.num_scheduled_tokens)
        record.swaps = list(self.swaps)
        decodes = [rid for i, rid in enumerate(batch.req_ids) if not runner._is_prompt(i, sched)]
        prompts = [rid for i, rid in enumerate(batch.req_ids) if runner._is_prompt(i, sched)]
        del self.h2d.updates[:]
        if decodes:
            pad_to = 1 << (len(decodes) - 1).bit_length()  # a decode bucket
            metadata = runner._prepare_sampling(batch_changed, decodes, pad_to)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(decodes, pad_to)]
            record.calls.append(Call(number, "decode", rows, metadata))
        logits_requests = [rid for rid in prompts if rid in completes]
        if logits_requests:
            metadata = runner._prepare_sampling(batch_changed, prompts, len(logits_requests), logits_requests)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(prompts, len(logits_requests),
                                                                                  logits_requests)]
            record.calls.append(Call(number, "prefill", rows, metadata))
        record.updates = list(self.h2d.updates)
        # The step's tokens: progress and one sampled token per sampled request.
        for rid, n in scheduled.items():
            runner.requests[rid].num_computed_tokens += n
        for call in record.calls:
            for rid in dict.fromkeys(call.rows):
                runner.requests[rid].output_token_ids.append(number)
        return record

    def run(self) -> list[Step]:
        return [
            # D0 is decoding; P1 (48 tokens) prefills its first chunk of 24; P2 (8) prefills whole.
            self.step(1, {"D0": 1, "P1": 24, "P2": 8}, completes={"P2"},
                      added=[self.request("D0", 12, [5]), self.request("P1", 0, []), self.request("P2", 0, [])]),
            # P2 is a decode now, behind P1's last chunk: the runner swaps them. No arrival.
            self.step(2, {"D0": 1, "P1": 24, "P2": 1}, completes={"P1"}),
            # D0 comes back with 3 tokens to catch up (KV-offload requeue): prefill path, moved last.
            self.step(3, {"D0": 3, "P1": 1, "P2": 1}, completes={"D0"}),
            # Nothing moves.
            self.step(4, {"D0": 1, "P1": 1, "P2": 1}, completes=set()),
        ]


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario(ROOT)


@pytest.fixture(scope="module")
def steps(scenario: Scenario) -> list[Step]:
    return scenario.run()


def _calls(steps: list[Step]) -> list[Call]:
    return [call for step in steps for call in step.calls]


def _expected(rid: str) -> dict[str, float]:
    params, _ = REQUESTS[rid]
    greedy = params.temperature < SAMPLING_EPS
    return {
        # As InputBatch.add_request stores them.
        "temperature": -1.0 if greedy else params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if 0 < params.top_k < VOCAB else VOCAB,
        "frequency_penalties": params.frequency_penalty,
        "presence_penalties": params.presence_penalty,
        "repetition_penalties": params.repetition_penalty,
    }


def _mismatches(steps: list[Step], fields: tuple[str, ...]) -> tuple[list[str], int]:
    wrong, total = [], 0
    for call in _calls(steps):
        for name in fields:
            tensor = getattr(call.metadata, name)
            assert tensor is not None, f"step {call.step} {call.kind}: {name} is None"
            got = tensor.tolist()
            assert len(got) == len(call.rows), f"step {call.step} {call.kind}: {name} has {len(got)} rows"
            for i, rid in enumerate(call.rows):
                want = np.float32(_expected(rid)[name]).item()
                total += 1
                if np.float32(got[i]).item() != want:
                    wrong.append(f"step {call.step} {call.kind} row {i} ({rid}): {name} {got[i]:g}, asked {want:g}")
    return wrong, total


def test_runner_reorders_without_a_batch_change(steps: list[Step]):
    """The scenario exercises the bug's trigger: swaps on steps that copy nothing by default."""
    assert [s.batch_changed for s in steps] == [True, False, False, False]
    assert steps[0].swaps == [] and steps[3].swaps == []
    assert steps[1].swaps and steps[2].swaps, [s.swaps for s in steps]
    assert [c.kind for c in steps[1].calls] == ["decode", "prefill"]
    assert steps[1].calls[0].rows == ["D0", "P2"] and steps[1].calls[1].rows == ["P1"]


def test_temperature_top_p_top_k_follow_their_requests(steps: list[Step]):
    wrong, total = _mismatches(steps, ("temperature", "top_p", "top_k"))
    assert not wrong, f"{len(wrong)} of {total} values handed to the sampler are another request's:\n" + "\n".join(wrong)


def test_penalties_follow_their_requests(steps: list[Step]):
    wrong, total = _mismatches(steps, ("frequency_penalties", "presence_penalties", "repetition_penalties"))
    for call in _calls(steps):
        prompt_rows = call.metadata.prompt_token_ids
        assert prompt_rows is not None, f"step {call.step} {call.kind}: no prompt_token_ids with penalties"
        for i, rid in enumerate(call.rows):
            total += 1
            row = prompt_rows[i].tolist()
            want = PROMPTS[rid]
            if row[:len(want)] != want or any(t != VOCAB for t in row[len(want):]):
                wrong.append(f"step {call.step} {call.kind} row {i} ({rid}): prompt_token_ids are another prompt's")
    assert not wrong, f"{len(wrong)} of {total} penalty inputs are another request's:\n" + "\n".join(wrong)


def test_no_copy_on_a_step_without_a_move(steps: list[Step]):
    """The fix copies only rows that swap_states moved, and nothing on a step where none moved."""
    for step in steps[1:]:
        moved = {i for pair in step.swaps for i in pair}
        copied = {i for _, rows in step.updates for i in rows}
        assert copied <= moved, f"step {step.number}: copied rows {sorted(copied)}, moved only {sorted(moved)}"
    assert steps[3].updates == [], f"step 4 moved nothing but copied {steps[3].updates}"


def test_topk_hint_agrees_with_device_top_k(steps: list[Step]):
    """With topk-subset-sampler applied, its host-side hint must describe the device top_k."""
    source = (ROOT / INPUT_BATCH_REL).read_text()
    if "topk-subset-sampler" not in source:
        pytest.skip("topk-subset-sampler is not applied to this vllm_gaudi tree")
    wrong = []
    for call in _calls(steps):
        top_k = call.metadata.top_k
        hints = {k: v for k, v in vars(top_k).items() if k.startswith("_gaudi_fixes")}
        assert hints, f"step {call.step} {call.kind}: top_k carries no topk-subset-sampler hint"
        device_k = top_k.tolist()
        sampling = [k for k, t in zip(device_k, call.metadata.temperature.tolist()) if t >= SAMPLING_EPS]
        for attr, hint in hints.items():
            if attr == "_gaudi_fixes_max_top_k":  # v1: the batch's largest top_k
                want = max(device_k)
            elif attr == "_gaudi_fixes_topk_window":  # v2: the window covering the sampling rows
                want = next((w for w in TOPK_WINDOWS if sampling and w >= max(sampling)), None)
            else:
                pytest.fail(f"unknown topk-subset-sampler hint {attr}; teach this test what it means")
            if hint != want:
                wrong.append(f"step {call.step} {call.kind} rows {call.rows}: {attr} {hint}, device top_k "
                             f"{device_k} needs {want}")
    assert not wrong, "\n".join(wrong)
