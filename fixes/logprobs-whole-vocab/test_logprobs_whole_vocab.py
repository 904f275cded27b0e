"""logprobs=-1 and prompt_logprobs=-1 return the whole vocabulary (CPU; needs torch and numpy).

vLLM maps ``-1`` to the vocabulary size where a request enters the batch (the GPU input batch for
``logprobs``, the GPU model runner for ``prompt_logprobs``). This drives the REAL ``InputBatch`` of
``$GAUDI_FIXES_ROOT/vllm_gaudi/v1/worker/hpu_input_batch.py`` (vLLM's imports stubbed, see
vllm_gaudi_stubs.py) with the runner's own ``_prepare_sampling`` and hands what it builds to the
code vllm_gaudi runs with it: its ``_hpu_gather_logprobs`` (``vllm_gaudi/patches.py``, the
``Sampler.gather_logprobs`` it installs) for sampled tokens and the runner's
``_gather_prompt_logprobs_hpu`` for prompt tokens, both lifted from the tree.

- L (``logprobs=-1``) decodes beside F (``logprobs=5``): the sampler is handed the batch's
  ``max_num_logprobs``; L must get the whole vocabulary, F at least its 5.
- L decodes alone: ``max_num_logprobs`` must be the vocabulary size, never -1.
- P (``prompt_logprobs=-1``) prefills beside G (``prompt_logprobs=5``): each prompt's logprobs
  are gathered with its own count; P must get the whole vocabulary.
On pristine vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/logprobs-whole-vocab``
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from vllm_gaudi_stubs import (
    INPUT_BATCH_REL,
    UTILS_REL,
    H2DRecorder,
    Runner,
    SamplingParams,
    load_hpu_gather_logprobs,
    load_input_batch,
)

ROOT_ENV = "GAUDI_FIXES_ROOT"
VOCAB = 96

if not os.environ.get(ROOT_ENV):
    pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(os.environ[ROOT_ENV])
if not (ROOT / INPUT_BATCH_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

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


class Batch:

    def __init__(self, rids: list[str]):
        h2d = H2DRecorder(ROOT / UTILS_REL)
        self.module = load_input_batch(ROOT, h2d)
        self.batch = self.module.InputBatch(
            max_num_reqs=4,
            max_model_len=64,
            max_num_batched_tokens=64,
            device=torch.device("cpu"),
            pin_memory=False,
            vocab_size=VOCAB,
            block_sizes=[128],
            kernel_block_sizes=[128],
        )
        self.runner = Runner(ROOT, self.batch, extra=("_gather_prompt_logprobs_hpu", ))
        self.prompts = {rid: [(5 * i + 3 * n) % VOCAB for i in range(PROMPT_LEN)] for n, rid in enumerate(rids)}
        for rid in rids:
            logprobs, prompt_logprobs = REQUESTS[rid]
            state = self.module.CachedRequestState(
                req_id=rid,
                prompt_token_ids=self.prompts[rid],
                mm_features=[],
                sampling_params=SamplingParams(temperature=1.0, logprobs=logprobs, prompt_logprobs=prompt_logprobs),
                generator=None,
                block_ids=[[0]],
                num_computed_tokens=0,
                output_token_ids=[],
            )
            self.runner.requests[rid] = state
            self.batch.add_request(state, None)
        self.batch.refresh_sampling_metadata()

    def decode_metadata(self, rids: list[str]) -> Any:
        pad_to = 1 << (len(rids) - 1).bit_length()
        return self.runner._prepare_sampling(True, rids, pad_to)


def _logprobs(rows: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(rows, VOCAB, generator=gen), dim=-1)


def test_whole_vocabulary_beside_five():
    b = Batch(["L", "F"])
    metadata = b.decode_metadata(["L", "F"])
    n = metadata.max_num_logprobs
    assert n is not None and n != -1, f"the sampler is asked for max_num_logprobs={n}"
    gather = load_hpu_gather_logprobs(ROOT)
    sampled = torch.tensor([1, 2], dtype=torch.int64)
    out = gather(_logprobs(2, 0), n, sampled)
    # Column 0 is the sampled token; the rest are the top-n tokens, as vLLM's gather_logprobs.
    got = out.logprob_token_ids.shape[1] - 1
    for row, rid in enumerate(["L", "F"]):
        want = wanted(REQUESTS[rid][0])
        assert got >= want, (f"request {rid} asked for logprobs={REQUESTS[rid][0]} ({want} of the {VOCAB} tokens) "
                             f"but the sampler returns {got} per token (the batch's max_num_logprobs is {n})")
    assert sorted(out.logprob_token_ids[0, 1:].tolist()) == list(range(VOCAB))


def test_whole_vocabulary_alone():
    """Alone, L made max_num_logprobs -1: vLLM's Sampler then returns the raw logprobs without
    token ids (a 1-D empty tensor), which vllm_gaudi's _build_logprobs_output reads as 2-D."""
    b = Batch(["L"])
    metadata = b.decode_metadata(["L"])
    assert metadata.max_num_logprobs == VOCAB, (
        f"request L asked for logprobs=-1 (the whole vocabulary, {VOCAB}) but the sampler is asked for "
        f"max_num_logprobs={metadata.max_num_logprobs}")


def test_prompt_logprobs_whole_vocabulary_beside_five():
    b = Batch(["P", "G"])
    for n, rid in enumerate(["P", "G"]):
        num = b.batch.num_prompt_logprobs[rid]
        asked = REQUESTS[rid][1]
        prompt = torch.tensor(b.prompts[rid], dtype=torch.int64)
        try:
            out = b.runner._gather_prompt_logprobs_hpu(_logprobs(PROMPT_LEN - 1, 10 + n), num, prompt[1:])
        except RuntimeError as err:
            pytest.fail(f"request {rid} asked for prompt_logprobs={asked}: the runner gathers its prompt "
                        f"logprobs with torch.topk(k={num}), which raises: {err}")
        got = out.logprob_token_ids.shape[1] - 1
        assert got == wanted(asked), (f"request {rid} asked for prompt_logprobs={asked} ({wanted(asked)} of the "
                                      f"{VOCAB} tokens) but gets {got} per prompt token")
