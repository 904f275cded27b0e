"""Penalties see the generated tokens under async scheduling (CPU; needs torch and numpy).

Frequency and presence penalties (and the output half of the repetition penalty) are computed
from each row's ``output_token_ids`` in the sampling metadata, which
``InputBatch.make_selective_sampling_metadata`` takes from the runner's request states. This test
drives the REAL ``InputBatch`` and the runner's own code over several engine steps:
``_prepare_sampling`` (and every runner method it calls) for each sampler call, then the REAL
tail of ``HPUModelRunner.sample_tokens`` — from ``if self.use_async_scheduling or
self.use_structured_output:`` to the loop that extends ``req_state.output_token_ids`` — lifted out
of the tree's ``hpu_model_runner.py`` with every runner method it calls. The model and the
sampler are not run: a recording sampler returns tokens the test chooses, so the test knows what
each request generated.

Under async scheduling (vLLM's default, which vllm_gaudi keeps without spec decode) every
sampler call must see each request's generated tokens; with no penalties in the batch, the
request states must stay as they were (no bookkeeping on the fast path).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/async-penalties-output-tokens``
"""

from __future__ import annotations

import copy
import os
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import vllm_gaudi_stubs as stubs
from vllm_gaudi_stubs import INPUT_BATCH_REL, RUNNER_REL, UTILS_REL, H2DRecorder, SamplingParams, SchedulerOutput, \
    load_input_batch

VOCAB = 128

_root = os.environ.get("GAUDI_FIXES_VLLM_GAUDI_ROOT") or os.environ.get("GAUDI_FIXES_ROOT")
if not _root:
    pytest.skip("GAUDI_FIXES_ROOT is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(_root)
if not (ROOT / INPUT_BATCH_REL).is_file() or not (ROOT / RUNNER_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} / {RUNNER_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

PENALISED = {
    "D0": SamplingParams(temperature=0.8, frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.2),
    "D1": SamplingParams(temperature=0.8),
}
PLAIN = {"D0": SamplingParams(temperature=0.8), "D1": SamplingParams(temperature=0.7)}
PROMPT = {"D0": [3, 4, 5, 6], "D1": [7, 8, 9]}
NUM_STEPS = 5


class Watched(torch.Tensor):
    """A sampled-token tensor that counts device-to-host copies made of it (or of what is
    computed from it): on HPU each is a sync that stalls the async pipeline."""

    host_copies = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.numpy):
            Watched.host_copies += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class RecordingSampler:
    """Returns the tokens the test chose for each row; records what each call was handed."""

    def __init__(self):
        self.calls: list[dict[str, Any]] = []

    def sample(self, rows: list[str], metadata: Any, step: int) -> torch.Tensor:
        self.calls.append({"step": step, "rows": rows, "output_token_ids": copy.deepcopy(metadata.output_token_ids)})
        return torch.tensor([self.choose(step, rid, metadata, i) for i, rid in enumerate(rows)],
                            dtype=torch.int32).as_subclass(Watched)

    def choose(self, step: int, rid: str, metadata: Any, row: int) -> int:
        return token(step, rid)


BAD_WORD = [10, 11]


class BadWordsSampler(RecordingSampler):
    """Greedy over logits that prefer D0 to say 10 then 11 (a bad word), 12 second best, with
    vLLM's real ``apply_bad_words`` (vllm/v1/sample/ops/bad_words.py of the tree) applied
    first, as ``Sampler.apply_logits_processors`` does."""

    def __init__(self, apply_bad_words):
        super().__init__()
        self.apply_bad_words = apply_bad_words
        self.said: list[int] = []  # D0's token of each call

    def sample(self, rows: list[str], metadata: Any, step: int) -> torch.Tensor:
        out = super().sample(rows, metadata, step)
        self.said.append(int(out[rows.index("D0")]))
        return out

    def choose(self, step: int, rid: str, metadata: Any, row: int) -> int:
        if rid != "D0":
            return token(step, rid)
        logits = torch.zeros(len(metadata.output_token_ids), VOCAB)
        logits[row, BAD_WORD[step % 2]] = 10.0
        logits[row, 12] = 5.0
        if metadata.bad_words_token_ids:
            self.apply_bad_words(logits, metadata.bad_words_token_ids, metadata.output_token_ids)
        return int(logits[row].argmax())


def token(step: int, rid: str) -> int:
    return 20 + 10 * step + int(rid[1:])


class Scenario:

    def __init__(self, params: dict[str, SamplingParams], use_async: bool, sampler: Any = None):
        self.params = params
        Watched.host_copies = 0
        self.module = load_input_batch(ROOT, H2DRecorder(ROOT / UTILS_REL))
        self.batch = self.module.InputBatch(max_num_reqs=8, max_model_len=64, max_num_batched_tokens=64,
                                            device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                            block_sizes=[128], kernel_block_sizes=[128])
        runner = self.runner = stubs.Runner(ROOT, self.batch)
        self.tail = stubs.lift_sample_tokens_tail(runner, ROOT, use_async)
        self.sampler = sampler or RecordingSampler()
        self.generated: dict[str, list[int]] = {rid: [] for rid in params}

    def step(self, number: int) -> None:
        batch, runner = self.batch, self.runner
        if number == 0:  # both arrive and prefill whole
            for rid, params in self.params.items():
                state = runner.requests[rid] = self.module.CachedRequestState(
                    req_id=rid, prompt_token_ids=PROMPT[rid], mm_features=[], sampling_params=params,
                    generator=None, block_ids=[[0]], num_computed_tokens=0, output_token_ids=[])
                batch.add_request(state, None)
            batch.refresh_sampling_metadata()
            scheduled = {rid: len(PROMPT[rid]) for rid in self.params}
        else:
            scheduled = {rid: 1 for rid in self.params}
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        sched = SchedulerOutput(num_scheduled_tokens=scheduled)
        runner._ensure_decodes_first(sched)
        runner.invalid_req_indices = []  # sample_tokens' head (async only, or always with unfinished-prompt-no-token)
        requests = list(batch.req_ids)
        decode_sampled, prefill_sampled = [], []
        if number == 0:
            md = runner._prepare_sampling(True, requests, len(requests), requests)
            prefill_sampled.append(self.sampler.sample(requests, md, number))
            decode_requests, prefill_requests = [], requests
        else:
            pad_to = 4  # a padded decode bucket
            md = runner._prepare_sampling(False, requests, pad_to)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(requests, pad_to)]
            decode_sampled.append(self.sampler.sample(rows, md, number))
            decode_requests, prefill_requests = requests, []
        for rid in requests:
            self.generated[rid].append(token(number, rid))
        namespace = {
            "self": runner, "torch": torch, "num_reqs": len(requests), "num_decodes": len(decode_requests),
            "decode_sampled_token_ids": decode_sampled, "prefill_sampled_token_ids": prefill_sampled,
            "decode_sampled_requests": list(decode_requests), "prefill_sampled_requests": list(prefill_requests),
            "spec_decode_num_tokens": None
        }
        exec(self.tail, namespace)
        for rid, n in scheduled.items():
            runner.requests[rid].num_computed_tokens += n

    def run(self) -> "Scenario":
        for number in range(NUM_STEPS):
            self.step(number)
        return self


def _check_calls(scenario: Scenario) -> list[str]:
    wrong = []
    seen: dict[str, list[int]] = {rid: [] for rid in scenario.params}
    for call in scenario.sampler.calls:
        for i, rid in enumerate(dict.fromkeys(call["rows"])):
            got = call["output_token_ids"][i]
            if got != seen[rid]:
                wrong.append(f"step {call['step']}: the sampler saw {rid}'s output tokens {got}, it has generated "
                             f"{seen[rid]}")
        for rid in dict.fromkeys(call["rows"]):
            seen[rid] = seen[rid] + [token(call["step"], rid)]
    return wrong


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_penalties_see_the_generated_tokens(use_async: bool):
    """D0 has frequency / presence / repetition penalties: every sampler call must hand over
    every token D0 and D1 generated before it."""
    scenario = Scenario(PENALISED, use_async).run()
    wrong = _check_calls(scenario)
    mode = "async scheduling" if use_async else "sync scheduling"
    assert not wrong, (f"under {mode} the penalties do not see the generated tokens (frequency and presence "
                       "penalties do nothing, repetition covers the prompt only):\n" + "\n".join(wrong))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_output_grows_with_every_token(use_async: bool):
    """With no penalties, bad_words or logits-processor plugin in the batch, each request's
    output_token_ids still grows by one per generated token (under async scheduling with -1
    placeholders, as vLLM's GPU runner keeps them): MinTokensLogitsProcessor releases EOS only
    when its length reaches min_tokens."""
    scenario = Scenario(PLAIN, use_async).run()
    mode = "async scheduling" if use_async else "sync scheduling"
    wrong = [f"{rid}: output_token_ids {state.output_token_ids} after {NUM_STEPS} generated tokens"
             for rid, state in scenario.runner.requests.items() if len(state.output_token_ids) != NUM_STEPS]
    assert not wrong, (f"under {mode} the requests' outputs do not count the generated tokens: a min_tokens request "
                       "never stops (EOS stays masked up to max_tokens):\n" + "\n".join(wrong))


def test_no_penalties_no_host_copy():
    """The placeholders cost a list append per sampled row and nothing else: with nothing in
    the batch reading the tokens themselves, no device-to-host copy of the sampled tokens is
    made under async scheduling."""
    scenario = Scenario(PLAIN, True).run()
    assert Watched.host_copies == 0, (f"{Watched.host_copies} device-to-host copies of the sampled tokens under async "
                                      "scheduling with no penalties, bad_words or plugin: each stalls the HPU pipeline")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_multi_token_bad_words_are_blocked(use_async: bool):
    """D0 has bad_words [[10, 11]] and a model that wants to say 10 then 11: after a 10, the
    sampler must see it and mask 11."""
    path = ROOT / "vllm/v1/sample/ops/bad_words.py"
    if not path.is_file():
        pytest.skip(f"no {path}: needs a vllm tree next to vllm_gaudi/")
    namespace = {"__name__": "gaudi_fixes_bad_words"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    params = {"D0": SamplingParams(temperature=0.0, bad_words_token_ids=[BAD_WORD]), "D1": SamplingParams()}
    scenario = Scenario(params, use_async, BadWordsSampler(namespace["apply_bad_words"])).run()
    said = scenario.sampler.said
    pairs = [i for i in range(1, len(said)) if said[i - 1:i + 1] == BAD_WORD]
    mode = "async scheduling" if use_async else "sync scheduling"
    assert not pairs, (f"under {mode} the multi-token bad word {BAD_WORD} was emitted: D0 said {said} (the sampler saw "
                       f"D0's output tokens {[c['output_token_ids'][c['rows'].index('D0')] for c in scenario.sampler.calls]})")
