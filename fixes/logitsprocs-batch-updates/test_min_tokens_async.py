"""A min_tokens request stops at its EOS, and a plugin reading the generated tokens sees them,
under sync AND async scheduling on HPU (CPU; needs torch and numpy and a root holding ``vllm/``
and ``vllm_gaudi/``).

vLLM's real ``MinTokensLogitsProcessor`` (built by the tree's ``build_logitsprocs``) masks EOS
while ``len(output_token_ids) < min_tokens``; it holds a reference to the request's output list
and reads its length every step. The harness (harness.py) runs the engine steps: vLLM's
scheduler output through the runner's own ``_update_states`` into the REAL ``InputBatch``, the
runner's reorder statements and ``_prepare_sampling``, and the REAL tail of
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

import types

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness
import logits_plugins

VOCAB = 64
EOS = 3
MIN_TOKENS = 4
MAX_TOKENS = 6

PARAMS = {
    "P": dict(temperature=0.0, min_tokens=MIN_TOKENS),
    "N": dict(temperature=0.0),
}
PROMPT_LEN = 8


class Scenario:

    def __init__(self, root, mode: str, params: dict = PARAMS, plugin: bool = False,  # noqa: F811
                 prefer_eos: bool = True):
        self.params, self.prefer_eos = params, prefer_eos
        lp = harness.logitsprocs_package(root)  # the plugin: logits_plugins' NoRepeat, as users write them
        self.h = harness.Harness(root, mode, vocab=VOCAB,
                                 plugins=(logits_plugins.classes(lp.interface, lp.builtin)[1], ) if plugin else ())
        self.h.runner.sampler = self._sample
        self.number = 0
        for rid, kw in params.items():
            self.h.add(rid, list(range(5, 5 + PROMPT_LEN)), **kw)
            # as the engine's input processing sets it (the generation config's EOS)
            self.h.scheduler.requests[rid].params._all_stop_token_ids = {EOS}

    def _sample(self, logits: torch.Tensor, sampling_metadata) -> types.SimpleNamespace:
        # A model that prefers EOS and then a fresh token per step; or (prefer_eos=False) token
        # 20, then 21.
        logits = torch.zeros(logits.shape[0], VOCAB)
        if self.prefer_eos:
            logits[:, EOS] = 10.0
            logits[:, 20 + self.number] = 5.0
        else:
            logits[:, 20] = 10.0
            logits[:, 21] = 5.0
        for processor in sampling_metadata.logitsprocs.non_argmax_invariant:
            logits = processor.apply(logits)
        for processor in sampling_metadata.logitsprocs.argmax_invariant:
            logits = processor.apply(logits)
        tokens = logits.argmax(dim=-1).to(torch.int32)
        return types.SimpleNamespace(sampled_token_ids=tokens.view(-1, 1), logprobs_tensors=None)

    def run(self) -> list[int]:
        first = next(iter(self.params))
        for self.number in range(MAX_TOKENS):
            self.h.step({rid: PROMPT_LEN if self.number == 0 else 1 for rid in self.params})
            # The scheduler's stop check: EOS once min_tokens are out, or max_tokens.
            out = self.h.output(first)
            if (out[-1] == EOS and len(out) >= MIN_TOKENS) or len(out) >= MAX_TOKENS:
                break
        return self.h.output(first)


def test_min_tokens_request_stops_at_its_eos(root, mode):  # noqa: F811
    said = Scenario(root, mode).run()
    want = [20, 21, 22, 23, EOS]
    mode = f"{mode} scheduling"
    if said == want:
        return
    if EOS not in said:
        why = f"EOS masked on every step up to max_tokens={MAX_TOKENS}"
        pytest.fail(f"min_tokens={MIN_TOKENS} request never stopped: {why} under {mode} (it said {said}, "
                    f"want {want})")
    pytest.fail(f"min_tokens={MIN_TOKENS} request was not held back from EOS {EOS} under {mode}: it said {said} "
                f"(want {want}: EOS masked for its first {MIN_TOKENS} tokens)")


def test_a_plugin_reading_the_tokens_sees_them(root, mode):  # noqa: F811
    """A logits-processor plugin that reads the generated tokens (not only their number) must
    see the real ones under async scheduling too, with no penalties or bad_words in the batch."""
    params = {"R": dict(temperature=0.0, extra_args={"no_repeat": True}), "N": dict(temperature=0.0)}
    said = Scenario(root, mode, params, plugin=True, prefer_eos=False).run()
    want = [20, 21, 20, 21, 20, 21]
    mode = f"{mode} scheduling"
    assert said == want, (f"under {mode} a --logits-processors plugin that bans repeating the last token let it "
                          f"repeat: the request said {said}, want {want}")
