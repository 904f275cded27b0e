"""gaudi-fixes' result plugin for pytest, loaded with `-p gaudi_fixes_pytest` by `gaudi-fixes test`
and `matrix`. It writes what pytest itself decided, as JSON, to $GAUDI_FIXES_PYTEST_REPORT when
the session ends (exit status, counts, skip reasons), and the test now running to
$GAUDI_FIXES_PYTEST_RUNNING (its node id, then a line "DONE TOTAL": tests finished of those
collected), so that gaudi-fixes never reads a verdict from a line of output (an atexit handler's
line on stderr is not a summary) and can say in its heartbeat which test runs and how far along.
"""

import json
import os
import time

_COUNTS = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
_SKIPS = []
_START = [time.time()]
_PROGRESS = {"done": 0, "total": 0, "running": ""}


def _replace(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def pytest_sessionstart(session):
    # pytest times its summary from here too.
    _START[0] = time.time()


def _running():
    path = os.environ.get("GAUDI_FIXES_PYTEST_RUNNING")
    if path:
        _replace(path, "%s\n%d %d\n" % (_PROGRESS["running"], _PROGRESS["done"], _PROGRESS["total"]))


def pytest_collection_finish(session):
    _PROGRESS["total"] = len(session.items)


def pytest_runtest_logstart(nodeid, location):
    _PROGRESS["running"] = nodeid
    _running()


def pytest_runtest_logfinish(nodeid, location):
    _PROGRESS["done"] += 1
    _running()


def pytest_collectreport(report):
    if report.failed:
        _COUNTS["errors"] += 1


def pytest_runtest_logreport(report):
    # As pytest's own summary counts them (terminal.py / skipping.py).
    xfail = hasattr(report, "wasxfail")
    if report.skipped:
        _COUNTS["xfailed" if xfail else "skipped"] += 1
        if not xfail and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2])
            _SKIPS.append(reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason)
    elif report.failed:
        _COUNTS["failed" if report.when == "call" else "errors"] += 1
    elif report.when == "call":
        _COUNTS["xpassed" if xfail else "passed"] += 1


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("GAUDI_FIXES_PYTEST_REPORT")
    if path:
        doc = dict(_COUNTS, exitstatus=int(exitstatus), collected=_PROGRESS["total"], skips=_SKIPS,
                   duration=time.time() - _START[0])
        _replace(path, json.dumps(doc))
