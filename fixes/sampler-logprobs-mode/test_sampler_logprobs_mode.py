"""--logprobs-mode and use_fp64_gumbel reach the HPU runner's Sampler (CPU; needs torch and numpy).

vLLM's GPU runner builds its sampler as ``Sampler(logprobs_mode=model_config.logprobs_mode,
use_fp64_gumbel=model_config.use_fp64_gumbel)``; vllm_gaudi's runner built ``Sampler()``, so a
server started with ``--logprobs-mode processed_logprobs`` (or ``processed_logits``,
``raw_logits``) served raw logprobs on HPU. The test lifts the statement that builds
``self.sampler`` out of each runner's ``__init__`` (vllm_gaudi's ``HPUModelRunner`` and vLLM's
``GPUModelRunner`` of the tree) and runs it with vLLM's real ``Sampler`` and a model config
asking for the mode; then a harness step (the runner's own ``_update_states``, ``_run_sampling``,
``_build_logprobs_output``) samples a request with ``logprobs=2``, ``temperature=0.5`` and
``top_k=5`` with the HPU runner's sampler, and each logits row also goes through the GPU runner's
sampler: the top-2 logprobs served must be the GPU's. Under sync and async scheduling.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/sampler-logprobs-mode``
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)
import vllm_gaudi_stubs as stubs

import harness
import lift

PROMPT_LEN = 6
GPU_RUNNER_REL = "vllm/v1/worker/gpu_model_runner.py"


def build_sampler(path, cls_name: str, model_config: Any) -> Any:
    """The sampler the runner class `cls_name` of `path` builds: its ``__init__``'s
    ``self.sampler = …`` statement, run with vLLM's real Sampler and `model_config`."""
    from vllm.v1.sample.sampler import Sampler
    owner = types.SimpleNamespace(model_config=model_config)
    return lift.assigned(path, f"{cls_name}.__init__", "self.sampler", owner, {"Sampler": Sampler})


class Both:
    """The HPU runner's sampler, each call also handed to the GPU runner's (the served logprobs of
    both kept per call)."""

    def __init__(self, root, hpu: Any, gpu: Any):  # noqa: F811
        from vllm.v1.outputs import LogprobsTensors
        from vllm.v1.sample.metadata import SamplingMetadata
        harness.no_pinned_memory()
        self.metadata_cls, self.hpu, self.gpu = SamplingMetadata, hpu, gpu
        hpu_gather = stubs.load_hpu_gather_logprobs(root)
        for s in (hpu, gpu):
            s.pin_memory = False
            s.gather_logprobs = lambda lp, n, token_ids: LogprobsTensors(*hpu_gather(lp, n, token_ids))
        self.pairs: list[tuple[Any, Any]] = []

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        md = sampling_metadata
        real = self.metadata_cls(**{f.name: getattr(md, f.name) for f in dataclasses.fields(self.metadata_cls)
                                    if hasattr(md, f.name)})
        out = self.hpu(logits.clone(), real)
        ref = self.gpu(logits.clone(), real)
        self.pairs.append((out.logprobs_tensors, ref.logprobs_tensors))
        return out


@pytest.mark.parametrize("logprobs_mode", ["processed_logprobs", "processed_logits", "raw_logits"])
def test_logprobs_mode_reaches_sampler(root, mode, logprobs_mode):  # noqa: F811
    h = harness.Harness(root, mode)  # imports the tree's vllm
    config = types.SimpleNamespace(logprobs_mode=logprobs_mode, use_fp64_gumbel=True)
    hpu = build_sampler(root / stubs.RUNNER_REL, "HPUModelRunner", config)
    gpu = build_sampler(root / GPU_RUNNER_REL, "GPUModelRunner", config)
    both = h.runner.sampler = Both(root, hpu, gpu)
    h.add("A", harness.prompt(PROMPT_LEN, 0), temperature=0.5, top_k=5, logprobs=2)
    for scheduled in [{"A": PROMPT_LEN}, {"A": 1}, {"A": 1}]:
        h.step(scheduled)
    assert both.pairs, "no sampler call"
    for n, (got, want) in enumerate(both.pairs):
        # columns 1..2: the top-2 tokens' (column 0 is the drawn token's, which is random)
        g, w = got.logprobs[0, 1:3].tolist(), want.logprobs[0, 1:3].tolist()
        assert torch.allclose(torch.tensor(g), torch.tensor(w), atol=1e-4), (
            f"--logprobs-mode {logprobs_mode}: call {n + 1} serves request A (temperature=0.5, top_k=5) the top-2 "
            f"logprobs {[round(x, 4) for x in g]}; vLLM's GPU runner serves {[round(x, 4) for x in w]}")
    assert hpu.use_fp64_gumbel == gpu.use_fp64_gumbel, (
        f"use_fp64_gumbel=True in the model config: the HPU runner's sampler has use_fp64_gumbel="
        f"{hpu.use_fp64_gumbel}, vLLM's GPU runner's {gpu.use_fp64_gumbel}")
