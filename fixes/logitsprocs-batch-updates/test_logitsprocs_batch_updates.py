"""min_p, logit_bias, min_tokens and logits-processor plugins act on their own requests' rows on
HPU (CPU; needs torch and numpy).

Drives the REAL ``InputBatch`` of ``$GAUDI_FIXES_ROOT/vllm_gaudi/v1/worker/hpu_input_batch.py``
with vLLM's REAL logits-processor package of ``$GAUDI_FIXES_ROOT/vllm`` (``build_logitsprocs``,
``MinPLogitsProcessor``, ``LogitBiasLogitsProcessor``, ``MinTokensLogitsProcessor``,
``BatchUpdateBuilder``) plus a plugin-style processor written against vLLM's ``LogitsProcessor``
interface, through the HPU runner's own sequence: ``_update_states``' removals, adds and
condense, then ``sample_tokens``' reorders (lifted from the real ``hpu_model_runner.py`` with
whatever that tree does right after them) and one ``_prepare_sampling`` per sampler call — a
decode bucket padded by repeating a request, and a prefill batch of the prompts whose chunk has
logits. Each call's logits go through the processors in the sampler's order
(``Sampler.apply_logits_processors``' ``non_argmax_invariant``, then ``Sampler.sample``'s
``argmax_invariant``).

Requests: D0 ``logit_bias {5: +100}``; P1 ``min_p 0.5`` with a prompt prefilled in two chunks;
P2 ``min_tokens 4`` (EOS 3); X3 and, later in X3's row, X5 use the plugin (ban token 7 / 13);
N4 none. Six steps with swaps, a padded decode bucket, a condense, a slot refilled by an arrival
and a removal of the last row. Every row must get exactly its own request's constraint (a padding
row its source request's), no other row may change, and no sampler call may raise.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/logitsprocs-batch-updates``
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from vllm_gaudi_stubs import (
    INPUT_BATCH_REL,
    LOGITSPROCS_REL,
    UTILS_REL,
    H2DRecorder,
    Runner,
    SamplingParams,
    SchedulerOutput,
    load,
)

ROOT_ENV = "GAUDI_FIXES_ROOT"
VOCAB = 64
EOS = 3
BIAS_TOKEN, BIAS = 5, 100.0
MIN_P = 0.5
MIN_TOKENS = 4
NEG_INF = float("-inf")

if not os.environ.get(ROOT_ENV):
    pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm/ and vllm_gaudi/",
                allow_module_level=True)
ROOT = Path(os.environ[ROOT_ENV])
for _rel in (INPUT_BATCH_REL, LOGITSPROCS_REL / "builtin.py"):
    if not (ROOT / _rel).is_file():
        pytest.skip(f"no {_rel} under {ROOT}: needs a vllm tree and a vllm_gaudi tree", allow_module_level=True)

# req_id -> (sampling params, prompt length)
REQUESTS = {
    "D0": (SamplingParams(logit_bias={BIAS_TOKEN: BIAS}), 12),
    "P1": (SamplingParams(min_p=MIN_P), 48),
    "P2": (SamplingParams(min_tokens=MIN_TOKENS, eos_token_id=EOS), 8),
    "X3": (SamplingParams(extra_args={"ban_token": 7}), 10),
    "N4": (SamplingParams(), 8),
    "X5": (SamplingParams(extra_args={"ban_token": 13}), 8),
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

    def __init__(self, root: Path, requests: dict = REQUESTS, plugin: bool = True):
        self.requests_params = requests
        loaded = load(root, H2DRecorder(root / UTILS_REL))
        self.module, lp = loaded.input_batch, loaded.logitsprocs
        config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=8),
                                       speculative_config=None)
        custom = [_make_plugin(lp.interface, lp.builtin)] if plugin else []
        # As HPUModelRunner builds them (build_logitsprocs of the tree, plugins appended).
        logitsprocs = loaded.build_logitsprocs(config, torch.device("cpu"), False, False, custom)
        self.batch = self.module.InputBatch(
            max_num_reqs=8,
            max_model_len=256,
            max_num_batched_tokens=512,
            device=torch.device("cpu"),
            pin_memory=False,
            vocab_size=VOCAB,
            block_sizes=[128],
            kernel_block_sizes=[128],
            logitsprocs=logitsprocs,
        )
        self.runner = Runner(root, self.batch, reorder=True)
        self.swaps: list[tuple[int, int]] = []
        swap_states = self.batch.swap_states

        def recording_swap(i1: int, i2: int) -> None:
            self.swaps.append((i1, i2))
            swap_states(i1, i2)

        self.batch.swap_states = recording_swap
        self.generator = torch.Generator().manual_seed(16)

    def request(self, rid: str, num_computed_tokens: int, output_token_ids: list[int]):
        params, length = self.requests_params[rid]
        return self.module.CachedRequestState(
            req_id=rid,
            prompt_token_ids=[(11 * i + len(rid)) % VOCAB for i in range(length)],
            mm_features=[],
            sampling_params=params,
            generator=None,
            block_ids=[[0]],
            num_computed_tokens=num_computed_tokens,
            output_token_ids=output_token_ids,
        )

    def _sample(self, number: int, kind: str, *args) -> Call:
        runner = self.runner
        rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(*args)]
        metadata = runner._prepare_sampling(False, *args)
        logits = torch.randn(len(rows), VOCAB, generator=self.generator) * 3
        out, error = logits.clone(), None
        try:
            # Sampler.apply_logits_processors, then (random sampling) Sampler.sample.
            for processor in metadata.logitsprocs.non_argmax_invariant:
                out = processor.apply(out)
            for processor in metadata.logitsprocs.argmax_invariant:
                out = processor.apply(out)
        except Exception as e:  # noqa: BLE001 - the test reports what the sampler would raise
            out, error = None, e
        counts = {rid: len(runner.requests[rid].output_token_ids) for rid in rows}
        return Call(number, kind, rows, logits, out, error, counts, metadata.logitsprocs)

    def step(self, number: int, scheduled: dict[str, int], completes: set[str], added=(), finished=()) -> Step:
        batch, runner = self.batch, self.runner
        # HPUModelRunner._update_states: removals, progress, arrivals into the lowest freed
        # rows, condense of what is left, refresh on a change.
        removed = [batch.remove_request(rid) for rid in finished]
        for rid in finished:
            runner.requests.pop(rid)
        for rid, state in runner.requests.items():
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        removed = sorted(removed, reverse=True)
        for state in added:
            runner.requests[state.req_id] = state
            batch.add_request(state, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)
        if added or finished:
            batch.refresh_sampling_metadata()
        record = Step(number)
        # sample_tokens: the tree's own reorder statements, then one sampler call per batch.
        del self.swaps[:]
        sched = SchedulerOutput(num_scheduled_tokens=scheduled)
        runner._sample_tokens_reorder(sched)
        record.swaps = list(self.swaps)
        prompts = [rid for i, rid in enumerate(batch.req_ids) if runner._is_prompt(i, sched)]
        decodes = [rid for rid in batch.req_ids if rid not in prompts]
        logits_requests = [rid for rid in prompts if rid in completes]
        if logits_requests:
            record.calls.append(self._sample(number, "prefill", prompts, len(logits_requests), logits_requests))
        if decodes:
            record.calls.append(self._sample(number, "decode", decodes, 1 << (len(decodes) - 1).bit_length()))
        for rid, n in scheduled.items():
            runner.requests[rid].num_computed_tokens += n
        for call in record.calls:
            for rid in dict.fromkeys(call.rows):
                runner.requests[rid].output_token_ids.append(number % VOCAB)
        return record

    def run(self) -> list[Step]:
        r = self.request
        return [
            # D0 and X3 decode; P1 prefills 24 of 48; P2 and N4 prefill whole.
            self.step(1, {"D0": 1, "P1": 24, "P2": 8, "X3": 1, "N4": 8}, {"P2", "N4"},
                      added=[r("D0", 12, [9]), r("P1", 0, []), r("P2", 0, []), r("X3", 10, [2]), r("N4", 0, [])]),
            # P2 and N4 decode now; P1's last chunk is behind them: swapped. No arrival.
            self.step(2, {"D0": 1, "P1": 24, "P2": 1, "X3": 1, "N4": 1}, {"P1"}),
            # N4 finishes (condense moves the last row into its place); D0 catches up 3 tokens
            # (prefill path, moved); three decodes in a bucket of four: one padding row.
            self.step(3, {"D0": 3, "P1": 1, "P2": 1, "X3": 1}, {"D0"}, finished=["N4"]),
            # X3 finishes and X5 arrives in its row.
            self.step(4, {"D0": 1, "P1": 1, "P2": 1, "X5": 8}, {"X5"}, added=[r("X5", 0, [])], finished=["X3"]),
            # P2 has its MIN_TOKENS outputs: EOS is allowed again. Nothing moves.
            self.step(5, {"D0": 1, "P1": 1, "P2": 1, "X5": 1}, set()),
            # The request in the last row finishes: the batch shrinks without a condense.
            self.step(6, {rid: 1 for rid in ("D0", "P1", "P2", "X5") if rid != self._last_row()}, set(),
                      finished=[self._last_row()]),
        ]

    def _last_row(self) -> str:
        return self.batch.req_ids[-1]


def _constraints(rid: str, num_outputs: int) -> list[str]:
    params, _ = REQUESTS[rid]
    found = []
    if params.logit_bias:
        found.append(f"logit_bias {{{BIAS_TOKEN}: +{BIAS:g}}}")
    if params.min_p:
        found.append(f"min_p {params.min_p:g}")
    if params.min_tokens and num_outputs < params.min_tokens:
        found.append(f"min_tokens {params.min_tokens} (EOS {EOS} masked)")
    if params.extra_args:
        found.append(f"plugin ban of token {params.extra_args['ban_token']}")
    return found


def _expected(rid: str, num_outputs: int, row: torch.Tensor) -> torch.Tensor:
    """What the sampler should see for a request's row, computed here from the request's
    parameters (vLLM's definitions: bias added, EOS at -inf, min_p keeps tokens of probability
    >= min_p times the largest, a plugin's ban at -inf)."""
    params, _ = REQUESTS[rid]
    want = row.clone()
    if params.logit_bias:
        for token, bias in params.logit_bias.items():
            want[token] += bias
    if params.min_tokens and num_outputs < params.min_tokens:
        want[EOS] = NEG_INF
    if params.extra_args:
        want[params.extra_args["ban_token"]] = NEG_INF
    if params.min_p:
        probs = torch.softmax(row, dim=-1)
        want[probs < params.min_p * probs.max()] = NEG_INF
    return want


def _observed(row_in: torch.Tensor, row_out: torch.Tensor) -> str:
    changed = [t for t in range(VOCAB) if not torch.equal(row_in[t], row_out[t])]
    if not changed:
        return "nothing applied"
    return "tokens " + ", ".join(f"{t}: {row_in[t].item():.2f} -> {row_out[t].item():.2f}" for t in changed[:6]) + (
        f" (+{len(changed) - 6} more)" if len(changed) > 6 else "")


@pytest.fixture(scope="module")
def steps() -> list[Step]:
    return Scenario(ROOT).run()


def _calls(steps: list[Step]) -> list[Call]:
    return [call for step in steps for call in step.calls]


def test_scenario_exercises_swaps_padding_condense_and_refill(steps: list[Step]):
    assert steps[1].swaps and steps[2].swaps, [s.swaps for s in steps]
    padded = [c for c in _calls(steps) if c.kind == "decode" and len(set(c.rows)) < len(c.rows)]
    assert padded, "no decode bucket was padded"
    kinds = {(c.step, c.kind) for c in _calls(steps)}
    assert {(1, "prefill"), (1, "decode"), (2, "prefill"), (3, "prefill"), (3, "decode"), (4, "prefill")} <= kinds
    assert steps[1].calls[0].rows == ["P1"], "P1's last chunk is its own prefill call on step 2"
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


def test_inactive_processors_cost_nothing():
    """With no request using min_p, logit_bias or min_tokens (and no plugin), no sampler call
    gets a processor to run: the host knows they are empty."""
    plain = {rid: (SamplingParams(), length) for rid, (_, length) in REQUESTS.items()}
    scenario = Scenario(ROOT, plain, plugin=False)
    handed = [f"step {c.step} {c.kind}: {[type(p).__name__ for p in c.logitsprocs.all]}"
              for c in _calls(scenario.run()) if list(c.logitsprocs.all)]
    assert not handed, "idle logits processors handed to the sampler:\n" + "\n".join(handed)
