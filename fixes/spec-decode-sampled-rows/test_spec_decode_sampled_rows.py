"""Speculative decoding with sampled requests (temperature > 0) on HPU: no step raises, the emitted
tokens follow the target's sampling distribution, seeded requests repeat, greedy requests beside
sampled ones keep their exact tokens (CPU; needs torch, numpy and vLLM's pure-Python deps:
_support/requirements.txt).

Drives vllm_gaudi's real ``InputBatch``, the runner's real ``_update_states``,
``_prepare_spec_decode_inputs`` and ``sample_tokens``' decode-sampling statement, vLLM's real
``Sampler`` and ``RejectionSampler`` with what ``hpu_rejection_sampler.py`` installs in vLLM's module
(the spec ``harness.Harness``; sync scheduling only: vllm_gaudi turns async scheduling off with a
speculative config, so there is no async case). The distribution tests call vLLM's real
``RejectionSampler`` with the HPU installs on one batch of many identical requests (the HPU layout:
every request the same draft count, so padded and compact rows coincide).

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm/ and vllm_gaudi/> pytest fixes/spec-decode-sampled-rows``
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import torch
import torch.utils._python_dispatch
import torch.utils._pytree
from fixtures import root  # noqa: F401  (pytest fixture)

import device_ops
import harness
import spec_decode
import spec_sampled

PROMPTS = spec_decode.SCENARIO_PROMPTS
GATE = 0.03  # the total-variation gate of the reference suite (`gaudi-fixes equiv`)
DRAWS = 60000  # at the gate, the noise of exact sampling stays below 0.025 (99.9%) for every count tested here


def _step(h: harness.Harness, scheduled: dict[str, int], drafts: dict[str, list[int]], what: str,
          number: int) -> dict[str, list[int]]:
    try:
        return h.step(scheduled, drafts={rid: d for rid, d in drafts.items() if d}).returned
    except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
        pytest.fail(f"speculative-decoding step {number} with {what} raised {type(e).__name__}: {e} "
                    "(an exception in sample_tokens ends EngineCore, and every request in flight fails)")


def _spec_run(root, params: dict[str, dict[str, Any]], counts: dict[str, int], what: str, steps: int = 4,  # noqa: F811
              drafter: Optional[Callable[[list[int], int], list[int]]] = None) -> tuple[Any, list[Any]]:
    """Requests `params` (rid -> sampling parameters) prefilled, one plain decode, then `steps` spec
    steps with `counts[rid]` drafts each (the model's greedy continuation unless `drafter`)."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    for rid, p in params.items():
        h.add(rid, PROMPTS[rid], max_tokens=64, **p)
    h.step({rid: len(PROMPTS[rid]) for rid in params})
    h.step({rid: 1 for rid in params})
    out = []
    for number in range(3, 3 + steps):
        drafts = {rid: (drafter or spec_decode.greedy)(h.scheduler.requests[rid].tokens, n) for rid, n in counts.items()}
        returned = _step(h, {rid: 1 + len(d) for rid, d in drafts.items()}, drafts, what, number)
        for rid, d in drafts.items():
            got = returned.get(rid) or []
            assert 1 <= len(got) <= len(d) + 1 and got[:-1] == d[:len(got) - 1], (
                f"speculative-decoding step {number} with {what}: request {rid} with drafts {d} got {got} (a step "
                "emits the accepted drafts, then one recovered or bonus token)")
        out.append((number, drafts, returned))
    return h, out


def test_temperature_alone(root):  # noqa: F811
    _spec_run(root, {"X": {"temperature": 0.7}}, {"X": 3}, "temperature=0.7")


def least_likely(context: list[int], n: int) -> list[int]:
    """Drafts a top_k / top_p never keeps: the model's least likely token at each position."""
    out: list[int] = []
    for _ in range(n):
        out.append(int(spec_decode.context_row(context + out).argmin()))
    return out


@pytest.mark.parametrize("cut", [{"top_k": 4}, {"top_p": 0.5}, {"top_k": 6, "top_p": 0.8}])
def test_top_k_top_p(root, cut):  # noqa: F811
    """Drafts outside the kept set are always rejected and the recovered token is drawn from the kept
    set of the target, as vLLM applies top_k / top_p to the target rows."""
    what = f"temperature=0.7 and {cut}"
    h, steps = _spec_run(root, {"X": {"temperature": 0.7, **cut}}, {"X": 2}, what, steps=6, drafter=least_likely)
    tokens = h.scheduler.requests["X"].tokens
    start = len(PROMPTS["X"]) + 1  # the spec steps' tokens
    for position in range(start, len(tokens)):
        probs = (spec_decode.context_row(tokens[:position]) / 0.7).softmax(-1)
        order = probs.argsort(descending=True)
        keep = order[:cut.get("top_k", harness.VOCAB)]
        if "top_p" in cut:  # the smallest set of most likely tokens whose mass reaches top_p
            mass = probs[keep].cumsum(0)
            keep = keep[:int((mass < cut["top_p"]).sum()) + 1]
        assert tokens[position] in keep.tolist(), (
            f"request X with {what} said token {tokens[position]} (#{position - len(PROMPTS['X']) + 1}) on a "
            f"speculative-decoding step, outside its kept set {sorted(keep.tolist())}")


def _seeded(root, seed: int, beside: bool) -> list[int]:  # noqa: F811
    params = {"X": {"temperature": 0.7, "seed": seed}}
    counts = {"X": 3}
    if beside:
        params["Y"] = {"temperature": 1.0}
        counts["Y"] = 2
    h, _ = _spec_run(root, params, counts, f"temperature=0.7, seed={seed}", steps=5)
    return h.output("X")


def test_seeded_reruns_equal(root):  # noqa: F811
    """A seeded request draws from its own generator: the same tokens on a rerun, and beside another
    sampled request (whose draws come from the global generator)."""
    first, again, beside = _seeded(root, 1234, False), _seeded(root, 1234, False), _seeded(root, 1234, True)
    assert first == again, f"seeded request (seed=1234) with speculative decoding gave {first}, then {again}"
    assert first == beside, (f"seeded request (seed=1234) with speculative decoding gave {first} alone and {beside} "
                             "beside another sampled request")
    other = _seeded(root, 4321, False)
    assert other != first, f"seeds 1234 and 4321 gave the same tokens {first}"


def _greedy_want(root, h, drafts: dict[str, list[int]]) -> dict[str, list[int]]:  # noqa: F811
    rids = [rid for rid in drafts if h.scheduler.requests[rid].params.temperature == 0.0]
    want = spec_decode.gpu_step(root, [
        spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid], list(h.scheduler.requests[rid].output),
                               drafts[rid]) for rid in rids
    ], spec_decode.context_row)
    return dict(zip(rids, want))


def test_sampled_request_without_drafts(root):  # noqa: F811
    """Y (temperature 0.7) has no drafts this step beside greedy X with drafts: Y gets one token, X the
    tokens vLLM's GPU path gives."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    h.add("X", PROMPTS["X"], temperature=0.0, max_tokens=64)
    h.add("Y", PROMPTS["Y"], temperature=0.7, max_tokens=64)
    h.step({"X": len(PROMPTS["X"]), "Y": len(PROMPTS["Y"])})
    h.step({"X": 1, "Y": 1})
    for number, wrong in ((3, False), (4, True), (5, False)):
        drafts = {"X": spec_decode.greedy(h.scheduler.requests["X"].tokens, 3), "Y": []}
        if wrong:
            drafts["X"][1] = (drafts["X"][1] + 1) % harness.VOCAB
        want = _greedy_want(root, h, drafts)
        got = _step(h, {"X": 4, "Y": 1}, drafts, "a temperature=0.7 request without drafts", number)
        assert len(got.get("Y") or []) == 1, f"step {number}: request Y without drafts got {got.get('Y')}"
        assert got.get("X") == want["X"], (
            f"step {number}: greedy request X (drafts {drafts['X']}) beside a sampled request without drafts got "
            f"{got.get('X')} where vLLM's GPU path gives {want['X']}")


def test_sampled_prefill_beside_greedy(root):  # noqa: F811
    """Z (temperature 0.7) is still prefilling (its prompt in two chunks) while greedy X and Y take spec
    steps: the batch is not all greedy, and X and Y (temperature stored as -1.0 on HPU) get exactly
    the tokens vLLM's GPU path gives, not their least likely ones."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    for rid in ("X", "Y"):
        h.add(rid, PROMPTS[rid], temperature=0.0, max_tokens=64)
    h.step({"X": len(PROMPTS["X"]), "Y": len(PROMPTS["Y"])})
    h.step({"X": 1, "Y": 1})
    h.add("Z", PROMPTS["Z"], temperature=0.7, max_tokens=64)
    chunks = (3, len(PROMPTS["Z"]) - 3, 1)
    for number, chunk in enumerate(chunks, start=3):
        drafts = {"X": spec_decode.greedy(h.scheduler.requests["X"].tokens, 2),
                  "Y": spec_decode.greedy(h.scheduler.requests["Y"].tokens, 1)}
        if number == 4:
            drafts["Y"][0] = (drafts["Y"][0] + 1) % harness.VOCAB
        want = _greedy_want(root, h, drafts)
        scheduled = {"X": 3, "Y": 2, "Z": chunk}
        got = _step(h, scheduled, drafts, "a temperature=0.7 request prefilling beside greedy ones", number)
        for rid in ("X", "Y"):
            assert got.get(rid) == want[rid], (
                f"step {number}: greedy request {rid} (drafts {drafts[rid]}) beside a sampled request still "
                f"prefilling got {got.get(rid)} where vLLM's GPU path gives {want[rid]}")


def test_seeded_steps_equal_vllms_gpu_path(root):  # noqa: F811
    """Seeded sampled requests (X: temperature 0.7, top_k 20; Z: temperature 1.0, top_p 0.9) beside greedy
    Y: each spec step's tokens equal vLLM's GPU path for the same step (vLLM's own ``rejection_sample``
    with ``spec_sampled``'s stand-ins for its Triton kernels, its uniforms drawn in float32 as the HPU
    draws them: Gaudi has no float64), given each seeded request's generator in the state the HPU
    rejection sampler finds it. That state is one bonus-row draw further than on the
    GPU: vllm_gaudi's runner samples the bonus rows once itself (``_run_sampling``, for the sampling
    metadata) before the ``RejectionSampler`` samples them again, so a seeded request's tokens cannot
    equal the GPU's for the same seed; from there on, the draws are vLLM's."""
    h = harness.Harness(root, harness.Config(spec_tokens=4, buckets=(2, 4)))
    params = {"X": dict(temperature=0.7, top_k=20, seed=11), "Y": dict(temperature=0.0),
              "Z": dict(temperature=1.0, top_p=0.9, seed=12)}
    for rid, p in params.items():
        h.add(rid, PROMPTS[rid], max_tokens=64, **p)
    h.step({rid: len(PROMPTS[rid]) for rid in params})
    h.step({rid: 1 for rid in params})
    plan = ({"X": 3, "Y": 2, "Z": 1}, {"X": 1, "Y": 3, "Z": 2}, {"X": 2, "Y": 0, "Z": 3}, {"X": 3, "Y": 1, "Z": 0},
            {"X": 2, "Y": 2, "Z": 2}, {"X": 3, "Y": 3, "Z": 3})
    compared = 0
    for number, counts in enumerate(plan, start=3):
        drafts = {rid: spec_decode.greedy(h.scheduler.requests[rid].tokens, n) for rid, n in counts.items()}
        if number % 2:  # a likely but not most likely first draft
            for rid in ("X", "Z"):
                if drafts[rid]:
                    row = spec_decode.context_row(h.scheduler.requests[rid].tokens)
                    drafts[rid][0] = int(row.argsort(descending=True)[1])
        order = sorted(counts, key=lambda rid: h.batch.req_id_to_index[rid])
        generators = {}
        for i, rid in enumerate(order):
            own = h.batch.generators.get(h.batch.req_id_to_index[rid])
            if own is not None:
                g = torch.Generator()
                g.set_state(own.get_state())
                torch.empty(harness.VOCAB).exponential_(generator=g)  # vllm_gaudi's own bonus-row draw
                generators[i] = g
        want = spec_decode.gpu_step(root, [
            spec_decode.GpuRequest(h.scheduler.requests[rid].params, PROMPTS[rid],
                                   list(h.scheduler.requests[rid].output), drafts[rid]) for rid in order
        ], spec_decode.context_row, generators)
        got = _step(h, {rid: 1 + len(d) for rid, d in drafts.items()}, drafts, "seeded sampled requests", number)
        for rid, tokens in zip(order, want):
            compared += len(tokens)
            assert got.get(rid) == tokens, (
                f"speculative-decoding step {number}: request {rid} ({params[rid]}, drafts {drafts[rid]}) got "
                f"{got.get(rid)} where vLLM's GPU path, its generator in the same state, gives {tokens}")
    print(f"seeded steps: {compared} tokens equal to vLLM's GPU path")


# The stand-ins for vLLM's Triton kernels (spec_sampled.py) keep each kernel's contract, on
# hand-worked cases (compact layout: requests of 2, 0 and 1 drafts).


def _kernel_case():
    cu = torch.tensor([2, 2, 3], dtype=torch.int32)
    drafts = torch.tensor([1, 2, 3], dtype=torch.int32)
    target = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.3, 0.1, 0.5, 0.1], [0.25, 0.25, 0.25, 0.25]])
    return cu, drafts, target


def test_stand_in_expand():
    out = torch.empty(3)
    spec_sampled.expand(out, torch.tensor([0.5, 9.0, 0.0]), torch.tensor([2, 2, 3], dtype=torch.int32), 0, 1)
    assert out.tolist() == [0.5, 0.5, 1.0]


def test_installed_expand_keeps_the_kernels_contract(root):  # noqa: F811
    """The expand_batch_to_tokens hpu_rejection_sampler.py installs (torch ops, no Triton) gives each
    token its request's value as the expand_kernel stand-in does: requests without tokens, a
    replaced value, a batch of 60000 (the distribution tests' size: no [tokens, batch] temporary)."""
    expand_batch_to_tokens = spec_decode.RealVllm.get(root).hpu_installs["expand_batch_to_tokens"]
    generator = torch.Generator().manual_seed(0)
    cases = [(torch.tensor([0.5, 9.0, 0.0]), torch.tensor([2, 2, 3], dtype=torch.int32))]
    for size in [*range(1, 9), 60000]:
        counts = torch.randint(0, 4, (size, ), generator=generator)
        counts[-1] = 1
        cases.append((torch.randint(0, 3, (size, ), generator=generator).float(), counts.cumsum(0).to(torch.int32)))
    for x, cu in cases:
        want = torch.empty(int(cu[-1]))
        spec_sampled.expand(want, x, cu, 0, 7)
        got = expand_batch_to_tokens(x, cu, int(cu[-1]), 0, 7)
        assert torch.equal(got, want), (
            f"expand_batch_to_tokens on cu_num_tokens {cu.tolist()[:8]}: {got} where vLLM's gives {want}")


def test_stand_in_random_sample():
    cu, drafts, target = _kernel_case()  # request 0: p(draft 1) = 0.6 at position 0, p(draft 2) = 0.5 at 1
    recovered = torch.tensor([3, 0, 1], dtype=torch.int32)
    bonus = torch.tensor([7, 8, 9])
    for uniform, want in (([0.5, 0.6], [1, 0, -1]),  # accepted, then 0.5 < 0.6: its recovered token, the end
                          ([0.5, 0.5], [1, 2, 7]),  # p / q >= u at both: the bonus token follows
                          ([0.7, 0.0], [3, -1, -1])):  # the first rejected: recovered, the rest placeholders
        out = torch.full((3, 3), -1, dtype=torch.int32)
        spec_sampled.rejection_random_sample(out, cu, drafts, None, target, bonus, recovered,
                                             torch.tensor(uniform + [0.3], dtype=torch.float64),
                                             torch.tensor([False, False, True]), 2)
        assert out[0].tolist() == want, f"uniforms {uniform}: {out[0].tolist()}, want {want}"
        assert out[1].tolist() == [8, -1, -1], "a request without drafts gets its bonus token"
        assert out[2].tolist() == [-1, -1, -1], "a greedy request is left to the greedy kernel"
    out = torch.full((3, 3), -1, dtype=torch.int32)  # with draft probabilities: p / q
    draft_probs = torch.tensor([[0.1, 0.9, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75], [0.25, 0.25, 0.25, 0.25]])
    spec_sampled.rejection_random_sample(out, cu, drafts, draft_probs, target, bonus, recovered,
                                         torch.tensor([0.6, 0.9, 0.3], dtype=torch.float64),
                                         torch.tensor([False, False, False]), 2)
    assert out.tolist() == [[1, 2, 7], [8, -1, -1], [3, 9, -1]], out.tolist()  # 0.67 >= 0.6, 2.0 >= 0.9; 1.0 >= 0.3


def test_stand_in_recovered_tokens():
    cu, drafts, target = _kernel_case()
    out = torch.zeros(3, dtype=torch.int32)
    inv_q = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0]])
    spec_sampled.sample_recovered_tokens(out, cu, drafts, None, target, inv_q)
    # request 0: draft 1 zeroed -> argmax of [0.1, 0, 0.2, 0.1] is 2; draft 2 zeroed -> [0.3, 0.1, 0, 0.1] -> 0;
    # request 2: draft 3 zeroed, inv_q doubles token 1 -> 1
    assert out.tolist() == [2, 0, 1]
    draft_probs = torch.tensor([[0.1, 0.1, 0.1, 0.7], [0.3, 0.1, 0.5, 0.1], [0.0, 0.5, 0.0, 0.5]])
    spec_sampled.sample_recovered_tokens(out, cu, drafts, draft_probs, target, inv_q)
    # max(p - q, 0): [0, 0.5, 0.1, 0] -> 1; [0, 0, 0, 0] -> 0 (first index on ties); [0.25, 0, 0.25, 0] -> 0
    assert out.tolist() == [1, 0, 0]


def test_stand_in_greedy_sample():
    cu, drafts, _ = _kernel_case()
    out = torch.full((3, 3), -1, dtype=torch.int32)
    spec_sampled.rejection_greedy_sample(out, cu, drafts, torch.tensor([1, 0, 3]), torch.tensor([7, 8, 9]),
                                         torch.tensor([True, True, False]), 2)
    assert out.tolist() == [[1, 0, -1], [8, -1, -1], [-1, -1, -1]]


# The distribution: one batch of DRAWS identical requests (the same context, temperature 1.0, the
# same ngram drafts: no draft probabilities) through vLLM's RejectionSampler with the HPU installs.


def _batch_step(root, context: list[int], drafts: list[int], temperature: float) -> torch.Tensor:  # noqa: F811
    """The [DRAWS, len(drafts) + 1] output of one spec step of DRAWS identical requests on HPU."""
    real = spec_decode.RealVllm.get(root)
    n, s = DRAWS, len(drafts)
    rows = torch.stack([spec_decode.context_row(context + drafts[:j]) for j in range(s + 1)])
    logits = rows.repeat(n, 1)
    per = s + 1
    target = [i * per + j for i in range(n) for j in range(s)]
    bonus = [i * per + s for i in range(n)]
    metadata = real.SpecDecodeMetadata(
        draft_token_ids=torch.tensor(drafts * n, dtype=torch.int32), num_draft_tokens=[s] * n,
        cu_num_draft_tokens=torch.arange(1, n + 1, dtype=torch.int32) * s,
        cu_num_sampled_tokens=torch.arange(1, n + 1, dtype=torch.int32) * per,
        target_logits_indices=torch.tensor(target, dtype=torch.int32),
        bonus_logits_indices=torch.tensor(bonus, dtype=torch.int32), logits_indices=torch.arange(n * per))
    config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=n),
                                   speculative_config=types.SimpleNamespace(num_speculative_tokens=s))
    logitsprocs = real.logits_processor.build_logitsprocs(config, torch.device("cpu"), False, False, [])
    fields = {f.name for f in dataclasses.fields(real.SamplingMetadata)}
    values = dict(temperature=torch.full((n, ), temperature), all_greedy=False, all_random=True, top_p=None,
                  top_k=None, generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                  frequency_penalties=torch.zeros(n), presence_penalties=torch.zeros(n),
                  repetition_penalties=torch.ones(n), output_token_ids=[[] for _ in range(n)],
                  allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=logitsprocs,
                  spec_token_ids=[list(drafts) for _ in range(n)])
    sampling_metadata = real.SamplingMetadata(**{k: v for k, v in values.items() if k in fields})
    sampler = real.RejectionSampler(real.Sampler())
    torch.manual_seed(7)
    try:
        with spec_decode.installed(real.rejection_sampler, real.hpu_rejection_sample, real.hpu_installs):
            return sampler(metadata, None, logits, sampling_metadata).sampled_token_ids
    except Exception as e:  # noqa: BLE001 - an exception in sample_tokens ends EngineCore
        pytest.fail(f"a speculative-decoding step of temperature={temperature} requests with an ngram draft raised "
                    f"{type(e).__name__}: {e} (an exception in sample_tokens ends EngineCore)")


def _tvd(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens.to(torch.int64), minlength=probs.numel()).double()
    return float((counts / counts.sum() - probs.double()).abs().sum() / 2)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_emitted_tokens_follow_the_target(root, temperature):  # noqa: F811
    """A request with one ngram draft (the target's most likely token): its first emitted token
    follows the target at its temperature, and the bonus token after an accepted draft follows the
    target after the draft, each within the suite's gate over DRAWS requests."""
    context = PROMPTS["Y"]
    p1 = (spec_decode.context_row(context) / temperature).softmax(-1)
    d1 = int(p1.argmax())
    p2 = (spec_decode.context_row(context + [d1]) / temperature).softmax(-1)
    out = _batch_step(root, context, [d1], temperature)
    tvd1 = _tvd(out[:, 0], p1)
    assert tvd1 < GATE, (f"the first token of a temperature={temperature} speculative step (ngram draft {d1}) is "
                         f"{tvd1:.4f} in total variation from the target's distribution over {DRAWS} draws "
                         f"(gate {GATE})")
    bonus = out[out[:, 0] == d1, 1]
    tvd2 = _tvd(bonus, p2)
    assert tvd2 < GATE, (f"the bonus token of a temperature={temperature} speculative step after the accepted draft "
                         f"{d1} is {tvd2:.4f} in total variation from the target's over {bonus.numel()} draws")
    print(f"temperature {temperature}: TVD first {tvd1:.4f} over {DRAWS} draws, bonus {tvd2:.4f} over {bonus.numel()}")


def test_distribution_of_a_two_token_step(root):  # noqa: F811
    """A temperature-1.0 request with ngram drafts [d1, d2] (d1 the target's most likely token, d2 its
    second most likely after d1): the first emitted token follows the target p1, and where d1 was
    accepted the second follows p2 given d1 (accepted d2 or recovered), each within the suite's gate
    (TVD 0.03) over DRAWS requests."""
    context = PROMPTS["X"]
    p1 = spec_decode.context_row(context).softmax(-1)
    d1 = int(p1.argmax())
    p2 = spec_decode.context_row(context + [d1]).softmax(-1)
    d2 = int(p2.argsort(descending=True)[1])
    out = _batch_step(root, context, [d1, d2], 1.0)
    first = out[:, 0]
    tvd1 = _tvd(first, p1)
    assert tvd1 < GATE, (f"the first token of a temperature=1.0 speculative step (ngram drafts [{d1}, {d2}]) is "
                         f"{tvd1:.4f} in total variation from the target's distribution over {DRAWS} draws "
                         f"(gate {GATE}): accepted d1 {int((first == d1).sum())} times, p1(d1) = {float(p1[d1]):.3f}")
    second = out[first == d1, 1]
    tvd2 = _tvd(second, p2)
    assert tvd2 < GATE, (f"the second token of a temperature=1.0 speculative step after an accepted draft {d1} is "
                         f"{tvd2:.4f} in total variation from the target's distribution over {second.numel()} draws "
                         f"(gate {GATE})")
    print(f"two-token step: TVD first {tvd1:.4f} over {DRAWS} draws, second {tvd2:.4f} over {second.numel()}")



# --------------------------------------------------------------------------
# On the device: the spec-decode fixes' aten ops against the allowlist (device_ops.txt)
# --------------------------------------------------------------------------

ALLOWLIST_PATH = Path(__file__).resolve().parent / "device_ops.txt"
# What hpu_rejection_sampler.py installs in vLLM's module and runs on the device: rejection_sample
# on a batch with sampled requests (this fix's random path, with spec-decode-request-rows'
# re-layout of the compact rows and logitsprocs-batch-updates' min_tokens hook, statement for
# statement those of the greedy path), expand_batch_to_tokens, and apply_sampling_constraints' own
# statements. Not audited: vllm_gaudi's greedy rejection_sample on an all-greedy batch (vllm_gaudi's
# own code, run on Gaudi today) and vLLM's apply_sampling_constraints inside the wrapper.
AUDITED = ("rejection_sample", "expand_batch_to_tokens", "apply_sampling_constraints")
# Steps of sampled and greedy requests: temperature alone, with top_k/top_p, seeded beside an
# unseeded one, a greedy request beside sampled ones, padding rows (3 decodes in a bucket of 4)
# and differing draft counts.
AUDIT_RUNS = {
    "temperature": ({"X": {"temperature": 0.7}}, {"X": 3}),
    "top_k_top_p": ({"X": {"temperature": 0.9, "top_k": 5, "top_p": 0.8}, "Y": {"temperature": 0.7}}, {"X": 2, "Y": 3}),
    "seeded_beside_greedy": ({"X": {"temperature": 0.7, "seed": 11}, "Y": {"temperature": 1.0}, "Z": {"temperature": 0.0}},
                             {"X": 3, "Y": 1, "Z": 2}),
}


@contextlib.contextmanager
def _recording(real: Any, source: Path, recorder_of: Callable[[], Any]):
    """The installs in AUDITED wrapped: each call runs under a device_ops.OpRecorder whose device
    tensors are the call's tensor arguments and the sampling metadata's (the rest of the step, host
    index building from host lists included, is the host's)."""
    saved = (real.hpu_rejection_sample, dict(real.hpu_installs))

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            device = [a for a in torch.utils._pytree.tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            for a in [*args, *kwargs.values()]:
                if dataclasses.is_dataclass(a):
                    device += [v for v in vars(a).values() if isinstance(v, torch.Tensor)]
            recorder = recorder_of()
            for t in device:
                recorder.mark(t)
            with recorder:
                return fn(*args, **kwargs)
        return recorded

    namespace = saved[1]["apply_sampling_constraints"].__globals__
    unaudited = {name: namespace[name] for name in ("_vllm_apply_sampling_constraints", "_greedy_rejection_sample")}
    try:
        for name in AUDITED:
            if name in real.hpu_installs:
                real.hpu_installs[name] = wrap(saved[1][name])
        real.hpu_rejection_sample = real.hpu_installs["rejection_sample"]
        # vLLM's apply_sampling_constraints and the greedy path run unrecorded (the expand vLLM's
        # calls is recorded).
        for name, fn in unaudited.items():
            namespace[name] = functools.partial(_unrecorded, fn)
        yield
    finally:
        real.hpu_rejection_sample, real.hpu_installs = saved[0], saved[1]
        namespace.update(unaudited)


def _unrecorded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with torch.utils._python_dispatch._disable_current_modes():
        return fn(*args, **kwargs)


def record_spec_ops(root: Path, source: Optional[Path] = None  # noqa: F811
                    ) -> tuple[dict[tuple[str, str], set[str]], dict[tuple[str, str], set[str]]]:
    """(op, input dtypes) -> the runs it was seen in, on the device path and on the host."""
    real = spec_decode.RealVllm.get(root)
    source = source or root / spec_decode.REJECTION_REL
    seen: dict[tuple[str, str], set[str]] = {}
    host: dict[tuple[str, str], set[str]] = {}
    for name, (params, counts) in AUDIT_RUNS.items():
        recorders: list[Any] = []

        def recorder_of() -> Any:
            recorders.append(device_ops.OpRecorder(device=(), sources=[source]))
            return recorders[-1]

        with _recording(real, source, recorder_of):
            _spec_run(root, params, counts, f"the op audit's {name} run", steps=2)
        assert recorders, f"{name}: the installed rejection_sample was never called"
        for r in recorders:
            for key in r.ops:
                seen.setdefault(key, set()).add(name)
            for key in r.host_ops:
                host.setdefault(key, set()).add(name)
    return seen, host


def test_allowlist_entries_carry_evidence():
    assert device_ops.load_allowlist(ALLOWLIST_PATH), f"{ALLOWLIST_PATH} lists no op"


def test_device_path_uses_only_ops_gaudi_compiles(root):  # noqa: F811
    """Every aten op (with input dtypes) hpu_rejection_sampler.py's installs dispatch on the device
    in sampled and greedy spec steps is in device_ops.txt with its evidence; no host sync, no
    data-dependent shape (the index built on the host from num_draft_tokens is the host's). An op
    listed as `unsupported:` (the bridge says Gaudi does not run it with those dtypes) fails."""
    allowed = device_ops.load_allowlist(ALLOWLIST_PATH)
    seen, host = record_spec_ops(root)
    print(f"\ndevice path: {len(seen)} (op, input dtypes) over {len(AUDIT_RUNS)} runs")
    for op, dtypes in sorted(seen):
        print(f"  {op:34} {dtypes}")
    print(f"host: {sorted(host)}")
    failures = device_ops.classify(seen, allowed, ALLOWLIST_PATH.name)
    unsupported = [k for k in device_ops.unsupported(allowed) if k in seen]
    print(f"UNSUPPORTED (the bridge says Gaudi does not run them): {len(unsupported)}")
    for op, dtypes in unsupported:
        print(f"  {op:34} {dtypes}")
    assert not failures, "spec-decode device-path ops Gaudi may not compile:\n" + "\n".join(failures)


# One op outside the allowlist in the random path (torch.multinomial in place of the Gumbel-max draw),
# one host sync, one data-dependent shape: each must fail the audit.
AUDIT_MUTANTS = {
    "multinomial": ("recovered = (residual * q.reciprocal().unsqueeze(1)).argmax(dim=-1)",
                    "recovered = torch.multinomial(residual.view(-1, vocab_size) + 1e-9, 1).view(batch_size, -1)"),
    "host_sync": ("kept = (accepted | ~own).to(torch.int32).cumprod(dim=-1).bool()",
                  "kept = (accepted | ~own).to(torch.int32).cumprod(dim=-1).bool() | bool(accepted.any()) & False"),
    "data_dependent_shape": ("kept = (accepted | ~own).to(torch.int32).cumprod(dim=-1).bool()",
                             "kept = (accepted | ~own).to(torch.int32).cumprod(dim=-1).bool()\n"
                             "    kept = kept | (accepted.nonzero().shape[0] < 0)"),
}


@pytest.mark.parametrize("name", sorted(AUDIT_MUTANTS))
def test_audit_rejects_ops_gaudi_may_not_compile(root, name, tmp_path):  # noqa: F811
    """The audit fails on a random path that uses an op outside device_ops.txt, syncs with the
    host or has a data-dependent shape (the mutant source executed in place of the tree's)."""
    old, new = AUDIT_MUTANTS[name]
    real = spec_decode.RealVllm.get(root)
    source = root / spec_decode.REJECTION_REL
    text = source.read_text()
    assert text.count(old) == 1, f"{name}: the mutated line is not in {source} once"
    mutant = tmp_path / "hpu_rejection_sampler.py"
    mutant.write_text(text.replace(old, new))
    saved = (real.hpu_rejection_sample, real.hpu_installs)
    installs = spec_decode._load_hpu_installs_from(mutant, real.rejection_sampler)  # noqa: SLF001
    real.hpu_rejection_sample, real.hpu_installs = installs["rejection_sample"], installs
    try:
        seen, _ = record_spec_ops(root, source=mutant)
    finally:
        real.hpu_rejection_sample, real.hpu_installs = saved
    allowed = device_ops.load_allowlist(ALLOWLIST_PATH)
    # The tree's own failures (ops listed `unsupported:`) are left out: the mutant must add one.
    unsupported = set(device_ops.unsupported(allowed))
    failures = device_ops.classify({k: v for k, v in seen.items() if k not in unsupported}, allowed,
                                   ALLOWLIST_PATH.name)
    print(f"\n{name}: {failures[:2]}")
    assert failures, f"audit mutant {name} passed the audit"
