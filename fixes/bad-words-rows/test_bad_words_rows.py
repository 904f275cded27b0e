"""bad_words reach the sampler on their request's row of each call (CPU; needs torch and numpy).

Drives the REAL ``InputBatch`` of the vllm_gaudi tree (``$GAUDI_FIXES_VLLM_GAUDI_ROOT``, else
``$GAUDI_FIXES_ROOT``) through the HPU runner's own ``_ensure_decodes_first`` and
``_prepare_sampling`` (lifted from the real ``hpu_model_runner.py``, see vllm_gaudi_stubs.py) and
hands each call's metadata to vLLM's REAL ``apply_bad_words`` (``vllm/v1/sample/ops/bad_words.py``
of the vLLM tree, when one is given), the function the sampler calls.

The sampler indexes ``bad_words_token_ids`` by the row of the call's logits. The scenario is the
issue's: D0 and D1 are decoding when P2 (``bad_words`` -> token 9) arrives with P3 and P4, so P2
sits at persistent row 2 while the runner samples decodes and prefills in separate calls whose rows
are their own. Each sampler call the runner could make on that step is built (decode bucket of 2
and of 4; P2's own prefill call; a merged prefill call of P2, P3, P4), then D0, P3 and P4 finish,
``condense`` moves P2 to row 0, and P2 decodes first in a padded bucket.

Rule checked: token 9 is banned on P2's real row of every call that samples P2, and on no other
row. Padding rows (the runner pads a bucket by repeating the call's first request) get no ban:
their tokens are discarded, and a ban there is one more device op per padding row in
``apply_bad_words``' loop — the same rule the padding rows' generators follow.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/bad-words-rows``
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import torch
from vllm_gaudi_stubs import INPUT_BATCH_REL, UTILS_REL, H2DRecorder, Runner, SamplingParams, SchedulerOutput, \
    load_input_batch

VOCAB = 64
BANNED = 9
BAD_WORDS_REL = Path("vllm/v1/sample/ops/bad_words.py")


def _tree(var: str) -> Optional[Path]:
    value = os.environ.get(var) or os.environ.get("GAUDI_FIXES_ROOT")
    return Path(value) if value else None


GAUDI_ROOT = _tree("GAUDI_FIXES_VLLM_GAUDI_ROOT")
VLLM_ROOT = _tree("GAUDI_FIXES_VLLM_ROOT")
if GAUDI_ROOT is None:
    pytest.skip("GAUDI_FIXES_ROOT is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
if not (GAUDI_ROOT / INPUT_BATCH_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} under {GAUDI_ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

BAD_WORDS = {"P2": [[BANNED]]}
PROMPTS = {rid: [16 + 5 * n + i for i in range(8)] for n, rid in enumerate(("D0", "D1", "P2", "P3", "P4"))}


def _load_apply_bad_words() -> Optional[Callable]:
    """vLLM's apply_bad_words from the vLLM tree (it imports only torch), or None without one."""
    if VLLM_ROOT is None or not (VLLM_ROOT / BAD_WORDS_REL).is_file():
        return None
    spec = importlib.util.spec_from_file_location("gaudi_fixes_bad_words", VLLM_ROOT / BAD_WORDS_REL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.apply_bad_words


@dataclass
class Call:
    name: str
    rows: list[str]  # the request of each logits row, padding included
    real: int  # rows[:real] are the call's requests; the rest is padding
    # What the sampler banned on each row when it ran (right after the call was built: the batch's
    # dicts change on later steps), or the exception it raised.
    banned: Optional[dict[int, list[list[int]]]] = None
    error: Optional[IndexError] = None


class Scenario:

    def __init__(self):
        self.module = load_input_batch(GAUDI_ROOT, H2DRecorder(GAUDI_ROOT / UTILS_REL))
        self.batch = self.module.InputBatch(max_num_reqs=8, max_model_len=64, max_num_batched_tokens=64,
                                            device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                            block_sizes=[128], kernel_block_sizes=[128])
        self.runner = Runner(GAUDI_ROOT, self.batch)

    def request(self, rid: str) -> Any:
        params = SamplingParams(temperature=0.8, bad_words_token_ids=BAD_WORDS.get(rid))
        return self.module.CachedRequestState(req_id=rid, prompt_token_ids=PROMPTS[rid], mm_features=[],
                                              sampling_params=params, generator=None, block_ids=[[0]],
                                              num_computed_tokens=0, output_token_ids=[])

    def update_states(self, finished=(), added=()) -> bool:
        """HPUModelRunner._update_states' batch part: removals, arrivals, condense, refresh."""
        batch, runner = self.batch, self.runner
        removed = [batch.remove_request(rid) for rid in finished]
        for rid in finished:
            del runner.requests[rid]
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        removed = sorted(removed, reverse=True)
        for state in added:
            runner.requests[state.req_id] = state
            batch.add_request(state, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)
        changed = bool(finished) or bool(added)
        if changed:
            batch.refresh_sampling_metadata()
        return changed

    def call(self, name: str, changed: bool, request_ids: list[str], pad_to: int, logits=None) -> Call:
        metadata = self.runner._prepare_sampling(changed, request_ids, pad_to, logits)
        rows = [r for r, _ in self.runner._generate_req_id_output_token_ids_lst(request_ids, pad_to, logits)]
        call = Call(name, rows, len(dict.fromkeys(rows)))
        try:
            call.banned = _banned_rows(rows, metadata)
        except IndexError as err:
            call.error = err
        return call

    def advance(self, scheduled: dict[str, int], sampled: set[str]) -> None:
        for rid, n in scheduled.items():
            self.runner.requests[rid].num_computed_tokens += n
        for rid in sampled:
            self.runner.requests[rid].output_token_ids.append(1)

    def run(self) -> dict[str, Call]:
        runner, calls = self.runner, {}
        # Step 0: D0 and D1 arrive and prefill.
        changed = self.update_states(added=[self.request("D0"), self.request("D1")])
        sched = {"D0": 8, "D1": 8}
        runner._ensure_decodes_first(SchedulerOutput(sched))
        self.call("step 0 prefill [D0, D1]", changed, ["D0", "D1"], 2, ["D0", "D1"])
        self.advance(sched, {"D0", "D1"})
        # Step 1: D0, D1 decode; P2 (bad_words), P3, P4 arrive at rows 2, 3, 4 and prefill.
        changed = self.update_states(added=[self.request(r) for r in ("P2", "P3", "P4")])
        sched = {"D0": 1, "D1": 1, "P2": 8, "P3": 8, "P4": 8}
        runner._ensure_decodes_first(SchedulerOutput(sched))
        assert self.batch.req_ids[:5] == ["D0", "D1", "P2", "P3", "P4"], self.batch.req_ids
        # The sampler calls the runner makes on this step, under each bucketing it may choose.
        calls["decode"] = self.call("step 1 decode call [D0, D1], bucket 2", changed, ["D0", "D1"], 2)
        calls["decode padded"] = self.call("step 1 decode call [D0, D1], bucket 4", changed, ["D0", "D1"], 4)
        calls["own prefill"] = self.call("step 1 prefill call [P2]", changed, ["P2"], 1, ["P2"])
        calls["merged prefill"] = self.call("step 1 prefill call [P2, P3, P4]", changed, ["P2", "P3", "P4"], 3,
                                            ["P2", "P3", "P4"])
        self.advance(sched, set(sched))
        # Step 2: D0, P3, P4 finish; condense moves P2 to row 0; P2 and D1 decode in a bucket of 4.
        changed = self.update_states(finished=["D0", "P3", "P4"])
        sched = {"P2": 1, "D1": 1}
        runner._ensure_decodes_first(SchedulerOutput(sched))
        assert self.batch.req_ids[:2] == ["P2", "D1"], self.batch.req_ids
        calls["first in padded bucket"] = self.call("step 2 decode call [P2, D1], bucket 4", changed, ["P2", "D1"],
                                                    4)
        return calls


@pytest.fixture(scope="module")
def calls() -> dict[str, Call]:
    return Scenario().run()


APPLY_BAD_WORDS = _load_apply_bad_words()


def _banned_rows(rows: list[str], metadata: Any) -> dict[int, list[list[int]]]:
    """The rows on which the sampler bans a token, and what; raises what the sampler would."""
    bad_words = metadata.bad_words_token_ids
    if APPLY_BAD_WORDS is None:
        # No vLLM tree: read the dict the way apply_bad_words does (logits[i] for each key i).
        for i in bad_words:
            if not 0 <= i < len(rows):
                raise IndexError(f"index {i} is out of bounds for dimension 0 with size {len(rows)}")
        return {i: [list(w) for w in words] for i, words in bad_words.items()}
    logits = torch.zeros(len(rows), VOCAB)
    APPLY_BAD_WORDS(logits, bad_words, metadata.output_token_ids)
    return {i: [[t] for t in torch.nonzero(torch.isinf(logits[i])).flatten().tolist()] for i in range(len(rows))
            if torch.isinf(logits[i]).any()}


def _check(call: Call) -> None:
    if call.error is not None:
        pytest.fail(f"{call.name}: the sampler's apply_bad_words raised IndexError: {call.error} — P2's bad_words "
                    f"are keyed by its persistent row, not by this {len(call.rows)}-row call's rows; an exception "
                    f"in the sampler ends EngineCore")
    banned = call.banned
    wrong = []
    for i, rid in enumerate(call.rows):
        want = BAD_WORDS.get(rid) if i < call.real else None
        got = banned.get(i)
        what = rid if i < call.real else f"padding copy of {rid}"
        if want and not got:
            wrong.append(f"row {i} ({what}) asked bad_words {want} but was not banned")
        elif got and i >= call.real:
            wrong.append(f"row {i} ({what}) was banned token(s) {got}: padding rows get no ban")
        elif got and not want:
            wrong.append(f"row {i} ({what}) was banned token(s) {got} from another request's bad_words")
        elif got and sorted(got) != sorted(want):
            wrong.append(f"row {i} ({what}) was banned {got}, asked {want}")
    assert not wrong, f"{call.name}:\n" + "\n".join(wrong)


def test_decode_call_without_bad_words(calls: dict[str, Call]):
    """P2 arrives while D0 and D1 decode: their decode call bans nothing and does not crash."""
    _check(calls["decode"])


def test_own_prefill_call(calls: dict[str, Call]):
    """P2's own prefill call (one row) bans token 9 on its row 0."""
    _check(calls["own prefill"])


def test_merged_prefill_call(calls: dict[str, Call]):
    """A prefill call of P2, P3, P4 bans token 9 on P2's row, not on P4's."""
    _check(calls["merged prefill"])


def test_padded_decode_buckets(calls: dict[str, Call]):
    """Padded decode buckets: the ban only on P2's real row (none in D0/D1's call, not on padding)."""
    _check(calls["decode padded"])
    _check(calls["first in padded bucket"])


def test_scenario_exercises_the_trigger(calls: dict[str, Call]):
    """P2's persistent row differs from its row in the prefill calls; step 2 pads with copies of P2."""
    assert calls["own prefill"].rows == ["P2"] and calls["merged prefill"].rows == ["P2", "P3", "P4"]
    assert calls["decode"].rows == ["D0", "D1"] and calls["decode padded"].rows == ["D0", "D1", "D0", "D0"]
    assert calls["first in padded bucket"].rows == ["P2", "D1", "P2", "P2"]
