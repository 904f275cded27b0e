"""The runner's own prompt-logprobs path on the harness (harness.py), and what vLLM's GPU path
delivers for the same prompt.

``bind(h)`` lifts ``HPUModelRunner._get_prompt_logprobs_dict`` and ``_gather_prompt_logprobs_hpu``
out of the tree onto the harness's runner; ``step(h, scheduled)`` runs one engine step
(``Harness.step``: the runner's ``_update_states`` and sampling) and then the runner's
``_get_prompt_logprobs_dict`` (``collect(h, done, scheduled)`` after a step the caller ran) with
the hidden states ``sample_tokens`` collects for it: for every
prefill of the step whose request is in the batch's ``num_prompt_logprobs``, the rows of its
scheduled positions (the model's logits rows stand in for hidden states: ``compute_logits`` is the
identity), padded as a prompt bucket pads them. Returns the step's ``prompt_logprobs_dict``.

``expected(h, rid, k)``: what vLLM's GPU ``_get_prompt_logprobs_dict`` delivers for request `rid`
once its prompt is prefilled, whatever its chunking: for each prompt position q < P - 1, the next
prompt token with ``log_softmax`` of the model's row q at it and its rank, then the top-k tokens
and logprobs (vLLM's ``Sampler.gather_logprobs``).

``gpu_expected(h, rid, k, logprobs_mode)``: the same as vLLM's own GPU runner computes it (its
``_get_prompt_logprobs_dict`` of the tree, lifted) for the server's ``--logprobs-mode``: logits in
the logits modes. ``bind(h, logprobs_mode)`` gives the HPU runner's model config that mode.
"""

from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np
import torch

import harness
import lift
import vllm_gaudi_stubs as stubs

GPU_RUNNER_REL = "vllm/v1/worker/gpu_model_runner.py"
PAD = 8  # a prompt bucket's length is a multiple of this (the padding rows are zeros)


class _Torch(types.ModuleType):
    """``torch`` as the lifted methods see it: ``torch.hpu.synchronize()`` does nothing on CPU."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.hpu = types.SimpleNamespace(synchronize=lambda: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def bind(h: harness.Harness, logprobs_mode: str = "raw_logprobs") -> None:
    """The tree's prompt-logprobs methods on `h`'s runner, its model config asking `logprobs_mode`
    (the server's ``--logprobs-mode``)."""
    from vllm.v1.outputs import LogprobsTensors
    from vllm.v1.sample.sampler import Sampler
    harness.no_pinned_memory()  # LogprobsTensors.empty_cpu asks for pinned memory when it sees no GPU
    runner = h.runner
    namespace = {"torch": _Torch(), "np": np, "Optional": Optional, "LogprobsTensors": LogprobsTensors}
    lift.bind(runner, h.root / stubs.RUNNER_REL,
              ["HPUModelRunner._get_prompt_logprobs_dict", "HPUModelRunner._gather_prompt_logprobs_hpu"], namespace)
    runner.device = torch.device("cpu")
    runner.model = types.SimpleNamespace(compute_logits=lambda hidden: hidden)
    runner.sampler.compute_logprobs = Sampler.compute_logprobs  # a static method: no Sampler state
    if getattr(runner, "model_config", None) is None:
        runner.model_config = types.SimpleNamespace()
    runner.model_config.logprobs_mode = logprobs_mode


def step(h: harness.Harness, scheduled: dict[str, int]) -> dict[str, Any]:
    """One engine step, then the runner's ``_get_prompt_logprobs_dict`` (as ``sample_tokens`` calls
    it after sampling): the step's prompt logprobs by request."""
    return collect(h, h.step(scheduled), scheduled)


def collect(h: harness.Harness, done: harness.Step, scheduled: dict[str, int]) -> dict[str, Any]:
    """The runner's ``_get_prompt_logprobs_dict`` after step `done` (``Harness.step``), with the
    hidden states ``sample_tokens`` collects for it: the step's prompt logprobs by request."""
    hidden: dict[str, torch.Tensor] = {}
    for rid in done.ns["pd_info"].prompt_req_ids:
        if rid in h.batch.num_prompt_logprobs:  # sample_tokens collects only these
            start = h.runner.requests[rid].num_computed_tokens
            rows = [h.model.row(rid, start + i) for i in range(scheduled[rid])]
            padded = -(-len(rows) // PAD) * PAD
            rows += [torch.zeros(h.vocab)] * (padded - len(rows))
            hidden[rid] = torch.stack(rows)
    return h.runner._get_prompt_logprobs_dict(hidden, done.ns["scheduler_output"])


def expected(h: harness.Harness, rid: str, k: int) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """vLLM's GPU path's prompt logprobs of `rid` (``k`` top tokens): ids, logprobs and ranks by
    prompt position."""
    prompt = h.scheduler.requests[rid].prompt
    ids, logprobs, ranks = [], [], []
    for q in range(len(prompt) - 1):
        lp = torch.log_softmax(h.model.row(rid, q).float(), dim=-1)
        target = prompt[q + 1]
        top = torch.topk(lp, k)
        ids.append([target, *top.indices.tolist()])
        logprobs.append([float(lp[target]), *top.values.tolist()])
        ranks.append(int((lp >= lp[target]).sum()))
    return ids, logprobs, ranks


def gpu_expected(h: harness.Harness, rid: str, k: int,
                 logprobs_mode: str) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """vLLM's own ``GPUModelRunner._get_prompt_logprobs_dict`` of the tree (lifted onto a stand-in
    runner holding `rid` alone, its whole prompt in one step, the model's rows as its hidden states,
    the ``Sampler`` and model config the GPU runner builds for the server's `logprobs_mode`): `rid`'s
    prompt logprobs (``k`` top tokens): ids, scores and ranks by prompt position."""
    from vllm.v1.outputs import LogprobsTensors
    from vllm.v1.sample.sampler import Sampler
    harness.no_pinned_memory()
    prompt = list(h.scheduler.requests[rid].prompt)
    gpu = types.SimpleNamespace(
        num_prompt_logprobs={rid: k}, device=torch.device("cpu"),
        requests={rid: types.SimpleNamespace(prompt_token_ids=prompt, in_progress_prompt_logprobs_cpu=None,
                                             num_computed_tokens=0)},
        input_batch=types.SimpleNamespace(req_id_to_index={rid: 0}),
        query_start_loc=types.SimpleNamespace(np=np.array([0, len(prompt)])),
        model=types.SimpleNamespace(compute_logits=lambda hidden: hidden),
        model_config=types.SimpleNamespace(logprobs_mode=logprobs_mode),
        sampler=Sampler(logprobs_mode=logprobs_mode), _sync_device=lambda: None)
    namespace = {"torch": torch, "np": np, "LogprobsTensors": LogprobsTensors,
                 "async_tensor_h2d": lambda data, *a, **kw: torch.tensor(data)}
    lift.bind(gpu, h.root / GPU_RUNNER_REL, ["GPUModelRunner._get_prompt_logprobs_dict"], namespace)
    hidden = torch.stack([h.model.row(rid, q) for q in range(len(prompt))])
    tensors = gpu._get_prompt_logprobs_dict(hidden, {rid: len(prompt)})[rid]
    return (tensors.logprob_token_ids.tolist(), tensors.logprobs.tolist(),
            tensors.selected_token_ranks.tolist())
