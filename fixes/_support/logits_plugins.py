"""Logits-processor plugins as users write them for ``--logits-processors``, for the conformance
suite: what a schedule's server loads, what its requests ask of them (``extra_args``), and which
tokens each one bans in a request's row.

- ``ban_tokens``: state keyed by the batch's persistent row through vLLM's own
  ``process_dict_updates`` (added, removed, moved with the batch's condense and swaps); a request
  with ``extra_args={"ban_tokens": [...]}`` never gets those tokens.
- ``no_repeat``: keeps each row's output list by reference (the list the runner appends to: under
  async scheduling its last entry is a -1 placeholder until the runner puts the sampled token
  there); a request with ``extra_args={"no_repeat": True}`` never gets its last token again.

Both are drawn from generators of their own (``server``, ``extra_args``), so that a schedule
whose server loads no plugin is the one its seed drew before plugins were drawn. vLLM refuses
custom logits processors with speculative decoding (``STR_SPEC_DEC_REJECTS_LOGITSPROCS``): plain
schedules only.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Optional

import torch

PLUGINS = ("ban_tokens", "no_repeat")
LOADED = 0.3  # the chance of a plain schedule's server loading the plugins
ASKS = 0.5  # in such a schedule, the chance of a request asking each plugin for something
BANNED = (4, 16)  # how many tokens a ban_tokens request bans, at least and at most


def server(seed: int) -> bool:
    """Whether schedule `seed`'s server loads the plugins (``--logits-processors``)."""
    return random.Random(f"conform-plugins {seed}").random() < LOADED


def extra_args(seed: int, rid: str, params: dict[str, Any], grammar: Optional[list[int]],
               vocab: int, spare: set[int]) -> Optional[dict[str, Any]]:
    """What request `rid` of schedule `seed` asks of the plugins (None: nothing). Banned tokens are
    never 0, 1 and 2 (the suite's columns a grammar always allows, EOS), one of `spare` (the
    reasoning config's tokens, which a thinking budget forces), or one its allowed_token_ids or
    grammar allows; ``no_repeat`` is not asked beside those nor beside a thinking budget: a ban
    there could leave a row nothing to draw."""
    rng = random.Random(f"conform-plugins {seed} {rid}")
    args: dict[str, Any] = {}
    if rng.random() < ASKS:
        keep = set(params.get("allowed_token_ids", ())) | set(grammar or ()) | spare
        free = [t for t in range(3, vocab) if t not in keep]
        args["ban_tokens"] = sorted(rng.sample(free, min(len(free), rng.randint(*BANNED))))
    if rng.random() < ASKS and not params.get("allowed_token_ids") and grammar is None \
            and "thinking_token_budget" not in params:
        args["no_repeat"] = True
    return args or None


def bans(asked: dict[str, Any], generated: list[int]) -> set[int]:
    """The tokens the plugins ban in the row of a request that asked `asked` and has `generated`."""
    args = asked.get("extra_args") or {}
    out = set(args.get("ban_tokens", ()))
    if args.get("no_repeat") and generated:
        out.add(generated[-1])
    return out


def classes(interface: Any, builtin: Any) -> tuple[type, ...]:
    """The plugin classes written against a tree's logits-processor package (``interface``,
    ``builtin``: vLLM's for the GPU path, the harness's loaded copy for the HPU side)."""

    class BanTokensLogitsProcessor(interface.LogitsProcessor):
        conform_plugin = True

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
            self.banned: dict[int, list[int]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: Any) -> None:
            builtin.process_dict_updates(self.banned, batch_update,
                                         lambda params, _, __: (params.extra_args or {}).get("ban_tokens"))

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for row, tokens in self.banned.items():
                logits[row, tokens] = float("-inf")
            return logits

    class NoRepeatLogitsProcessor(interface.LogitsProcessor):
        conform_plugin = True

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
            self.outputs: dict[int, list[int]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: Any) -> None:
            builtin.process_dict_updates(self.outputs, batch_update, lambda params, _, out: out if (
                params.extra_args or {}).get("no_repeat") else None)

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for row, out in self.outputs.items():
                if out:
                    logits[row, out[-1]] = float("-inf")
            return logits

    return BanTokensLogitsProcessor, NoRepeatLogitsProcessor


def applied(logitsprocs: Any, probe: torch.Tensor) -> torch.Tensor:
    """`probe` through the plugins among a call's logits processors only (vLLM's built-ins left
    out); a processor that wraps others for the call's rows (vllm_gaudi's ``logitsprocs``
    attribute: the batch's persistent rows mapped onto the call's) runs the plugins it wraps."""
    out = probe.clone()
    for proc in logitsprocs.all:
        if getattr(proc, "conform_plugin", False):
            out = proc.apply(out)
        elif isinstance(getattr(proc, "logitsprocs", None), list):
            mine = [p for p in proc.logitsprocs if getattr(p, "conform_plugin", False)]
            if mine:
                wrapper = copy.copy(proc)
                wrapper.logitsprocs = mine
                out = wrapper.apply(out)
    return out


def without(procs: Any) -> list[Any]:
    """Logits processors `procs` with the plugins left out (also from within a wrapper)."""
    out = []
    for proc in procs:
        if getattr(proc, "conform_plugin", False):
            continue
        inner = getattr(proc, "logitsprocs", None)
        if isinstance(inner, list) and any(getattr(p, "conform_plugin", False) for p in inner):
            rest = [p for p in inner if not getattr(p, "conform_plugin", False)]
            if not rest:
                continue
            proc = copy.copy(proc)
            proc.logitsprocs = rest
        out.append(proc)
    return out


def banned_rows(logitsprocs: Any, probe: torch.Tensor, vocab: int) -> list[set[int]]:
    """Per row of a sampler call, the tokens its plugins ban (on the call's probe), as they stand
    when the call is made (their state moves on with the batch: read it then)."""
    out = applied(logitsprocs, probe)
    return [set(torch.nonzero(torch.isinf(row[:vocab])).flatten().tolist()) for row in out]
