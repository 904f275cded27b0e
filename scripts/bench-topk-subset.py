#!/usr/bin/env python3
"""Time TopKTopPSampler.forward_native, stock vs topk-subset-sampler, on this machine.

Loads vllm/v1/sample/ops/topk_topp_sampler.py from two trees (each a directory
holding vllm/) with small stubs for the vLLM modules it imports, on an HPU-like
platform (not CUDA/CPU/XPU/ROCm, no Triton) so forward_native takes the same
branch as on Gaudi. Each shape gets random float32 logits, top_k uniform in
[1, 1024] and top_p uniform in (0.5, 1); the patched sampler gets the batch's
largest top_k as the hint that vllm_gaudi's input batch attaches.

    python scripts/bench-topk-subset.py --stock-root STOCK --patched-root PATCHED

Needs torch. Times are of the CPU; they say nothing about HPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

import torch

# The fix's own loader (stubs for the vLLM modules the sampler file imports).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixes" / "topk-subset-sampler"))
import vllm_stubs  # noqa: E402

SAMPLER_REL = Path("vllm/v1/sample/ops/topk_topp_sampler.py")
HINT_ATTR = "_gaudi_fixes_max_top_k"
SHAPES = ((256, 151936), (64, 128256), (8, 32000))


def load_sampler(root: Path, name: str) -> types.ModuleType:
    path = root / SAMPLER_REL
    if not path.is_file():
        sys.exit(f"bench-topk-subset: {path} does not exist")
    return vllm_stubs.load_sampler(path.read_text(), name, path)


def median_seconds(fns, logits: torch.Tensor, repeats: int) -> list[float]:
    """Median wall time of each fn on a fresh copy of logits (forward_native may
    write to its input; the copy is not timed). The fns are called in turn in
    every repeat, so a change of machine load hits all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent in zip(fns, times):
            fresh = logits.clone()
            start = time.perf_counter()
            fn(fresh)
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stock-root", type=Path, required=True, help="directory holding the stock vllm/")
    parser.add_argument("--patched-root", type=Path, required=True, help="directory holding the patched vllm/")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per sampler and shape")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    stock = load_sampler(args.stock_root, "bench_topk_stock")
    patched = load_sampler(args.patched_root, "bench_topk_patched")
    if not hasattr(patched, "_topk_subset_bucket"):
        sys.exit(f"bench-topk-subset: {args.patched_root / SAMPLER_REL} is not patched")
    stock_sampler, patched_sampler = stock.TopKTopPSampler(), patched.TopKTopPSampler()
    if not patched_sampler.topk_subset_enabled:
        sys.exit("bench-topk-subset: GAUDI_FIXES_TOPK_SUBSET=0 is set; unset it to time the fix")

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} calls, interleaved")
    print(f"{'B':>4} {'V':>7} {'K':>5} {'stock s':>9} {'patched s':>10} {'ratio':>7}")
    gen = torch.Generator().manual_seed(args.seed)
    for batch, vocab in SHAPES:
        logits = torch.randn(batch, vocab, generator=gen) * 3.0
        k = torch.randint(1, 1025, (batch,), generator=gen, dtype=torch.int32)
        p = 0.5 + 0.5 * torch.rand(batch, generator=gen)
        hinted = k.clone()
        setattr(hinted, HINT_ATTR, int(k.max()))
        window = patched._topk_subset_bucket(int(k.max()))

        # Every token the patched sampler draws must lie in its row's top-k.
        tokens, _ = patched_sampler.forward_native(logits.clone(), {}, hinted, p)
        kth = logits.topk(int(k.max()), dim=-1).values.gather(1, k.long().unsqueeze(1) - 1).squeeze(1)
        if bool((logits.gather(1, tokens.unsqueeze(1)).squeeze(1) < kth).any()):
            sys.exit("bench-topk-subset: the patched sampler drew a token outside top-k")

        stock_s, patched_s = median_seconds(
            (
                lambda x: stock_sampler.forward_native(x, {}, k, p),
                lambda x: patched_sampler.forward_native(x, {}, hinted, p),
            ),
            logits,
            args.repeats,
        )
        print(f"{batch:>4} {vocab:>7} {window:>5} {stock_s:>9.4f} {patched_s:>10.4f} {stock_s / patched_s:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
