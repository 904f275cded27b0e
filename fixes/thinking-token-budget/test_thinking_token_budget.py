"""thinking_token_budget ends a request's thinking on HPU as on vLLM's GPU path (CPU; needs torch and numpy).

With ``--reasoning-parser`` vLLM's GPU runner builds its input batch with
``vllm_config.reasoning_config``; the batch keeps a ``ThinkingBudgetStateHolder`` (its requests'
``thinking_token_budget``, synced from the batch's adds, removals and moves) and hands it to the
sampler (``SamplingMetadata.thinking_budget_state_holder``), whose ``apply_logits_processors``
counts each request's thinking tokens and forces the end-of-think token once the budget is spent.

The HPU batch is built here by the runner's own statement (``self.input_batch = InputBatch(...)`` of
``HPUModelRunner.__init__``, and of ``may_reinitialize_input_batch``, which replaces the batch for
models with several KV-cache block sizes), run on a stand-in runner whose ``vllm_config`` holds a
real ``ReasoningConfig`` (think start 250, end 251). The harness (harness.py) then drives it:
requests come in as vLLM's scheduler sends them, through the runner's own ``_update_states``, its
reorders and ``refresh_logitsprocs``, and every sampler call of the runner (``_run_sampling`` /
``_prepare_sampling``) goes to vLLM's REAL ``Sampler`` of the tree. The reference is vLLM's GPU
path of the tree: ``gpu_input_batch.InputBatch`` built with the same reasoning config and vLLM's
``Sampler``, one request, greedy, one step per token (a greedy request's tokens do not depend on
the rest of its batch).

- A (prompt ending in the think-start token, ``thinking_token_budget=3``) alone, 8 steps: the GPU
  path forces the end-of-think token as A's 4th token (pristine: A thinks for all 8). Built by
  ``__init__`` and by ``may_reinitialize_input_batch``.
- B (no budget) prefills, A (budget 0) prefills in its own sampler call while B decodes (A's row
  there is not its persistent row), C (budget 2) likewise a step later; then all decode.
- A (budget 4) left out of one step (the runner drops it from the batch and adds it back).
Under sync and async scheduling (async: the token forced on one step reaches the holder on the
next only if the runner puts the sampled tokens in place of its placeholders, as the GPU runner
does; otherwise the end-of-think token is forced again).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/thinking-token-budget``
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness
import thinking_budget

START, END = 250, 251  # the reasoning config's think-start and end-of-think token ids
PROMPT_LEN = 6


def prompt(salt: int) -> list[int]:
    """A chat prompt whose template opened the thinking (it ends in the think-start token)."""
    return [t for t in harness.prompt(PROMPT_LEN + 4, salt) if t not in (START, END)][:PROMPT_LEN - 1] + [START]


def reasoning_config(root) -> Any:  # noqa: F811
    """vLLM's ReasoningConfig of the tree with its token ids as ``initialize_token_ids`` sets them."""
    harness.Vllm.get(root)  # imports the tree's vllm
    from vllm.config.reasoning import ReasoningConfig
    config = ReasoningConfig(reasoning_parser="deepseek_r1")
    config._reasoning_start_token_ids, config._reasoning_end_token_ids = [START], [END]
    return config


class RealSampler:
    """vLLM's ``Sampler`` of the tree as the HPU runner calls it (the metadata the batch made
    turned into vLLM's own ``SamplingMetadata``)."""

    def __init__(self):
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.sample.sampler import Sampler
        harness.no_pinned_memory()
        self.metadata_cls = SamplingMetadata
        self.sampler = Sampler()
        self.sampler.pin_memory = False

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        md = sampling_metadata
        fields = {f.name: getattr(md, f.name) for f in dataclasses.fields(self.metadata_cls) if hasattr(md, f.name)}
        return self.sampler(logits, self.metadata_cls(**fields))


def gpu_tokens(root, salt: int, budget: int, n: int) -> list[int]:  # noqa: F811
    """The `n` tokens vLLM's GPU path gives a greedy request (prompt(salt), thinking_token_budget
    `budget`): its ``gpu_input_batch.InputBatch`` built with the reasoning config (as
    ``GPUModelRunner`` builds it), ``refresh_metadata`` and vLLM's ``Sampler`` each step, the token
    appended to the request's output ids; the harness's forward pass."""
    import vllm.v1.worker.gpu_input_batch as gib
    from vllm.v1.sample.sampler import Sampler
    harness.no_pinned_memory()
    v = harness.Vllm.get(root)
    params = v.SamplingParams(temperature=0.0, thinking_token_budget=budget)
    kw: dict[str, Any] = dict(max_num_reqs=harness.MAX_REQS, max_model_len=harness.MAX_MODEL_LEN,
                              max_num_batched_tokens=256, device=torch.device("cpu"), vocab_size=harness.VOCAB,
                              block_sizes=[harness.BLOCK], max_num_blocks_per_req=[harness.MAX_MODEL_LEN // harness.BLOCK],
                              reasoning_config=reasoning_config(root))
    accepted = set(inspect.signature(gib.InputBatch.__init__).parameters)
    kw.update({k: x for k, x in (("kernel_block_sizes", [harness.BLOCK]), ("pin_memory", False)) if k in accepted})
    batch = gib.InputBatch(**kw)
    scheduler = harness.Scheduler(v)
    request = scheduler.add("A", prompt(salt), params)
    model = harness.Model(scheduler)
    output: list[int] = []
    batch.add_request(harness.make(gib.CachedRequestState, req_id="A", prompt_token_ids=list(request.prompt),
                                   mm_features=[], sampling_params=params, generator=None, block_ids=([0], ),
                                   num_computed_tokens=0, output_token_ids=output))
    sampler = Sampler()
    sampler.pin_memory = False
    for _ in range(n):
        batch.refresh_metadata()
        logits = model.logits([("A", len(request.tokens) - 1)])
        token = int(sampler(logits, batch.sampling_metadata).sampled_token_ids[0, 0])
        output.append(token)
        request.output.append(token)
    return output


def _run(root, mode, requests: dict[str, tuple[int, int | None]], plan: list[dict[str, int]],  # noqa: F811
         built_by: str = "__init__") -> harness.Harness:
    """`requests`: id -> (prompt salt, thinking_token_budget or None), greedy."""
    h = harness.Harness(root, mode, batch=thinking_budget.runner_batch(root, reasoning_config(root), harness.VOCAB, built_by))
    h.runner.sampler = RealSampler()
    for rid, (salt, budget) in requests.items():
        h.add(rid, prompt(salt), temperature=0.0, max_tokens=32, thinking_token_budget=budget)
    for scheduled in plan:
        h.step(scheduled)
    return h


def _check(h: harness.Harness, rid: str, salt: int, budget: int) -> None:
    got = h.output(rid)
    want = gpu_tokens(h.root, salt, budget, len(got))
    assert [i for i, t in enumerate(want) if t == END] == [budget], f"the GPU reference ends thinking elsewhere: {want}"
    if got != want:
        ends = [i + 1 for i, t in enumerate(got) if t == END]
        did = f"got the end-of-think token at steps {ends}" if ends else f"thought for {len(got)} tokens"
        raise AssertionError(
            f"request {rid} with thinking_token_budget={budget} {did} ({got}); vLLM's GPU path ends thinking after "
            f"{budget} (emits the end-of-think token id {END} at step {budget + 1}, then no more: {want})")


@pytest.mark.parametrize("built_by", ["__init__", "may_reinitialize_input_batch"])
def test_budget_ends_thinking(root, mode, built_by):  # noqa: F811
    h = _run(root, mode, {"A": (0, 3)}, [{"A": PROMPT_LEN}] + [{"A": 1}] * 7, built_by)
    _check(h, "A", 0, 3)


def test_budget_rows_of_each_call(root, mode):  # noqa: F811
    """A and C prefill in a sampler call of their own (row 0 there) while the requests before
    them decode: the end-of-think token goes to each budgeted request's row of its call."""
    h = _run(root, mode, {"B": (1, None), "A": (2, 0), "C": (3, 2)},
             [{"B": PROMPT_LEN}, {"B": 1, "A": PROMPT_LEN}, {"B": 1, "A": 1, "C": PROMPT_LEN}] +
             [{"B": 1, "A": 1, "C": 1}] * 4)
    _check(h, "A", 2, 0)
    _check(h, "C", 3, 2)
    assert END not in h.output("B"), f"request B has no thinking_token_budget and got the end-of-think token: {h.output('B')}"


def test_budget_across_a_gap(root, mode):  # noqa: F811
    """A is left out of one step (B decodes alone): the runner drops it from the batch and adds it
    back; its thinking tokens still count."""
    h = _run(root, mode, {"A": (4, 4), "B": (5, None)},
             [{"A": PROMPT_LEN, "B": PROMPT_LEN}, {"A": 1, "B": 1}, {"B": 1}] + [{"A": 1, "B": 1}] * 5)
    _check(h, "A", 4, 4)
