"""A seeded request's tokens do not depend on its decode bucket's padding (CPU; needs torch, numpy).

vllm_gaudi pads a decode batch to its bucket by repeating the first request's row
(``_generate_req_id_output_token_ids_lst``), and ``make_selective_sampling_metadata`` maps every
row to its request's ``torch.Generator``. The harness (harness.py) runs the steps: vLLM's scheduler
output through the runner's own ``_update_states`` (which gives a seeded request its generator),
the REAL ``InputBatch`` and the runner's ``_run_sampling`` / ``_prepare_sampling``, and samples
with the tree's REAL ``TopKTopPSampler.forward_native`` (``vllm/v1/sample/ops/topk_topp_sampler.py``)
— stock, or with ``topk-subset-sampler`` applied when the tree has it (then its path must be the
one taken).

S (seed 1234, top_k 20) prefills, then decodes for six steps in a bucket of 1 (alone), a bucket of 2 (alone,
one padding row) and a bucket of 4 (beside U, two padding rows), each run from a fresh batch and
the same seed (the model's logits are a function of S's tokens). S must get the same tokens in all three.
On pristine vllm_gaudi these tests fail; on the patched file they pass.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/seeded-padding-rows``
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fixtures import root  # noqa: F401  (pytest fixture)
from vllm_gaudi_stubs import SAMPLER_REL

import harness

SEED = 1234
STEPS = 6
PROMPT_LEN = 8

REQUESTS = {
    "S": dict(temperature=1.0, top_k=20, seed=SEED),
    "U": dict(temperature=1.0, top_k=50),
}
# (name, decode requests, bucket)
CASES = (
    ("a bucket of 1", ["S"], 1),
    ("a bucket of 2 (1 padding row)", ["S"], 2),
    ("a bucket of 4 beside U (2 padding rows)", ["S", "U"], 4),
)


def run_case(root, rids: list[str], bucket: int) -> dict[str, Any]:  # noqa: F811
    """S's tokens over its prefill and STEPS decode steps in `bucket`, the generators each decode
    step handed the sampler, and how many sampler calls topk-subset-sampler's path sampled."""
    h = harness.Harness(root, "sync")
    h.decode_bucket = lambda n: bucket
    for n, rid in enumerate(rids):
        h.add(rid, harness.prompt(PROMPT_LEN, n), max_tokens=32, **REQUESTS[rid])
    mod = h.vllm.sampler_module
    subset_calls = []
    real = getattr(mod, "_topk_subset_sample", None)
    if real is not None:

        def spy(*args, **kwargs):
            subset_calls.append(1)
            return real(*args, **kwargs)

        mod._topk_subset_sample = spy
    # Unseeded rows draw from the global generator; fix it so that only the seed can differ.
    torch.manual_seed(0)
    generator_rows = []
    try:
        h.step({rid: PROMPT_LEN for rid in rids})
        subset_calls.clear()
        for _ in range(STEPS):
            before = len(h.sampler.calls)
            h.step({rid: 1 for rid in rids})
            (call, ) = h.sampler.calls[before:]
            assert call["rows"] == bucket and h.model.owners(call["logits"])[0] == "S"
            generator_rows.append(sorted(call["generators"]))
    finally:
        if real is not None:
            mod._topk_subset_sample = real
    return {"tokens": h.output("S"), "generator_rows": generator_rows, "subset_calls": len(subset_calls)}


@pytest.fixture(scope="module")
def results(root) -> dict[str, dict[str, Any]]:  # noqa: F811
    return {name: run_case(root, rids, bucket) for name, rids, bucket in CASES}


def topk_applied(root) -> bool:  # noqa: F811
    return "topk-subset-sampler" in (root / SAMPLER_REL).read_text()

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


def test_topk_subset_sampler_path_is_covered(results, root):  # noqa: F811
    """With topk-subset-sampler applied, the seeded rows must go through its path (else the
    first test would only check the stock sampler)."""
    if not topk_applied(root):
        pytest.skip("topk-subset-sampler is not applied to this tree: the stock sampler was checked")
    for name, r in results.items():
        assert r["subset_calls"] == STEPS, (f"in {name}: topk-subset-sampler sampled {r['subset_calls']} of "
                                            f"{STEPS} steps")
