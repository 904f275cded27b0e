"""The runner's own prompt-logprobs path on the harness (harness.py), and what vLLM's GPU path
delivers for the same prompt.

``bind(h)`` lifts ``HPUModelRunner._get_prompt_logprobs_dict`` and ``_gather_prompt_logprobs_hpu``
out of the tree onto the harness's runner; ``step(h, scheduled)`` runs one engine step
(``Harness.step``: the runner's ``_update_states`` and sampling) and then the runner's
``_get_prompt_logprobs_dict`` (``collect(h, done, scheduled)`` after a step the caller ran) with
the hidden states ``sample_tokens`` collects for it, by its own statement, from a prefill batch of
the step's prompts (the model's logits rows stand in for hidden states: ``compute_logits`` is the
identity), padded as a prompt bucket pads them, or merged into one row as ``VLLM_MERGED_PREFILL``
lays them out. Returns the step's ``prompt_logprobs_dict``.

``expected(h, rid, k)``: what vLLM's GPU ``_get_prompt_logprobs_dict`` delivers for request `rid`
once its prompt is prefilled, whatever its chunking: for each prompt position q < P - 1, the next
prompt token with ``log_softmax`` of the model's row q at it and its rank, then the top-k tokens
and logprobs (vLLM's ``Sampler.gather_logprobs``); ``check_once`` asserts a request's deliveries
against it.

``gpu_expected(h, rid, k, logprobs_mode)``: the same as vLLM's own GPU runner computes it (its
``_get_prompt_logprobs_dict`` of the tree, lifted) for the server's ``--logprobs-mode``: logits in
the logits modes. ``bind(h, logprobs_mode)`` gives the HPU runner's model config that mode.
"""

from __future__ import annotations

import ast
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


def step(h: harness.Harness, scheduled: dict[str, int], merged: bool = False) -> dict[str, Any]:
    """One engine step, then the runner's ``_get_prompt_logprobs_dict`` (as ``sample_tokens`` calls
    it after sampling): the step's prompt logprobs by request (`merged`: ``collect``'s)."""
    return collect(h, h.step(scheduled), scheduled, merged)


def collect(h: harness.Harness, done: harness.Step, scheduled: dict[str, int], merged: bool = False) -> dict[str, Any]:
    """The runner's ``_get_prompt_logprobs_dict`` after step `done` (``Harness.step``), with the
    hidden states its ``sample_tokens`` collects for it, by the tree's own statement (``for i, rid
    in enumerate(req_id)`` over a prefill batch): the step's prefills as one prefill batch, each
    request's rows (its scheduled positions) in a row of ``[requests, bucket, vocab]``, or, with
    `merged` (``VLLM_MERGED_PREFILL``), one after another in the one row of ``[1, bucket, vocab]``
    the merged layout makes. Returns the step's prompt logprobs by request."""
    ids = list(done.ns["pd_info"].prompt_req_ids)
    hidden: dict[str, torch.Tensor] = {}
    if not ids:  # no prefill this step: nothing collected
        return h.runner._get_prompt_logprobs_dict(hidden, done.ns["scheduler_output"])
    chunks = []
    for rid in ids:
        start = h.runner.requests[rid].num_computed_tokens
        chunks.append([h.model.row(rid, start + i) for i in range(scheduled[rid])])
    if merged:
        chunks = [[row for rows in chunks for row in rows]]
    width = -(-max((len(rows) for rows in chunks), default=0) // PAD) * PAD
    padded = [torch.stack(rows + [torch.zeros(h.vocab)] * (width - len(rows))) for rows in chunks]
    h.runner.use_merged_prefill = merged
    path = h.root / stubs.RUNNER_REL
    loop = lift.find_statement(lift.definition(path, "HPUModelRunner.sample_tokens"), path=path, kind=ast.For,
                               contains="prefill_hidden_states_for_logprobs[", nested=True,
                               where="HPUModelRunner.sample_tokens")
    exec(compile(ast.Module([loop], []), str(path), "exec", dont_inherit=True),
         {"self": h.runner, "req_id": ids, "non_flattened_hidden_states": torch.stack(padded),
          "prefill_hidden_states_for_logprobs": hidden, "scheduler_output": done.ns["scheduler_output"]})
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


def check_once(h: harness.Harness, delivered: dict, rid: str, k: int) -> None:
    """`rid`'s prompt logprobs (``k`` asked) came once (`delivered`: per request, (step, tensors)
    per delivery), as vLLM's GPU path gives them (``expected``): the assertion says how not."""
    prompt = h.scheduler.requests[rid].prompt
    got = delivered.get(rid, [])
    rows = sum(t.logprob_token_ids.shape[0] for _, t in got)
    assert len(got) == 1, (
        f"request {rid} ({len(prompt)} prompt tokens, prompt_logprobs={k}) gets its prompt logprobs "
        f"{len(got)} times (steps {[n for n, _ in got]}; the user sees {rows + 1 if got else 0} entries), where "
        f"vLLM's GPU path delivers them once ({len(prompt)} entries)")
    ids, logprobs, ranks = expected(h, rid, k)
    _, tensors = got[0]
    got_ids = tensors.logprob_token_ids.tolist()
    assert len(got_ids) == len(prompt) - 1, (
        f"request {rid} ({len(prompt)} prompt tokens) gets prompt logprobs for {len(got_ids)} positions (the user "
        f"sees {len(got_ids) + 1} entries), where vLLM's GPU path gives {len(prompt) - 1} ({len(prompt)} entries)")
    bad = [p for p in range(len(prompt) - 1) if got_ids[p] != ids[p]]
    assert not bad, (
        f"request {rid}'s prompt logprobs for positions {bad[0]}-{bad[-1]} are token ids "
        f"{[got_ids[p][0] for p in bad]} (top-{k}: {[got_ids[p][1:] for p in bad]}) where vLLM's GPU path "
        f"gives the prompt's {[ids[p][0] for p in bad]} (top-{k}: {[ids[p][1:] for p in bad]})")
    for q in range(len(prompt) - 1):
        for col in range(k + 1):
            value = float(tensors.logprobs[q][col])
            assert abs(value - logprobs[q][col]) < 1e-4, (
                f"request {rid}'s prompt logprob of token {ids[q][col]} at position {q} is {value}, vLLM's GPU "
                f"path gives {logprobs[q][col]}")
        assert int(tensors.selected_token_ranks[q]) == ranks[q], (
            f"request {rid}'s prompt token {ids[q][0]} at position {q} has rank "
            f"{int(tensors.selected_token_ranks[q])}, vLLM's GPU path gives {ranks[q]}")


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
