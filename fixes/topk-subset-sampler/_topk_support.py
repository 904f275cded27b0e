"""Shared loading and helpers of the topk-subset-sampler tests (test_topk_*.py; CPU, needs torch).

The patched ``vllm/v1/sample/ops/topk_topp_sampler.py`` is loaded from the tree at
``$GAUDI_FIXES_ROOT`` (the directory holding ``vllm/``), with small stubs for the
vLLM modules it imports, on an HPU-like platform so ``forward_native`` is used.
Every test file imports this module first: with ``$GAUDI_FIXES_ROOT`` unset it skips the
file; a tree whose sampler is not patched fails each test that loads it (``patched_source``).
The environment variable's name is the harness's (``_support/fixtures.py``); the ``root``
fixture is not used, as these tests need ``vllm/`` alone (the vllm_gaudi half skips without it).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/> pytest -s fixes/topk-subset-sampler``
(``-s`` shows the measured numbers).
"""

from __future__ import annotations

import ast
import functools
import os
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from fixtures import ROOT_ENV
from vllm_gaudi_stubs import load_sampler_source as load_sampler

# The names agreed for the fix, written out independently of the patched code.
HINT_ATTR = "_gaudi_fixes_topk_window"
WINDOWS = (64, 128, 256, 512, 1024)
SAMPLER_REL = Path("vllm/v1/sample/ops/topk_topp_sampler.py")
FIX_DIR = Path(__file__).resolve().parent
NUCLEUS_ATTR = "_gaudi_fixes_nucleus_window"

if not os.environ.get(ROOT_ENV):
    pytest.skip(
        f"{ROOT_ENV} is not set: point it at a directory holding the patched vllm/ "
        "(e.g. a tree made by scripts/fetch-upstream.sh and `gaudi-fixes apply`)",
        allow_module_level=True,
    )

ROOT = Path(os.environ[ROOT_ENV])
SAMPLER_PATH = ROOT / SAMPLER_REL

# A fixed thread count keeps float reductions, and so the measured ulps, alike across machines.
torch.set_num_threads(min(2, torch.get_num_threads()))


# --------------------------------------------------------------------------
# Loading the sampler module with stubbed vLLM imports (the catalogue's _support/vllm_gaudi_stubs.py)
# --------------------------------------------------------------------------


@functools.cache
def patched_source() -> str:
    if not SAMPLER_PATH.is_file():
        pytest.fail(f"{ROOT_ENV}={ROOT}: {SAMPLER_PATH} does not exist")
    source = SAMPLER_PATH.read_text()
    if "_apply_top_k_top_p_subset" not in source or HINT_ATTR not in source:
        pytest.fail(
            f"{SAMPLER_PATH} is not patched with topk-subset-sampler v2 "
            "(run `gaudi-fixes apply topk-subset-sampler` on that tree first)"
        )
    return source


@functools.cache
def base() -> types.ModuleType:
    return load_sampler(patched_source(), "gaudi_fixes_topk_patched", SAMPLER_PATH)


# --------------------------------------------------------------------------
# Shared helpers: batches of logits, the subset's columns, path spies, mutations
# --------------------------------------------------------------------------


def bf16_round(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def llm_like_logits(gen: torch.Generator, batch: int, vocab: int) -> torch.Tensor:
    """Gaussian logits (std 3) with a few strong candidates per row (synthetic:
    no model runs here)."""
    logits = torch.randn(batch, vocab, generator=gen) * 3.0
    top = torch.randint(0, vocab, (batch, 8), generator=gen)
    logits.scatter_(1, top, 12.0 + 3.0 * torch.rand(batch, 8, generator=gen))
    return logits


def random_k(gen: torch.Generator, batch: int, low: int = 1, high: int = 1024) -> torch.Tensor:
    return torch.randint(low, high + 1, (batch,), generator=gen, dtype=torch.int32)


def random_p(gen: torch.Generator, batch: int) -> torch.Tensor:
    return 0.5 + 0.5 * torch.rand(batch, generator=gen)


def expected_window(max_top_k: int) -> int | None:
    return next((w for w in WINDOWS if max_top_k <= w), None)


@dataclass
class Subset:
    """The patched sampler's masked K+1 columns, spread back over the vocabulary."""

    window_logits: torch.Tensor  # [B, K+1]; column 0 is the tie class
    window_ids: torch.Tensor  # [B, K]
    kth: torch.Tensor  # [B]
    num_tied: torch.Tensor  # [B] |T| over the whole row
    probs: torch.Tensor  # [B, V] window columns 1.. scattered; T members 0
    tie_mass: torch.Tensor  # [B] probability of column 0
    tie_kept: torch.Tensor  # [B] number of T members the column stands for


def subset(mod, logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor | None, window: int) -> Subset:
    wl, wi, kth, _tied, _counts, num_tied = mod._apply_top_k_top_p_subset(logits.clone(), k, p, window)
    probs = wl.softmax(dim=-1, dtype=torch.float32)
    full = torch.zeros_like(logits).scatter_(1, wi.long(), probs[:, 1:])
    kth = kth.view(-1)
    # Column 0 holds kth + log(kept): recover the count it stands for.
    kept = torch.where(wl[:, 0] > -float("inf"), (wl[:, 0].double() - kth.double()).exp().round(), 0.0)
    return Subset(wl, wi, kth, num_tied.view(-1), full, probs[:, 0], kept.long())


def coupled_race(mod, sub: Subset, logits: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The subset race under full-vocabulary noise, as the seeded path couples it."""
    tied = logits == sub.kth.unsqueeze(1)
    q_tied, tie_token = torch.where(tied, noise, float("inf")).min(dim=1)
    q = torch.cat(((q_tied * sub.num_tied.float()).unsqueeze(1), noise.gather(1, sub.window_ids)), dim=1)
    return mod._topk_subset_race(sub.window_logits, sub.window_ids, q, tie_token)


@contextmanager
def _record_paths(mod):
    """Record which path forward_native takes (subset or stock)."""
    taken: list[str] = []
    subset, stock_apply = mod._topk_subset_sample, mod.apply_top_k_top_p
    nucleus = mod._topk_subset_nucleus_sample

    def subset_spy(*args, **kwargs):
        taken.append("subset")
        return subset(*args, **kwargs)

    def stock_spy(*args, **kwargs):
        taken.append("stock")
        return stock_apply(*args, **kwargs)

    def nucleus_spy(*args, **kwargs):
        taken.append("nucleus")
        return nucleus(*args, **kwargs)

    mod._topk_subset_sample, mod.apply_top_k_top_p = subset_spy, stock_spy
    mod._topk_subset_nucleus_sample = nucleus_spy
    try:
        yield taken
    finally:
        mod._topk_subset_sample, mod.apply_top_k_top_p = subset, stock_apply
        mod._topk_subset_nucleus_sample = nucleus


def _with_hint(k: torch.Tensor, hint) -> torch.Tensor:
    k = k.clone()
    if hint is not None:
        setattr(k, HINT_ATTR, hint)
    return k


def _generators(kind: str, batch: int) -> dict[int, torch.Generator]:
    rows = {"": [], "some": [1, 4], "all": list(range(batch))}[kind]
    return {row: torch.Generator().manual_seed(11 + row) for row in rows}


_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__")


@contextmanager
def _forbid_device_reads():
    """Make every Tensor -> Python value conversion raise."""
    saved = {name: getattr(torch.Tensor, name) for name in _SYNC_METHODS}

    def forbidden(name):
        def method(self, *args, **kwargs):
            raise AssertionError(f"device value read: Tensor.{name}()")

        return method

    for name in _SYNC_METHODS:
        setattr(torch.Tensor, name, forbidden(name))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def _function_span(source: str, name: str) -> tuple[int, int]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            lines = source.splitlines(keepends=True)
            start = sum(len(line) for line in lines[: node.lineno - 1])
            end = sum(len(line) for line in lines[: node.end_lineno])
            return start, end
    raise AssertionError(f"function {name} not found in {SAMPLER_PATH}")


def mutate(source: str, function: str, old: str, new: str) -> str:
    """Replace `old` (exactly once) inside one function of the source."""
    start, end = _function_span(source, function)
    body = source[start:end]
    assert body.count(old) == 1, f"{function}: {old!r} found {body.count(old)} times"
    mutant = source[:start] + body.replace(old, new) + source[end:]
    assert mutant != source
    return mutant


def _mutations(function: str, *pairs: tuple[str, str]):
    def apply(source: str) -> str:
        for old, new in pairs:
            source = mutate(source, function, old, new)
        return source

    return apply
