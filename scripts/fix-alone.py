#!/usr/bin/env python3
"""A fix applied alone passes its own tests: its `requires:` is what its tests need.

    python3 scripts/fix-alone.py --bin target/release/gaudi-fixes --tree PRISTINE FIX...

For each FIX, on a hard-linked copy of the pristine tree PRISTINE (holding vllm/ and
vllm_gaudi/; gaudi-fixes replaces files by rename, so the pristine tree is never written):
`gaudi-fixes apply FIX` (which brings what FIX `requires:`, and nothing else) must exit 0 and
`gaudi-fixes test FIX` must then pass (exit 0). A fix whose tests pass only with a fix it does not
require (one it merely comes `after:`, or one of the default profile it does not name) fails
here: a user who applies it alone gets a tree its own tests reject. A fix that does not cover
the tree's release (apply exits 3, "no variant") is reported as "SKIP". Each line printed is one
check; the output of a check that went wrong follows it. Needs the catalogue of this repository
(fixes/, profiles/) and a Python with pytest and torch (--python, default python3).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the gaudi-fixes binary")
    parser.add_argument("--tree", required=True, type=Path, help="pristine tree holding vllm/ and vllm_gaudi/")
    parser.add_argument("--python", default=os.environ.get("PYTHON", "python3"))
    parser.add_argument("fixes", nargs="+")
    args = parser.parse_args()
    pristine = args.tree.resolve()
    failed: list[str] = []
    for fix in args.fixes:
        with tempfile.TemporaryDirectory(prefix="fix-alone-") as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(["cp", "-al", str(pristine), str(tree)], check=True)

            def gf(*rest: str) -> subprocess.CompletedProcess:
                return run([args.bin, "--catalog", str(REPO), "--root", str(tree), "--python", args.python, *rest])

            check = gf("apply", "--check", fix)
            if check.returncode == 3 and "no variant" in check.stdout + check.stderr:
                print(f"SKIP: {fix}: does not cover this release", flush=True)
                continue
            applied = gf("apply", fix)
            if applied.returncode != 0:
                failed.append(f"{fix}: apply alone exited {applied.returncode}")
                print(f"FAIL: {failed[-1]}", flush=True)
                print(applied.stdout[-3000:] + applied.stderr[-3000:], flush=True)
                continue
            tested = gf("test", fix)
            if tested.returncode == 0:
                print(f"PASS: {fix}: applied alone (with what it requires), its tests pass", flush=True)
            else:
                failed.append(f"{fix}: applied alone (with what it requires), `test {fix}` exited {tested.returncode}")
                print(f"FAIL: {failed[-1]}", flush=True)
                print(tested.stdout[-4000:] + tested.stderr[-3000:], flush=True)
    print(f"fix-alone: {len(failed)} problem(s)" + "".join(f"\n  {f}" for f in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
