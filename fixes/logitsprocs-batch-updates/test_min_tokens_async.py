"""A min_tokens request stops at its EOS, and a plugin reading the generated tokens sees them,
under sync AND async scheduling on HPU (CPU; needs torch and numpy and a root holding ``vllm/``
and ``vllm_gaudi/``).

vLLM's real ``MinTokensLogitsProcessor`` (built by the tree's ``build_logitsprocs``) masks EOS
while ``len(output_token_ids) < min_tokens``; it holds a reference to the request's output list
and reads its length every step. This test drives the REAL ``InputBatch``, the runner's reorder
statements and ``_prepare_sampling`` (``vllm_gaudi_stubs.Runner``) and the REAL tail of
``HPUModelRunner.sample_tokens`` — from ``if self.use_async_scheduling or
self.use_structured_output:`` to the loop that extends ``req_state.output_token_ids`` — lifted
from the tree's ``hpu_model_runner.py`` with every runner method it calls, over several engine
steps. The model prefers EOS on every step; greedy sampling after the processors. Under async
scheduling the runner must still count each generated token (vLLM's GPU runner appends a -1
placeholder per sampled row), or EOS stays masked until ``max_tokens``; and a
``--logits-processors`` plugin that reads the tokens themselves (no repeat of the last token)
must get the real ids, not the placeholders.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/logitsprocs-batch-updates``
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch
import vllm_gaudi_stubs as stubs
from vllm_gaudi_stubs import (INPUT_BATCH_REL, LOGITSPROCS_REL, RUNNER_REL, UTILS_REL, H2DRecorder, Runner,
                              SamplingParams, SchedulerOutput, load)

VOCAB = 64
EOS = 3
MIN_TOKENS = 4
MAX_TOKENS = 6

if not os.environ.get("GAUDI_FIXES_ROOT"):
    pytest.skip("GAUDI_FIXES_ROOT is not set: point it at a directory holding vllm/ and vllm_gaudi/",
                allow_module_level=True)
ROOT = Path(os.environ["GAUDI_FIXES_ROOT"])
for _rel in (INPUT_BATCH_REL, RUNNER_REL, LOGITSPROCS_REL / "builtin.py"):
    if not (ROOT / _rel).is_file():
        pytest.skip(f"no {_rel} under {ROOT}: needs a vllm tree and a vllm_gaudi tree", allow_module_level=True)

PARAMS = {
    "P": SamplingParams(temperature=0.0, min_tokens=MIN_TOKENS, eos_token_id=EOS),
    "N": SamplingParams(temperature=0.0),
}
PROMPT_LEN = 8


def _no_repeat_plugin(interface: types.ModuleType, builtin: types.ModuleType) -> type:
    """A plugin as users write them for ``--logits-processors`` that reads the generated tokens
    themselves: a request with ``extra_args={"no_repeat": True}`` never repeats its last token.
    It keeps each row's output list through vLLM's own ``process_dict_updates``."""

    class NoRepeatLogitsProcessor(interface.LogitsProcessor):

        def __init__(self, vllm_config, device, is_pin_memory):
            self.outputs: dict[int, list[int]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update) -> None:
            builtin.process_dict_updates(self.outputs, batch_update, lambda params, _, out: out if (
                params.extra_args or {}).get("no_repeat") else None)

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for row, out in self.outputs.items():
                if out:
                    logits[row, out[-1]] = float("-inf")
            return logits

    return NoRepeatLogitsProcessor


class Scenario:

    def __init__(self, use_async: bool, params: dict = PARAMS, plugin: bool = False, prefer_eos: bool = True):
        self.params, self.prefer_eos = params, prefer_eos
        loaded = load(ROOT, H2DRecorder(ROOT / UTILS_REL))
        self.module = loaded.input_batch
        config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=8),
                                       speculative_config=None)
        lp = loaded.logitsprocs
        custom = [_no_repeat_plugin(lp.interface, lp.builtin)] if plugin else []
        logitsprocs = loaded.build_logitsprocs(config, torch.device("cpu"), False, False, custom)
        self.batch = self.module.InputBatch(max_num_reqs=8, max_model_len=64, max_num_batched_tokens=64,
                                            device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                            block_sizes=[128], kernel_block_sizes=[128], logitsprocs=logitsprocs)
        runner = self.runner = Runner(ROOT, self.batch, reorder=True)
        self.tail = stubs.lift_sample_tokens_tail(runner, ROOT, use_async)
        self.said: dict[str, list[int]] = {rid: [] for rid in params}
        self.finished = False

    def _sample(self, rows: list[str], metadata, step: int) -> torch.Tensor:
        # A model that prefers EOS and then a fresh token per step; or (prefer_eos=False) token
        # 20, then 21.
        logits = torch.zeros(len(rows), VOCAB)
        if self.prefer_eos:
            logits[:, EOS] = 10.0
            logits[:, 20 + step] = 5.0
        else:
            logits[:, 20] = 10.0
            logits[:, 21] = 5.0
        for processor in metadata.logitsprocs.non_argmax_invariant:
            logits = processor.apply(logits)
        for processor in metadata.logitsprocs.argmax_invariant:
            logits = processor.apply(logits)
        return logits.argmax(dim=-1).to(torch.int32)

    def step(self, number: int) -> None:
        batch, runner = self.batch, self.runner
        if number == 0:
            for rid, params in self.params.items():
                state = runner.requests[rid] = self.module.CachedRequestState(
                    req_id=rid, prompt_token_ids=list(range(5, 5 + PROMPT_LEN)), mm_features=[],
                    sampling_params=params, generator=None, block_ids=[[0]], num_computed_tokens=0,
                    output_token_ids=[])
                batch.add_request(state, None)
            batch.refresh_sampling_metadata()
            scheduled = {rid: PROMPT_LEN for rid in self.params}
        else:
            scheduled = {rid: 1 for rid in self.params}
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        runner._sample_tokens_reorder(SchedulerOutput(num_scheduled_tokens=scheduled))
        runner.invalid_req_indices = []
        requests = list(batch.req_ids)
        if number == 0:
            md = runner._prepare_sampling(True, requests, len(requests), requests)
            sampled = self._sample(requests, md, number)
            decode_sampled, prefill_sampled, num_decodes = [], [sampled], 0
        else:
            pad_to = 4  # a padded decode bucket
            md = runner._prepare_sampling(False, requests, pad_to)
            rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(requests, pad_to)]
            sampled = self._sample(rows, md, number)
            decode_sampled, prefill_sampled, num_decodes = [sampled], [], len(requests)
        for i, rid in enumerate(requests):
            self.said[rid].append(int(sampled[i]))
        exec(self.tail, {
            "self": runner, "torch": torch, "num_reqs": len(requests), "num_decodes": num_decodes,
            "decode_sampled_token_ids": decode_sampled, "prefill_sampled_token_ids": prefill_sampled,
            "decode_sampled_requests": requests if num_decodes else [],
            "prefill_sampled_requests": [] if num_decodes else requests, "spec_decode_num_tokens": None
        })
        for rid, n in scheduled.items():
            runner.requests[rid].num_computed_tokens += n
        # The scheduler's stop check: EOS once min_tokens are out, or max_tokens.
        out = self.said[next(iter(self.params))]
        self.finished = (out[-1] == EOS and len(out) >= MIN_TOKENS) or len(out) >= MAX_TOKENS

    def run(self) -> list[int]:
        for number in range(MAX_TOKENS):
            self.step(number)
            if self.finished:
                break
        return self.said[next(iter(self.params))]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_min_tokens_request_stops_at_its_eos(use_async: bool):
    said = Scenario(use_async).run()
    want = [20, 21, 22, 23, EOS]
    mode = "async scheduling" if use_async else "sync scheduling"
    if said == want:
        return
    if EOS not in said:
        why = f"EOS masked on every step up to max_tokens={MAX_TOKENS}"
        pytest.fail(f"min_tokens={MIN_TOKENS} request never stopped: {why} under {mode} (it said {said}, "
                    f"want {want})")
    pytest.fail(f"min_tokens={MIN_TOKENS} request was not held back from EOS {EOS} under {mode}: it said {said} "
                f"(want {want}: EOS masked for its first {MIN_TOKENS} tokens)")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_plugin_reading_the_tokens_sees_them(use_async: bool):
    """A logits-processor plugin that reads the generated tokens (not only their number) must
    see the real ones under async scheduling too, with no penalties or bad_words in the batch."""
    params = {"R": SamplingParams(temperature=0.0, extra_args={"no_repeat": True}), "N": SamplingParams(temperature=0.0)}
    said = Scenario(use_async, params, plugin=True, prefer_eos=False).run()
    want = [20, 21, 20, 21, 20, 21]
    mode = "async scheduling" if use_async else "sync scheduling"
    assert said == want, (f"under {mode} a --logits-processors plugin that bans repeating the last token let it "
                          f"repeat: the request said {said}, want {want}")
