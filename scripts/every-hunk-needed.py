#!/usr/bin/env python3
"""Every hunk of a fix is needed: leave any one out and one of the fix's tests fails.

    python3 scripts/every-hunk-needed.py --bin target/release/gaudi-fixes --tree PRISTINE FIX...

For each FIX, on hard-linked copies of the pristine tree PRISTINE (holding vllm/ and
vllm_gaudi/; never written: files are replaced by rename, never edited in place): the fix's
tests must fail before it is applied and pass once it is (with what it comes after); then, for
every hunk of the variant that matches the tree, the fully patched tree gets that one hunk
taken back out (its post-image, found exactly once, replaced by its pre-image) and
`gaudi-fixes test FIX` must fail (exit 1). A hunk whose absence no test notices is
reported as "NOT GUARDED" and the script exits 1. Each line printed is one check; pytest's own
output is shown only for a check that went wrong. Needs the catalogue of this repository
(fixes/, profiles/) and a Python with pytest and torch (--python, default python3).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def show(binary: str, catalog: Path, fix: str) -> dict:
    out = run([binary, "--catalog", str(catalog), "show", fix, "--format", "json"])
    if out.returncode != 0:
        sys.exit(f"every-hunk-needed: `gaudi-fixes show {fix}` failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["manifest"]


def predecessors(binary: str, catalog: Path, fix: str) -> list[str]:
    """What FIX comes after (requires: and after:, transitively): applied with it."""
    seen: list[str] = []
    queue = [fix]
    while queue:
        manifest = show(binary, catalog, queue.pop())
        for name in manifest.get("requires", []) + manifest.get("after", []):
            if name not in seen and name != fix:
                seen.append(name)
                queue.append(name)
    return seen


def variant_for(binary: str, catalog: Path, tree: Path, fix: str) -> str:
    out = run([binary, "--catalog", str(catalog), "--root", str(tree), "apply", "--check", fix, "--format", "json"])
    doc = json.loads(out.stdout)
    for entry in doc["fixes"]:
        if entry["name"] == fix and entry.get("variant"):
            return entry["variant"]
    sys.exit(f"every-hunk-needed: no variant of {fix} matches {tree} (exit {out.returncode})")


def hunks(patch: str) -> tuple[list[str], list[list[str]]]:
    """(file header lines, hunks as line lists) of a one-file unified diff."""
    lines = patch.splitlines(keepends=True)
    header: list[str] = []
    out: list[list[str]] = []
    for line in lines:
        if line.startswith("@@"):
            out.append([line])
        elif out:
            out[-1].append(line)
        else:
            header.append(line)
    return header, out


def scratch_tree(pristine: Path, into: Path) -> Path:
    tree = into / "tree"
    subprocess.run(["cp", "-al", str(pristine), str(tree)], check=True)
    return tree


def image(hunk: list[str], keep: str) -> str:
    """The pre-image (keep="-") or post-image (keep="+") of a hunk's body, line endings kept."""
    out = []
    for line in hunk[1:]:
        if line.startswith("\\"):
            continue
        if line[:1] == " " or line[:1] == keep or (line in ("\n", "\r\n")):
            out.append(line[1:] if line[:1] in " +-" else line)
    return "".join(out)


def without(path: Path, hunk: list[str]) -> bool:
    """Take one hunk back out of the patched file at `path` (replaced by rename). False when its
    post-image is not found exactly once."""
    text = path.read_text()
    post, pre = image(hunk, "+"), image(hunk, "-")
    if text.count(post) != 1:
        return False
    tmp = path.with_name(path.name + ".every-hunk")
    tmp.write_text(text.replace(post, pre))
    os.replace(tmp, path)
    return True


class Checker:
    def __init__(self, binary: str, python: str, pristine: Path):
        self.binary, self.python, self.pristine = binary, python, pristine
        self.failed: list[str] = []

    def gf(self, catalog: Path, tree: Path, *args: str) -> subprocess.CompletedProcess:
        return run([self.binary, "--catalog", str(catalog), "--root", str(tree), "--python", self.python, *args])

    def expect(self, what: str, proc: subprocess.CompletedProcess, want: int) -> bool:
        if proc.returncode == want:
            print(f"PASS: {what} (exit {want})", flush=True)
            return True
        self.failed.append(what)
        print(f"FAIL: {what}: exit {proc.returncode}, expected {want}", flush=True)
        print(proc.stdout[-4000:] + proc.stderr[-4000:], flush=True)
        return False

    def fix(self, fix: str) -> None:
        before = predecessors(self.binary, REPO, fix)
        with tempfile.TemporaryDirectory(prefix="every-hunk-") as tmp:
            tmp_path = Path(tmp)
            tree = scratch_tree(self.pristine, tmp_path)
            variant = variant_for(self.binary, REPO, tree, fix)
            # -x: a failure is the verdict, so pytest stops at the first (the later tests may import
            # vLLM for real, tens of seconds each).
            self.expect(f"{fix}: its tests fail on the pristine tree", self.gf(REPO, tree, "test", fix, "--", "-x"), 1)
            if not self.expect(f"{fix}: applies", self.gf(REPO, tree, "apply", *before, fix), 0):
                return
            self.expect(f"{fix}: its tests pass once applied", self.gf(REPO, tree, "test", fix), 0)
        patches = show(self.binary, REPO, fix)["releases"][variant]["patches"]
        for entry in patches:
            _, parts = hunks((REPO / "fixes" / fix / entry["patch"]).read_text())
            for i in range(len(parts)):
                self.without_hunk(fix, before, entry, parts[i], i)

    def without_hunk(self, fix: str, before: list[str], entry: dict, hunk: list[str], i: int):
        where = f"{fix}: without hunk {i + 1} of {entry['patch']} ({hunk[0].strip()[:60]})"
        with tempfile.TemporaryDirectory(prefix="every-hunk-") as tmp:
            tree = scratch_tree(self.pristine, Path(tmp))
            applied = self.gf(REPO, tree, "apply", *before, fix)
            if applied.returncode != 0 or not without(tree / entry["file"], hunk):
                self.failed.append(where)
                print(f"FAIL: {where}: could not apply the fix and take the hunk out (apply exit {applied.returncode})",
                      flush=True)
                print(applied.stdout[-3000:] + applied.stderr[-3000:], flush=True)
                return
            tested = self.gf(REPO, tree, "test", fix, "--", "-x")  # stop at the first failure: it is the verdict
            if tested.returncode == 1:
                print(f"PASS: {where}: its tests fail (exit 1)", flush=True)
            else:
                self.failed.append(where)
                print(f"NOT GUARDED: {where}: `gaudi-fixes test {fix}` exited {tested.returncode}", flush=True)
                print(tested.stdout[-3000:] + tested.stderr[-3000:], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the gaudi-fixes binary")
    parser.add_argument("--tree", required=True, type=Path, help="pristine tree holding vllm/ and vllm_gaudi/")
    parser.add_argument("--python", default=os.environ.get("PYTHON", "python3"))
    parser.add_argument("fixes", nargs="+")
    args = parser.parse_args()
    checker = Checker(args.bin, args.python, args.tree.resolve())
    for fix in args.fixes:
        checker.fix(fix)
    print(f"every-hunk-needed: {len(checker.failed)} problem(s)" + "".join(f"\n  {f}" for f in checker.failed))
    return 1 if checker.failed else 0


if __name__ == "__main__":
    sys.exit(main())
