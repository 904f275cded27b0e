"""logprob_token_ids come back for the ids a request asked for (CPU; needs torch and numpy).

vLLM's GPU input batch records ``SamplingParams.logprob_token_ids`` and hands them to the sampler
(``SamplingMetadata.logprob_token_ids``, by the row of the sampler's logits); vLLM's ``Sampler``
then gathers those ids' logprobs. The harness (harness.py) brings the requests in as vLLM's
scheduler sends them, through the runner's own ``_update_states`` into the REAL ``InputBatch``,
and each sampler call of the runner (its own ``_run_sampling`` / ``_prepare_sampling``) goes to
vLLM's REAL ``Sampler`` of the tree (with vllm_gaudi's ``_hpu_gather_logprobs`` as its
``gather_logprobs``, as ``vllm_gaudi/patches.py`` installs it), the metadata the batch made turned
into vLLM's own ``SamplingMetadata``; the step's logprobs are the runner's own
``_build_logprobs_output``. The expected logprobs are ``log_softmax`` of the model's logits row,
read at the ids.

- A (``logprob_token_ids=[5, 9]``) alone: each generated token's logprobs row must hold A's
  sampled token and 5 and 9 with their logprobs (pristine: no logprobs at all).
- A beside B (``logprobs=2``), prefilled and decoded together: A's rows still hold its ids
  (pristine: the top-2 tokens').
- A (three ids) and B (``logprobs=2``) in separate sampler calls of one step (one prefills while
  the other decodes, both orders): the step's logprobs have rows of both widths (pristine: no ids
  for A; without the padding, ``_build_logprobs_output`` raises ``ValueError``).
Under sync and async scheduling.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/logprob-token-ids``
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)
import vllm_gaudi_stubs as stubs

import harness

PROMPT_LEN = 6


class RealSampler:
    """vLLM's ``Sampler`` of the tree as the HPU runner calls it; records each call's logits rows
    (whose they are is read from the model)."""

    def __init__(self, root, model: harness.Model):  # noqa: F811
        from vllm.v1.outputs import LogprobsTensors
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.sample.sampler import Sampler
        harness.no_pinned_memory()
        self.metadata_cls, self.model = SamplingMetadata, model
        self.sampler = Sampler()
        self.sampler.pin_memory = False
        hpu_gather = stubs.load_hpu_gather_logprobs(root)

        def gather(logprobs: torch.Tensor, num_logprobs: int, token_ids: torch.Tensor) -> Any:
            return LogprobsTensors(*hpu_gather(logprobs, num_logprobs, token_ids))

        self.sampler.gather_logprobs = gather
        self.calls: list[dict[str, Any]] = []

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        md = sampling_metadata
        fields = {f.name: getattr(md, f.name) for f in dataclasses.fields(self.metadata_cls) if hasattr(md, f.name)}
        out = self.sampler(logits, self.metadata_cls(**fields))
        self.calls.append({"owners": self.model.owners(logits), "logits": logits.clone()})
        return out


def _run(root, mode, requests: dict[str, dict], plan: list[dict[str, int]]) -> tuple[harness.Harness, list]:  # noqa: F811
    h = harness.Harness(root, mode)
    sampler = h.runner.sampler = RealSampler(root, h.model)
    for n, (rid, params) in enumerate(requests.items()):
        h.add(rid, harness.prompt(PROMPT_LEN, n), temperature=0.0, max_tokens=16, **params)
    got = []
    for scheduled in plan:
        before = len(sampler.calls)
        step = h.step(scheduled)
        rows = {rid: row for call in sampler.calls[before:] for rid, row in zip(call["owners"], call["logits"])
                if rid is not None}
        got.append((step, rows))
    return h, got


def _check_ids(h: harness.Harness, got: list, rid: str, ids: list[int]) -> int:
    """Every step that sampled `rid`'s next token gave it its sampled token and `ids` with their
    logprobs (log_softmax of the model's row); returns how many steps were checked."""
    checked = 0
    for step, rows in got:
        if rid not in rows or not step.returned.get(rid):
            continue
        lp = step.logprobs
        assert lp is not None, (f"step {step.number}: request {rid} asked for the logprobs of tokens {ids} "
                                f"and the step returns no logprobs at all")
        index = h.batch.req_id_to_index[rid]
        token_ids = [int(t) for t in lp.logprob_token_ids[index]]
        want = torch.log_softmax(rows[rid].float(), dim=-1)
        sampled = step.returned[rid][0]
        assert token_ids[:len(ids) + 1] == [sampled, *ids], (
            f"step {step.number}: request {rid} asked for the logprobs of tokens {ids} (after its sampled token "
            f"{sampled}) and got those of tokens {token_ids}")
        for col, tok in enumerate([sampled, *ids]):
            assert abs(float(lp.logprobs[index][col]) - float(want[tok])) < 1e-4, (
                f"step {step.number}: request {rid}'s logprob of token {tok} is {float(lp.logprobs[index][col])}, "
                f"vLLM's is {float(want[tok])}")
        checked += 1
    return checked


def test_ids_alone(root, mode):  # noqa: F811
    h, got = _run(root, mode, {"A": {"logprob_token_ids": [5, 9]}}, [{"A": PROMPT_LEN}] + [{"A": 1}] * 3)
    assert _check_ids(h, got, "A", [5, 9]) >= 3


def test_ids_beside_logprobs(root, mode):  # noqa: F811
    h, got = _run(root, mode, {"A": {"logprob_token_ids": [5, 9]}, "B": {"logprobs": 2}},
                  [{"A": PROMPT_LEN, "B": PROMPT_LEN}] + [{"A": 1, "B": 1}] * 3)
    assert _check_ids(h, got, "A", [5, 9]) >= 3


def test_ids_and_logprobs_in_separate_calls(root, mode):  # noqa: F811
    """B prefills first; A (three ids: wider rows) prefills while B decodes (A's call first), then
    C (``logprobs=2``) prefills while A and B decode (C's narrower call first)."""
    h, got = _run(root, mode, {"B": {"logprobs": 2}, "A": {"logprob_token_ids": [5, 9, 11]}, "C": {"logprobs": 2}},
                  [{"B": PROMPT_LEN}, {"B": 1, "A": PROMPT_LEN}, {"B": 1, "A": 1, "C": PROMPT_LEN},
                   {"B": 1, "A": 1, "C": 1}])
    assert _check_ids(h, got, "A", [5, 9, 11]) >= 3
    for step, rows in got:  # B's and C's logprobs: the sampled token first, as vLLM's
        for rid in ("B", "C"):
            if rid in rows and step.returned.get(rid):
                index = h.batch.req_id_to_index[rid]
                assert int(step.logprobs.logprob_token_ids[index][0]) == step.returned[rid][0]


def test_finished_requests_ids_dropped(root, mode):  # noqa: F811
    """The batch keeps a request's logprob_token_ids only while it is in the batch (as vLLM's GPU
    batch): a server's memory does not grow with every request served."""
    h = harness.Harness(root, mode)
    h.runner.sampler = RealSampler(root, h.model)
    for n in range(6):
        rid = f"R{n}"
        h.add(rid, harness.prompt(PROMPT_LEN, n), temperature=0.0, logprob_token_ids=[n + 1, n + 2])
        h.step({rid: PROMPT_LEN})
        h.scheduler.finish(rid)
    h.runner._update_states(h.scheduler.output({}))  # the last finish reaches the runner (no step runs)
    held = getattr(h.batch, "logprob_token_ids", {})
    assert not held, (f"6 requests with logprob_token_ids finished and the batch still holds the lists of "
                      f"{sorted(held)}: it grows with every request served")
