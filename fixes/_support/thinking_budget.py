"""The conformance suite's reasoning config: a plain schedule that draws one (``"reasoning"``) runs
both engines as a server with ``--reasoning-parser`` does, and some of its requests ask a
``thinking_token_budget``.

- Draws (pure Python, each from a generator of its own so that every other draw of a schedule
  stays what the seed drew before): ``reasoning(seed)``, the think-start and end-of-think token
  ids of the schedule (from the suite's vocabulary, ``REASONING``'s chance); ``budget(seed, rid)``,
  a request's ``thinking_token_budget`` (``BUDGET``'s chance) and how many of its prompt's last
  tokens are thinking already; ``opens_thinking`` puts the think-start token in its prompt (the
  chat template opened the thinking), the prompt's length unchanged (its chunks stay the seed's).
- Engines: ``reasoning_config`` is vLLM's ``ReasoningConfig`` of the tree with those token ids (as
  ``initialize_token_ids`` sets them); ``runner_batch`` builds the HPU side's ``InputBatch`` with the
  runner's own ``self.input_batch = InputBatch(...)`` statement of ``HPUModelRunner.__init__``, on a
  stand-in runner whose ``vllm_config`` holds it (a runner that passes no reasoning config builds a
  batch without vLLM's thinking-budget state); vLLM's GPU batch is handed it as
  ``GPUModelRunner`` hands it (``reasoning_config=``).
- ``due(prompt, budget, start, end)``: where vLLM's GPU path puts the end-of-think token in a
  request's output when its prompt opens the thinking and the model does not end it first (its
  ``ThinkingBudgetStateHolder``: the thinking tokens of the prompt count, the budget spent, the
  next token is forced), for the check ``thinking_token_budget`` (conform_checks.py).
- ``recording(metadata, call)``: while a sampler call runs, the rows whose end-of-think token the
  metadata's thinking-budget state forces (``Call.forced``): a request without a budget must have
  none (vLLM's GPU path does force some: its holder leaves a removed request's state on the row a
  one-way move of the condense lands on; listed under ``gpu_disagrees``).
"""

from __future__ import annotations

import ast
import contextlib
import random
import types
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

REASONING = 0.3  # the chance of a plain schedule running with a reasoning config
BUDGET = 0.5  # the chance of a request of such a schedule asking thinking_token_budget
BUDGETS = (0, 1, 2, 3, 4)
THINKING = (0, 0, 1, 2)  # how many prompt tokens follow the think-start token (thinking already)


def reasoning(seed: int, vocab: int) -> Optional[dict[str, int]]:
    """Schedule `seed`'s reasoning config (its think-start and end-of-think token ids), or None."""
    rng = random.Random(f"conform-reasoning {seed}")
    if rng.random() >= REASONING:
        return None
    start, end = rng.sample(range(3, vocab), 2)
    return {"think_start": start, "think_end": end}


def budget(seed: int, rid: str) -> Optional[tuple[int, int]]:
    """Request `rid`'s (thinking_token_budget, thinking tokens its prompt ends with), or None."""
    rng = random.Random(f"conform-thinking-budget {seed} {rid}")
    if rng.random() >= BUDGET:
        return None
    return rng.choice(BUDGETS), rng.choice(THINKING)


def opens_thinking(prompt: list[int], thinking: int, start: int, end: int) -> list[int]:
    """`prompt` with the think-start token `thinking` tokens before its end (at most its last
    token), and no think token after it; the same length."""
    out = list(prompt)
    at = len(out) - 1 - min(thinking, len(out) - 1)
    out[at] = start
    other = next(t for t in range(3, 3 + 3) if t not in (start, end))
    out[at + 1:] = [other if t in (start, end) else t for t in out[at + 1:]]
    return out


def due(prompt: list[int], budget: int, start: int, end: int) -> Optional[int]:
    """The output index at which vLLM's GPU path forces the end-of-think token for a request with
    `prompt` and ``thinking_token_budget`` `budget`, if the model has not ended its thinking before:
    the budget less the prompt's thinking tokens (those after its last think-start token), at least
    0. None when the prompt does not open the thinking (no think-start after its last end-of-think)."""
    last_start = max((i for i, t in enumerate(prompt) if t == start), default=-1)
    last_end = max((i for i, t in enumerate(prompt) if t == end), default=-1)
    if last_start <= last_end:
        return None
    return max(budget - (len(prompt) - 1 - last_start), 0)


def reasoning_config(config: dict[str, int]) -> Any:
    """vLLM's ``ReasoningConfig`` of the tree (imported already) with the schedule's token ids."""
    from vllm.config.reasoning import ReasoningConfig
    out = ReasoningConfig(reasoning_parser="deepseek_r1")
    out._reasoning_start_token_ids, out._reasoning_end_token_ids = [config["think_start"]], [config["think_end"]]
    return out


def runner_batch(root: Path, config: Any, vocab: int, method: str = "__init__") -> Callable[[Any, Any], Any]:
    """A builder (``harness.Harness(batch=…)``) of the InputBatch ``HPUModelRunner.<method>`` builds:
    its own ``self.input_batch = InputBatch(...)`` statement, run on a stand-in runner with the
    harness's sizes, a `vocab`-wide model and a ``vllm_config`` whose ``reasoning_config`` is `config`."""
    import torch

    import harness
    import vllm_gaudi_stubs as stubs
    import lift
    path = root / stubs.RUNNER_REL
    fn = next(n for n in stubs.runner_class(path).body if isinstance(n, ast.FunctionDef) and n.name == method)
    stmt = lift.find_statement(fn, path=path, target="self.input_batch", contains="InputBatch(", nested=True,
                               where=f"HPUModelRunner.{method}")
    code = compile(ast.Module([stmt], []), str(path), "exec")

    def build(module: Any, logitsprocs: Any) -> Any:
        vllm_config = types.SimpleNamespace(speculative_config=None, reasoning_config=config,
                                            model_config=types.SimpleNamespace(logits_processors=None))
        owner = types.SimpleNamespace(
            vllm_config=vllm_config, scheduler_config=types.SimpleNamespace(max_num_seqs=harness.MAX_REQS),
            max_num_reqs=harness.MAX_REQS, max_model_len=harness.MAX_MODEL_LEN, max_encoder_len=0,
            max_num_tokens=256, device=torch.device("cpu"), pin_memory=False, block_size=harness.BLOCK,
            model_config=types.SimpleNamespace(get_vocab_size=lambda: vocab), is_pooling_model=False,
            input_batch=types.SimpleNamespace(logitsprocs=logitsprocs))
        exec(code, {"InputBatch": module.InputBatch, "build_logitsprocs": lambda *a: logitsprocs, "self": owner,
                    "block_sizes": [harness.BLOCK], "kernel_block_sizes": [harness.BLOCK]})
        return owner.input_batch

    return build


FORCED = 1e9 / 2  # the holder sets the end-of-think token's logit to 1e9 on a row it forces


@contextlib.contextmanager
def recording(sampling_metadata: Any, call: Any) -> Iterator[None]:
    """While the sampler runs: the rows whose end-of-think token the metadata's thinking-budget
    state forces go to ``call.forced`` (read from the logits its ``apply_to_logits`` returns)."""
    holder = getattr(sampling_metadata, "thinking_budget_state_holder", None)
    if holder is None:
        yield
        return
    apply = type(holder).apply_to_logits

    def recorded(logits: Any, *args: Any, **kw: Any) -> Any:
        out = apply(holder, logits, *args, **kw)
        call.forced = [i for i in range(out.shape[0]) if bool((out[i] >= FORCED).any())]
        return out

    holder.apply_to_logits = recorded
    try:
        yield
    finally:
        del holder.apply_to_logits
