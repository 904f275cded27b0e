"""prompt_logprobs with merged prefill (CPU; needs torch and numpy).

With ``VLLM_MERGED_PREFILL=true`` vllm_gaudi lays the prompts of one prefill batch one after
another in a single row (``align_and_pad`` chains them when the bucket's batch size is 1), so the
model's hidden states are ``[1, tokens, hidden]``. ``sample_tokens`` then collects each
prompt-logprobs request's hidden states as ``non_flattened_hidden_states[i]``, ``i`` its index in
the batch: the first request gets the whole merged row (its own tokens come first, so its prompt
logprobs are right), any later one raises ``IndexError`` and EngineCore ends with every request in
flight.

The harness (harness.py) brings the requests in through the runner's own ``_update_states`` into
the REAL ``InputBatch``; after each step the tree's own collecting statement of ``sample_tokens``
runs on the step's prefills laid out as the merged layout lays them (prompt_logprobs.py,
``collect(..., merged=True)``), then the runner's own ``_get_prompt_logprobs_dict``. The reference
is vLLM's GPU path (``prompt_logprobs.expected``): each request's prompt logprobs delivered once,
row q holding the next prompt token and the top tokens with ``log_softmax`` of the model's row q.
Under sync and async scheduling (the collecting code is the same in both).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/prompt-logprobs-merged-prefill``
"""

from __future__ import annotations

from typing import Any

from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness
import prompt_logprobs

K = 2  # prompt_logprobs asked for


def _run(h: harness.Harness, plan: list[dict[str, int]], merged: bool) -> dict[str, list[tuple[int, Any]]]:
    """Steps `plan` with the prefills of each step in one (merged) prefill batch: every prompt
    logprobs delivery by request, (step number, LogprobsTensors). An ``IndexError`` there is what
    ends EngineCore: the assertion says so in the user's words."""
    delivered: dict[str, list[tuple[int, Any]]] = {}
    for scheduled in plan:
        try:
            got = prompt_logprobs.step(h, scheduled, merged)
        except IndexError as e:
            asking = [r for r in scheduled if h.scheduler.requests[r].params.prompt_logprobs is not None]
            raise AssertionError(
                f"with VLLM_MERGED_PREFILL=true, step {len(h.steps) - 1} prefills {sorted(scheduled)} in one merged "
                f"batch and collecting the prompt logprobs of {asking} raised IndexError: {e}; EngineCore ends and "
                "every request in flight fails (vLLM's GPU path delivers them)") from e
        for rid, tensors in got.items():
            delivered.setdefault(rid, []).append((len(h.steps), tensors))
    return delivered


def _harness(root, mode) -> harness.Harness:  # noqa: F811
    h = harness.Harness(root, mode)
    prompt_logprobs.bind(h)
    return h


def test_every_request_of_a_merged_prefill(root, mode):  # noqa: F811
    """A (7 tokens), B (9) and C (5) prefill in one merged batch; A and C ask prompt_logprobs
    (C's rows start after A's and B's 16 tokens)."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(7, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("B", harness.prompt(9, 1), temperature=0.0, max_tokens=8)
    h.add("C", harness.prompt(5, 2), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    delivered = _run(h, [{"A": 7, "B": 9, "C": 5}, {"A": 1, "B": 1, "C": 1}], merged=True)
    prompt_logprobs.check_once(h, delivered, "A", K)
    prompt_logprobs.check_once(h, delivered, "C", K)


def test_chunked_prompt_in_merged_prefills(root, mode):  # noqa: F811
    """B's 12-token prompt in chunks of 5 and 7, each merged behind another request's prefill."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(6, 0), temperature=0.0, max_tokens=8)
    h.add("B", harness.prompt(12, 1), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("C", harness.prompt(4, 2), temperature=0.0, max_tokens=8)
    delivered = _run(h, [{"A": 6, "B": 5}, {"A": 1, "C": 4, "B": 7}, {"A": 1, "B": 1, "C": 1}], merged=True)
    prompt_logprobs.check_once(h, delivered, "B", K)


def test_unmerged_prefill_batch_unchanged(root, mode):  # noqa: F811
    """Without merged prefill, two prompt-logprobs requests in one prefill batch (a row each): as
    before the fix."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(7, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("B", harness.prompt(9, 1), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    delivered = _run(h, [{"A": 7, "B": 9}, {"A": 1, "B": 1}], merged=False)
    prompt_logprobs.check_once(h, delivered, "A", K)
    prompt_logprobs.check_once(h, delivered, "B", K)
