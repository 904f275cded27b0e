"""Sampling parameters follow their requests through swap_states (CPU; needs torch and numpy).

The harness (harness.py) runs the steps: vLLM's scheduler output through the runner's own
``_update_states`` (add / condense / refresh) into the REAL ``InputBatch``, then ``sample_tokens``'
reordering (``_ensure_decodes_first``, ``ensure_multi_token_decodes_last``) and one
``_prepare_sampling`` per sampler call, with the real ``async_h2d_copy`` / ``async_h2d_update`` on
device "cpu".

The scenario is the chunked-prefill one of the fix page: D0 prefills, then decodes while P1's
long prompt is prefilled in two chunks and P2's short prompt finishes in one, so on step 3 P2 is a
decode behind the still-prefilling P1 and the runner swaps them; step 4 changes nothing. No
request is added or removed after step 2, so steps 3 and 4 build the sampler's metadata with
``skip_copy=True``. Every value handed to the sampler must be the value its request asked for.
On pristine vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/swap-states-sampling-params``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)
from vllm_gaudi_stubs import INPUT_BATCH_REL

import harness

VOCAB = 1000
# topk-subset-sampler's windows (seed page), written out independently of the patched code.
TOPK_WINDOWS = (64, 128, 256, 512, 1024)
SAMPLING_EPS = 1e-5

# (temperature, top_p, top_k) from the issue, plus distinct penalties and prompt lengths.
REQUESTS = {
    "D0": (dict(temperature=0.7, top_p=0.9, top_k=20, frequency_penalty=0.1, presence_penalty=0.2,
                repetition_penalty=1.1), 12),
    "P1": (dict(temperature=1.0, top_p=0.8, top_k=200, frequency_penalty=0.3, presence_penalty=0.0,
                repetition_penalty=1.3), 48),
    "P2": (dict(temperature=0.5, top_p=0.95, top_k=40, frequency_penalty=0.0, presence_penalty=0.5,
                repetition_penalty=1.05), 8),
}


@dataclass
class Call:
    """One sampler call: the requests of its rows (padding included) and what it was handed."""

    step: int
    rows: list[str]
    metadata: Any


@dataclass
class Step:
    number: int
    batch_changed: bool
    swaps: list[tuple[int, int]] = field(default_factory=list)
    # (destination tensor, rows) of every host-to-device row update of the step.
    updates: list[tuple[torch.Tensor, list[int]]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)


def run(root) -> tuple[harness.Harness, list[Step]]:  # noqa: F811
    h = harness.Harness(root, "sync", vocab=VOCAB)
    h.decode_bucket = lambda n: 1 << (n - 1).bit_length()
    for n, (rid, (params, length)) in enumerate(REQUESTS.items()):
        h.add(rid, harness.prompt(length, n), max_tokens=32, **params)
    swaps = h.record_swaps()
    steps = []
    for number, scheduled in enumerate([
        {"D0": 12},  # D0 prefills
        {"D0": 1, "P1": 24, "P2": 8},  # P1 (48 tokens) prefills its first chunk of 24; P2 (8) prefills whole
        {"D0": 1, "P1": 24, "P2": 1},  # P2 is a decode now, behind P1's last chunk: the runner swaps them
        {"D0": 1, "P1": 1, "P2": 1},  # nothing moves
    ], start=1):
        del swaps[:], h.h2d.updates[:]
        before = len(h.sampler.calls)
        out = h.step(scheduled)
        calls = [Call(number, h.model.owners(c["logits"]), c["metadata"]) for c in h.sampler.calls[before:]]
        steps.append(Step(number, out.batch_changed, list(swaps), list(h.h2d.updates), calls))
    return h, steps


@pytest.fixture(scope="module")
def scenario(root) -> tuple[harness.Harness, list[Step]]:  # noqa: F811
    return run(root)


@pytest.fixture(scope="module")
def steps(scenario) -> list[Step]:
    return scenario[1]


def _calls(steps: list[Step]) -> list[Call]:
    return [call for step in steps for call in step.calls]


def _expected(params: Any) -> dict[str, float]:
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


def _mismatches(h: harness.Harness, steps: list[Step], fields: tuple[str, ...]) -> tuple[list[str], int]:
    wrong, total = [], 0
    for call in _calls(steps):
        for name in fields:
            tensor = getattr(call.metadata, name)
            assert tensor is not None, f"step {call.step} {call.rows}: {name} is None"
            got = tensor.tolist()
            assert len(got) == len(call.rows), f"step {call.step} {call.rows}: {name} has {len(got)} rows"
            for i, rid in enumerate(call.rows):
                want = np.float32(_expected(h.runner.requests[rid].sampling_params)[name]).item()
                total += 1
                if np.float32(got[i]).item() != want:
                    wrong.append(f"step {call.step} call {call.rows} row {i} ({rid}): {name} {got[i]:g}, asked {want:g}")
    return wrong, total


def test_runner_reorders_without_a_batch_change(steps: list[Step]):
    """The scenario exercises the bug's trigger: swaps on steps that copy nothing by default."""
    assert [s.batch_changed for s in steps] == [True, True, False, False]
    assert steps[1].swaps == [] and steps[3].swaps == []
    assert steps[2].swaps, [s.swaps for s in steps]
    assert sorted(c.rows for c in steps[2].calls) == [["D0", "P2"], ["P1"]]


def test_temperature_top_p_top_k_follow_their_requests(scenario):
    wrong, total = _mismatches(*scenario, ("temperature", "top_p", "top_k"))
    assert not wrong, f"{len(wrong)} of {total} values handed to the sampler are another request's:\n" + "\n".join(wrong)


def test_penalties_follow_their_requests(scenario):
    h, steps = scenario
    wrong, total = _mismatches(h, steps, ("frequency_penalties", "presence_penalties", "repetition_penalties"))
    for call in _calls(steps):
        prompt_rows = call.metadata.prompt_token_ids
        assert prompt_rows is not None, f"step {call.step} {call.rows}: no prompt_token_ids with penalties"
        for i, rid in enumerate(call.rows):
            total += 1
            row = prompt_rows[i].tolist()
            want = h.runner.requests[rid].prompt_token_ids
            if row[:len(want)] != want or any(t != VOCAB for t in row[len(want):]):
                wrong.append(f"step {call.step} {call.rows} row {i} ({rid}): prompt_token_ids are another prompt's")
    assert not wrong, f"{len(wrong)} of {total} penalty inputs are another request's:\n" + "\n".join(wrong)


def test_no_copy_on_a_step_without_a_move(steps: list[Step]):
    """The fix copies only rows that swap_states moved, and nothing on a step where none moved."""
    for step in steps[2:]:
        moved = {i for pair in step.swaps for i in pair}
        copied = {i for _, rows in step.updates for i in rows}
        assert copied <= moved, f"step {step.number}: copied rows {sorted(copied)}, moved only {sorted(moved)}"
    assert steps[3].updates == [], f"step 4 moved nothing but copied {steps[3].updates}"


def test_topk_hint_agrees_with_device_top_k(steps: list[Step], root):  # noqa: F811
    """With topk-subset-sampler applied, its host-side hint must describe the device top_k."""
    source = (root / INPUT_BATCH_REL).read_text()
    if "topk-subset-sampler" not in source:
        pytest.skip("topk-subset-sampler is not applied to this vllm_gaudi tree")
    wrong = []
    for call in _calls(steps):
        top_k = call.metadata.top_k
        hints = {k: v for k, v in vars(top_k).items() if k.startswith("_gaudi_fixes")}
        assert hints, f"step {call.step} {call.rows}: top_k carries no topk-subset-sampler hint"
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
                wrong.append(f"step {call.step} {call.rows} rows {call.rows}: {attr} {hint}, device top_k "
                             f"{device_k} needs {want}")
    assert not wrong, "\n".join(wrong)
