"""Penalties, allowed_token_ids and bad_words act on speculative-decoding steps as on vLLM's GPU path,
and no step raises (CPU; needs torch, numpy and vLLM's pure-Python deps: _support/requirements.txt).

Drives vllm_gaudi's real ``InputBatch``, the runner's real ``_update_states``,
``_prepare_spec_decode_inputs`` (the HPU layout of the draft rows) and ``sample_tokens``'
decode-sampling statement, vLLM's real ``Sampler`` and ``RejectionSampler`` with vllm_gaudi's
``rejection_sample`` (the spec ``harness.Harness``; sync scheduling: vllm_gaudi turns async off with a
speculative config). Greedy requests X (plain, row 0) and Y, later Z (each with the feature under
test) are prefilled and decode once without drafts; then spec steps: the drafter proposes each
request's greedy continuation of the model *without* the feature (so a ban or a penalty must reject
some drafts), with differing draft counts (one step without drafts for Y), all accepted or a wrong
first draft, in a bucket of 2 holding exactly the batch (beside Z's prefill) and in a bucket of 4
padded after 3 decodes. Each step's tokens for every request are held against vLLM's GPU path for
the same step (``spec_decode.gpu_step``: compact layout, one metadata row per request with its
``spec_token_ids``, the real rejection sampler, a torch stand-in for its Triton greedy kernel).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/spec-decode-request-rows``
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)

import harness
import spec_decode

PROMPTS, STEPS = spec_decode.SCENARIO_PROMPTS, spec_decode.SCENARIO_STEPS  # see spec_decode.py


def _run(root, params: dict[str, dict[str, Any]], model: Callable[[list[int]], torch.Tensor], what: str,
         drafter: Optional[Callable[[Any, int], list[int]]] = None):  # noqa: F811
    """`drafter(request, n)`: the n drafts proposed for a request (default: the model's greedy
    continuation)."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4), row=model))
    for rid in PROMPTS:
        h.add(rid, PROMPTS[rid], temperature=0.0, max_tokens=64,
              **{k: v for k, v in params.get(rid, {}).items() if k != "bad_words_ids"})
        if "bad_words" in params.get(rid, {}):  # what the tokenizer gives: the words are token ids here
            h.scheduler.requests[rid].params._bad_words_token_ids = params[rid]["bad_words_ids"]
    h.step({"X": len(PROMPTS["X"]), "Y": len(PROMPTS["Y"])})
    h.step({"X": 1, "Y": 1})
    steps = []
    for number, (prefill, counts, wrong) in enumerate(STEPS, start=3):
        drafts = {rid: (drafter or (lambda r, n: spec_decode.greedy(r.tokens, n, model)))(h.scheduler.requests[rid], n)
                  for rid, n in counts.items()}
        if wrong:
            drafts[wrong][0] = (drafts[wrong][0] + 1) % harness.VOCAB
        want = spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid],
                                   list(h.scheduler.requests[rid].output), drafts[rid]) for rid in counts
        ], model)
        scheduled = {rid: 1 + n for rid, n in counts.items()}
        if prefill:
            scheduled["Z"] = len(PROMPTS["Z"])
        try:
            step = h.step(scheduled, drafts={rid: d for rid, d in drafts.items() if d})
        except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
            pytest.fail(f"speculative-decoding step {number} with {what} raised {type(e).__name__}: {e} "
                        "(an exception in sample_tokens ends EngineCore)")
        steps.append((number, drafts, dict(zip(counts, want)), step.returned))
    return h, steps


def _same_as_gpu(steps, what: str) -> None:
    for number, drafts, want, got in steps:
        for rid in want:
            assert got.get(rid) == want[rid], (
                f"speculative-decoding step {number} with {what} (drafts {drafts}): request {rid} got "
                f"{got.get(rid)} where vLLM's GPU path gives {want[rid]}")


# Penalties: Y as a generation_config.json's repetition_penalty gives it, Z with presence and
# frequency penalties (their most) and a model that prefers token 11, then 12, everywhere: the
# penalties turn it from one to the other as it says them. The drafter proposes the continuation
# with the penalties (vLLM's order: repetition, then frequency and presence), so drafts are
# accepted only where a draft row's penalties count the drafts before it.
PENALTIES = {"Y": {"repetition_penalty": 1.05}, "Z": {"presence_penalty": 2.0, "frequency_penalty": 2.0}}


def penalties_model(context: list[int]) -> torch.Tensor:
    row = spec_decode.context_row(context)
    if context[:len(PROMPTS["Z"])] == PROMPTS["Z"]:
        row[11] += 12.0
        row[12] += 9.0
    return row


def penalized_greedy(request: Any, n: int) -> list[int]:
    p, prompt, out = request.params, request.prompt, list(request.output)
    for _ in range(n):
        row = penalties_model(prompt + out).clone()
        seen = sorted(set(prompt + out))
        row[seen] = torch.where(row[seen] > 0, row[seen] / p.repetition_penalty, row[seen] * p.repetition_penalty)
        counts = torch.bincount(torch.tensor(out, dtype=torch.int64), minlength=harness.VOCAB).float()
        row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).float()
        out.append(int(row.argmax()))
    return out[len(request.output):]


def test_penalties_on_spec_steps(root):  # noqa: F811
    what = "repetition_penalty / presence_penalty / frequency_penalty"
    h, steps = _run(root, PENALTIES, penalties_model, what, penalized_greedy)
    _same_as_gpu(steps, what)


ALLOWED = {"Y": [1, 2, 3, 4, 5, 6, 7, 8], "Z": [20, 21, 22, 23]}


def test_allowed_token_ids_on_spec_steps(root):  # noqa: F811
    what = "allowed_token_ids"
    h, steps = _run(root, {rid: {"allowed_token_ids": ids} for rid, ids in ALLOWED.items()},
                    spec_decode.context_row, what)
    for rid, ids in ALLOWED.items():
        outside = [t for t in h.output(rid) if t not in ids]
        assert not outside, f"request {rid} with allowed_token_ids={ids} said {outside} on speculative-decoding steps"
    _same_as_gpu(steps, what)


BANNED = 9  # Y: bad_words [[9]], a single-token word its model prefers everywhere
WORD = [5, 6]  # Z: bad_words [[5, 6]], a two-token word its model says whenever it says 5


def bad_words_model(context: list[int]) -> torch.Tensor:
    row = spec_decode.context_row(context)
    if context[:len(PROMPTS["Y"])] == PROMPTS["Y"]:
        row[BANNED] += 50.0
    if context[:len(PROMPTS["Z"])] == PROMPTS["Z"]:
        if context[-1] == WORD[0]:
            row[WORD[1]] += 50.0
        elif len(context) % 3 == 0:
            row[WORD[0]] += 50.0
    return row


def test_bad_words_on_spec_steps(root):  # noqa: F811
    what = "bad_words"
    h, steps = _run(root, {"Y": {"bad_words": ["nine"], "bad_words_ids": [[BANNED]]},
                           "Z": {"bad_words": ["five six"], "bad_words_ids": [WORD]}}, bad_words_model, what)
    said = h.output("Y")
    assert BANNED not in said, f"request Y with bad_words [[{BANNED}]] said {BANNED} on speculative-decoding steps: {said}"
    said = h.output("Z")
    pairs = [i for i in range(1, len(said)) if said[i - 1:i + 1] == WORD]
    assert not pairs, (f"request Z with the two-token bad word {WORD} said it on speculative-decoding steps "
                       f"(as tokens #{pairs[0]}-#{pairs[0] + 1}): {said}")
    _same_as_gpu(steps, what)


MIN_TOKENS = 8


def test_min_tokens_beside_differing_draft_counts(root):  # noqa: F811
    """min_tokens (logitsprocs-batch-updates) still holds back Y's stop token on the draft rows in
    their new layout, X having more drafts than Y, and Z other counts."""
    what = f"min_tokens={MIN_TOKENS}"
    h, steps = _run(root, {"Y": {"min_tokens": MIN_TOKENS, "stop_token_ids": [BANNED]}}, bad_words_model, what)
    said = h.output("Y")
    early = said[:MIN_TOKENS]
    assert BANNED not in early, (
        f"min_tokens={MIN_TOKENS} request was not held back from its stop token {BANNED} with speculative decoding: "
        f"it said {said}, {BANNED} as token #{early.index(BANNED) + 1}")
    _same_as_gpu(steps, what)


class _GatherShapes:
    """The runner's rejection sampler, recording the shape of the target-logits gather
    (``logits[metadata.target_logits_indices]``, vLLM's RejectionSampler) of every call, with the
    step's decode bucket, most drafts and total drafts."""

    def __init__(self, inner: Any):
        self.inner, self.shapes = inner, []

    def __call__(self, metadata: Any, draft_probs: Any, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        counts = list(metadata.num_draft_tokens)
        self.shapes.append((len(counts), max(counts), sum(counts),
                            tuple(logits[metadata.target_logits_indices].shape)))
        return self.inner(metadata, draft_probs, logits, sampling_metadata)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


Shapes = list[tuple[int, int, int, tuple[int, ...]]]  # (bucket, most drafts, total drafts, gathered shape)


def _gather_shapes(root, params: dict[str, dict[str, Any]], model: Callable[[list[int]], torch.Tensor], what: str,
                   drafter: Optional[Callable[[Any, int], list[int]]] = None) -> Shapes:  # noqa: F811
    """``_run`` with the runner's rejection sampler recording its target gathers; every request's
    tokens held against vLLM's GPU path (the compact rows alone): the padded rows reach no request."""
    recorder: dict[str, _GatherShapes] = {}
    original = harness.Harness.__init__

    def init(self, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.runner.rejection_sampler = recorder["r"] = _GatherShapes(self.runner.rejection_sampler)

    harness.Harness.__init__ = init  # type: ignore[method-assign]
    try:
        h, steps = _run(root, params, model, what, drafter)
    finally:
        harness.Harness.__init__ = original  # type: ignore[method-assign]
    _same_as_gpu(steps, what)
    return recorder["r"].shapes


def _one_shape_per_bucket(shapes: Shapes, what: str) -> None:
    print(f"\n{what}: (bucket, most drafts, total drafts, gathered shape) per spec step: {shapes}")
    by_width: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    totals: dict[tuple[int, int], set[int]] = {}
    for bucket, most, total, shape in shapes:
        by_width.setdefault((bucket, most), set()).add(shape)
        totals.setdefault((bucket, most), set()).add(total)
    assert any(len(t) > 1 for t in totals.values()), f"no two steps of one bucket differ in total drafts: {shapes}"
    for (bucket, most), seen in sorted(by_width.items(), key=lambda kv: -len(kv[1])):
        assert len(seen) == 1, (
            f"speculative-decoding steps with {what} in one decode bucket ({bucket} requests, {most} drafts at most) "
            f"gathered the target logits in {len(seen)} shapes {sorted(seen)} for total draft counts "
            f"{sorted(totals[bucket, most])}: a new HPU graph for every total draft count (padded to the bucket, as "
            "logits_indices, they are one)")
    for (bucket, most), seen in sorted(by_width.items()):
        assert next(iter(seen))[0] == bucket * most, (
            f"the target gather of a {bucket}-request bucket with {most} drafts at most ({what}) has shape "
            f"{sorted(seen)}, not {bucket * most} rows (the padded layout)")


def test_target_gather_has_one_shape_per_bucket(root):  # noqa: F811
    """Plain greedy requests (no per-row feature): steps of one decode bucket and step width gather
    the target logits in one shape, whatever their total draft count (HPU compiles a graph per
    shape), and every request's tokens are those of vLLM's GPU path (the compact rows alone): the
    padded rows reach no request."""
    what = "plain greedy requests"
    _one_shape_per_bucket(_gather_shapes(root, {}, spec_decode.context_row, what), what)


# The features vLLM's RejectionSampler counts the target rows for by num_draft_tokens (and
# spec_token_ids): the padded rows reach it with them too (hpu_rejection_sampler's
# apply_logits_processors counts the padding rows as the last request's).
PER_ROW_FEATURES: dict[str, tuple[dict[str, dict[str, Any]], Callable[[list[int]], torch.Tensor], Any]] = {
    "penalties": (PENALTIES, penalties_model, penalized_greedy),
    "allowed_token_ids": ({rid: {"allowed_token_ids": ids} for rid, ids in ALLOWED.items()}, spec_decode.context_row,
                          None),
    "bad_words": ({"Y": {"bad_words": ["nine"], "bad_words_ids": [[BANNED]]},
                   "Z": {"bad_words": ["five six"], "bad_words_ids": [WORD]}}, bad_words_model, None),
    "min_tokens": ({"Y": {"min_tokens": MIN_TOKENS, "stop_token_ids": [BANNED]}}, bad_words_model, None),
    "logprobs": ({"X": {"logprobs": 3}, "Z": {"logprobs": 3}}, spec_decode.context_row, None),
}


@pytest.mark.parametrize("feature", list(PER_ROW_FEATURES))
def test_target_gather_has_one_shape_per_bucket_with_per_row_features(root, feature):  # noqa: F811
    """As above, with a feature vLLM's RejectionSampler counts the target rows for: one gather
    shape per decode bucket and step width, every request's tokens those of vLLM's GPU path."""
    params, model, drafter = PER_ROW_FEATURES[feature]
    _one_shape_per_bucket(_gather_shapes(root, params, model, feature, drafter), feature)
