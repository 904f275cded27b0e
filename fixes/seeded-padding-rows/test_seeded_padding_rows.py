"""A seeded request's tokens do not depend on its decode bucket's padding (CPU; needs torch, numpy).

vllm_gaudi pads a decode batch to its bucket by repeating the first request's row
(``_generate_req_id_output_token_ids_lst``), and ``make_selective_sampling_metadata`` maps every
row to its request's ``torch.Generator``. This drives the REAL ``InputBatch`` of
``$GAUDI_FIXES_ROOT/vllm_gaudi/v1/worker/hpu_input_batch.py`` (vLLM's imports stubbed, see
vllm_gaudi_stubs.py) with the runner's own ``_prepare_sampling``, lifted from the tree's
``hpu_model_runner.py``, and samples with the tree's REAL ``TopKTopPSampler.forward_native``
(``vllm/v1/sample/ops/topk_topp_sampler.py``, on an HPU-like platform) — stock, or with
``topk-subset-sampler`` applied when the tree has it (then its path must be the one taken).

S (seed 1234, top_k 20) decodes for six steps in a bucket of 1 (alone), a bucket of 2 (alone,
one padding row) and a bucket of 4 (beside U, two padding rows), each run from a fresh batch and
the same seed, with the same logits for S on each step. S must get the same tokens in all three.
On pristine vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/seeded-padding-rows``
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm_gaudi_stubs import (
    INPUT_BATCH_REL,
    SAMPLER_REL,
    UTILS_REL,
    H2DRecorder,
    Runner,
    SamplingParams,
    load_input_batch,
    load_sampler,
)

ROOT_ENV = "GAUDI_FIXES_ROOT"
VOCAB = 512
SEED = 1234
STEPS = 6
PROMPT_LEN = 8

if not os.environ.get(ROOT_ENV):
    pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm/ and vllm_gaudi/",
                allow_module_level=True)
ROOT = Path(os.environ[ROOT_ENV])
for _rel in (INPUT_BATCH_REL, SAMPLER_REL):
    if not (ROOT / _rel).is_file():
        pytest.skip(f"no {_rel} under {ROOT}: needs vllm and vllm_gaudi trees", allow_module_level=True)

REQUESTS = {
    "S": SamplingParams(temperature=1.0, top_k=20, seed=SEED),
    "U": SamplingParams(temperature=1.0, top_k=50),
}
# (name, decode requests, bucket)
CASES = (
    ("a bucket of 1", ["S"], 1),
    ("a bucket of 2 (1 padding row)", ["S"], 2),
    ("a bucket of 4 beside U (2 padding rows)", ["S", "U"], 4),
)


def step_logits(rid: str, step: int) -> torch.Tensor:
    """The model's logits for request `rid` on `step`: the same in every case."""
    gen = torch.Generator().manual_seed(1000 * step + ord(rid))
    return torch.randn(VOCAB, generator=gen) * 3


def sampler_module() -> Any:
    return load_sampler(ROOT)


def topk_applied() -> bool:
    return "topk-subset-sampler" in (ROOT / SAMPLER_REL).read_text()


def run_case(rids: list[str], bucket: int) -> dict[str, Any]:
    """S's tokens over STEPS decode steps in `bucket`, the generators each step handed the
    sampler, and whether topk-subset-sampler's path sampled."""
    h2d = H2DRecorder(ROOT / UTILS_REL)
    module = load_input_batch(ROOT, h2d)
    batch = module.InputBatch(
        max_num_reqs=8,
        max_model_len=64,
        max_num_batched_tokens=64,
        device=torch.device("cpu"),
        pin_memory=False,
        vocab_size=VOCAB,
        block_sizes=[128],
        kernel_block_sizes=[128],
    )
    runner = Runner(ROOT, batch)
    for rid in rids:
        params = REQUESTS[rid]
        # As HPUModelRunner._update_states: a seeded request gets its own generator.
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        state = module.CachedRequestState(
            req_id=rid,
            prompt_token_ids=list(range(PROMPT_LEN)),
            mm_features=[],
            sampling_params=params,
            generator=generator,
            block_ids=[[0]],
            num_computed_tokens=PROMPT_LEN,
            output_token_ids=[1],
        )
        runner.requests[rid] = state
        batch.add_request(state, None)
    batch.refresh_sampling_metadata()
    mod = sampler_module()
    subset_calls = []
    if hasattr(mod, "_topk_subset_sample"):
        real = mod._topk_subset_sample

        def spy(*args, **kwargs):
            subset_calls.append(1)
            return real(*args, **kwargs)

        mod._topk_subset_sample = spy
    sampler = mod.TopKTopPSampler()
    tokens, generator_rows = [], []
    # Unseeded rows draw from the global generator; fix it so that only the seed can differ.
    torch.manual_seed(0)
    for step in range(STEPS):
        metadata = runner._prepare_sampling(step == 0, rids, bucket)
        rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(rids, bucket)]
        assert len(rows) == bucket and rows[0] == "S", rows
        logits = torch.stack([step_logits(r, step) for r in rows]) / metadata.temperature.unsqueeze(1)
        generator_rows.append(sorted(metadata.generators))
        sampled, _ = sampler.forward_native(logits, metadata.generators, metadata.top_k, metadata.top_p)
        tokens.append(int(sampled[0]))
        for rid in rids:
            runner.requests[rid].output_token_ids.append(int(sampled[rows.index(rid)]))
    return {"tokens": tokens, "generator_rows": generator_rows, "subset_calls": len(subset_calls)}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return {name: run_case(rids, bucket) for name, rids, bucket in CASES}


def test_seed_gives_the_same_tokens_whatever_the_padding(results):
    reference_name = CASES[0][0]
    reference = results[reference_name]["tokens"]
    wrong = [
        f"  in {name}: {r['tokens']}" for name, r in results.items() if r["tokens"] != reference
    ]
    assert not wrong, (f"request S (seed {SEED}) sampled {reference} in {reference_name} but other tokens with "
                       f"the same seed and logits in a padded bucket:\n" + "\n".join(wrong))


def test_only_the_requests_own_row_draws_from_its_generator(results):
    for name, r in results.items():
        for step, rows in enumerate(r["generator_rows"]):
            assert rows == [0], (f"step {step + 1} in {name}: the sampler got S's generator for rows {rows}; "
                                 f"S is row 0, the other rows are padding or U")


def test_topk_subset_sampler_path_is_covered(results):
    """With topk-subset-sampler applied, the seeded rows must go through its path (else the
    first test would only check the stock sampler)."""
    if not topk_applied():
        pytest.skip("topk-subset-sampler is not applied to this tree: the stock sampler was checked")
    for name, r in results.items():
        assert r["subset_calls"] == STEPS, (f"in {name}: topk-subset-sampler sampled {r['subset_calls']} of "
                                            f"{STEPS} steps")
