#!/usr/bin/env python3
"""Time TopKTopPSampler.forward_native, stock vs topk-subset-sampler, on this machine;
and measure the fast path's reach on a simulated request mix.

Loads vllm/v1/sample/ops/topk_topp_sampler.py from two trees (each a directory holding
vllm/) with small stubs for the vLLM modules it imports, on an HPU-like platform (not
CUDA/CPU/XPU/ROCm, no Triton) so forward_native takes the same branch as on Gaudi. The
patched sampler gets the window hint that vllm_gaudi's input batch attaches.

    python scripts/bench-topk-subset.py --stock-root STOCK --patched-root PATCHED \\
        [--baseline-root [NAME=]OLD ...]   # other patched trees (e.g. the fix's v1), timed alongside
        [--first-shape-only] [--repeats N]
    python scripts/bench-topk-subset.py --top-p --stock-root STOCK --patched-root PATCHED [--repeats N] \\
        [--baseline-root [NAME=]OLD ...]

Speed: the first shape is the issue's (B=256, V=151936, top_k=50, top_p=0.9); the others
have top_k uniform in [1, 1024] and top_p uniform in (0.5, 1). Beside the samplers it times
two floors on the same logits: a bare `logits.topk(K)` (the one op the fast path cannot do
without) and `logits.amax(-1)` (one read of the logits, the cheapest vocabulary-wide pass),
and prints every sampler's time as a multiple of the bare topk. Everything is interleaved
(each repeat calls every function in turn), so the ratios are comparable on a loaded machine;
the load average (os.getloadavg) is printed before and after.

Reach (--reach, needs vllm_gaudi/ in the patched tree): batches of B requests, every
request top_k 20 (--reach-top-k), a share greedy (stored by vllm_gaudi as top_k = vocab,
temperature -1) and a share seeded (own generator); the window hint is computed by the
tree's own patched hpu_input_batch.py helper and the decision by the sampler's own
_topk_subset_window. Prints the fraction of batches that skip the full-vocabulary sort.

Reach by model defaults (--reach-defaults, needs vllm_gaudi/ too; issue 47): batches whose
requests keep the generation_config defaults of one model family (DEFAULTS below: Llama 3.x,
DeepSeek V3/R1, Qwen, Gemma), or of all four mixed, except a share greedy, a share seeded and
a share (--override) that set their own parameters (OVERRIDES, drawn uniformly) and a share
(--large-top-k) with top_k 2000. The top_k /
top_p tensors are None as vllm_gaudi's input batch leaves them (no row with top_k < vocab /
top_p < 1), the hints come from the tree's patched helpers, the path from the sampler's own
_topk_subset_window and _topk_subset_nucleus. Prints per mix the share of sampler calls on
each path: window, pivot, stock with its full sort, and no filter (no top_k or top_p tensor:
stock draws without sorting).

Needs torch (and numpy for --reach). Times are of the CPU; they say nothing about HPU.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys
import time
import types
from pathlib import Path

import torch

# The catalogue's test-support loader (stubs for the vLLM modules the sampler file imports).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixes" / "_support"))
import vllm_gaudi_stubs  # noqa: E402

SAMPLER_REL = Path("vllm/v1/sample/ops/topk_topp_sampler.py")
INPUT_BATCH_REL = Path("vllm_gaudi/v1/worker/hpu_input_batch.py")
HINT_ATTR = "_gaudi_fixes_topk_window"
V1_HINT_ATTR = "_gaudi_fixes_max_top_k"  # the fix's v1: the batch's raw largest top_k
WINDOWS = (64, 128, 256, 512, 1024)
# (batch, vocab, top_k or None for uniform [1, 1024], top_p or None for uniform (0.5, 1))
SHAPES = ((256, 151936, 50, 0.9), (256, 151936, None, None), (64, 128256, None, None), (8, 32000, None, None))


def load_sampler(root: Path, name: str) -> types.ModuleType:
    path = root / SAMPLER_REL
    if not path.is_file():
        sys.exit(f"bench-topk-subset: {path} does not exist")
    return vllm_gaudi_stubs.load_sampler_source(path.read_text(), name, path)


def window_for(max_top_k: int) -> int | None:
    return next((w for w in WINDOWS if max_top_k <= w), None)


def hinted(k: torch.Tensor) -> torch.Tensor:
    """k with both the v2 hint (the window) and the v1 hint (the raw max)."""
    k = k.clone()
    setattr(k, V1_HINT_ATTR, int(k.max()))
    window = window_for(int(k.max()))
    if window is not None:
        setattr(k, HINT_ATTR, window)
    return k


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


def bench(args) -> None:
    samplers = {"stock": load_sampler(args.stock_root, "bench_topk_stock").TopKTopPSampler()}
    patched = load_sampler(args.patched_root, "bench_topk_patched")
    if not hasattr(patched, "_topk_subset_bucket"):
        sys.exit(f"bench-topk-subset: {args.patched_root / SAMPLER_REL} is not patched")
    samplers["patched"] = patched.TopKTopPSampler()
    if not samplers["patched"].topk_subset_enabled:
        sys.exit("bench-topk-subset: GAUDI_FIXES_TOPK_SUBSET=0 is set; unset it to time the fix")
    for i, spec in enumerate(args.baseline_root or []):
        name, _, root = spec.rpartition("=")
        name = name or ("baseline" if i == 0 else f"baseline{i + 1}")
        samplers[name] = load_sampler(Path(root), f"bench_topk_{name}").TopKTopPSampler()

    names = list(samplers)
    floors = ("topk(K)", "amax")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} calls, interleaved; "
          f"load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'B':>4} {'V':>7} {'top_k':>9} {'top_p':>9} {'K':>5} "
          + " ".join(f"{n + ' s':>12}" for n in names + list(floors))
          + " " + " ".join(f"{'stock/' + n:>16}" for n in names[1:])
          + " " + " ".join(f"{n + '/topk':>14}" for n in names[1:] + ["amax"]))
    gen = torch.Generator().manual_seed(args.seed)
    for batch, vocab, top_k, top_p in SHAPES[:1] if args.first_shape_only else SHAPES:
        logits = torch.randn(batch, vocab, generator=gen) * 3.0
        if top_k is None:
            k = torch.randint(1, 1025, (batch,), generator=gen, dtype=torch.int32)
        else:
            k = torch.full((batch,), top_k, dtype=torch.int32)
        p = 0.5 + 0.5 * torch.rand(batch, generator=gen) if top_p is None else torch.full((batch,), top_p)
        hk = hinted(k)

        # Every token the patched sampler draws must lie in its row's top-k.
        tokens, _ = samplers["patched"].forward_native(logits.clone(), {}, hk, p)
        kth = logits.topk(int(k.max()), dim=-1).values.gather(1, k.long().unsqueeze(1) - 1).squeeze(1)
        if bool((logits.gather(1, tokens.unsqueeze(1)).squeeze(1) < kth).any()):
            sys.exit("bench-topk-subset: the patched sampler drew a token outside top-k")

        fns = [lambda x, s=s, kk=(k if n == "stock" else hk): s.forward_native(x, {}, kk, p) for n, s in samplers.items()]
        window = window_for(int(k.max()))
        fns += [lambda x, w=window: x.topk(w, dim=-1), lambda x: x.amax(dim=-1)]
        secs = median_seconds(fns, logits, args.repeats)
        topk_s = secs[len(names)]
        print(
            f"{batch:>4} {vocab:>7} {top_k or '[1,1024]':>9} {top_p or '(0.5,1)':>9} {window:>5} "
            + " ".join(f"{s:>12.4f}" for s in secs)
            + " " + " ".join(f"{secs[0] / s:>15.1f}x" for s in secs[1 : len(names)])
            + " " + " ".join(f"{s / topk_s:>13.2f}x" for s in secs[1 : len(names)] + [secs[-1]])
        )
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


# Issue 47: Llama's (T 0.6, top_p 0.9) and DeepSeek's (top_p 0.95) defaults without top_k,
# and top_k 50 + top_p 0.9, all at temperature 0.6 (logits randn * 3.0 / 0.6).
TOP_P_SHAPES = ((256, 151936, 50, 0.9), (256, 151936, None, 0.9), (256, 151936, None, 0.95))
NUCLEUS_ATTR = "_gaudi_fixes_nucleus_window"


def bench_top_p(args) -> None:
    """Stock vs the patched sampler on TOP_P_SHAPES (rows without top_k: k is None, as
    vllm_gaudi passes it when no request sets top_k, and p carries the nucleus hint),
    beside a bare topk(1024) and amax, interleaved."""
    stock = load_sampler(args.stock_root, "bench_topp_stock").TopKTopPSampler()
    patched_mod = load_sampler(args.patched_root, "bench_topp_patched")
    if not hasattr(patched_mod, "_topk_subset_nucleus_sample"):
        sys.exit(f"bench-topk-subset: {args.patched_root / SAMPLER_REL} has no top-p path (issue 47)")
    patched = patched_mod.TopKTopPSampler()
    # --baseline-root: other patched trees (e.g. the fix before issue 47), timed alongside on the
    # shapes they have a fast path for (with the same hints; a tree without the top-p path runs
    # its own code for the others, which is timed too).
    baselines = []
    for i, spec in enumerate(args.baseline_root or []):
        name, _, root = spec.rpartition("=")
        baselines.append((name or f"base{i + 1}", load_sampler(Path(root), f"bench_topp_base{i}").TopKTopPSampler()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} calls, interleaved; "
          f"temperature 0.6; load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'B':>4} {'V':>7} {'top_k':>6} {'top_p':>6} {'path':>8} {'stock s':>9} {'fix s':>8} {'topk1024 s':>10} "
          f"{'amax s':>8} {'stock/fix':>10} {'fix/topk':>9}" + "".join(f" {n + ' s':>9} {'fix/' + n:>9}" for n, _ in baselines))
    gen = torch.Generator().manual_seed(args.seed)
    for batch, vocab, top_k, top_p in TOP_P_SHAPES:
        logits = torch.randn(batch, vocab, generator=gen) * 3.0 / 0.6
        p = torch.full((batch,), top_p)
        hp = p.clone()
        if top_k is None:
            k = hk = None
            setattr(hp, NUCLEUS_ATTR, 0)
        else:
            k = torch.full((batch,), top_k, dtype=torch.int32)
            hk = hinted(k)
        path = []
        spy_n, spy_s = patched_mod._topk_subset_nucleus_sample, patched_mod._topk_subset_sample
        patched_mod._topk_subset_nucleus_sample = lambda *a, **kw: (path.append("pivot"), spy_n(*a, **kw))[1]
        patched_mod._topk_subset_sample = lambda *a, **kw: (path.append("window"), spy_s(*a, **kw))[1]
        tokens, _ = patched.forward_native(logits.clone(), {}, hk, hp)
        patched_mod._topk_subset_nucleus_sample, patched_mod._topk_subset_sample = spy_n, spy_s
        # Every drawn token must be one stock keeps.
        kept = patched_mod.apply_top_k_top_p_pytorch(logits.clone(), k, p.clone()) > -float("inf")
        if not bool(kept.gather(1, tokens.unsqueeze(1)).all()):
            sys.exit("bench-topk-subset: the patched sampler drew a token stock does not keep")
        fns = [lambda x: stock.forward_native(x, {}, k, p), lambda x: patched.forward_native(x, {}, hk, hp),
               lambda x: x.topk(1024, dim=-1), lambda x: x.amax(dim=-1)]
        fns += [lambda x, b=b: b.forward_native(x, {}, hk, hp) for _, b in baselines]
        secs = median_seconds(fns, logits, args.repeats)
        print(f"{batch:>4} {vocab:>7} {top_k or '-':>6} {top_p:>6} {path[0] if path else 'stock':>8} "
              f"{secs[0]:>9.3f} {secs[1]:>8.3f} {secs[2]:>10.3f} {secs[3]:>8.4f} "
              f"{secs[0] / secs[1]:>9.1f}x {secs[1] / secs[2]:>8.2f}x"
              + "".join(f" {t:>9.3f} {secs[1] / t:>8.2f}x" for t in secs[4:]))
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def input_batch_namespace(root: Path, flag: str) -> dict:
    """The patched hpu_input_batch.py's hint helpers and the constants they read (its top-level
    definitions of those names, executed alone)."""
    import numpy as np

    path = root / INPUT_BATCH_REL
    if not path.is_file():
        sys.exit(f"bench-topk-subset: {flag} needs {path}")
    tree = ast.parse(path.read_text())
    names = {"_SAMPLING_EPS", "_GAUDI_FIXES_TOPK_WINDOW_ATTR", "_GAUDI_FIXES_TOPK_WINDOWS",
             "_gaudi_fixes_with_topk_window", "_GAUDI_FIXES_MAX_TOP_K_ATTR", "_gaudi_fixes_with_max_top_k",
             "_GAUDI_FIXES_NUCLEUS_WINDOW_ATTR", "_gaudi_fixes_with_nucleus_window"}
    nodes = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in names)
             or (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in names)]
    namespace = {"np": np, "torch": torch, "Optional": __import__("typing").Optional}
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    return namespace


def load_input_batch_helper(root: Path):
    """The patched hpu_input_batch.py's window helper (v2, or v1's raw maximum)."""
    path = root / INPUT_BATCH_REL
    namespace = input_batch_namespace(root, "--reach")
    if "_gaudi_fixes_with_topk_window" in namespace:  # v2
        return lambda top_k, top_k_cpu, temp_cpu: namespace["_gaudi_fixes_with_topk_window"](top_k, top_k_cpu, temp_cpu)
    if "_gaudi_fixes_with_max_top_k" in namespace:  # v1: the raw maximum over all rows
        return lambda top_k, top_k_cpu, temp_cpu: namespace["_gaudi_fixes_with_max_top_k"](top_k, top_k_cpu)
    sys.exit(f"bench-topk-subset: {path} is not patched with topk-subset-sampler")


def reach(args) -> None:
    import numpy as np

    trees = {"patched": args.patched_root}
    for i, spec in enumerate(args.baseline_root or []):
        name, _, root = spec.rpartition("=")
        trees = {name or ("baseline" if i == 0 else f"baseline{i + 1}"): Path(root), **trees}
    vocab = 151936
    rng = np.random.default_rng(args.seed)
    print(f"reach: every request top_k {args.reach_top_k}, {args.greedy:.0%} greedy, {args.seeded:.0%} seeded, "
          f"vocab {vocab}, {args.batches} batches per size")
    for name, root in trees.items():
        mod = load_sampler(root, f"reach_{name}")
        sampler = mod.TopKTopPSampler()
        attach = load_input_batch_helper(root)
        v1 = "generators" in sampler._topk_subset_window.__code__.co_varnames[: sampler._topk_subset_window.__code__.co_argcount]
        for batch in args.reach_batches:
            logits = torch.empty(batch, vocab, device="meta")
            fast = calls = 0
            for _ in range(args.batches):
                kind = rng.random(batch)
                greedy = kind < args.greedy
                seeded = (~greedy) & (kind < args.greedy + args.seeded)
                if greedy.all():
                    continue  # all greedy: the Sampler does not call TopKTopPSampler
                top_k_cpu = np.where(greedy, vocab, args.reach_top_k).astype(np.int32)
                temperature_cpu = np.where(greedy, -1.0, 0.8).astype(np.float32)
                k = attach(torch.from_numpy(top_k_cpu.copy()), top_k_cpu, temperature_cpu)
                generators = {int(i): torch.Generator() for i in np.flatnonzero(seeded)}
                window = (sampler._topk_subset_window(logits, generators, k) if v1
                          else sampler._topk_subset_window(logits, k))
                calls += 1
                fast += window is not None
            print(f"  {name:>8} B={batch:>4}: {fast}/{calls} batches skip the full sort ({fast / calls:.2%})")


# Generation-config defaults (temperature, top_k or None, top_p) of the model families of issue 47.
DEFAULTS = {
    "llama-3.x": (0.6, None, 0.9),
    "deepseek-v3/r1": (0.6, None, 0.95),
    "qwen": (0.7, 20, 0.8),
    "gemma": (1.0, 64, 0.95),
}
# What a request that sets its own parameters asks (temperature, top_k or None, top_p), drawn uniformly.
OVERRIDES = ((1.0, None, 1.0), (0.8, None, 0.95), (0.7, 40, 0.9), (1.0, 50, 1.0), (0.9, 100, 1.0))
# --large-top-k: a request with 1024 < top_k < vocab (no window covers it: its batch keeps the stock path).
LARGE_TOP_K = (0.8, 2000, 0.95)


def reach_defaults(args) -> None:
    import numpy as np

    vocab = 151936
    rng = np.random.default_rng(args.seed)
    mod = load_sampler(args.patched_root, "reach_defaults")
    sampler = mod.TopKTopPSampler()
    path = args.patched_root / INPUT_BATCH_REL
    ns = input_batch_namespace(args.patched_root, "--reach-defaults")
    if "_gaudi_fixes_with_nucleus_window" not in ns:
        sys.exit(f"bench-topk-subset: {path} has no top-p (nucleus) hint: not patched with issue 47's topk-subset-sampler")
    print(f"reach by model defaults: {args.greedy:.0%} greedy, {args.seeded:.0%} seeded, {args.override:.0%} own "
          f"parameters (drawn from {len(OVERRIDES)}), {args.large_top_k:.1%} top_k {LARGE_TOP_K[1]}, vocab {vocab}, {args.batches} batches per size")
    print(f"{'mix':>16} {'B':>4} {'calls':>6} {'window':>8} {'pivot':>8} {'stock':>8} {'no filter':>9}")
    mixes = [[name] for name in DEFAULTS] + [list(DEFAULTS)]
    for mix in mixes:
        label = mix[0] if len(mix) == 1 else "all four mixed"
        for batch in args.reach_batches:
            logits = torch.empty(batch, vocab, device="meta")
            counts = {"window": 0, "pivot": 0, "stock": 0, "no filter": 0}
            for _ in range(args.batches):
                kind = rng.random(batch)
                greedy = kind < args.greedy
                seeded = (~greedy) & (kind < args.greedy + args.seeded)
                own = (~greedy) & (~seeded) & (kind < args.greedy + args.seeded + args.override)
                large = (~greedy) & (~seeded) & (~own) & (kind < args.greedy + args.seeded + args.override + args.large_top_k)
                if greedy.all():
                    continue  # all greedy: the Sampler does not call TopKTopPSampler
                temperature = np.empty(batch, np.float32)
                top_k = np.empty(batch, np.int32)
                top_p = np.empty(batch, np.float32)
                for i in range(batch):
                    if greedy[i]:
                        t, k, p = -1.0, None, 1.0
                    elif own[i]:
                        t, k, p = OVERRIDES[rng.integers(len(OVERRIDES))]
                    elif large[i]:
                        t, k, p = LARGE_TOP_K
                    else:
                        t, k, p = DEFAULTS[mix[rng.integers(len(mix))]]
                    temperature[i], top_k[i], top_p[i] = t, vocab if k is None or k >= vocab else k, p
                k_t = None if (top_k >= vocab).all() else torch.from_numpy(top_k.copy())
                p_t = None if (top_p >= 1).all() else torch.from_numpy(top_p.copy())
                k_t = ns["_gaudi_fixes_with_topk_window"](k_t, top_k, temperature)
                p_t = ns["_gaudi_fixes_with_nucleus_window"](p_t, top_k, temperature, vocab)
                if sampler._topk_subset_window(logits, k_t) is not None:
                    counts["window"] += 1
                elif sampler._topk_subset_nucleus(logits, k_t, p_t) is not None:
                    counts["pivot"] += 1
                elif k_t is None and p_t is None:
                    counts["no filter"] += 1
                else:
                    counts["stock"] += 1
            calls = sum(counts.values())
            print(f"{label:>16} {batch:>4} {calls:>6} " + " ".join(
                f"{counts[c] / calls:>{9 if c == 'no filter' else 8}.1%}" for c in counts))


def profile_pivot(args) -> None:
    """torch.profiler over one call of the pivot path (B 256, V 151,936, top_p 0.9, the --top-p logits)."""
    from torch.profiler import profile

    mod = load_sampler(args.patched_root, "profile_pivot")
    gen = torch.Generator().manual_seed(args.seed)
    logits = torch.randn(256, 151936, generator=gen) * 3.0 / 0.6
    p = torch.full((256,), 0.9)
    mod._topk_subset_nucleus_sample(logits.clone(), None, p, 0, {})  # warm
    x = logits.clone()
    with profile() as prof:
        mod._topk_subset_nucleus_sample(x, None, p, 0, {})
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stock-root", type=Path, help="directory holding the stock vllm/")
    parser.add_argument("--patched-root", type=Path, required=True, help="directory holding the patched vllm/")
    parser.add_argument("--baseline-root", action="append", metavar="[NAME=]ROOT",
                        help="another patched tree to time alongside (e.g. v1=TREE); repeatable")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per sampler and shape")
    parser.add_argument("--first-shape-only", action="store_true", help="time only B=256, V=151936, top_k 50, top_p 0.9")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-p", action="store_true",
                        help="time issue 47's shapes: top_p 0.9 / 0.95 without top_k and top_k 50 + top_p 0.9, T 0.6")
    parser.add_argument("--reach", action="store_true", help="measure the fast path's reach instead of timing")
    parser.add_argument("--profile-pivot", action="store_true",
                        help="torch.profiler over one call of the top-p pivot path (where its time goes)")
    parser.add_argument("--reach-defaults", action="store_true",
                        help="measure the fast path's reach on batches of model-default requests (issue 47)")
    parser.add_argument("--override", type=float, default=0.1, help="--reach-defaults: share of requests with their own parameters")
    parser.add_argument("--large-top-k", type=float, default=0.0,
                        help="--reach-defaults: share of requests with top_k 2000 (above every window)")
    parser.add_argument("--reach-top-k", type=int, default=20)
    parser.add_argument("--reach-batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--greedy", type=float, default=0.05, help="share of greedy requests")
    parser.add_argument("--seeded", type=float, default=0.01, help="share of seeded requests")
    parser.add_argument("--batches", type=int, default=2000, help="simulated batches per size")
    args = parser.parse_args()
    if args.profile_pivot:
        profile_pivot(args)
    elif args.reach_defaults:
        reach_defaults(args)
    elif args.reach:
        reach(args)
    else:
        if not args.stock_root:
            parser.error("--stock-root is required for timing")
        bench_top_p(args) if args.top_p else bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
