"""Shrink a schedule that finds a difference: the smallest schedule that still differs under the
same feature, as Hypothesis shrinks a failing example (greedy delta debugging over the data).

    python conform_shrink.py --root DIR FILE [--feature NAME]

FILE is a schedule (``--first``'s ``failing_schedule``, or a corpus file). The feature is the
first one it differs in, or ``--feature``. Reductions, each kept only when the smaller schedule is
still one a scheduler can send (``valid``) and still differs in that feature, tried until none
helps: the steps after the difference, whole requests, steps, a request from one step's
structured-output list, drafts, prompt tokens (the last, with one of the request's chunks one
token shorter), sampling parameters, grammars. Progress and the result's first
sentence go to stderr; stdout's last line is one JSON object: ``{"schedule": …, "feature": …,
"first": …, "before": {...sizes}, "after": {...sizes}, "runs": n}`` (``--replay`` takes the
schedule), or ``{"error": …}`` with exit 3 when FILE does not differ in the feature.

It imports the suite (conform.py) and is never imported by it: the suite's verdicts do not
depend on this file.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import conform

Schedule = dict[str, Any]


def valid(schedule: Schedule) -> Optional[str]:
    """Why `schedule` is not one vLLM's scheduler can send (None when it is): every request a step
    names arrived in that step or before and has not finished; a request arrives once; a
    structured request has a grammar; at least one request and one step."""
    requests, steps = schedule.get("requests") or {}, schedule.get("steps") or []
    if not requests or not steps:
        return "a schedule needs at least one request and one step"
    live: set[str] = set()
    seen: set[str] = set()
    for i, step in enumerate(steps):
        for rid in step["finish"]:
            if rid not in live:
                return f"step {i} finishes {rid}, which is not running"
            live.discard(rid)
        for rid in step["arrive"]:
            if rid not in requests or rid in seen:
                return f"step {i}: {rid} arrives twice or is not defined"
            seen.add(rid)
            live.add(rid)
        named = set(step["preempt"]) | set(step["scheduled"]) | set(step["structured"]) | set(step.get("drafts", {}))
        for rid in named:
            if rid not in live:
                return f"step {i} names {rid}, which is not running"
        for rid in step["structured"]:
            if requests[rid]["grammar"] is None:
                return f"step {i}: {rid} is structured but has no grammar"
    return tokens_fit(schedule)


def tokens_fit(schedule: Schedule) -> Optional[str]:
    """Why a step schedules tokens a request does not have (None when every count fits), with the
    generator's model of a request (conform_schedule): a chunk at most the tokens left (its prompt
    and output so far less those computed), one output token when a chunk reaches the end, a
    preemption's computed tokens back to 0 and its resumption at the block-aligned prefix hit, a
    new request at its prefix-cache hit; a step with drafts schedules a decode (1 token, of a
    request past its prompt) and the drafts. (Cutting a step or drafts can leave counts no
    scheduler sends.)"""
    block = conform.schedules.BLOCK
    prompt = {rid: len(r["prompt"]) for rid, r in schedule["requests"].items()}
    computed: dict[str, int] = {}
    output: dict[str, int] = {}
    cached: dict[str, int] = {}
    preempted: set[str] = set()
    for i, step in enumerate(schedule["steps"]):
        for rid in step["preempt"]:
            cached[rid], computed[rid] = computed[rid], 0
            preempted.add(rid)
        for rid in step["arrive"]:
            computed[rid], output[rid] = schedule["requests"][rid].get("cached", 0), 0
        drafts = step.get("drafts", {})
        for rid, n in step["scheduled"].items():
            tokens = prompt[rid] + output[rid]
            if rid in preempted and rid not in step["preempt"]:
                computed[rid] = min(cached[rid], tokens - 1) // block * block
                preempted.discard(rid)
            left = tokens - computed[rid]
            chunk = n - len(drafts.get(rid, []))
            if chunk < 1 or chunk > left or (rid in drafts and left != 1):
                return f"step {i} schedules {n} tokens of {rid}, which has {left} left"
            if rid in drafts and not output[rid]:
                return f"step {i} sends drafts with {rid}, which has not finished its prompt"
            computed[rid] += chunk
            if computed[rid] >= tokens:
                output[rid] += 1
    return None


def sizes(schedule: Schedule) -> dict[str, int]:
    steps = schedule["steps"]
    return {"requests": len(schedule["requests"]), "steps": len(steps),
            "parameters": sum(len(r["params"]) for r in schedule["requests"].values()),
            "prompt_tokens": sum(len(r["prompt"]) for r in schedule["requests"].values()),
            "scheduled_tokens": sum(sum(s["scheduled"].values()) for s in steps),
            "drafts": sum(len(d) for s in steps for d in s.get("drafts", {}).values())}


def differences(root: Path, schedule: Schedule) -> dict[str, str]:
    """The features the schedule differs in, each with its first sentence."""
    saved = conform.GpuModules.get(root).saved
    try:
        f = conform.run_schedule(root, schedule, True)
    finally:
        sys.modules.update(saved)
    out: dict[str, str] = {}
    for feature, sentence in f.found:
        out.setdefault(feature, sentence)
    return out


def without_request(s: Schedule, rid: str) -> Schedule:
    s = copy.deepcopy(s)
    del s["requests"][rid]
    for step in s["steps"]:
        for key in ("finish", "arrive", "preempt", "structured"):
            step[key] = [r for r in step[key] if r != rid]
        step["scheduled"].pop(rid, None)
        step.get("drafts", {}).pop(rid, None)
    return s


def candidates(s: Schedule) -> Iterator[tuple[str, Schedule]]:
    """Smaller schedules than `s`, the biggest cuts first."""
    for k in range(1, len(s["steps"])):
        yield f"only the first {k} steps", {**copy.deepcopy(s), "steps": copy.deepcopy(s["steps"][:k])}
    for rid in sorted(s["requests"], key=lambda r: -len(s["requests"][r]["prompt"])):
        yield f"without request {rid}", without_request(s, rid)
    for i in range(len(s["steps"])):
        t = copy.deepcopy(s)
        del t["steps"][i]
        yield f"without step {i}", t
    for i, step in enumerate(s["steps"]):
        for rid in step["structured"]:
            t = copy.deepcopy(s)
            t["steps"][i]["structured"].remove(rid)
            yield f"step {i} without {rid} structured", t
        for rid in step.get("drafts", {}):
            t = copy.deepcopy(s)
            del t["steps"][i]["drafts"][rid]
            t["steps"][i]["scheduled"][rid] -= len(step["drafts"][rid])  # the decode is left
            yield f"step {i} without {rid}'s drafts", t
            if len(step["drafts"][rid]) > 1:
                t = copy.deepcopy(s)
                t["steps"][i]["drafts"][rid] = step["drafts"][rid][:-1]
                t["steps"][i]["scheduled"][rid] -= 1
                yield f"step {i} with one draft less for {rid}", t
    for rid, r in s["requests"].items():
        if len(r["prompt"]) > 1:  # its prompt one token shorter, one of its chunks with it
            for i, step in enumerate(s["steps"]):
                if rid in step["scheduled"]:
                    t = copy.deepcopy(s)
                    t["requests"][rid]["prompt"] = r["prompt"][:-1]
                    left = t["steps"][i]
                    left["scheduled"][rid] -= 1
                    if left["scheduled"][rid] - len(left.get("drafts", {}).get(rid, [])) < 1:
                        del left["scheduled"][rid]
                        left["structured"] = [x for x in left["structured"] if x != rid]
                    yield f"{rid}'s prompt one token shorter (step {i} schedules one less)", t
    for rid, r in s["requests"].items():
        for key in [k for k in r["params"] if k != "temperature"]:
            t = copy.deepcopy(s)
            del t["requests"][rid]["params"][key]
            yield f"{rid} without {key}", t
        if r["grammar"] is not None and not any(rid in step["structured"] for step in s["steps"]):
            t = copy.deepcopy(s)
            t["requests"][rid]["grammar"] = None
            yield f"{rid} without its grammar", t


def shrink(s: Schedule, still: Callable[[Schedule], Optional[str]], log: Callable[[str], None]) -> tuple[Schedule, str]:
    """Apply the first reduction that keeps the difference, again and again, until none does."""
    first = still(s)
    assert first is not None
    changed = True
    while changed:
        changed = False
        for what, t in candidates(s):
            if valid(t) is not None:
                continue
            sentence = still(t)
            if sentence is not None:
                log(f"conform-shrink: {what}: still differs ({sizes(t)})")
                s, first, changed = t, sentence, True
                break
    return s, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("file", type=Path)
    ap.add_argument("--feature", help="the feature to keep differing in (default: the schedule's first)")
    args = ap.parse_args()
    root = args.root.resolve()

    def fail(message: str) -> int:
        print(json.dumps({"error": message}))
        return 3

    try:
        schedule = conform.schedules.load(args.file)
    except (OSError, ValueError) as e:
        return fail(f"cannot shrink {args.file}: {e}")
    why = valid(schedule)
    if why is not None:
        return fail(f"{args.file} is not a schedule a scheduler can send: {why}")
    found = differences(root, schedule)
    feature = args.feature or next(iter(found), None)
    if feature is None or feature not in found:
        return fail(f"{args.file} finds no difference{' in ' + feature if feature else ''} on {root}: nothing to shrink")
    runs = 0

    def still(t: Schedule) -> Optional[str]:
        nonlocal runs
        runs += 1
        return differences(root, t).get(feature)

    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    before = sizes(schedule)
    small, first = shrink(schedule, still, log)
    log(f"conform-shrink: {feature}: {before} -> {sizes(small)} in {runs} runs; {first}")
    print(json.dumps({"schedule": small, "feature": feature, "first": first, "before": before,
                      "after": sizes(small), "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
