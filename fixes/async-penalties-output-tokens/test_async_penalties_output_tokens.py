"""Penalties see the generated tokens under async scheduling (CPU; needs torch and numpy).

Frequency and presence penalties (and the output half of the repetition penalty) are computed
from each row's ``output_token_ids`` in the sampling metadata, which
``InputBatch.make_selective_sampling_metadata`` takes from the runner's request states. The harness (harness.py)
runs the engine steps: vLLM's scheduler output through the runner's own ``_update_states`` into
the REAL ``InputBatch``, ``_prepare_sampling`` (and every runner method it calls) for each sampler
call, then the REAL tail of ``HPUModelRunner.sample_tokens`` — from ``if self.use_async_scheduling
or self.use_structured_output:`` to the loop that extends ``req_state.output_token_ids`` — lifted
out of the tree's ``hpu_model_runner.py`` with every runner method it calls. The sampler is this
test's: it returns tokens the test chooses, so the test knows what each request generated.

Under async scheduling (vLLM's default, which vllm_gaudi keeps without spec decode) every
sampler call must see each request's generated tokens; with no penalties in the batch, the
request states must stay as they were (no bookkeeping on the fast path).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/async-penalties-output-tokens``
"""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness

VOCAB = 128
PENALISED = {
    "D0": dict(temperature=0.8, frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.2),
    "D1": dict(temperature=0.8),
}
PLAIN = {"D0": dict(temperature=0.8), "D1": dict(temperature=0.7)}
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
        self.owners = None  # whose each logits row is (the harness's model)
        self.step = 0

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        rows = self.owners(logits)
        out = self.sample(rows, sampling_metadata, self.step)
        return types.SimpleNamespace(sampled_token_ids=out.view(-1, 1), logprobs_tensors=None)

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
        if "D0" in rows:  # a prompt's own prefill call may hold only D1
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

    def __init__(self, root, params: dict[str, dict], mode: str, sampler: Any = None):  # noqa: F811
        self.params = params
        Watched.host_copies = 0
        self.h = harness.Harness(root, mode, vocab=VOCAB)
        self.h.decode_bucket = lambda n: 4  # a padded decode bucket
        self.sampler = self.h.runner.sampler = sampler or RecordingSampler()
        self.sampler.owners = self.h.model.owners
        self.runner = self.h.runner
        for rid, kw in params.items():
            self.h.add(rid, PROMPT[rid], **kw)

    def run(self) -> "Scenario":
        for number in range(NUM_STEPS):
            self.sampler.step = number
            # both arrive and prefill whole, then decode
            self.h.step({rid: len(PROMPT[rid]) if number == 0 else 1 for rid in self.params})
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


def test_penalties_see_the_generated_tokens(root, mode):  # noqa: F811
    """D0 has frequency / presence / repetition penalties: every sampler call must hand over
    every token D0 and D1 generated before it."""
    scenario = Scenario(root, PENALISED, mode).run()
    wrong = _check_calls(scenario)
    assert not wrong, (f"under {mode} scheduling the penalties do not see the generated tokens (frequency and presence "
                       "penalties do nothing, repetition covers the prompt only):\n" + "\n".join(wrong))


def test_output_grows_with_every_token(root, mode):  # noqa: F811
    """With no penalties, bad_words or logits-processor plugin in the batch, each request's
    output_token_ids still grows by one per generated token (under async scheduling with -1
    placeholders, as vLLM's GPU runner keeps them): MinTokensLogitsProcessor releases EOS only
    when its length reaches min_tokens."""
    scenario = Scenario(root, PLAIN, mode).run()
    wrong = [f"{rid}: output_token_ids {state.output_token_ids} after {NUM_STEPS} generated tokens"
             for rid, state in scenario.runner.requests.items() if len(state.output_token_ids) != NUM_STEPS]
    assert not wrong, (f"under {mode} scheduling the requests' outputs do not count the generated tokens: a min_tokens request "
                       "never stops (EOS stays masked up to max_tokens):\n" + "\n".join(wrong))


def test_no_penalties_no_host_copy(root):  # noqa: F811
    """The placeholders cost a list append per sampled row and nothing else: with nothing in
    the batch reading the tokens themselves, no device-to-host copy of the sampled tokens is
    made under async scheduling."""
    Scenario(root, PLAIN, "async").run()
    assert Watched.host_copies == 0, (f"{Watched.host_copies} device-to-host copies of the sampled tokens under async "
                                      "scheduling with no penalties, bad_words or plugin: each stalls the HPU pipeline")


def test_multi_token_bad_words_are_blocked(root, mode):  # noqa: F811
    """D0 has bad_words [[10, 11]] and a model that wants to say 10 then 11: after a 10, the
    sampler must see it and mask 11."""
    from vllm.v1.sample.ops.bad_words import apply_bad_words  # the tree's, imported by the harness's vllm
    params = {"D0": dict(temperature=0.0), "D1": dict()}
    scenario = Scenario(root, params, mode, BadWordsSampler(apply_bad_words))
    # as SamplingParams.update_from_tokenizer sets it for bad_words
    scenario.h.scheduler.requests["D0"].params._bad_words_token_ids = [BAD_WORD]
    scenario.run()
    said = scenario.sampler.said
    pairs = [i for i in range(1, len(said)) if said[i - 1:i + 1] == BAD_WORD]
    assert not pairs, (f"under {mode} scheduling the multi-token bad word {BAD_WORD} was emitted: D0 said {said} (the sampler saw "
                       f"D0's output tokens {[c['output_token_ids'][c['rows'].index('D0')] for c in scenario.sampler.calls if 'D0' in c['rows']]})")
