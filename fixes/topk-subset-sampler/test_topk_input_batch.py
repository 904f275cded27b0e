"""Tests for the topk-subset-sampler fix: the vllm_gaudi half (CPU; reads the sources).

With ``vllm_gaudi/`` next to ``vllm/``: the input batch attaches the window computed from
the rows that sample (on top_k) and the nucleus window (on top_p, issue 47), and the sampler
warm-up lists a top_k for each window; vLLM's Sampler hands the top_k tensor on unchanged.
Without ``vllm_gaudi/`` the input batch's tests skip. Loading: ``_topk_support.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from _topk_support import HINT_ATTR, NUCLEUS_ATTR, ROOT, WINDOWS, expected_window

INPUT_BATCH_REL = Path("vllm_gaudi/v1/worker/hpu_input_batch.py")
MODEL_RUNNER_REL = Path("vllm_gaudi/v1/worker/hpu_model_runner.py")


# --------------------------------------------------------------------------
# The vllm_gaudi half: the window attached by the input batch, the warm-up
# --------------------------------------------------------------------------


def test_vllm_sampler_passes_top_k_tensor_unchanged():
    """The hint rides on the top_k tensor: vLLM's Sampler must hand
    sampling_metadata.top_k itself to TopKTopPSampler."""
    path = ROOT / "vllm/v1/sample/sampler.py"
    if not path.is_file():
        pytest.skip(f"{path} absent (tree without the Sampler)")
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "topk_topp_sampler"
    ]
    assert calls, f"{path}: no call of self.topk_topp_sampler"
    for call in calls:
        assert len(call.args) >= 3 and ast.unparse(call.args[2]) == "sampling_metadata.top_k", (
            f"{path}:{call.lineno}: top_k reaches TopKTopPSampler as {ast.unparse(call.args[2])}"
        )


def _gaudi_source(rel: Path) -> str:
    if not (ROOT / "vllm_gaudi").is_dir():
        pytest.skip(f"no vllm_gaudi/ in {ROOT}: the vllm_gaudi half is not tested")
    return (ROOT / rel).read_text()


def metadata_arg_failures(tree: ast.AST, path: str, arg: str, helper: str, hint: str) -> list[str]:
    """Both SamplingMetadata builders must pass `arg` through `helper`, with the same rows'
    host copies of top_k and temperature."""
    failures = []
    values = [
        kw.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "SamplingMetadata"
        for kw in n.keywords
        if kw.arg == arg
    ]
    if len(values) != 2:
        failures.append(f"{path}: {len(values)} SamplingMetadata({arg}=...) calls, want 2")
    for value in values:
        text = ast.unparse(value)
        ok = isinstance(value, ast.Call) and getattr(value.func, "id", None) == helper
        if not ok or "self.top_k_cpu[" not in text or "self.temperature_cpu[" not in text:
            failures.append(f"{path}:{value.lineno}: {arg} passed without the {hint}: {text}")
    return failures


def check_input_batch(source: str) -> list[str]:
    """The input batch attaches the window chosen from the rows that sample."""
    path = ROOT / INPUT_BATCH_REL
    tree = ast.parse(source)
    wanted = {"_SAMPLING_EPS", "_GAUDI_FIXES_TOPK_WINDOW_ATTR", "_GAUDI_FIXES_TOPK_WINDOWS", "_gaudi_fixes_with_topk_window"}
    nodes = [
        n for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in wanted)
        or (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in wanted)
    ]
    if len(nodes) != len(wanted):
        return [f"{path}: not patched with topk-subset-sampler v2 (missing {sorted(wanted)})"]
    namespace = {"np": np, "torch": torch, "Optional": __import__("typing").Optional}
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    failures = []
    if namespace["_GAUDI_FIXES_TOPK_WINDOW_ATTR"] != HINT_ATTR or tuple(namespace["_GAUDI_FIXES_TOPK_WINDOWS"]) != WINDOWS:
        failures.append(f"{path}: attribute name or windows differ from the sampler's")
    attach = namespace["_gaudi_fixes_with_topk_window"]
    V = 151936
    greedy, sampled = -1.0, 0.7

    def window_of(top_k, temperature):
        top_k_cpu = np.array(top_k, dtype=np.int32)
        tensor = attach(torch.from_numpy(top_k_cpu.copy()), top_k_cpu, np.array(temperature, dtype=np.float32))
        return getattr(tensor, HINT_ATTR, None)

    expectations = [
        # (top_k per row, temperature per row, window)
        ([20] * 8, [sampled] * 8, 64),
        ([70, 3], [sampled, sampled], 128),
        ([1024, 1], [sampled, 1.0], 1024),
        ([257], [sampled], 512),
        ([20, V, 20, V], [sampled, greedy, sampled, greedy], 64),  # greedy rows: top_k stored as vocab
        ([20, V], [sampled, sampled], None),  # a sampled row without top_k: stock
        ([1025], [sampled], None),
        ([V, V], [greedy, greedy], None),
        ([20, 300], [1e-6, sampled], 512),  # temperature below _SAMPLING_EPS is greedy
    ]
    for top_k, temperature, want in expectations:
        got = window_of(top_k, temperature)
        if got != want or (got is not None and type(got) is not int):
            failures.append(f"{path}: top_k {top_k[:4]}, temperature {temperature[:4]}: window {got!r}, want {want}")
    if attach(None, np.array([20]), np.array([1.0])) is not None:
        failures.append(f"{path}: top_k None must stay None")
    return failures + metadata_arg_failures(tree, path, "top_k", "_gaudi_fixes_with_topk_window", "window hint")


def check_warmup(source: str) -> list[str]:
    """warmup_sampler's configs include a sampled top_k in each window, and the warm-up
    sets the rows' host temperature (from which the input batch picks the window)."""
    path = ROOT / MODEL_RUNNER_REL
    fn = next((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "warmup_sampler"), None)
    if fn is None:
        return [f"{path}: no warmup_sampler"]
    configs = next(
        (n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "sampling_configs"),
        None,
    )
    if configs is None:
        return [f"{path}: warmup_sampler has no sampling_configs list"]
    entries = ast.literal_eval(configs)
    windows = {expected_window(top_k) for temp, _top_p, top_k, _changed in entries if temp > 0 and 0 < top_k}
    failures = []
    missing = sorted(set(WINDOWS) - windows)
    if missing:
        failures.append(f"{path}: warmup_sampler compiles no sampled top_k for windows {missing}")
    if "self.input_batch.temperature_cpu[i] =" not in ast.get_source_segment(source, fn):
        failures.append(f"{path}: warmup_sampler leaves the rows' host temperature unset")
    return failures


def test_input_batch_attaches_window_from_sampled_rows():
    assert check_input_batch(_gaudi_source(INPUT_BATCH_REL)) == []


def test_warmup_compiles_every_window():
    assert check_warmup(_gaudi_source(MODEL_RUNNER_REL)) == []


GAUDI_MUTANTS = {
    "hint_from_all_rows": (INPUT_BATCH_REL, check_input_batch, "top_k_cpu[temperature_cpu >= _SAMPLING_EPS]", "top_k_cpu"),
    "hint_raw_max": (
        INPUT_BATCH_REL, check_input_batch,
        "setattr(top_k, _GAUDI_FIXES_TOPK_WINDOW_ATTR, window)", "setattr(top_k, _GAUDI_FIXES_TOPK_WINDOW_ATTR, largest)",
    ),
    "selective_metadata_without_hint": (
        INPUT_BATCH_REL, check_input_batch,
        "top_k=_gaudi_fixes_with_topk_window(None if self.no_top_k else self.top_k[req_indices],",
        "top_k=(lambda t, *_: t)(None if self.no_top_k else self.top_k[req_indices],",
    ),
    "warmup_missing_window_512": (
        MODEL_RUNNER_REL, check_warmup, "(1.0, 0.95, 400, True),\n", "",
    ),
    "warmup_temperature_unset": (
        MODEL_RUNNER_REL, check_warmup, "self.input_batch.temperature_cpu[i] =", "_unused_temperature =",
    ),
}


@pytest.mark.parametrize("name", sorted(GAUDI_MUTANTS))
def test_gaudi_mutant_is_rejected(name):
    rel, check, old, new = GAUDI_MUTANTS[name]
    source = _gaudi_source(rel)
    assert source.count(old) == 1, f"{rel}: {old!r} found {source.count(old)} times"
    mutant = source.replace(old, new)
    if name == "warmup_missing_window_512":
        mutant = mutant.replace("(1.0, 0.95, 400, False),\n", "")
    failures = check(mutant)
    print(f"\n{name}: {failures[:1]}")
    assert failures, f"mutant {name} passed"


# --------------------------------------------------------------------------
# The input batch's nucleus window on top_p (issue 47)
# --------------------------------------------------------------------------


def check_input_batch_nucleus(source: str) -> list[str]:
    """The input batch attaches the nucleus window (the window of the sampled top_k rows,
    0 with none) to top_p when every sampled row has top_k <= 1024 or none, in both
    SamplingMetadata builders."""
    path = ROOT / INPUT_BATCH_REL
    tree = ast.parse(source)
    wanted = {"_SAMPLING_EPS", "_GAUDI_FIXES_TOPK_WINDOWS", "_GAUDI_FIXES_NUCLEUS_WINDOW_ATTR",
              "_gaudi_fixes_with_nucleus_window"}
    nodes = [
        n for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in wanted)
        or (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in wanted)
    ]
    if len(nodes) != len(wanted):
        return [f"{path}: no nucleus window (issue 47; missing {sorted(wanted)})"]
    namespace = {"np": np, "torch": torch, "Optional": __import__("typing").Optional}
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    failures = []
    if namespace["_GAUDI_FIXES_NUCLEUS_WINDOW_ATTR"] != NUCLEUS_ATTR:
        failures.append(f"{path}: nucleus attribute differs from the sampler's")
    attach = namespace["_gaudi_fixes_with_nucleus_window"]
    V = 151936
    greedy, sampled = -1.0, 0.7
    expectations = [
        ([V] * 4, [sampled] * 4, 0),  # top_p only (Llama, DeepSeek)
        ([V, 20, V, V], [sampled] * 4, 64),  # mixed
        ([V, 300], [sampled, sampled], 512),
        ([V, 2000], [sampled, sampled], None),  # a sampled top_k above 1024: stock
        ([V, 2000], [sampled, greedy], 0),  # ... unless that row is greedy
        ([V, 20], [sampled, 1e-6], 0),
    ]
    for top_k, temperature, want in expectations:
        top_k_cpu = np.array(top_k, dtype=np.int32)
        p = torch.full((len(top_k),), 0.9)
        got = getattr(attach(p, top_k_cpu, np.array(temperature, dtype=np.float32), V), NUCLEUS_ATTR, None)
        if got != want or (got is not None and type(got) is not int):
            failures.append(f"{path}: top_k {top_k}, temperature {temperature}: nucleus window {got!r}, want {want}")
    if attach(None, np.array([V]), np.array([1.0]), V) is not None:
        failures.append(f"{path}: top_p None must stay None")
    return failures + metadata_arg_failures(tree, path, "top_p", "_gaudi_fixes_with_nucleus_window", "nucleus hint")


def test_input_batch_attaches_nucleus_window():
    assert check_input_batch_nucleus(_gaudi_source(INPUT_BATCH_REL)) == []


NUCLEUS_GAUDI_MUTANTS = {
    "greedy_rows_counted": ("sampled = top_k_cpu[_SAMPLING_EPS <= temperature_cpu]", "sampled = top_k_cpu"),
    "vocab_rows_counted": ("limited = sampled[sampled < vocab_size]", "limited = sampled"),
    "no_hint_without_top_k": ("setattr(top_p, _GAUDI_FIXES_NUCLEUS_WINDOW_ATTR, 0)\n", "pass\n"),
}


@pytest.mark.parametrize("name", sorted(NUCLEUS_GAUDI_MUTANTS))
def test_input_batch_nucleus_mutant_is_rejected(name):
    source = _gaudi_source(INPUT_BATCH_REL)
    old, new = NUCLEUS_GAUDI_MUTANTS[name]
    assert source.count(old) == 1, f"{old!r} found {source.count(old)} times"
    assert check_input_batch_nucleus(source.replace(old, new)) != []
