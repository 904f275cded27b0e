"""prompt_logprobs survive a request's steps out of the batch (CPU; needs torch and numpy).

vLLM's GPU runner keeps a request's prompt-logprobs state (``num_prompt_logprobs``: how many it
asked for, until they are delivered; the rows of a chunked prompt computed so far) from its
arrival until they are delivered or it finishes, whether or not it is in the persistent batch.
vllm_gaudi keeps both in its ``InputBatch``, and ``remove_request`` drops them each time
``_update_states`` takes an unscheduled request out of the batch; ``add_request`` sets
``num_prompt_logprobs`` again each time it comes back.

The harness (harness.py) brings the requests in as vLLM's scheduler sends them, through the
runner's own ``_update_states`` into the REAL ``InputBatch``; after each step's sampling the
runner's own ``_get_prompt_logprobs_dict`` (prompt_logprobs.py) computes the step's prompt
logprobs from the hidden states ``sample_tokens`` collects. The reference is vLLM's GPU path: each
request's prompt logprobs delivered once, row q holding the next prompt token and the top tokens
with ``log_softmax`` of the model's row q.

- A chunked prompt left out for a step between its chunks: its rows of the first chunk must be
  what the GPU gives (pristine: uninitialised memory).
- A request preempted after its prefill (and recomputed on resumption, as vLLM recomputes a
  prompt-logprobs request: it never reads the prefix cache): its prompt logprobs must be delivered
  once (pristine: twice, 2P-1 entries for the user).
- A request aborted mid-prefill and resubmitted under the same id with another prompt: its prompt
  logprobs must be those of its new prompt.
Under sync and async scheduling.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/prompt-logprobs-state``
"""

from __future__ import annotations

from typing import Any

from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness
import prompt_logprobs

K = 2  # prompt_logprobs asked for


def _harness(root, mode) -> harness.Harness:  # noqa: F811
    h = harness.Harness(root, mode)
    prompt_logprobs.bind(h)
    return h


def _run(h: harness.Harness, plan: list[Any]) -> dict[str, list[tuple[int, Any]]]:
    """Steps `plan` (a dict of scheduled tokens, or a callable run between steps); every prompt
    logprobs delivery by request: (step number, LogprobsTensors)."""
    delivered: dict[str, list[tuple[int, Any]]] = {}
    for scheduled in plan:
        if callable(scheduled):
            scheduled(h)
            continue
        for rid, tensors in prompt_logprobs.step(h, scheduled).items():
            delivered.setdefault(rid, []).append((len(h.steps), tensors))
    return delivered


def test_chunk_left_out_between_chunks(root, mode):  # noqa: F811
    """A's 12-token prompt in chunks of 5 and 7; the step between them schedules only B."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(12, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("B", harness.prompt(6, 1), temperature=0.0, max_tokens=8)
    delivered = _run(h, [{"A": 5, "B": 6}, {"B": 1}, {"A": 7, "B": 1}, {"A": 1, "B": 1}])
    prompt_logprobs.check_once(h, delivered, "A", K)


def test_preempted_after_prefill(root, mode):  # noqa: F811
    """A prefills its 8-token prompt (prompt logprobs delivered), decodes, is preempted and comes
    back recomputing its prompt and output from position 0."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(8, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    h.add("B", harness.prompt(6, 1), temperature=0.0, max_tokens=8)

    def preempt(h: harness.Harness) -> None:
        h.scheduler.preempt("A")
        h.scheduler.requests["A"].cached = 0  # a prompt-logprobs request never reads the prefix cache

    def resume(h: harness.Harness) -> dict[str, int]:
        return {"A": len(h.scheduler.requests["A"].tokens), "B": 1}

    plan: list[Any] = [{"A": 8, "B": 6}, {"A": 1, "B": 1}, preempt, {"B": 1}]
    delivered = _run(h, plan)
    more = _run(h, [resume(h), {"A": 1, "B": 1}])
    for rid, got in more.items():
        delivered.setdefault(rid, []).extend(got)
    prompt_logprobs.check_once(h, delivered, "A", K)


def test_same_id_resubmitted_mid_prefill(root, mode):  # noqa: F811
    """A (12 tokens) is aborted after its first chunk and a new request A (10 other tokens)
    arrives in the same step, as vLLM's runner treats an aborted and resubmitted id."""
    h = _harness(root, mode)
    h.add("A", harness.prompt(12, 0), temperature=0.0, max_tokens=8, prompt_logprobs=K)
    delivered = _run(h, [{"A": 5}])

    def resubmit(h: harness.Harness) -> None:
        h.scheduler.finish("A")
        h.add("A", harness.prompt(10, 3), temperature=0.0, max_tokens=8, prompt_logprobs=K)

    delivered = _run(h, [resubmit, {"A": 10}, {"A": 1}])
    prompt_logprobs.check_once(h, delivered, "A", K)
