#!/usr/bin/env python3
"""Gate records: a mutation gate's verdict, kept with the hash of exactly what the gate read.

The mutation gates of `scripts/test.sh` (every-hunk-needed, fix-alone, the conformance suite's
one-fix-out mutants, `scripts/conform-mutants.py`) re-prove, at tens of minutes a run, things whose inputs
rarely change. Each verdict is recorded in `gates/<gate>/<release>/<subject>.json` with a key:
the sha256 of the gate's inputs, listed in the record with their own hashes so a reviewer can see
what the verdict rests on. `test.sh` reuses a passing record whose key matches the inputs of
this checkout and runs every gate whose key does not (`test.sh --deep` runs them all).

    python3 scripts/gates.py tree-id TREE                       # the pristine tree's identity
    python3 scripts/gates.py key GATE SUBJECT RELEASE --tree-id ID [--variant V]
    python3 scripts/gates.py reusable GATE SUBJECT RELEASE --tree-id ID [--variant V]   # exit 0: reuse
    python3 scripts/gates.py record GATE SUBJECT RELEASE --tree-id ID [--variant V] --found FILE

What a gate reads (GATES below, one row per gate):
- the files of the fixes it applies: a fix's fix.yaml, the patch files of the variant that serves
  the release (`--variant`; every variant when not given) and its tests (*.py beside fix.yaml);
- the test-support modules those tests import (fixes/conftest.py and the closure of `import X`
  over fixes/_support/X.py), or the conformance suite's closure for the conform gates;
- the gate's own script, and the pristine tree (`tree-id`: every file's path and sha256).
The gaudi-fixes binary is not in the key: its behaviour is held by `cargo test` and by the steps
test.sh always runs (apply, revert, the fix tests on pristine and patched trees, conform on the
default profile and on pristine).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXES = REPO / "fixes"
SUPPORT = FIXES / "_support"
RECORDS = REPO / "gates"
FORMAT = 1
VERIFIED = re.compile(rb"^\s+verified:")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def input_hash(path: Path) -> str:
    """A gate input's hash. fix.yaml's `verified:` lines are left out: `matrix --record` writes
    them, and no gate reads them."""
    if path.name != "fix.yaml":
        return sha256(path)
    kept = [line for line in path.read_bytes().splitlines(keepends=True) if not VERIFIED.match(line)]
    return hashlib.sha256(b"".join(kept)).hexdigest()


def tree_id(tree: Path) -> str:
    """Every regular file of the tree (path and content), `__pycache__` and the fetch marker aside."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name == ".gaudi-fixes-upstream" or not path.is_file() or path.is_symlink():
                continue
            digest.update(f"{path.relative_to(tree)}\0{sha256(path)}\n".encode())
    return digest.hexdigest()


def support_closure(sources: list[Path]) -> list[Path]:
    """fixes/_support modules imported (at any depth of the file) by SOURCES, transitively."""
    seen: dict[Path, None] = {}
    queue = list(sources)
    while queue:
        tree = ast.parse(queue.pop().read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                module = SUPPORT / (name.split(".")[0] + ".py")
                if module.is_file() and module not in seen:
                    seen[module] = None
                    queue.append(module)
    return sorted(seen)


def manifest_fields(fix: str) -> tuple[list[str], dict[str, list[str]]]:
    """(requires + after, {variant: its patch files}) read from fix.yaml (the lines this needs)."""
    text = (FIXES / fix / "fix.yaml").read_text()
    before: list[str] = []
    for key in ("requires", "after"):
        m = re.search(rf"^{key}:\s*\[([^\]]*)\]", text, re.M)
        if m:
            before += [n.strip() for n in m.group(1).split(",") if n.strip()]
    variants: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^  (v?[0-9][^:\s]*):", line)
        if m:
            current = m.group(1)
            variants.setdefault(current, [])
        m = re.match(r"^\s+patch:\s*(\S+)", line)
        if m and current:
            variants[current].append(m.group(1))
    return before, variants


def predecessors(fix: str) -> list[str]:
    seen: list[str] = []
    queue = [fix]
    while queue:
        for name in manifest_fields(queue.pop())[0]:
            if name not in seen and name != fix:
                seen.append(name)
                queue.append(name)
    return seen


def required(fix: str) -> list[str]:
    """What FIX `requires:`, transitively: what `apply FIX` brings with it."""
    seen: list[str] = []
    queue = [fix]
    while queue:
        text = (FIXES / queue.pop() / "fix.yaml").read_text()
        m = re.search(r"^requires:\s*\[([^\]]*)\]", text, re.M)
        for name in [n.strip() for n in m.group(1).split(",")] if m else []:
            if name and name not in seen and name != fix:
                seen.append(name)
                queue.append(name)
    return seen


def fix_files(fix: str, variant: str | None) -> list[Path]:
    """fix.yaml, the variant's patches (every variant's when None), the fix's Python files."""
    _, variants = manifest_fields(fix)
    chosen = variants.get(variant, []) if variant else sorted({p for ps in variants.values() for p in ps})
    out = [FIXES / fix / "fix.yaml"] + [FIXES / fix / p for p in chosen]
    out += sorted((FIXES / fix).glob("*.py"))
    return out


def tests_of(fixes: list[str]) -> list[Path]:
    return [p for f in fixes for p in sorted((FIXES / f).glob("*.py"))]


def default_fixes() -> list[str]:
    return re.findall(r"^  - (\S+)", (REPO / "profiles" / "default.yaml").read_text(), re.M)


def conform_sources() -> list[Path]:
    return [SUPPORT / "conform.py"] + support_closure([SUPPORT / "conform.py"])


def inputs(gate: str, subject: str, variants: dict[str, str | None]) -> list[Path]:
    """Exactly what GATE reads for SUBJECT (a fix, or the gate's one subject)."""
    if gate == "every-hunk-needed":
        fixes = [subject] + predecessors(subject)
        files = [p for f in fixes for p in fix_files(f, variants.get(f))]
        files += [FIXES / "conftest.py"] + support_closure(tests_of(fixes) + [FIXES / "conftest.py"])
        return files + [REPO / "scripts" / "every-hunk-needed.py"]
    if gate == "fix-alone":
        fixes = [subject] + required(subject)
        files = [p for f in fixes for p in fix_files(f, variants.get(f))]
        files += [FIXES / "conftest.py"] + support_closure(tests_of(fixes) + [FIXES / "conftest.py"])
        return files + [REPO / "scripts" / "fix-alone.py"]
    if gate in ("conform-one-fix-out", "conform-mutants"):
        files = [REPO / "profiles" / "default.yaml"]
        files += [p for f in default_fixes() for p in fix_files(f, variants.get(f)) if p.suffix != ".py"]
        files += conform_sources()
        if gate == "conform-mutants":
            files.append(REPO / "scripts" / "conform-mutants.py")
        return files
    sys.exit(f"gates.py: unknown gate {gate!r} (every-hunk-needed, fix-alone, conform-one-fix-out, conform-mutants)")


def key_of(gate: str, subject: str, release: str, tid: str, variants: dict[str, str | None], extra: str):
    files = sorted(set(inputs(gate, subject, variants)))
    listed = [f"{p.relative_to(REPO)} {input_hash(p)}" for p in files]
    digest = hashlib.sha256()
    for line in [f"format {FORMAT}", f"gate {gate}", f"subject {subject}", f"release {release}",
                 f"tree {tid}", f"settings {extra}"] + listed:
        digest.update(line.encode() + b"\n")
    return digest.hexdigest(), listed


def record_path(gate: str, subject: str, release: str) -> Path:
    return RECORDS / gate / release / f"{subject}.json"


def parse_variants(values: list[str]) -> dict[str, str | None]:
    """FIX=VARIANT pairs: which variant serves the release for each fix (from the binary)."""
    out: dict[str, str | None] = {}
    for v in values:
        fix, _, variant = v.partition("=")
        out[fix] = variant or None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    tid = sub.add_parser("tree-id")
    tid.add_argument("tree", type=Path)
    for name in ("key", "reusable", "record"):
        p = sub.add_parser(name)
        p.add_argument("gate")
        p.add_argument("subject")
        p.add_argument("release")
        p.add_argument("--tree-id", required=True)
        p.add_argument("--variant", action="append", default=[], metavar="FIX=VARIANT")
        p.add_argument("--settings", default="", help="the gate's settings (e.g. schedules 40)")
        if name == "record":
            p.add_argument("--found", type=Path, required=True, help="the gate's output: what it found")
    args = parser.parse_args()
    if args.cmd == "tree-id":
        print(tree_id(args.tree))
        return 0
    variants = parse_variants(args.variant)
    key, listed = key_of(args.gate, args.subject, args.release, args.tree_id, variants, args.settings)
    path = record_path(args.gate, args.subject, args.release)
    if args.cmd == "key":
        print(key)
        return 0
    if args.cmd == "reusable":
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            print(f"no record ({path.relative_to(REPO)})")
            return 1
        if rec.get("key") != key:
            print(f"inputs changed since {rec.get('recorded_at', '?')} ({path.relative_to(REPO)})")
            return 1
        if rec.get("verdict") != "pass":
            print(f"recorded verdict {rec.get('verdict')!r}")
            return 1
        print(f"reused: recorded {rec.get('recorded_at', '?')}, key {key[:12]}")
        return 0
    found = [line.rstrip() for line in args.found.read_text().splitlines()
             if line.startswith(("PASS", "FAIL", "NOT GUARDED", "named", "every-hunk-needed:", "conform"))
             or "named" in line]
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {
        "format": FORMAT,
        "gate": args.gate,
        "subject": args.subject,
        "release": args.release,
        "verdict": "pass",
        "key": key,
        "recorded_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "settings": args.settings,
        "tree": args.tree_id,
        "inputs": listed,
        "found": found[-60:],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, path)
    print(f"recorded {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
