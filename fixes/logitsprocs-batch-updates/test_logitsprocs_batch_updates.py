"""min_p, logit_bias, min_tokens and logits-processor plugins act on their own requests' rows on
HPU, under sync and async scheduling (CPU; needs torch and numpy and a root holding ``vllm/`` and
``vllm_gaudi/``).

The harness (``_support/harness.py``) runs the engine steps: vLLM's scheduler output through the
runner's own ``_update_states`` into the REAL ``InputBatch`` of the tree, with vLLM's REAL
logits-processor package (``build_logitsprocs``: ``MinPLogitsProcessor``,
``LogitBiasLogitsProcessor``, ``MinTokensLogitsProcessor``) plus a plugin-style processor written
against vLLM's ``LogitsProcessor`` interface; then ``sample_tokens``' own reorders and one
``_run_sampling`` / ``_prepare_sampling`` per sampler call (a decode bucket padded by repeating a
request, one call per prefill batch whose chunks have logits). The sampler here runs each call's
processors in the sampler's order (``Sampler.apply_logits_processors``' ``non_argmax_invariant``,
then ``Sampler.sample``'s ``argmax_invariant``) and samples greedily.

Requests: D0 ``logit_bias {5: +100}``, preempted and resumed with a 3-token catch-up (prefill
path, in a freed row); P1 ``min_p 0.5`` with a prompt prefilled in two chunks; P2 ``min_tokens 4``
(EOS 3); X3 and, later in X3's row, X5 use the plugin (ban token 7 / 13); N4 none. Seven steps with
swaps, a padded decode bucket, a condense, a slot refilled by an arrival and a removal of the last
row. Every row must get exactly its own request's constraint (a padding row its source request's),
no other row may change, and no sampler call may raise.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/logitsprocs-batch-updates``
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import torch
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness

VOCAB = 64
EOS = 3
BIAS_TOKEN, BIAS = 5, 100.0
MIN_P = 0.5
MIN_TOKENS = 4
NEG_INF = float("-inf")

# req_id -> (sampling params, prompt length); greedy unless a temperature is given (vLLM's
# SamplingParams drops min_p for a greedy request; the sampler here takes the argmax anyway)
REQUESTS = {
    "D0": (dict(logit_bias={BIAS_TOKEN: BIAS}), 13),
    "P1": (dict(min_p=MIN_P, temperature=1.0), 48),
    "P2": (dict(min_tokens=MIN_TOKENS), 8),
    "X3": (dict(extra_args={"ban_token": 7}), 10),
    "N4": (dict(), 8),
    "X5": (dict(extra_args={"ban_token": 13}), 8),
}


def _make_plugin(interface: types.ModuleType, builtin: types.ModuleType) -> type:
    """A plugin as users write them for ``--logits-processors``: state keyed by persistent
    row through vLLM's own ``process_dict_updates``; bans one token per request."""

    class BanTokenLogitsProcessor(interface.LogitsProcessor):

        def __init__(self, vllm_config, device, is_pin_memory):
            self.banned: dict[int, int] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update) -> None:
            builtin.process_dict_updates(self.banned, batch_update,
                                         lambda params, _, __: (params.extra_args or {}).get("ban_token"))

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for row, token in self.banned.items():
                logits[row, token] = NEG_INF
            return logits

    return BanTokenLogitsProcessor


@dataclass
class Call:
    step: int
    kind: str  # decode | prefill
    rows: list[str]  # the request of each logits row, padding included
    logits_in: torch.Tensor
    logits_out: Optional[torch.Tensor]
    error: Optional[BaseException]
    # Outputs the request had when the step began (what min_tokens counts).
    num_outputs: dict[str, int]
    logitsprocs: Any


@dataclass
class Step:
    number: int
    swaps: list[tuple[int, int]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)


class Scenario:

    def __init__(self, root, mode: str, requests: dict = REQUESTS, plugin: bool = True):  # noqa: F811
        self.requests = requests
        lp = harness.logitsprocs_package(root)
        # As HPUModelRunner builds them (build_logitsprocs of the tree, plugins appended).
        self.h = harness.Harness(root, mode, vocab=VOCAB,
                                 plugins=(_make_plugin(lp.interface, lp.builtin), ) if plugin else ())
        self.h.runner.sampler = self._sample
        self.swaps = self.h.record_swaps()
        self.steps: list[Step] = []
        self.scheduled: dict[str, int] = {}
        for salt, (rid, (kw, length)) in enumerate(requests.items()):
            self._add(rid, kw, length, salt)

    def _add(self, rid: str, kw: dict, length: int, salt: int) -> None:
        self.h.add(rid, [t % VOCAB for t in harness.prompt(length, salt)], **{"temperature": 0.0, **kw})
        # as the engine's input processing sets it (the generation config's EOS)
        self.h.scheduler.requests[rid].params._all_stop_token_ids = {EOS}

    def _sample(self, logits: torch.Tensor, sampling_metadata: Any) -> types.SimpleNamespace:
        sched = self.h.scheduler.requests
        rows = self.h.model.owners(logits)
        decode = all(self.scheduled[rid] == 1 for rid in rows)  # every prompt chunk here is longer
        logits_in = logits.clone()
        out, error = logits.clone(), None
        lp = sampling_metadata.logitsprocs
        try:
            # Sampler.apply_logits_processors, then (random sampling) Sampler.sample.
            for processor in lp.non_argmax_invariant:
                out = processor.apply(out)
            for processor in lp.argmax_invariant:
                out = processor.apply(out)
        except Exception as e:  # noqa: BLE001 - the test reports what the sampler would raise
            out, error = None, e
        counts = {rid: len(sched[rid].output) for rid in rows}
        self.steps[-1].calls.append(Call(len(self.steps), "decode" if decode else "prefill", rows, logits_in, out,
                                         error, counts, lp))
        tokens = (logits_in if out is None else out).argmax(dim=-1).to(torch.int32)
        return types.SimpleNamespace(sampled_token_ids=tokens.view(-1, 1), logprobs_tensors=None)

    def step(self, scheduled: dict[str, int], finished=()) -> Step:
        for rid in finished:
            self.h.scheduler.finish(rid)
        self.steps.append(Step(len(self.steps) + 1))
        del self.swaps[:]
        self.scheduled = scheduled
        self.h.step(scheduled)
        self.steps[-1].swaps = list(self.swaps)
        return self.steps[-1]

    def run(self) -> list[Step]:
        h, step = self.h, self.step
        # 1. D0, P2, X3, N4 prefill whole; P1 prefills 24 of 48 (no logits row yet).
        step({"D0": 13, "P1": 24, "P2": 8, "X3": 10, "N4": 8})
        # 2. P1's last chunk is behind the decodes: swapped; a bucket of four decodes.
        step({"D0": 1, "P1": 24, "P2": 1, "X3": 1, "N4": 1})
        # 3. N4 finishes and D0 is preempted: both rows go, the batch condenses; three decodes in
        # a bucket of four: one padding row.
        h.scheduler.preempt("D0")
        step({"P1": 1, "P2": 1, "X3": 1}, finished=["N4"])
        # 4. D0 resumes in a freed row: its prefix-cache hit is 12 of its 15 tokens, a 3-token
        # catch-up on the prefill path.
        step({"D0": 3, "P1": 1, "P2": 1, "X3": 1})
        # 5. X3 finishes and X5 arrives in its row.
        step({"D0": 1, "P1": 1, "P2": 1, "X5": 8}, finished=["X3"])
        # 6. P2 has its MIN_TOKENS outputs: EOS is allowed again.
        step({"D0": 1, "P1": 1, "P2": 1, "X5": 1})
        # 7. The request in the last row finishes: the batch shrinks without a condense.
        last = h.batch.req_ids[-1]
        step({rid: 1 for rid in ("D0", "P1", "P2", "X5") if rid != last}, finished=[last])
        return self.steps


def _params(rid: str) -> dict:
    return REQUESTS[rid][0]


def _constraints(rid: str, num_outputs: int) -> list[str]:
    params = _params(rid)
    found = []
    if params.get("logit_bias"):
        found.append(f"logit_bias {{{BIAS_TOKEN}: +{BIAS:g}}}")
    if params.get("min_p"):
        found.append(f"min_p {params['min_p']:g}")
    if params.get("min_tokens") and num_outputs < params["min_tokens"]:
        found.append(f"min_tokens {params['min_tokens']} (EOS {EOS} masked)")
    if params.get("extra_args"):
        found.append(f"plugin ban of token {params['extra_args']['ban_token']}")
    return found


def _expected(rid: str, num_outputs: int, row: torch.Tensor) -> torch.Tensor:
    """What the sampler should see for a request's row, computed here from the request's
    parameters (vLLM's definitions: bias added, EOS at -inf, min_p keeps tokens of probability
    >= min_p times the largest, a plugin's ban at -inf)."""
    params = _params(rid)
    want = row.clone()
    for token, bias in (params.get("logit_bias") or {}).items():
        want[token] += bias
    if params.get("min_tokens") and num_outputs < params["min_tokens"]:
        want[EOS] = NEG_INF
    if params.get("extra_args"):
        want[params["extra_args"]["ban_token"]] = NEG_INF
    if params.get("min_p"):
        probs = torch.softmax(row, dim=-1)
        want[probs < params["min_p"] * probs.max()] = NEG_INF
    return want


def _observed(row_in: torch.Tensor, row_out: torch.Tensor) -> str:
    changed = [t for t in range(VOCAB) if not torch.equal(row_in[t], row_out[t])]
    if not changed:
        return "nothing applied"
    return "tokens " + ", ".join(f"{t}: {row_in[t].item():.2f} -> {row_out[t].item():.2f}" for t in changed[:6]) + (
        f" (+{len(changed) - 6} more)" if len(changed) > 6 else "")


@pytest.fixture(scope="module")
def steps(root, mode) -> list[Step]:  # noqa: F811
    return Scenario(root, mode).run()


def _calls(steps: list[Step]) -> list[Call]:
    return [call for step in steps for call in step.calls]


def test_scenario_exercises_swaps_padding_condense_and_refill(steps: list[Step]):
    assert steps[1].swaps and steps[4].swaps, [s.swaps for s in steps]
    padded = [c for c in _calls(steps) if c.kind == "decode" and len(set(c.rows)) < len(c.rows)]
    assert padded, "no decode bucket was padded"
    kinds = {(c.step, c.kind) for c in _calls(steps)}
    assert {(1, "prefill"), (2, "prefill"), (2, "decode"), (3, "decode"), (4, "prefill"), (4, "decode"),
            (5, "prefill")} <= kinds, kinds
    assert steps[1].calls[0].rows == ["P1"], "P1's last chunk is its own prefill call on step 2"
    assert (steps[3].calls[0].kind, set(steps[3].calls[0].rows)) == ("prefill", {"D0"}), \
        "D0's catch-up after its resumption is a prefill call on step 4"
    active = {rid for c in _calls(steps) for rid in c.rows if _constraints(rid, c.num_outputs[rid])}
    assert active == {"D0", "P1", "P2", "X3", "X5"}, active


def test_no_sampler_call_raises(steps: list[Step]):
    raised = [f"step {c.step} {c.kind} call (rows {c.rows}): {type(c.error).__name__}: {c.error}"
              for c in _calls(steps) if c.error is not None]
    assert not raised, ("the logits processors raised inside the sampler (on a server this ends EngineCore):\n" +
                        "\n".join(raised))


def test_each_constraint_lands_on_its_own_row(steps: list[Step]):
    wrong, checked = [], 0
    for call in _calls(steps):
        if call.error is not None:
            wrong.append(f"step {call.step} {call.kind} call raised {type(call.error).__name__}")
            continue
        for i, rid in enumerate(call.rows):
            source = call.rows.index(rid)  # a padding row repeats the request of an earlier row
            n = call.num_outputs[rid]
            want = _expected(rid, n, call.logits_in[source])
            checked += 1
            if not torch.equal(call.logits_out[i], want):
                asked = ", ".join(_constraints(rid, n)) or "no logits processor"
                pad = f" (padding for row {source})" if source != i else ""
                wrong.append(f"step {call.step} {call.kind} row {i} ({rid}{pad}) asked for {asked}; the sampler "
                             f"saw {_observed(call.logits_in[i], call.logits_out[i])}")
    assert not wrong, (f"{len(wrong)} of {checked} rows handed to the sampler do not carry their own request's "
                       "min_p / logit_bias / min_tokens / plugin constraint:\n" + "\n".join(wrong))


def test_inactive_processors_cost_nothing(root, mode):  # noqa: F811
    """With no request using min_p, logit_bias or min_tokens (and no plugin), no sampler call
    gets a processor to run: the host knows they are empty."""
    plain = {rid: (dict(), length) for rid, (_, length) in REQUESTS.items()}
    scenario = Scenario(root, mode, plain, plugin=False)
    handed = [f"step {c.step} {c.kind} ({mode} scheduling): {[type(p).__name__ for p in c.logitsprocs.all]}"
              for c in _calls(scenario.run()) if list(c.logitsprocs.all)]
    assert not handed, "idle logits processors handed to the sampler:\n" + "\n".join(handed)
