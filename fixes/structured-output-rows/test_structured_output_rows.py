"""Structured output: each logits row is sampled with its own request's parameters (CPU; needs
torch and numpy).

When a step holds a structured-output request, ``HPUModelRunner.sample_tokens`` does not sample
each forward pass on its own: it keeps the decodes' logits and each prefill batch's logits, joins
them decodes first and samples them in one call. The harness (harness.py) runs that branch — the
REAL ``if self.use_structured_output:`` block of ``sample_tokens`` with the runner's own
``_run_sampling`` and ``_prepare_sampling`` — after vllm_gaudi's real ``_update_states``, driven by
vLLM's scheduler output: D0 (greedy) and D1 (seeded) prefill and decode; then S4, a
JSON-constrained prompt, arrives with P2 (and, in one test, P3's first chunk of 40 tokens) on the
first structured step. The model stands in for the forward passes (a logits row is a function of
its request's tokens, so the recorded sampler can tell whose row it got).

Every row the sampler is handed must carry its own request's temperature, top_p, top_k,
generator, penalties, prompt and output tokens, and there must be one metadata row per logits row.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/structured-output-rows``
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from fixtures import mode, root  # noqa: F401  (pytest fixtures)

import harness

SAMPLING_EPS = 1e-5

# S4 is the JSON-constrained request, greedy; D1 is seeded; each has its own penalties.
REQUESTS = {
    "D0": dict(temperature=0.0, repetition_penalty=1.2),
    "D1": dict(temperature=0.9, top_p=0.8, top_k=50, frequency_penalty=0.5, presence_penalty=0.1, seed=7),
    "P2": dict(temperature=1.3, top_p=0.95, top_k=5, frequency_penalty=0.2, presence_penalty=0.6,
               repetition_penalty=1.1),
    "P3": dict(temperature=0.6, top_p=0.7, top_k=20, presence_penalty=0.3, repetition_penalty=1.3),
    "S4": dict(temperature=0.0, frequency_penalty=0.4, repetition_penalty=1.05),
}
STRUCTURED = ["S4"]
PROMPT_LEN = {"D0": 6, "D1": 9, "P2": 7, "P3": 40, "S4": 5}


def _structured_step(root, mode, prompts: dict[str, int]) -> tuple[harness.Harness, harness.Step, dict]:
    """D0 and D1 prefill and decode twice; then the first structured step: S4 and `prompts`
    arrive, scheduled that many tokens, while D0 and D1 decode. Returns the harness, the step
    and its one sampler call."""
    h = harness.Harness(root, mode)
    for n, (rid, params) in enumerate(REQUESTS.items()):
        h.add(rid, harness.prompt(PROMPT_LEN[rid], n), max_tokens=32, **params)
    h.step({"D0": PROMPT_LEN["D0"], "D1": PROMPT_LEN["D1"]})
    h.step({"D0": 1, "D1": 1})
    h.step({"D0": 1, "D1": 1})
    before = len(h.sampler.calls)
    grammar = types.SimpleNamespace(structured_output_request_ids=STRUCTURED)  # its bitmask is not the subject
    scheduled = {"D0": 1, "D1": 1, "S4": PROMPT_LEN["S4"], **prompts}
    try:
        step = h.step(scheduled, grammar_output=grammar)
    except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
        rows = [f"{len(c['metadata'].temperature)} metadata rows for {c['rows']} logits rows {h.model.owners(c['logits'])}"
                for c in h.sampler.calls[before:]]
        pytest.fail(f"the first structured-output step (scheduled {scheduled}) raised in the sampler under {mode} "
                    f"scheduling: {type(e).__name__}: {e} ({'; '.join(rows)}) — on a server this ends EngineCore "
                    "and every request in flight")
    calls = h.sampler.calls[before:]
    assert step.structured and len(calls) == 1, "the structured-output branch made no single sampler call"
    return h, step, calls[0]


def _expected(params) -> dict[str, float]:
    return {  # as InputBatch.add_request stores them
        "temperature": -1.0 if params.temperature < SAMPLING_EPS else params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if 0 < params.top_k < harness.VOCAB else harness.VOCAB,
        "frequency_penalties": params.frequency_penalty,
        "presence_penalties": params.presence_penalty,
        "repetition_penalties": params.repetition_penalty,
    }


def _mismatches(h: harness.Harness, call: dict) -> list[str]:
    md = call["metadata"]
    rows = h.model.owners(call["logits"])
    n_meta = len(md.temperature)
    wrong = []
    if n_meta != len(rows):
        wrong.append(f"{n_meta} metadata rows for {len(rows)} logits rows {rows}: the sampler's "
                     f"temperature/penalty rows do not line up with the logits")
    generators = {rid: state.generator for rid, state in h.runner.requests.items() if state.generator is not None}
    for i, rid in enumerate(rows[:n_meta]):
        state = h.runner.requests[rid]
        for name, value in _expected(state.sampling_params).items():
            tensor = getattr(md, name)
            if tensor is None:
                continue  # no_top_p / no_top_k: nothing to hand over
            got = tensor[i].item()
            if np.float32(got).item() != np.float32(value).item():
                wrong.append(f"logits row {i} ({rid}) was sampled with {name} {got:g}, it asked {value:g}")
        gen = md.generators.get(i)
        if gen is not generators.get(rid):
            owner = next((r for r, g in generators.items() if g is gen), None)
            wrong.append(f"logits row {i} ({rid}) got {owner + chr(39) + 's generator' if owner else 'no generator'}"
                         f", it has {'its own seed' if rid in generators else 'none'}")
        if md.output_token_ids[i] is not state.output_token_ids:
            wrong.append(f"logits row {i} ({rid}) was penalised for output tokens {md.output_token_ids[i]}, "
                         f"its own are {state.output_token_ids}")
        prompt, own = md.prompt_token_ids[i].tolist(), state.prompt_token_ids
        if prompt[:len(own)] != own or any(t != harness.VOCAB for t in prompt[len(own):]):
            wrong.append(f"logits row {i} ({rid}) was penalised against another request's prompt")
    return wrong


def test_mixed_step_rows_follow_their_requests(root, mode):  # noqa: F811
    """D0 and D1 decode while S4 (JSON) and P2 prefill: one call, rows [D0, D1, S4, P2]."""
    h, _, call = _structured_step(root, mode, {"P2": PROMPT_LEN["P2"]})
    wrong = _mismatches(h, call)
    assert not wrong, ("a structured-output step sampled rows with another request's parameters:\n"
                       + "\n".join(wrong))


def test_prompt_chunk_without_logits(root, mode):  # noqa: F811
    """As above, plus P3 whose first chunk does not finish its prompt — under sync scheduling on
    the first structured-output step it has no logits row (``_prepare_inputs`` gives such a chunk
    a row only when ``use_structured_output`` was already set, by the previous step). Every row
    must still carry its own request's parameters, not be shifted by P3."""
    h, _, call = _structured_step(root, mode, {"P2": PROMPT_LEN["P2"], "P3": 16})
    wrong = _mismatches(h, call)
    assert not wrong, ("a structured-output step sampled rows with another request's parameters:\n"
                       + "\n".join(wrong))


def test_scenario_is_a_mixed_step(root, mode):  # noqa: F811
    """The step has decodes and prefills and samples them in one call, decodes first."""
    h, _, call = _structured_step(root, mode, {"P2": PROMPT_LEN["P2"]})
    assert h.model.owners(call["logits"]) == ["D0", "D1", "S4", "P2"]
