"""Tests for the topk-subset-sampler fix: torch.compile graphs (CPU, aot_eager backend).

The window path compiles one graph per window (and one for the stock path), the top-p pivot
path (issue 47) one per nucleus hint; no symbolic-int input, no graph break. Loading:
``_topk_support.py``.
"""

from __future__ import annotations

import torch
from _topk_support import (
    NUCLEUS_ATTR,
    WINDOWS,
    _with_hint,
    base,
    expected_window,
    llm_like_logits,
    random_k,
    random_p,
)


def compile_counting(fn):
    """fn under torch.compile (aot_eager), and the list that gets, per graph compiled, the
    type names of its non-tensor inputs (a SymInt there: a shape-dependent recompile)."""
    graphs: list[list[str]] = []

    def backend(gm, example_inputs):
        graphs.append([type(x).__name__ for x in example_inputs if not isinstance(x, torch.Tensor)])
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    return torch.compile(fn, backend=backend), graphs


def test_compile_one_graph_per_window():
    """Under torch.compile (aot_eager), 40 batches with mixed top_k compile at most one
    graph per window plus one (the stock path), none with a symbolic-int input."""
    mod = base()
    torch._dynamo.reset()
    compiled, graphs = compile_counting(mod.TopKTopPSampler().forward_native)
    g = torch.Generator().manual_seed(5)
    B, V = 8, 4096
    used = set()
    for i in range(40):
        logits = llm_like_logits(g, B, V)
        high = (10, 60, 100, 200, 300, 1000, 128, 500, V)[i % 9]
        k = random_k(g, B, 1, high)
        window = expected_window(int(k.max()))
        used.add(window)
        p = random_p(g, B)  # p None would be a second graph per window (as in stock)
        tokens, _ = compiled(logits.clone(), {}, _with_hint(k, window), p)
        kth = logits.sort(dim=-1, descending=True).values.gather(1, k.long().unsqueeze(1) - 1)
        assert bool((logits.gather(1, tokens.unsqueeze(1)) >= kth).all()), f"batch {i}: token outside top-k"
    torch._dynamo.reset()
    print(f"\n{len(graphs)} graphs for windows {sorted(w for w in used if w)} and the stock path")
    assert len(graphs) <= len(WINDOWS) + 1, graphs
    assert not any(graphs), f"symbolic graph inputs: {graphs}"


def test_compile_nucleus_one_graph_per_hint():
    """Under torch.compile (aot_eager), 18 top-p batches with nucleus hints 0, 64 and 128
    (rows without top_k mixed with top_k rows) compile one graph per hint, none with a
    symbolic-int input and no graph break; every token is one stock keeps."""
    mod = base()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled, graphs = compile_counting(mod.TopKTopPSampler().forward_native)
    g = torch.Generator().manual_seed(47)
    B, V = 8, 4096
    for i in range(18):
        logits = llm_like_logits(g, B, V)
        p = random_p(g, B)
        hint = (0, 64, 128)[i % 3]
        setattr(p, NUCLEUS_ATTR, hint)
        k = None
        if hint:
            k = random_k(g, B, 1, hint)
            k[torch.rand(B, generator=g) < 0.5] = V
        kept = mod.apply_top_k_top_p_pytorch(logits.clone(), None if k is None else k.clone(), p.clone())
        tokens, _ = compiled(logits.clone(), {}, k, p)
        assert bool((kept.gather(1, tokens.unsqueeze(1)) > -float("inf")).all()), f"batch {i}: token stock drops"
    breaks = dict(torch._dynamo.utils.counters["graph_break"])
    torch._dynamo.reset()
    print(f"\n{len(graphs)} graphs for nucleus hints 0, 64, 128; graph breaks {breaks}")
    assert len(graphs) <= 3, graphs
    assert not any(graphs), f"symbolic graph inputs: {graphs}"
    assert not breaks, breaks
