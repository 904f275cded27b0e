"""Torch stand-ins for the Triton kernels of vLLM's ``rejection_sampler.py``, so vLLM's own
``rejection_sample`` (its Python: the uniform and exponential draws, the greedy and random paths)
runs on CPU for batches with sampled requests. Each stand-in follows its kernel's contract, one
program (request, and draft position for the recovered tokens) at a time:

- ``expand_kernel``: request i's value (``replace_from`` read as ``replace_to``) at its tokens
  ``cu[i-1]..cu[i]-1``;
- ``rejection_greedy_sample_kernel``: for a greedy request (every request when ``is_greedy`` is
  None), the target argmax of each draft position is written until the first draft that differs
  from it (that position included); the bonus token follows only when every draft matched;
- ``rejection_random_sample_kernel``: for a sampled request, draft j is accepted when it is not
  negative, its draft probability q (1 without draft probabilities) is > 0 and
  ``p / q >= uniform[j]`` (p: the target's probability of the draft); the first rejected
  position gets ``recovered[j]`` and ends the request's tokens; the bonus token follows when every
  draft was accepted;
- ``sample_recovered_tokens_kernel``: for draft position j of request i, the argmax over the
  vocabulary of ``prob * inv_q[i]``, prob = max(target - draft, 0), or without draft
  probabilities the target with the draft's own entry 0; the first index on ties.

Synthetic mode is not covered (asserted). ``installed(module)`` swaps the stand-ins in for vLLM 0.26
(kernels launched as ``kernel[grid](...)``) and 0.30 / 0.33 (the ``_expand`` / ``_rejection_*`` /
``_sample_recovered_tokens`` dispatchers). ``fixes/spec-decode-sampled-rows`` tests them against
hand-worked cases; ``/work/device-49`` (the lead's scripts/) holds them against the real kernels.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

PLACEHOLDER = -1


def _starts(cu: torch.Tensor) -> list[tuple[int, int]]:
    ends = [int(x) for x in cu.tolist()]
    return list(zip([0] + ends[:-1], ends))


def expand(output: torch.Tensor, input: torch.Tensor, cu_num_tokens: torch.Tensor, replace_from: Any,
           replace_to: Any, **_: Any) -> None:
    for i, (start, end) in enumerate(_starts(cu_num_tokens)):
        value = input[i]
        output[start:end] = replace_to if value == replace_from else value


def rejection_greedy_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, target_argmax: torch.Tensor, bonus_token_ids: torch.Tensor,
                            is_greedy: Optional[torch.Tensor], max_spec_len: int, uniform_probs: Any = None,
                            synthetic_conditional_rates: Any = None, **kw: Any) -> None:
    assert synthetic_conditional_rates is None and not kw.get("SYNTHETIC_MODE"), "synthetic mode is not covered"
    out = output_token_ids.view(-1, max_spec_len + 1)
    bonus = bonus_token_ids.view(-1)
    for i, (start, end) in enumerate(_starts(cu_num_draft_tokens)):
        if is_greedy is not None and not bool(is_greedy[i]):
            continue
        rejected = False
        for pos in range(end - start):
            token = int(target_argmax[start + pos])
            out[i, pos] = token
            if int(draft_token_ids[start + pos]) != token:
                rejected = True
                break
        if not rejected:
            out[i, end - start] = bonus[i]


def rejection_random_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: Optional[torch.Tensor],
                            target_probs: torch.Tensor, bonus_token_ids: torch.Tensor,
                            recovered_token_ids: torch.Tensor, uniform_probs: torch.Tensor, is_greedy: torch.Tensor,
                            max_spec_len: int, synthetic_conditional_rates: Any = None, **kw: Any) -> None:
    assert synthetic_conditional_rates is None and not kw.get("SYNTHETIC_MODE"), "synthetic mode is not covered"
    out = output_token_ids.view(-1, max_spec_len + 1)
    bonus = bonus_token_ids.view(-1)
    for i, (start, end) in enumerate(_starts(cu_num_draft_tokens)):
        if bool(is_greedy[i]):
            continue
        rejected = False
        for pos in range(end - start):
            t = start + pos
            draft = int(draft_token_ids[t])
            if draft < 0:
                accepted = False
            else:
                q = 1.0 if draft_probs is None else float(draft_probs[t, draft])
                p = target_probs[t, draft]  # float32, divided and compared as the kernel does
                accepted = q > 0 and float(p / torch.tensor(q, dtype=p.dtype)) >= float(uniform_probs[t])
            if accepted:
                out[i, pos] = draft
            else:
                out[i, pos] = recovered_token_ids[t]
                rejected = True
                break
        if not rejected:
            out[i, end - start] = bonus[i]


def sample_recovered_tokens(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: Optional[torch.Tensor],
                            target_probs: torch.Tensor, inv_q: torch.Tensor, **_: Any) -> None:
    for i, (start, end) in enumerate(_starts(cu_num_draft_tokens)):
        for t in range(start, end):
            if draft_probs is None:
                prob = target_probs[t].clone()
                prob[int(draft_token_ids[t])] = 0.0
            else:
                prob = (target_probs[t] - draft_probs[t]).clamp(min=0.0)
            output_token_ids[t] = int((prob * inv_q[i]).argmax())


PROGRAMS = {
    "expand": (expand, ["output", "input", "cu_num_tokens", "replace_from", "replace_to"]),
    "rejection_greedy_sample": (rejection_greedy_sample, [
        "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "target_argmax", "bonus_token_ids", "is_greedy",
        "max_spec_len", "uniform_probs", "synthetic_conditional_rates"]),
    "rejection_random_sample": (rejection_random_sample, [
        "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs", "bonus_token_ids",
        "recovered_token_ids", "uniform_probs", "is_greedy", "max_spec_len", "vocab_size",
        "synthetic_conditional_rates"]),
    "sample_recovered_tokens": (sample_recovered_tokens, [
        "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs", "inv_q",
        "vocab_size", "BLOCK_SIZE"]),
}


class _Launched:
    """A kernel of vLLM 0.26 (``kernel[grid](args...)``): the arguments bound by the kernel's
    parameter names (``_ptr`` dropped) and handed to the stand-in."""

    def __init__(self, name: str):
        self.program, self.names = PROGRAMS[name]

    def __getitem__(self, grid: Any):
        def launch(*args: Any, **kwargs: Any) -> None:
            self.program(**dict(zip(self.names, args)), **kwargs)

        return launch


def _dispatcher(name: str, names: list[str]):
    program = PROGRAMS[name][0]

    def call(*args: Any, **kwargs: Any) -> None:
        program(**dict(zip(names, args)), **kwargs)

    return call


# vLLM 0.30 / 0.33's dispatchers: their own parameter lists (no vocab_size / BLOCK_SIZE).
_DISPATCHERS = {
    "_expand": ("expand", ["output", "input", "cu_num_tokens", "replace_from", "replace_to"]),
    "_rejection_greedy_sample": ("rejection_greedy_sample", PROGRAMS["rejection_greedy_sample"][1]),
    "_rejection_random_sample": ("rejection_random_sample", [
        "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs", "bonus_token_ids",
        "recovered_token_ids", "uniform_probs", "is_greedy", "max_spec_len", "synthetic_conditional_rates"]),
    "_sample_recovered_tokens": ("sample_recovered_tokens", [
        "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs", "inv_q"]),
}
_KERNELS = {"expand_kernel": "expand", "rejection_greedy_sample_kernel": "rejection_greedy_sample",
            "rejection_random_sample_kernel": "rejection_random_sample",
            "sample_recovered_tokens_kernel": "sample_recovered_tokens"}


def stand_ins(module: Any) -> dict[str, Any]:
    """The module attributes to replace: the dispatchers where the module has them (0.30, 0.33),
    else the kernels (0.26)."""
    if all(hasattr(module, n) for n in _DISPATCHERS):
        return {n: _dispatcher(*spec) for n, spec in _DISPATCHERS.items()}
    return {n: _Launched(p) for n, p in _KERNELS.items()}


@contextlib.contextmanager
def installed(module: Any):
    """vLLM's rejection-sampler module with the stand-ins in place of its Triton kernels."""
    values = stand_ins(module)
    saved = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


def uniform_probs_float32(num_tokens: int, num_draft_tokens: list[int], generators: dict[int, torch.Generator],
                          device: Any) -> torch.Tensor:
    """vLLM's ``generate_uniform_probs`` (one uniform per draft; a request with drafts and a generator
    draws its own, in order) in float32, as the HPU draws them: Gaudi has no float64."""
    uniform = torch.rand((num_tokens, ), dtype=torch.float32, device=device)
    start = 0
    for i, n in enumerate(num_draft_tokens):
        if n == 0:
            continue
        if generators.get(i) is not None:
            uniform[start:start + n].uniform_(generator=generators[i])
        start += n
    return uniform


@contextlib.contextmanager
def mirror_hpu_draws(module: Any):
    """vLLM's own ``rejection_sample`` for a batch with sampled requests, with the torch stand-ins
    for its four Triton kernels (``installed``: each held to its kernel's contract by
    fixes/spec-decode-sampled-rows' ``test_stand_in_*``), its uniforms drawn in float32
    (``uniform_probs_float32``) as the HPU draws them: Gaudi has no float64. With the bonus-row
    draw conform's GPU engine adds for each seeded request of the decode block (vllm_gaudi's runner
    samples a spec step's bonus rows once itself, ``_run_sampling``, before the
    ``RejectionSampler`` samples them again: conform_spec.gpu_spec_step), these are the two ways
    the HPU consumes a seeded request's random stream otherwise than vLLM's GPU path; mirrored, a
    seeded request's tokens are vLLM's for the same draws, token for token (``spec_tokens``)."""
    saved = module.generate_uniform_probs
    module.generate_uniform_probs = uniform_probs_float32
    try:
        with installed(module):
            yield
    finally:
        module.generate_uniform_probs = saved
