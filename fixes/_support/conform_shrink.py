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
import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable, Iterator, Optional

import conform
from conform_schedule import Schedule, Step


def valid(schedule: Schedule) -> Optional[str]:
    """Why `schedule` is not one vLLM's scheduler can send (None when it is): every request a step
    names arrived in that step or before and has not finished; a request arrives once; a
    structured request has a grammar; at least one request and one step."""
    requests, steps = schedule.requests, schedule.steps
    if not requests or not steps:
        return "a schedule needs at least one request and one step"
    live: set[str] = set()
    seen: set[str] = set()
    for i, step in enumerate(steps):
        for rid in step.finish:
            if rid not in live:
                return f"step {i} finishes {rid}, which is not running"
            live.discard(rid)
        for rid in step.arrive:
            if rid not in requests or rid in seen:
                return f"step {i}: {rid} arrives twice or is not defined"
            seen.add(rid)
            live.add(rid)
        named = set(step.preempt) | set(step.scheduled) | set(step.structured) | set(step.drafts or {})
        for rid in named:
            if rid not in live:
                return f"step {i} names {rid}, which is not running"
        for rid in step.structured:
            if requests[rid].grammar is None:
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
    prompt = {rid: len(r.prompt) for rid, r in schedule.requests.items()}
    computed: dict[str, int] = {}
    output: dict[str, int] = {}
    cached: dict[str, int] = {}
    preempted: set[str] = set()
    for i, step in enumerate(schedule.steps):
        for rid in step.preempt:
            cached[rid], computed[rid] = computed[rid], 0
            preempted.add(rid)
        for rid in step.arrive:
            computed[rid], output[rid] = schedule.requests[rid].cached, 0
        drafts = step.drafts or {}
        for rid, n in step.scheduled.items():
            tokens = prompt[rid] + output[rid]
            if rid in preempted and rid not in step.preempt:
                computed[rid] = min(cached[rid], tokens - 1) // block * block
                preempted.discard(rid)
            left = tokens - computed[rid]
            chunk = n - len(drafts.get(rid, ()))
            if chunk < 1 or chunk > left or (rid in drafts and left != 1):
                return f"step {i} schedules {n} tokens of {rid}, which has {left} left"
            if rid in drafts and not output[rid]:
                return f"step {i} sends drafts with {rid}, which has not finished its prompt"
            computed[rid] += chunk
            if computed[rid] >= tokens:
                output[rid] += 1
    return None


def sizes(schedule: Schedule) -> dict[str, int]:
    steps = schedule.steps
    return {"requests": len(schedule.requests), "steps": len(steps),
            "parameters": sum(len(r.params) for r in schedule.requests.values()),
            "prompt_tokens": sum(len(r.prompt) for r in schedule.requests.values()),
            "scheduled_tokens": sum(sum(s.scheduled.values()) for s in steps),
            "drafts": sum(len(d) for s in steps for d in (s.drafts or {}).values())}


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


def _without(ids: tuple[str, ...], rid: str) -> tuple[str, ...]:
    return tuple(r for r in ids if r != rid)


def _less(mapping: Optional[dict], rid: str) -> Optional[dict]:
    return None if mapping is None else {r: v for r, v in mapping.items() if r != rid}


def without_request(s: Schedule, rid: str) -> Schedule:
    steps = tuple(dataclasses.replace(step, finish=_without(step.finish, rid), arrive=_without(step.arrive, rid),
                                      preempt=_without(step.preempt, rid), structured=_without(step.structured, rid),
                                      scheduled=_less(step.scheduled, rid), drafts=_less(step.drafts, rid))
                  for step in s.steps)
    return s.replace(requests=_less(s.requests, rid), steps=steps)


def with_step(s: Schedule, i: int, step: Step) -> Schedule:
    return s.replace(steps=s.steps[:i] + (step,) + s.steps[i + 1:])


def candidates(s: Schedule) -> Iterator[tuple[str, Schedule]]:
    """Smaller schedules than `s`, the biggest cuts first."""
    for k in range(1, len(s.steps)):
        yield f"only the first {k} steps", s.replace(steps=s.steps[:k])
    for rid in sorted(s.requests, key=lambda r: -len(s.requests[r].prompt)):
        yield f"without request {rid}", without_request(s, rid)
    for i in range(len(s.steps)):
        yield f"without step {i}", s.replace(steps=s.steps[:i] + s.steps[i + 1:])
    for i, step in enumerate(s.steps):
        for rid in step.structured:
            yield f"step {i} without {rid} structured", with_step(s, i, dataclasses.replace(
                step, structured=_without(step.structured, rid)))
        for rid, d in (step.drafts or {}).items():
            # the decode is left
            scheduled = {**step.scheduled, rid: step.scheduled[rid] - len(d)}
            yield f"step {i} without {rid}'s drafts", with_step(s, i, dataclasses.replace(
                step, drafts=_less(step.drafts, rid), scheduled=scheduled))
            if len(d) > 1:
                fewer = {**step.scheduled, rid: step.scheduled[rid] - 1}
                yield f"step {i} with one draft less for {rid}", with_step(s, i, dataclasses.replace(
                    step, drafts={**step.drafts, rid: d[:-1]}, scheduled=fewer))
    for rid, r in s.requests.items():
        if len(r.prompt) > 1:  # its prompt one token shorter, one of its chunks with it
            shorter = {**s.requests, rid: dataclasses.replace(r, prompt=r.prompt[:-1])}
            for i, step in enumerate(s.steps):
                if rid in step.scheduled:
                    scheduled = {**step.scheduled, rid: step.scheduled[rid] - 1}
                    left = dataclasses.replace(step, scheduled=scheduled)
                    if scheduled[rid] - len(step.drafts_of(rid)) < 1:
                        left = dataclasses.replace(step, scheduled=_less(scheduled, rid),
                                                   structured=_without(step.structured, rid))
                    yield (f"{rid}'s prompt one token shorter (step {i} schedules one less)",
                           with_step(s.replace(requests=shorter), i, left))
    for rid, r in s.requests.items():
        for key in [k for k in r.params if k != "temperature"]:
            params = {k: v for k, v in r.params.items() if k != key}
            yield f"{rid} without {key}", s.replace(requests={**s.requests, rid: dataclasses.replace(r, params=params)})
        if r.grammar is not None and not any(rid in step.structured for step in s.steps):
            plain = dataclasses.replace(r, grammar=None)
            yield f"{rid} without its grammar", s.replace(requests={**s.requests, rid: plain})


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
    print(json.dumps({"schedule": small.to_json(), "feature": feature, "first": first, "before": before,
                      "after": sizes(small), "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
