"""What harness.py runs of ``sample_tokens`` besides ``_update_states``: its pieces lifted out of
the tree's ``hpu_model_runner.py`` (``lift_step``) and the reading of what each request gets
back (``returned``).

Lifted: ``_ensure_decodes_first``, ``_get_prompts_and_decodes``, ``_extract_prefill_batch_contents``
(which decides which prompt chunk gets a logits row), ``_run_sampling`` / ``_prepare_sampling``
(every sampler call), ``_build_logprobs_output``, and these statements of ``sample_tokens``: its
head between ``num_reqs = …`` and ``_prepare_inputs`` (what it resets per step), the
``use_structured_output`` assignments (made after ``_prepare_inputs`` read the flag), the ``if
self.use_structured_output:`` block that joins the logits, and the tail from ``if
self.use_async_scheduling or self.use_structured_output:`` to the loop extending
``output_token_ids`` (with every runner method it calls). The forward passes, the sampler and the
prefill loop's and decode block's few lines that collect rows and tokens are harness.py's
(``Harness.step``); what the user gets is read as vLLM does (``AsyncHPUModelRunnerOutput.get_output``
drops ``invalid_req_indices``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import types
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
import lift
import vllm_gaudi_stubs as stubs
from vllm_gaudi_stubs import RUNNER_REL


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _sample_tokens_parts(cls: ast.ClassDef, path: Path) -> dict[str, list[ast.stmt]]:
    fn = _method(cls, "sample_tokens")
    body = fn.body
    where = f"{cls.name}.sample_tokens"

    def at(start: int = 0, **lookup: Any) -> int:
        return body.index(lift.find_statement(body[start:], path=path, where=where, **lookup))

    head_from = at(kind=ast.Assign, contains="num_reqs = num_decodes + num_prefills") + 1
    head_to = at(kind=ast.With, contains="prepare_input_tensors")
    flag_from = at(kind=ast.Assign, contains="self.use_structured_output = False")
    flag_to = at(flag_from, test="grammar_output is not None")
    # the structured block with its own test (a fix may add a condition to it)
    structured = lift.find_statement(body, path=path, where=where, test="self.use_structured_output",
                                     contains="logits_combined")
    return {"head": body[head_from:head_to], "flag": body[flag_from:flag_to + 1], "structured": [structured],
            "tail": stubs.tail_of_sample_tokens(cls, path)}


def _module_defs(path: Path, names: set[str]) -> list[ast.stmt]:
    tree = lift.parse(path)
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    if {n.name for n in found} != names:
        raise LookupError(f"{path}: missing {names - {n.name for n in found}} (vllm_gaudi changed; update the test)")
    return found


@dataclass
class LogprobsLists:
    logprob_token_ids: Any
    logprobs: Any
    sampled_token_ranks: Any
    cu_num_generated_tokens: Any = None  # vLLM's: each request's first row when it has several


class LogprobsTensors:
    def __init__(self, tokens: torch.Tensor):
        self.logprob_token_ids = tokens.view(-1, 1).long()

    def tolists(self) -> LogprobsLists:
        n = self.logprob_token_ids.shape[0]
        # As vLLM's LogprobsTensors.tolists: numpy arrays.
        return LogprobsLists(self.logprob_token_ids.numpy(), np.full((n, 1), -0.5, dtype=np.float32),
                             np.ones(n, dtype=np.int64))


class _BlockTable:
    """What _extract_prefill_batch_contents and InputBatch ask of MultiGroupBlockTable."""

    def __getitem__(self, group: int) -> Any:
        return types.SimpleNamespace(get_cpu_tensor=lambda: torch.zeros(8, 4, dtype=torch.int32))

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None  # add_row, swap_row, move_row, …


class _CpuTorch:
    """torch as the lifted runner code sees it on CPU: pinned memory is turned off (it needs an
    accelerator), as the GPU reference's PIN_MEMORY; everything else is torch itself."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def tensor(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return torch.tensor(*args, **kwargs)


def _apply_token_bitmask_inplace_cpu(logits: torch.Tensor, bitmask: torch.Tensor, indices=None) -> None:
    """xgrammar's ``apply_token_bitmask_inplace_cpu`` contract: bit ``t % 32`` of word ``t // 32``
    of a bitmask row is 1 where token ``t`` is allowed; the other tokens of that logits row become
    -inf; with ``indices``, only those rows (bitmask and logits share the row index)."""
    rows = range(logits.shape[0]) if indices is None else [int(i) for i in indices]
    vocab = logits.shape[1]
    bits = torch.arange(vocab)
    for r in rows:
        words = bitmask[r].to(torch.int64)
        allowed = ((words[bits // 32] >> (bits % 32)) & 1).bool()
        logits[r][~allowed] = float("-inf")


XGR_CPU = types.SimpleNamespace(apply_token_bitmask_inplace_cpu=_apply_token_bitmask_inplace_cpu)


@functools.lru_cache(maxsize=8)
def _lifted(path: Path, mtime_ns: int, grammar: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``lift_step``'s parsing and compiling, once per file version: the parts of ``sample_tokens``
    compiled and the lifted methods as functions (bound to each runner by ``lift_step``)."""
    cls = stubs.runner_class(path)
    parts = _sample_tokens_parts(cls, path)
    code = {k: compile(ast.Module(v, []), str(path), "exec") for k, v in parts.items()}
    defs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    provided = {"_ensure_decodes_first", "_is_prompt", "_generate_req_id_output_token_ids_lst", "_prepare_sampling",
                "_can_merge_prefill_contents", "_get_attention_group_id_for_hybrid", "get_dp_padding",
                "_resolve_block"}
    wanted = {"_get_prompts_and_decodes", "_extract_prefill_batch_contents", "_run_sampling",
              "_build_logprobs_output"}
    if grammar:
        wanted.add("apply_grammar_bitmask")
    else:
        provided.add("apply_grammar_bitmask")
    todo = wanted | lift.self_calls([n for v in parts.values() for n in v])
    lifted: set[str] = set()
    while todo - provided - lifted:
        name = (todo - provided - lifted).pop()
        if name in defs:
            lifted.add(name)
            todo |= lift.self_calls([defs[name]])
        else:
            provided.add(name)
    from dataclasses import dataclass as _dataclass
    namespace: dict[str, Any] = {"torch": _CpuTorch(), "np": np, "xgr_cpu": XGR_CPU, "Optional": Optional,
                                 "Union": Union, "fields": fields, "field": field, "dataclass": _dataclass, "Callable": Callable,
                                 "LogprobsLists": LogprobsLists, "LogprobsTensors": LogprobsTensors,
                                 "htorch": types.SimpleNamespace(core=types.SimpleNamespace(mark_step=lambda: None)),
                                 "empty_list": lambda: field(default_factory=list)}
    exec(compile(ast.Module(_module_defs(path, {"BatchContents", "PromptDecodeInfo", "merge_contents",
                                                "shallow_tuple", "round_up"}), []), str(path), "exec"),
         namespace)
    exec(compile(ast.Module([defs[n] for n in sorted(lifted)], []), str(path), "exec"), namespace)
    return code, {name: namespace[name] for name in lifted}


def lift_step(runner: Any, root: Path, grammar: bool = False) -> dict[str, Any]:
    """Lift onto `runner` (a ``vllm_gaudi_stubs.Runner``) what one engine step runs of the tree's
    ``hpu_model_runner.py`` (see the module's docstring) and set the attributes it reads (sync
    scheduling, no structured output yet, CPU, no profiler); return the parts of
    ``sample_tokens`` compiled (``head``, ``flag``, ``structured``, ``tail``) for ``exec`` with the
    step's locals. With `grammar`, the runner's own ``apply_grammar_bitmask`` is lifted too (with
    xgrammar's CPU kernel contract, ``XGR_CPU``); without, it is a no-op."""
    runner.input_batch.block_table = _BlockTable()
    path = root / RUNNER_REL
    code, functions = _lifted(path, path.stat().st_mtime_ns, grammar)
    for name, fn in functions.items():
        setattr(runner, name, types.MethodType(fn, runner))
    runner._can_merge_prefill_contents = lambda lhs, rhs: False  # one prefill batch per prompt
    runner._get_attention_group_id_for_hybrid = lambda: 0
    runner.get_dp_padding = lambda n: 0
    runner._resolve_block = lambda b: b
    if not grammar:
        runner.apply_grammar_bitmask = lambda *a: None  # the grammar's row mapping is not these tests' subject
    runner.attn_block_size = 128
    runner.use_async_scheduling = False
    runner.use_structured_output = False
    runner.device = torch.device("cpu")
    runner.max_model_len = 128
    runner.speculative_config = None
    runner.vllm_config = types.SimpleNamespace(speculative_config=None)
    runner.profiler = types.SimpleNamespace(enabled=False, record_event=lambda *a: contextlib.nullcontext())
    return code


def returned(runner: Any, ns: dict[str, Any]) -> dict[str, list[int]]:
    """What each request of the step gets back, read as vLLM does: under async scheduling
    ``AsyncHPUModelRunnerOutput.get_output`` drops the rows of ``invalid_req_indices``; under sync
    scheduling, ``postprocessed_sampled_token_ids``."""
    batch = runner.input_batch
    if runner.use_async_scheduling:
        # the output thread's copy (get_output), read as a plain tensor: not sample_tokens' own
        rows = ns["sampled_token_ids"].as_subclass(torch.Tensor).tolist()
        for i in runner.invalid_req_indices:
            if i < len(rows):
                rows[i].clear()
        return {rid: rows[i] for i, rid in enumerate(batch.req_ids) if i < len(rows)}
    post = ns["postprocessed_sampled_token_ids"]
    return {rid: list(post[batch.req_id_to_index[rid]]) for rid in batch.req_ids}
