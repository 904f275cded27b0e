"""logprobs=-1 and prompt_logprobs=-1 return the whole vocabulary (CPU; needs torch and numpy).

vLLM maps ``-1`` to the vocabulary size where a request enters the batch (the GPU input batch for
``logprobs``, the GPU model runner for ``prompt_logprobs``). The harness (harness.py) brings the
requests in as vLLM's scheduler sends them, through the runner's own ``_update_states`` into the
REAL ``InputBatch``, and runs their steps with the runner's ``_run_sampling`` / ``_prepare_sampling``;
what the batch and the sampler call hold is handed to the code vllm_gaudi runs with it: its ``_hpu_gather_logprobs`` (``vllm_gaudi/patches.py``, the
``Sampler.gather_logprobs`` it installs) for sampled tokens and the runner's
``_gather_prompt_logprobs_hpu`` for prompt tokens, both lifted from the tree.

- L (``logprobs=-1``) decodes beside F (``logprobs=5``): the sampler is handed the batch's
  ``max_num_logprobs``; L must get the whole vocabulary, F at least its 5.
- L prefills and decodes alone: ``max_num_logprobs`` must be the vocabulary size, never -1.
- P (``prompt_logprobs=-1``) prefills beside G (``prompt_logprobs=5``): each prompt's logprobs
  are gathered with its own count; P must get the whole vocabulary.
On pristine vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/logprobs-whole-vocab``
"""

from __future__ import annotations

from typing import Any, Optional

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)
import vllm_gaudi_stubs as stubs
from vllm_gaudi_stubs import load_hpu_gather_logprobs

import harness

VOCAB = harness.VOCAB

# request -> (logprobs, prompt_logprobs)
REQUESTS: dict[str, tuple[Optional[int], Optional[int]]] = {
    "L": (-1, None),
    "F": (5, None),
    "P": (None, -1),
    "G": (None, 5),
}
PROMPT_LEN = 6


def wanted(n: int) -> int:
    """The number of logprobs a request asking for `n` gets: -1 is the whole vocabulary."""
    return VOCAB if n == -1 else n


def _arrive(root, rids: list[str]) -> harness.Harness:  # noqa: F811
    """`rids` arrive and prefill their whole prompt in one step."""
    h = harness.Harness(root, "sync")
    for n, rid in enumerate(rids):
        logprobs, prompt_logprobs = REQUESTS[rid]
        h.add(rid, harness.prompt(PROMPT_LEN, n), temperature=1.0, logprobs=logprobs, prompt_logprobs=prompt_logprobs)
    h.step({rid: PROMPT_LEN for rid in rids})
    return h


def _decode_metadata(root, rids: list[str]) -> Any:  # noqa: F811
    """The sampling metadata of `rids`' first decode step, sampled in one call."""
    h = _arrive(root, rids)
    before = len(h.sampler.calls)
    h.step({rid: 1 for rid in rids})
    (call, ) = h.sampler.calls[before:]
    return call["metadata"]


def _logprobs(rows: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(rows, VOCAB, generator=gen), dim=-1)


def test_whole_vocabulary_beside_five(root):  # noqa: F811
    metadata = _decode_metadata(root, ["L", "F"])
    n = metadata.max_num_logprobs
    assert n is not None and n != -1, f"the sampler is asked for max_num_logprobs={n}"
    gather = load_hpu_gather_logprobs(root)
    sampled = torch.tensor([1, 2], dtype=torch.int64)
    out = gather(_logprobs(2, 0), n, sampled)
    # Column 0 is the sampled token; the rest are the top-n tokens, as vLLM's gather_logprobs.
    got = out.logprob_token_ids.shape[1] - 1
    for row, rid in enumerate(["L", "F"]):
        want = wanted(REQUESTS[rid][0])
        assert got >= want, (f"request {rid} asked for logprobs={REQUESTS[rid][0]} ({want} of the {VOCAB} tokens) "
                             f"but the sampler returns {got} per token (the batch's max_num_logprobs is {n})")
    assert sorted(out.logprob_token_ids[0, 1:].tolist()) == list(range(VOCAB))


def test_whole_vocabulary_alone(root):  # noqa: F811
    """Alone, L made max_num_logprobs -1: vLLM's Sampler then returns the raw logprobs without
    token ids (a 1-D empty tensor), which vllm_gaudi's _build_logprobs_output reads as 2-D."""
    metadata = _decode_metadata(root, ["L"])
    assert metadata.max_num_logprobs == VOCAB, (
        f"request L asked for logprobs=-1 (the whole vocabulary, {VOCAB}) but the sampler is asked for "
        f"max_num_logprobs={metadata.max_num_logprobs}")


def test_prompt_logprobs_whole_vocabulary_beside_five(root):  # noqa: F811
    h = _arrive(root, ["P", "G"])
    gather = stubs.Runner(root, h.batch, extra=("_gather_prompt_logprobs_hpu", ))._gather_prompt_logprobs_hpu
    for n, rid in enumerate(["P", "G"]):
        num = h.batch.num_prompt_logprobs[rid]  # as the step's _update_states added it
        asked = REQUESTS[rid][1]
        prompt = torch.tensor(h.runner.requests[rid].prompt_token_ids, dtype=torch.int64)
        try:
            out = gather(_logprobs(PROMPT_LEN - 1, 10 + n), num, prompt[1:])
        except RuntimeError as err:
            pytest.fail(f"request {rid} asked for prompt_logprobs={asked}: the runner gathers its prompt "
                        f"logprobs with torch.topk(k={num}), which raises: {err}")
        got = out.logprob_token_ids.shape[1] - 1
        assert got == wanted(asked), (f"request {rid} asked for prompt_logprobs={asked} ({wanted(asked)} of the "
                                      f"{VOCAB} tokens) but gets {got} per prompt token")
