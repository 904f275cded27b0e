"""A request resumed after preemption with a prefix-cache hit returns one new token, not its
earlier output again (CPU; needs torch, numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives vllm_gaudi's real ``_update_states``, ``InputBatch``, ``_extract_prefill_batch_contents`` and
``sample_tokens``' pieces with vLLM's real scheduler-output dataclasses (harness.py), sync and async.
Greedy request R (9-token prompt) and Q decode side by side; after R has 7 tokens of output the
scheduler preempts it (blocks freed, ``num_computed_tokens = 0``), runs Q alone for a step, then
resumes R: it comes back in the cached requests, resumed, with the block-aligned prefix hit
computed and the rest of its prompt and output scheduled again. The same schedule without the
preemption is the reference: R must get exactly the tokens it gets unpreempted, and Q too.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/resumed-prefill-rows``
"""

from __future__ import annotations

import pytest
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness

STEPS_BEFORE = 6  # decodes after the first token: R has 7 tokens of output when preempted
STEPS_AFTER = 3


def _run(root, mode, preempt: bool, chunks: tuple[int, ...] = ()) -> tuple[harness.Harness, list[harness.Step]]:
    """`chunks`: the resume's recompute in these chunks (the rest in the last one), else one."""
    h = harness.Harness(root, mode)
    h.add("R", harness.prompt(9, 1), temperature=0.0, max_tokens=32)
    h.add("Q", harness.prompt(5, 2), temperature=0.0, max_tokens=32)
    h.step({"R": 9, "Q": 5})
    for _ in range(STEPS_BEFORE):
        h.step({"R": 1, "Q": 1})
    resumed = []
    if preempt:
        h.scheduler.preempt("R")
        h.step({"Q": 1})
        hit = h.scheduler.hit("R")
        assert hit > 0 and hit % harness.BLOCK == 0
        rest = len(h.scheduler.requests["R"].tokens) - hit
        h.resume = (hit, len(h.scheduler.requests["R"].tokens))  # type: ignore[attr-defined]
        for n in chunks:
            resumed.append(h.step({"Q": 1, "R": n}))
            rest -= n
        resumed.append(h.step({"Q": 1, "R": rest}))
    else:
        h.step({"Q": 1})
        h.step({"Q": 1, "R": 1})
    for _ in range(STEPS_AFTER):
        h.step({"R": 1, "Q": 1})
    return h, resumed


@pytest.fixture(scope="module")
def runs(root, mode):  # noqa: F811
    return _run(root, mode, preempt=False), _run(root, mode, preempt=True)


def test_the_resume_is_what_the_scheduler_sends(runs):
    """The scenario reaches the bug's trigger: R resumed with a prefix hit, recomputing output."""
    (_, _), (h, resumed) = runs
    (step, ) = resumed
    assert step.scheduled["R"] > 1 and h.scheduler.requests["R"].computed > len(h.scheduler.requests["R"].prompt)


def test_a_one_token_recompute_chunk_short_of_the_end_returns_nothing(root, mode):  # noqa: F811
    """The resume's recompute in chunks of 2, 1 and the rest: the one-token chunk does not reach
    R's end, so it is still a prompt chunk (vllm_gaudi took it for a decode: one token scheduled,
    its prompt computed) and R gets nothing back for it."""
    plain, _ = _run(root, mode, preempt=False)
    chunked, resumed = _run(root, mode, preempt=True, chunks=(2, 1))
    one = resumed[1]
    assert one.scheduled["R"] == 1 and resumed[2].scheduled["R"] >= 1
    assert not one.returned.get("R"), (
        f"request R got {one.returned.get('R')} back for a one-token chunk of its recompute after preemption "
        f"({chunked.resume[0] + 3} of its {chunked.resume[1]} tokens computed after it): a token predicted "
        f"mid-recompute (it returns {plain.output('R')} unpreempted, {chunked.output('R')} here)")
    assert chunked.output("R") == plain.output("R"), (
        f"request R returned {chunked.output('R')} after a resume recomputed in chunks of 2, 1 and the rest, and "
        f"{plain.output('R')} unpreempted")


def test_resumed_request_returns_what_it_returns_unpreempted(runs):
    (plain, _), (preempted, resumed) = runs
    want, got = plain.output("R"), preempted.output("R")
    earlier = want[:STEPS_BEFORE + 1]
    repeated = got[len(earlier):len(earlier) + len(earlier)]
    assert got[:len(earlier)] == earlier, f"R's output before the preemption differs: {got} vs {want}"
    assert got == want, (
        f"request R got its earlier output again after it was preempted and resumed with a prefix-cache hit: "
        f"{got} where it returns {want} unpreempted (the resume step sampled {resumed[0].rows['R']} rows for R "
        f"and handed back {resumed[0].returned.get('R')}; repeated part {repeated})")


def test_the_request_beside_it_keeps_its_tokens(runs):
    (plain, _), (preempted, _) = runs
    assert preempted.output("Q") == plain.output("Q"), (
        f"request Q got {preempted.output('Q')} where it gets {plain.output('Q')} when R is not preempted")
