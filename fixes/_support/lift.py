"""Reading code out of the upstream trees: a function or method found with ``ast`` and compiled
against a namespace the caller gives, so a test runs the tree's own code rather than a copy.

When upstream moves or renames what is asked for, the one error is a ``LookupError`` naming the
file and the symbol (``vllm_gaudi/v1/worker/hpu_model_runner.py: no HPUModelRunner._update_states
(upstream moved it; update the harness)``).

Statements inside a function are found by ``find_statement`` alone: by their ``if`` test, which
still matches when a fix (or upstream) adds a condition to it (``if A:`` is found in a tree that
says ``if A and B:``), and / or by text they contain. When none or several match, the one error is
``NotFound`` (a ``LookupError``) naming the file, the function, what was looked for and the
closest statements there instead.
"""

from __future__ import annotations

import __future__
import ast
import difflib
import functools
import types
from pathlib import Path
from typing import Any, Iterable, Optional, Union


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


class NotFound(LookupError):
    """No statement, or more than one, matches a ``find_statement`` lookup; the message names the
    file, the function, what was looked for and what is there instead."""


def _conjuncts(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And):
        return [c for v in expr.values for c in _conjuncts(v)]
    return [expr]


def matches_test(want: ast.expr, got: ast.expr) -> bool:
    """Whether the test `got` is `want` with conditions added: equal, or a conjunction holding each
    conjunct of `want` (``A`` in ``A and B`` or ``B and A``), or, for ``A or B``, a disjunction of
    as many terms each matching in order (``A or (B and C)``)."""
    if ast.dump(want) == ast.dump(got):
        return True
    if isinstance(got, ast.BoolOp) and isinstance(got.op, ast.And):
        have = _conjuncts(got)
        return all(any(matches_test(w, h) for h in have) for w in _conjuncts(want))
    if (isinstance(want, ast.BoolOp) and isinstance(got, ast.BoolOp) and isinstance(want.op, ast.Or)
            and isinstance(got.op, ast.Or) and len(want.values) == len(got.values)):
        return all(matches_test(w, h) for w, h in zip(want.values, got.values))
    return False


def _statements(body: list[ast.stmt], nested: bool) -> Iterable[ast.stmt]:
    """`body`'s statements, with `nested` those inside them too (not inside nested definitions)."""
    for stmt in body:
        yield stmt
        if nested and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(stmt, field, None) or [], nested)
            for clause in (getattr(stmt, "handlers", None) or []) + (getattr(stmt, "cases", None) or []):
                yield from _statements(clause.body, nested)  # except / case clauses: their bodies


def _head(stmt: ast.stmt) -> str:
    """The statement's first line as unparsed (an ``if``'s test line, a ``for``'s header)."""
    return ast.unparse(stmt).split("\n", 1)[0]


def _assigns(stmt: ast.stmt, target: str) -> bool:
    """Whether `stmt` assigns to `target` (its text: ``self.sampler``), alone or among others."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return any(t is not None and ast.unparse(t) == target for t in targets)


def find_statement(scope: Union[ast.AST, list[ast.stmt]], *, path: Path, test: Optional[str] = None,
                   contains: Optional[str] = None, kind: Optional[type] = None, nested: bool = False,
                   where: Optional[str] = None, target: Optional[str] = None) -> ast.stmt:
    """The one statement of `scope` (a function, a compound statement: its body; or a list of
    statements) that is of type `kind` (``ast.If`` when `test` is given, ``ast.Assign`` when
    `target` is), whose test matches `test` (``matches_test``: a condition added to it still
    matches), that assigns to `target` (``self.sampler``) and whose unparsed text contains
    `contains`. With `nested`, statements at any depth count (the innermost of those nested in one
    another: a block containing the one wanted contains its text too). `where` names the function
    in the error (default: `scope`'s name). Raises ``NotFound`` when none or several match."""
    body = scope if isinstance(scope, list) else scope.body
    where = where or getattr(scope, "name", None) or "the statements"
    if test is not None and kind is None:
        kind = ast.If
    if target is not None and kind is None:
        kind = ast.Assign
    want = ast.parse(test, mode="eval").body if test is not None else None
    typed = [s for s in _statements(body, nested) if kind is None or isinstance(s, kind)]
    found = [s for s in typed
             if (want is None or matches_test(want, getattr(s, "test", None) or ast.Pass()))
             and (target is None or _assigns(s, target))
             and (contains is None or contains in ast.unparse(s))]
    if nested:
        found = [s for s in found if not any(t is not s and t in found for t in ast.walk(s))]
    if len(found) == 1:
        return found[0]
    looked = " and ".join(p for p in (
        f"{(kind or ast.stmt).__name__} statement" + (f" testing `{test}`" if test is not None else "")
        + (f" assigning {target}" if target is not None else ""),
        f"containing {contains!r}" if contains is not None else "") if p)
    if found:
        lines = ", ".join(f"line {s.lineno} `{_head(s)}`" for s in found)
        raise NotFound(f"{path}: {where}: {len(found)} statements match a {looked}, not one ({lines}); "
                       "upstream changed it: make the lookup narrower")
    text = f"if {test}:" if test is not None else f"{target} = " if target is not None else contains or ""
    wanted = {ast.dump(c) for c in _conjuncts(want)} if want is not None else set()

    def closeness(s: ast.stmt) -> tuple[bool, int, float]:
        """Holds the text looked for, shares conditions with the test, reads like it."""
        has = {ast.dump(n) for n in ast.walk(s.test)} if isinstance(getattr(s, "test", None), ast.expr) else set()
        return (contains is not None and contains in ast.unparse(s), len(wanted & has),
                difflib.SequenceMatcher(None, text, _head(s)).ratio())

    close = sorted(typed, key=closeness, reverse=True)[:3]
    there = "; ".join(f"line {s.lineno} `{_head(s)}`" for s in close) or "nothing of that kind"
    raise NotFound(f"{path}: {where}: no {looked}; closest there: {there} (upstream changed it; update the harness)")


def assigned(path: Path, qualname: str, target: str, owner: Any, namespace: dict[str, Any]) -> Any:
    """What `qualname` of `path` assigns to `target` (``self.sampler``): its one statement doing so
    (``find_statement``), run with ``self`` = `owner` and `namespace` for its names."""
    stmt = find_statement(definition(path, qualname), path=path, target=target, nested=True, where=qualname)
    exec(compile(ast.Module([stmt], []), str(path), "exec"), {**namespace, "self": owner})
    return getattr(owner, target.split(".", 1)[1])
