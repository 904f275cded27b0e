"""Reading code out of the upstream trees: a function or method found with ``ast`` and compiled
against a namespace the caller gives, so a test runs the tree's own code rather than a copy.

When upstream moves or renames what is asked for, the one error is a ``LookupError`` naming the
file and the symbol (``vllm_gaudi/v1/worker/hpu_model_runner.py: no HPUModelRunner._update_states
(upstream moved it; update the harness)``).
"""

from __future__ import annotations

import __future__
import ast
import functools
import types
from pathlib import Path
from typing import Any, Iterable, Optional


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def parse(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed once per version of the file (callers must not change it)."""
    return _parsed(path, path.stat().st_mtime_ns)


def _missing(path: Path, symbol: str) -> LookupError:
    return LookupError(f"{path}: no {symbol} (upstream moved it; update the harness)")


def definition(path: Path, qualname: str) -> ast.FunctionDef:
    """The definition ``NAME`` (module level) or ``CLASS.NAME`` (a method) in `path`."""
    body: list[ast.stmt] = parse(path).body
    *outer, name = qualname.split(".")
    for cls_name in outer:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
        if cls is None:
            raise _missing(path, qualname)
        body = cls.body
    fn = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)
    if fn is None:
        raise _missing(path, qualname)
    return fn


def compile_defs(defs: Iterable[ast.stmt], path: Path, namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute `defs` (definitions read from `path`) in `namespace`; annotations stay strings
    (they name types the namespace need not provide). Returns the namespace."""
    code = compile(ast.Module(list(defs), []), str(path), "exec", flags=__future__.annotations.compiler_flag,
                   dont_inherit=True)
    exec(code, namespace)
    return namespace


def function(path: Path, qualname: str, namespace: dict[str, Any]) -> types.FunctionType:
    """The function (or, for ``CLASS.NAME``, the method's plain function) `qualname` of `path`,
    compiled against `namespace` (its globals)."""
    fn = definition(path, qualname)
    return compile_defs([fn], path, namespace)[fn.name]


def bind(obj: Any, path: Path, qualnames: Iterable[str], namespace: dict[str, Any],
         name: Optional[str] = None) -> None:
    """Lift each method `qualnames` of `path` and bind it to `obj` under its own name."""
    for qualname in qualnames:
        fn = function(path, qualname, namespace)
        setattr(obj, name or fn.__name__, types.MethodType(fn, obj))


def self_calls(nodes: list[ast.AST]) -> set[str]:
    """Names of the `self.NAME(...)` calls in `nodes`."""
    return {
        sub.func.attr
        for node in nodes for sub in ast.walk(node)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name)
        and sub.func.value.id == "self"
    }
