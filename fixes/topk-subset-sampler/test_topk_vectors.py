"""Tests for the topk-subset-sampler fix: reference vectors (optional; CPU).

``$GAUDI_FIXES_VECTORS``: reference vectors written by ``gaudi-fixes``' reference sampler;
the patched real code must reproduce their stock tokens and supports. Without it these
tests skip. Loading: ``_topk_support.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from _topk_support import base, coupled_race, expected_window, subset

VECTORS_ENV = "GAUDI_FIXES_VECTORS"


# --------------------------------------------------------------------------
# Reference vectors from gaudi-fixes' reference sampler (optional)
# --------------------------------------------------------------------------


def _vector_dirs() -> list[Path]:
    root = os.environ.get(VECTORS_ENV)
    if not root:
        return []
    dirs = sorted(d for d in Path(root).iterdir() if (d / "logits.npy").is_file())
    if not dirs:
        pytest.fail(f"{VECTORS_ENV}={root}: no subdirectory with logits.npy")
    return dirs


@pytest.mark.skipif(not os.environ.get(VECTORS_ENV), reason=f"{VECTORS_ENV} is not set: no reference vectors")
def test_reference_vectors_excuse_few_rows():
    """The excused rows (documented differences) must stay a small part of the vectors, or
    test_reference_vectors would compare next to nothing."""
    manifest = json.loads((Path(os.environ[VECTORS_ENV]) / "manifest.json").read_text())
    rows = sum(c["batch"] for c in manifest["cases"])
    excused = sum(len(c["subset_may_differ"]) for c in manifest["cases"])
    assert rows > 0 and excused <= 0.25 * rows, f"{excused} of {rows} rows excused"


@pytest.mark.skipif(not os.environ.get(VECTORS_ENV), reason=f"{VECTORS_ENV} is not set: no reference vectors")
@pytest.mark.parametrize("vector_dir", _vector_dirs(), ids=lambda d: d.name)
def test_reference_vectors(vector_dir):
    """The patched real code reproduces the reference sampler's stock tokens and supports.

    Rows the reference lists under `subset_may_differ` in manifest.json (a tie or rounding
    at the top-p boundary) are the documented differences and are not compared; every
    other row, including tie groups at the k-th value that cross the window, must match.
    """
    manifest = json.loads((vector_dir.parent / "manifest.json").read_text())
    meta = next((c for c in manifest["cases"] if c["name"] == vector_dir.name), None)
    assert meta is not None, f"{vector_dir.name} is not in manifest.json"
    load = lambda name: np.load(vector_dir / name)  # noqa: E731
    logits = torch.from_numpy(load("logits.npy")).float()
    k = torch.from_numpy(load("k.npy")).long()
    p = torch.from_numpy(load("p.npy")).float()
    noise = torch.from_numpy(load("noise.npy")).float()
    expected = load("expected_tokens.npy").astype(np.int64)
    lengths = load("support_lengths.npy").astype(np.int64)
    support_ids = load("support_ids.npy").astype(np.int64)
    support_logprobs = load("support_logprobs.npy").astype(np.float32)
    B, V = logits.shape
    assert k.shape == (B,) and p.shape == (B,) and noise.shape == (B, V) and expected.shape == (B,)
    assert lengths.shape == (B,) and support_ids.shape == support_logprobs.shape == (int(lengths.sum()),)
    skip = {d["row"] for d in meta["subset_may_differ"]}
    rows = [r for r in range(B) if r not in skip]
    k_arg = None if meta["k_is_none"] else k
    p_arg = None if meta["p_is_none"] else p

    mod = base()

    def window_path(window: int) -> tuple[torch.Tensor, torch.Tensor]:
        sub = subset(mod, logits, k_arg, p_arg, window)
        tokens = coupled_race(mod, sub, logits, noise)
        full_logprobs = sub.probs.log()
        # The tie class's kept members (all of it unless top-p cuts inside it; then the
        # reference lists the row as a top-p tie) each carry an equal share of column 0.
        tied = logits == sub.kth.unsqueeze(1)
        members = tied & (tied.long().cumsum(dim=1) <= sub.tie_kept.unsqueeze(1))
        share = (sub.tie_mass / sub.tie_kept.clamp_min(1)).log().unsqueeze(1)
        return tokens, torch.where(members, share.expand_as(full_logprobs), full_logprobs)

    window = None if k_arg is None else expected_window(int(k.max()))
    route = meta.get("route", "")
    if route.startswith("pivot"):
        # Rows without top_k and a top_p tensor (issue 47): the pivot path, top_k rows by the
        # window (route "pivot + subset K=..."); the reference's noise raced over the pivot's
        # kept set as the patch races seeded rows (weights / noise).
        window = int(route.rsplit("=", 1)[1]) if "=" in route else 0
        e = torch.sub(logits, logits.amax(dim=-1, keepdim=True)).exp_()
        pivot, tie_weight, tied = mod._topk_subset_nucleus_pivot(e, p)
        weights = torch.where(tied, tie_weight, e.masked_fill(e < pivot, 0.0))
        tokens = (weights / noise).argmax(dim=-1)
        full_logprobs = (weights / weights.sum(dim=-1, keepdim=True)).log()
        if window:
            window_tokens, window_logprobs = window_path(window)
            tokens = torch.where(k < V, window_tokens, tokens)
            full_logprobs = torch.where((k < V).unsqueeze(1), window_logprobs, full_logprobs)
        # The patched sampler itself (unseeded: inverse-CDF pick) draws inside stock's support.
        drawn = mod._topk_subset_nucleus_sample(logits.clone(), k_arg, p, window, {}).numpy()
        starts = np.concatenate([[0], np.cumsum(lengths)])
        outside = [r for r in rows if drawn[r] not in support_ids[starts[r] : starts[r + 1]]]
        assert not outside, f"{vector_dir.name}: rows {outside[:10]} drew outside stock's support"
    elif window is None or window >= V:
        # No subset for this batch: the patched file must take the stock path.
        masked = mod.apply_top_k_top_p_pytorch(logits.clone(), k_arg, p_arg)
        probs = masked.softmax(dim=-1, dtype=torch.float32)
        tokens = mod.sample_with_exponential_noise(probs.clone(), noise.clone())
        full_logprobs = masked.log_softmax(dim=-1, dtype=torch.float32)
    else:
        tokens, full_logprobs = window_path(window)
    got_tokens = tokens.numpy()
    differ = [r for r in rows if got_tokens[r] != expected[r]]
    assert not differ, f"{vector_dir.name}: rows {differ[:10]} differ from the reference's stock token"
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for row in rows:
        want_ids = support_ids[offsets[row] : offsets[row + 1]]
        got_ids = torch.nonzero(full_logprobs[row] > -float("inf")).flatten().numpy()
        assert np.array_equal(got_ids, want_ids), f"{vector_dir.name} row {row}: support differs"
        got = full_logprobs[row, torch.from_numpy(want_ids)].numpy()
        want = support_logprobs[offsets[row] : offsets[row + 1]]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"{vector_dir.name} row {row}")
