"""prompt_logprobs follow --logprobs-mode on HPU (CPU; needs torch and numpy).

vLLM's GPU runner scores a request's prompt tokens by the server's ``--logprobs-mode``
(``GPUModelRunner._get_prompt_logprobs_dict``: the logits as float32 in ``raw_logits`` and
``processed_logits``, their ``log_softmax`` in ``raw_logprobs`` and ``processed_logprobs``; prompt
tokens skip the sampling processors, so processed and raw scores are the same). vllm_gaudi's
runner computed ``log_softmax`` in every mode, so a server started with ``--logprobs-mode
raw_logits`` (or ``processed_logits``) served log-probabilities for prompt tokens and logits for
sampled ones.

The harness (harness.py) brings request A (a 12-token prompt asking ``prompt_logprobs=2``, in
chunks of 5 and 7) in through the runner's own ``_update_states``; after each step's sampling the
runner's own ``_get_prompt_logprobs_dict`` (prompt_logprobs.py), its model config asking the mode,
computes the step's prompt logprobs. The reference is vLLM's own ``_get_prompt_logprobs_dict`` of
the same tree, lifted, with the Sampler and model config the GPU runner builds for the mode, fed
the same model rows: ids, scores and ranks must be the same. Each of the four modes, under sync and
async scheduling.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/prompt-logprobs-mode``
"""

from __future__ import annotations

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness
import prompt_logprobs

K = 2  # prompt_logprobs asked for
MODES = ["raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits"]
WHAT = {"raw_logprobs": "the raw log-probabilities", "processed_logprobs": "the processed log-probabilities",
        "raw_logits": "the raw logits", "processed_logits": "the processed logits"}


def _kind(h: harness.Harness, rid: str, values: list[float]) -> str:
    """What the user sees in `values` (position 0's target, then its top-k): log-probabilities or logits."""
    lp = torch.log_softmax(h.model.row(rid, 0).float(), dim=-1)
    row = h.model.row(rid, 0).float()
    return "log-probabilities" if abs(values[1] - float(lp.max())) < 1e-4 else (
        "logits" if abs(values[1] - float(row.max())) < 1e-4 else "scores")


@pytest.mark.parametrize("logprobs_mode", MODES)
def test_prompt_logprobs_follow_mode(root, mode, logprobs_mode):  # noqa: F811
    h = harness.Harness(root, mode)
    prompt_logprobs.bind(h, logprobs_mode)
    h.add("A", harness.prompt(12, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("B", harness.prompt(6, 1), temperature=0.0, max_tokens=8)
    delivered = []
    for scheduled in [{"A": 5, "B": 6}, {"A": 7, "B": 1}, {"A": 1, "B": 1}]:
        got = prompt_logprobs.step(h, scheduled).get("A")
        if got is not None:
            delivered.append(got)
    assert len(delivered) == 1, f"request A's prompt logprobs came {len(delivered)} times, vLLM's GPU path: once"
    tensors = delivered[0]
    ids, scores, ranks = prompt_logprobs.gpu_expected(h, "A", K, logprobs_mode)
    got_ids, got_scores = tensors.logprob_token_ids.tolist(), tensors.logprobs.tolist()
    got_ranks = tensors.selected_token_ranks.tolist()
    assert got_ids == ids, (
        f"request A (prompt_logprobs={K}, --logprobs-mode {logprobs_mode}) got prompt token ids {got_ids} where "
        f"vLLM's GPU path gives {ids}")
    bad = [q for q in range(len(ids)) if any(abs(a - b) > 1e-4 for a, b in zip(got_scores[q], scores[q]))]
    assert not bad, (
        f"request A asked prompt_logprobs={K} with --logprobs-mode {logprobs_mode} and got "
        f"{_kind(h, 'A', got_scores[0])} {[round(v, 4) for v in got_scores[bad[0]]]} at prompt position {bad[0]} "
        f"(token {ids[bad[0]][0]}, then its top-{K}) where vLLM's GPU path gives {WHAT[logprobs_mode]} "
        f"{[round(v, 4) for v in scores[bad[0]]]} ({len(bad)} of {len(ids)} positions differ)")
    assert got_ranks == ranks, (
        f"request A's prompt tokens have ranks {got_ranks} with --logprobs-mode {logprobs_mode}, vLLM's GPU path "
        f"gives {ranks}")
