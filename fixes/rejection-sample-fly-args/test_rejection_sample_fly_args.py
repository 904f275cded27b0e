"""Speculative decoding runs on vLLM 0.33: vllm_gaudi's ``rejection_sample`` takes the FLy
arguments vLLM 0.33's ``RejectionSampler`` passes, behaves as vLLM's standard rejection sampling
for ``fly_window_size=None`` and refuses FLy (a value it cannot honour) by name (CPU; needs torch,
numpy and vLLM's pure-Python deps: _support/requirements.txt).

``test_spec_steps_run`` drives the real ``InputBatch``, the runner's ``_update_states``,
``_prepare_spec_decode_inputs`` and decode-sampling statement, vLLM's real ``Sampler`` and
``RejectionSampler`` with vllm_gaudi's ``rejection_sample`` (spec_decode.py; sync scheduling) over
three decode steps of two greedy requests with two drafts each (all right, then one wrong), and
holds each step's tokens against vLLM's GPU path for the same step. On vLLM 0.33 pristine every
step raises ``TypeError``; on 0.26 and 0.30 vLLM passes no FLy argument (the test passes there).
The other two tests call vllm_gaudi's ``rejection_sample`` as vLLM 0.33's ``RejectionSampler.forward``
does, on every release (the file is the same in the three trees).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/rejection-sample-fly-args``
"""

from __future__ import annotations

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

PROMPTS = {"A": harness.prompt(6, 4), "B": harness.prompt(5, 5)}


def test_spec_steps_run(root):  # noqa: F811
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    for rid, p in PROMPTS.items():
        h.add(rid, p, temperature=0.0, max_tokens=32)
    h.step({rid: len(p) for rid, p in PROMPTS.items()})
    for number, wrong in ((2, None), (3, "B"), (4, None)):
        drafts = {rid: spec_decode.greedy(h.scheduler.requests[rid].tokens, 2) for rid in PROMPTS}
        if wrong:
            drafts[wrong][1] = (drafts[wrong][1] + 1) % harness.VOCAB
        want = spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid],
                                   list(h.scheduler.requests[rid].output), drafts[rid]) for rid in PROMPTS
        ], spec_decode.context_row)
        try:
            step = h.step({rid: 3 for rid in PROMPTS}, drafts=drafts)
        except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
            pytest.fail(f"speculative-decoding step {number} raised {type(e).__name__}: {e} (an exception in "
                        "sample_tokens ends EngineCore: no spec-decode step can run)")
        for rid, tokens in zip(PROMPTS, want):
            assert step.returned.get(rid) == tokens, (
                f"step {number} (drafts {drafts}): request {rid} got {step.returned.get(rid)} where vLLM's GPU path "
                f"gives {tokens}")


def _call(root, **fly):  # noqa: F811
    """vllm_gaudi's rejection_sample called as vLLM 0.33's RejectionSampler.forward calls it: two
    requests, two drafts each, the first all right, the second wrong at its second draft."""
    real = spec_decode.RealVllm.get(root)
    logits = torch.zeros(4, harness.VOCAB)
    for row, tok in enumerate([11, 12, 21, 22]):
        logits[row, tok] = 1.0
    md = type("Metadata", (), {"all_greedy": True, "logitsprocs": real.logits_processor.LogitsProcessors()})()
    return real.hpu_rejection_sample(torch.tensor([11, 12, 21, 99], dtype=torch.int32), [2, 2], 2,
                                     torch.tensor([2, 4], dtype=torch.int32), None, logits,
                                     torch.tensor([[13], [23]], dtype=torch.int32), md, synthetic_mode=False,
                                     synthetic_conditional_rates=None, use_fp64_gumbel=False, **fly)


def test_standard_rejection_sampling_with_vllm_033_arguments(root):  # noqa: F811
    try:
        out = _call(root, fly_window_size=None, fly_entropy_threshold=None, fly_entropy_top_k=3)
    except TypeError as e:
        pytest.fail(f"vllm_gaudi's rejection_sample cannot be called as vLLM 0.33 calls it: {e}")
    assert out.tolist() == [[11, 12, 13], [21, 22, -1]], f"standard rejection sampling gave {out.tolist()}"


def test_fly_is_refused_by_name(root):  # noqa: F811
    with pytest.raises(NotImplementedError, match="rejection_sample_method='fly'"):
        try:
            _call(root, fly_window_size=2, fly_entropy_threshold=0.3, fly_entropy_top_k=3)
        except TypeError as e:
            pytest.fail(f"vllm_gaudi's rejection_sample cannot be called as vLLM 0.33 calls it: {e}")
