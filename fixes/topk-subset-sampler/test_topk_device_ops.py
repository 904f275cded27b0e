"""Tests for the topk-subset-sampler fix: the device-op audit (CPU; records aten ops).

On the device: the fast path's aten ops (with input dtypes), recorded through the real
forward_native, must all be in device_ops.txt (each with its gaudi-pytorch-bridge evidence),
with no host sync and no data-dependent shape; sources that bring back searchsorted,
aten.index, a reinterpreted bool, int64 ids, a sync or a nonzero must fail that audit.
Loading: ``_topk_support.py``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import device_ops
from _topk_support import (
    FIX_DIR,
    NUCLEUS_ATTR,
    SAMPLER_PATH,
    _generators,
    _mutations,
    _record_paths,
    _with_hint,
    base,
    bf16_round,
    llm_like_logits,
    load_sampler,
    patched_source,
    random_k,
    random_p,
)


# --------------------------------------------------------------------------
# On the device: the fast path's aten ops against the allowlist (device_ops.txt)
# --------------------------------------------------------------------------

ALLOWLIST_PATH = FIX_DIR / "device_ops.txt"
# The allowlist's loader and the op recorder are shared with the spec-decode fixes' audit
# (_support/device_ops.py).
HOST_SYNC_OPS, DATA_DEPENDENT_OPS = device_ops.HOST_SYNC_OPS, device_ops.DATA_DEPENDENT_OPS
AllowedOp, _OpRecorder = device_ops.AllowedOp, device_ops.OpRecorder


def load_allowlist(path: Path = ALLOWLIST_PATH) -> dict[tuple[str, str], AllowedOp]:
    """`op dtypes evidence...` per line; # comments. Errors name the file and line."""
    return device_ops.load_allowlist(path)


@dataclass
class AuditBatch:
    name: str
    vocab: int
    bf16: bool
    seeded: str  # "" | some | all
    top_p: bool
    top_k: str = "random"  # random (in [1, 64]) | window (every row k = 64)
    # "" (the topk window path) | only (top-p rows without top_k: the value-axis pivot)
    # | mixed (top_k rows and rows without, window 64)
    nucleus: str = ""


AUDIT_BATCHES = (
    AuditBatch("fp32", 4096, False, "", True),
    AuditBatch("fp32_top_k_only", 4096, False, "", False),
    AuditBatch("bf16_tie", 32000, True, "", True, top_k="window"),
    AuditBatch("bf16_tie_top_k_only", 32000, True, "", False, top_k="window"),
    AuditBatch("seeded", 4096, True, "some", True),
    AuditBatch("all_seeded", 4096, True, "all", False),
    AuditBatch("vocab_not_multiple_of_4", 4099, True, "some", True, top_k="window"),
    AuditBatch("nucleus_fp32", 4096, False, "", True, nucleus="only"),
    AuditBatch("nucleus_bf16_seeded_v4099", 4099, True, "some", True, nucleus="only"),
    AuditBatch("nucleus_mixed_seeded", 32000, True, "some", True, nucleus="mixed"),
    AuditBatch("nucleus_all_seeded", 4096, False, "all", True, nucleus="mixed"),
)


def record_ops(mod, batch: AuditBatch, fast: bool = True) -> tuple[dict[tuple[str, str], int], list[str]]:
    """The aten ops of one forward_native call (the real patched method) on `batch`;
    fast=False records the stock path (no window attached). Returns (ops, paths taken)."""
    g = torch.Generator().manual_seed(zlib.crc32(batch.name.encode()))
    B = 8
    logits = llm_like_logits(g, B, batch.vocab)
    if batch.bf16:
        logits = bf16_round(logits)
    k = random_k(g, B, 1, 64) if batch.top_k == "random" else torch.full((B,), 64, dtype=torch.int32)
    k = _with_hint(k, 64 if fast else None)
    p = random_p(g, B) if batch.top_p else None
    if batch.nucleus:
        k = None if batch.nucleus == "only" else torch.tensor([batch.vocab, 20, batch.vocab, 64, 3, batch.vocab, 50,
                                                              batch.vocab], dtype=torch.int32)
        if fast:
            setattr(p, NUCLEUS_ATTR, 0 if batch.nucleus == "only" else 64)
    sampler = mod.TopKTopPSampler()
    with _record_paths(mod) as taken, _OpRecorder() as recorder:
        sampler.forward_native(logits, _generators(batch.seeded, B), k, p)
    return recorder.ops, taken


def audit(mod, allowed: dict[tuple[str, str], AllowedOp]) -> tuple[list[str], dict[tuple[str, str], set[str]]]:
    """Failures of the fast path's op stream over AUDIT_BATCHES, and every (op, dtypes) seen
    with the batches it was seen in."""
    failures: list[str] = []
    seen: dict[tuple[str, str], set[str]] = {}
    for batch in AUDIT_BATCHES:
        try:
            ops, taken = record_ops(mod, batch)
        except Exception as exc:
            failures.append(f"{batch.name}: forward_native raised {type(exc).__name__}: {exc}")
            continue
        want = ["nucleus"] if batch.nucleus else ["subset"]
        if taken != want:
            failures.append(f"{batch.name}: took {taken}, want {want} (the audit covers the fast path)")
        for key in ops:
            seen.setdefault(key, set()).add(batch.name)
    failures += device_ops.classify(seen, allowed, ALLOWLIST_PATH.name)
    return failures, seen


def test_allowlist_entries_carry_evidence():
    entries = load_allowlist()
    assert entries, f"{ALLOWLIST_PATH} lists no op"


def test_fast_path_uses_only_ops_gaudi_compiles():
    """Every aten op (with input dtypes) of the patched forward_native's fast path, over
    fp32, bf16-tie, seeded and odd-vocabulary batches, is in device_ops.txt with its
    evidence; no host sync, no data-dependent shape."""
    allowed = load_allowlist()
    failures, seen = audit(base(), allowed)
    print(f"\nfast path: {len(seen)} (op, input dtypes) over {len(AUDIT_BATCHES)} batches")
    for op, dtypes in sorted(seen):
        print(f"  {op:34} {dtypes}")
    assert not failures, "fast path ops Gaudi may not compile:\n" + "\n".join(failures)
    unused = sorted(set(allowed) - set(seen))
    print(f"allowlist entries not used by these batches: {unused}")


def test_stock_path_ops_fail_the_audit():
    """The stock path's op stream (recorded for the fix page) is not all in the allowlist:
    the audit can tell a full sort from the fast path."""
    allowed = load_allowlist()
    seen: dict[tuple[str, str], int] = {}
    for batch in AUDIT_BATCHES:
        ops, taken = record_ops(base(), batch, fast=False)
        assert taken == ["stock"], f"{batch.name}: took {taken} without a window"
        for key, n in ops.items():
            seen[key] = seen.get(key, 0) + n
    print(f"\nstock path: {len(seen)} (op, input dtypes)")
    for op, dtypes in sorted(seen):
        print(f"  {op:34} {dtypes}{'' if (op, dtypes) in allowed else '   (not in the allowlist)'}")
    assert ("aten.sort.default", "float32") in seen
    assert set(seen) - set(allowed), "the stock path's ops all pass the audit: the audit cannot tell them apart"


AUDIT_MUTANTS = {
    "searchsorted": _mutations(
        "_topk_subset_tie_member",
        ("chunk = (tie_counts < target).sum(dim=-1, keepdim=True, dtype=torch.int32)",
         "chunk = torch.searchsorted(tie_counts, target).to(torch.int32)"),
    ),
    "bool_reinterpreted": _mutations(
        "_topk_subset_tie_counts", ("tied = logits.eq_(kth)", "tied = (logits == kth).view(torch.uint8)")
    ),
    "seeded_noise_by_index": _mutations(
        "_topk_subset_noise", ("q[i, 1:] = row_q.index_select(0, window_ids[i])", "q[i, 1:] = row_q[window_ids[i]]")
    ),
    "int64_window_ids": _mutations("_apply_top_k_top_p_subset", ("logits_idx.to(torch.int32).flip(-1)", "logits_idx.flip(-1)")),
    "host_sync": _mutations("_topk_subset_tie_counts", ("num_tied = counts[:, -1:]", "num_tied = counts[:, -1:] + 0 * int(counts[0, -1])")),
    "data_dependent_shape": _mutations(
        "_topk_subset_tie_counts", ("num_tied = counts[:, -1:]", "num_tied = counts[:, -1:] + 0 * counts.nonzero().shape[0]")
    ),
}


@pytest.mark.parametrize("name", sorted(AUDIT_MUTANTS))
def test_audit_rejects_ops_gaudi_may_not_compile(name):
    """A source using an op outside the allowlist (the old patch's searchsorted, bool view,
    aten.index, int64 ids), a host sync or a data-dependent shape fails the audit."""
    source = patched_source()
    mutant = load_sampler(AUDIT_MUTANTS[name](source), f"gaudi_fixes_topk_audit_{name}", SAMPLER_PATH)
    failures, _ = audit(mutant, load_allowlist())
    print(f"\n{name}: {failures[:2]}")
    assert failures, f"audit mutant {name} passed the audit"
