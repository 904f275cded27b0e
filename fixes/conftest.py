"""pytest run straight on a fix's directory from a checkout (`pytest fixes/FIX`, as the fix pages
show): its tests import the catalogue's one test-support module, `fixes/_support/`, which
`gaudi-fixes test` writes beside them. Here it is put on sys.path instead, and the harness's
fixtures (`root`, `mode`: _support/fixtures.py) are offered to every test."""

import sys
from pathlib import Path

_SUPPORT = str(Path(__file__).resolve().parent / "_support")
if _SUPPORT not in sys.path:
    sys.path.insert(0, _SUPPORT)

from fixtures import mode, root  # noqa: E402,F401  (pytest fixtures)
