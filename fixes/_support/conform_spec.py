"""The conformance suite's speculative decoding (schedules with ``"spec"``: conform_schedule.py):
what the engines (conform_engines.py) do with it, and its checks.

- ``HpuEngine`` (conform_engines.py) of a spec schedule: ``harness.Harness`` with
  ``Config(spec_tokens=4)`` (vllm_gaudi's real ``InputBatch`` with vLLM's real
  modules, the runner's real ``_update_states``, ``_prepare_spec_decode_inputs`` and decode-sampling
  statement, its structured-output block, vLLM's real ``Sampler`` / ``RejectionSampler`` with
  vllm_gaudi's ``rejection_sample``), decodes padded to the buckets 2, 4, 8. Its prompt chunks'
  sampler calls are recorded for the plain checks; the spec decode block is judged by its result.
- ``GpuEngine`` of a spec schedule, its steps with drafts ``gpu_spec_step``: vLLM's GPU path of
  the tree: ``gpu_input_batch.InputBatch`` (its
  ``update_req_spec_token_ids``, written by the lifted ``GPUModelRunner._update_states``) with the
  logits processors vLLM builds under a speculative config, every request of a step with drafts
  in the compact layout of ``_calc_spec_decode_metadata`` (its drafts' rows, then its bonus row;
  a request without drafts has only the bonus row), the grammar on every row of a structured
  request, vLLM's real ``RejectionSampler``, ``parse_output`` (a row whose chunk does not reach
  its request's end discarded), the tokens and logprobs per request as ``LogprobsLists`` slices.
  The stand-ins: vLLM's Triton kernels do not run on CPU. On an all-greedy step
  ``spec_decode.greedy_rejection_sample`` (a torch loop) takes ``rejection_sample``'s place, held to
  the greedy kernel's contract by ``test_stand_in_keeps_the_kernels_contract``
  (fixes/logitsprocs-batch-updates/test_min_tokens_spec_decode.py); on a step with a sampled
  request vLLM's own ``rejection_sample`` runs with ``spec_sampled``'s stand-ins for its four
  kernels (each held to its kernel's contract by fixes/spec-decode-sampled-rows'
  ``test_stand_in_*``): ``spec_decode.rejection_step``, the fix tests' reference too. Two
  deliberate differences there, the two ways the HPU consumes a seeded request's random stream
  otherwise (``spec_sampled.mirror_hpu_draws``): the uniforms are float32 (Gaudi has no float64),
  and each seeded request of the decode block draws one bonus row more first (vllm_gaudi's runner
  samples the bonus rows once itself before the ``RejectionSampler`` does). A discarded
  row's generator is put back, as ``_bookkeeping_sync`` does.

A draft the schedule leaves ``null`` is the model's own greedy continuation (with the grammar
of a structured request), worked out by each engine from its request's tokens; the model is the
one of the plain engines (a logits row is a fixed function of the context it follows, column 0
very negative: marked with its request and position where the row is a prompt chunk's or a
plain decode's).

The check ``spec_tokens`` holds, per step with drafts and per request of its decode block, the
tokens and the logprobs served for each (the sampled token's) against vLLM's GPU path, where the
request's tokens before the step are the same on both sides: a greedy or seeded request's (a
seeded one's random draws mirrored, above); a sampled request without a seed is drawn by chance,
so ``spec_sampled_tokens`` (1 to drafts + 1 tokens, the accepted drafts before the last, a rejected
draft never its own replacement) and ``spec_support`` (each emitted token in the support vLLM's
GPU path draws it from: the target after the request's own tokens, its masks, temperature, top_k
and top_p) hold every sampled request, seeded or not. Every difference of a spec schedule
counts as ``spec_decode`` (conform.py's ``spec_findings``; the sentence ends with the check's own
feature in brackets).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Optional

import numpy as np
import torch

import conform_checks as checks
import conform_engines as engines
import harness
import spec_decode
import spec_sampled
from conform_engines import MARK, StepOut, begin_step
from conform_schedule import EOS, VOCAB, Step

FEATURE = "spec_decode"
UNMARKED = 1.0 - MARK  # column 0 of a row of no mark (`unmark` reads no request): a draft position's, a decode's in a step with drafts
BUCKETS = (2, 4, 8)


def row(context: list[int]) -> torch.Tensor:
    """The logits row after `context`: ``harness.Model.row``'s at the suite's width, column 0 very
    negative (token 0 is never drawn)."""
    seed = harness.zlib.crc32(np.asarray(context, dtype=np.int64).tobytes())
    x = torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 4.0
    x[0] = UNMARKED
    return x


def allowed(grammar: Optional[list[int]]) -> Optional[torch.Tensor]:
    if grammar is None:
        return None
    out = torch.zeros(VOCAB, dtype=torch.bool)
    out[[0, 1, *grammar]] = True
    return out


def resolve(tokens: list[int], drafts: list[Any], grammar: Optional[list[int]]) -> list[int]:
    """The schedule's drafts for a request whose tokens are `tokens`: ``None`` is the model's greedy
    continuation (under the request's grammar)."""
    mask, out = allowed(grammar), []
    for d in drafts:
        if d is None:
            x = row(tokens + out)
            if mask is not None:
                x = x.masked_fill(~mask, float("-inf"))
            d = int(x.argmax())
        out.append(int(d))
    return out


def served(lists: Any, index: int, n: int) -> Optional[list[tuple[int, float]]]:
    """The logprobs a request at batch row `index` getting `n` tokens is served: vLLM's scheduler
    reads them with ``LogprobsLists.slice_request(index, n)`` (the sampled token first per row)."""
    if lists is None or n == 0:
        return None
    cu = getattr(lists, "cu_num_generated_tokens", None)
    start = cu[index] if cu is not None and index < len(cu) else index
    ids, values = lists.logprob_token_ids[start:start + n], lists.logprobs[start:start + n]
    return [(int(i[0]), round(float(v[0]), 4)) for i, v in zip(ids, values)]


def served_rows(lists: Any, index: int, n: int) -> list[Any]:
    """The whole logprobs rows (``served``'s, with every column and the rank) of the request at
    batch row `index` getting `n` tokens."""
    cu = getattr(lists, "cu_num_generated_tokens", None)
    return engines.logprob_rows(lists, cu[index] if cu is not None and index < len(cu) else index, n)


def split(out: StepOut, block: set[str]) -> StepOut:
    """Move the requests of the decode block out of the plain fields (the plain checks see each
    request's one sampled row; a decode block's rows are the rejection sampler's)."""
    for rid in block:
        out.scheduled.pop(rid, None)
        out.returned.pop(rid, None)
        out.logprobs.pop(rid, None)
    return out


def hpu_step_out(engine: Any, out: Any, scheduled: dict[str, int], drafts: dict[str, list[int]], block: set[str],
                 before: dict[str, list[int]]) -> StepOut:
    """A spec schedule's HPU step (``HpuEngine.step``): the harness's step `out`, per request the
    tokens it got back and the logprobs served for each (``served``); the decode `block`'s
    requests moved to ``spec``."""
    h = engine.h
    batch = h.batch
    lists = h.runner._build_logprobs_output(out.ns["logprobs_segments"], max(batch.req_id_to_index.values()) + 1)
    logprobs, spec, rows = {}, {}, {}
    for rid, toks in out.returned.items():
        lp = served(lists, batch.req_id_to_index[rid], len(toks))
        if lp is not None:
            logprobs[rid] = ([i for i, _ in lp], [v for _, v in lp])
            rows[rid] = served_rows(lists, batch.req_id_to_index[rid], len(toks))
        if rid in block:
            spec[rid] = (drafts.get(rid, []), list(toks), lp)
    result = StepOut(dict(scheduled), engine.ends, list(engine.recorder.calls), dict(out.returned), logprobs,
                     bool(h.runner.use_structured_output), spec=spec, before=before, logprob_rows=rows)
    return split(result, block)


def decode_block(scheduler: harness.Scheduler, scheduled: dict[str, int]) -> set[str]:
    """The requests of a step with drafts that the decode block samples: those past their prompt."""
    return {rid for rid in scheduled if scheduler.requests[rid].computed >= len(scheduler.requests[rid].prompt)
            and scheduler.requests[rid].output}


def gpu_spec_step(engine: Any, number: int, step: Step) -> StepOut:
    """A step with drafts of vLLM's GPU path (``GpuEngine.step``): the compact layout, vLLM's real
    ``RejectionSampler`` (module docstring)."""
    requests, scheduler = engine.schedule.requests, engine.scheduler
    scheduled = begin_step(engine, scheduler, engine.m.vllm, number, step, engines.plain_params)
    before = {rid: list(r.output) for rid, r in scheduler.requests.items()}
    drafts = {rid: resolve(scheduler.requests[rid].tokens, d, requests[rid].grammar)
              for rid, d in step.drafts.items()}
    block = decode_block(scheduler, scheduled)
    engine._update_states(scheduler.output(scheduled, drafts))
    batch = engine.batch
    order = list(batch.req_ids[:batch.num_reqs])
    # What vLLM's rejection sampler reads per row, held against each request's own parameters
    # (conform.judge_step, OWN_ONLY): where vLLM's own batch hands a request another's state,
    # the tokens it emits are the reference's error, not a difference of the HPU path.
    marked = engine.model.logits([(rid, engine.ends[rid][0] - 1) for rid in order])
    own = [engine.recorder.record(marked, batch.sampling_metadata)]
    per_request: list[list[torch.Tensor]] = []  # per request, its drafts' rows and its bonus row
    for rid in order:
        d, r = drafts.get(rid, []), scheduler.requests[rid]
        mask = allowed(requests[rid].grammar) if rid in step.structured else None
        if rid in block:
            contexts = [r.tokens + d[:j] for j in range(len(d) + 1)]
            new = [row(c) for c in contexts]
        else:
            new = [engine.model.row(rid, engine.ends[rid][0] - 1)]
        # apply_grammar_bitmask: every row of a structured request
        per_request.append([x if mask is None else x.masked_fill(~mask, float("-inf")) for x in new])
    discarded = [i for i, rid in enumerate(order) if engine.ends[rid][0] < engine.ends[rid][1]]
    generators = {rid: engine.requests[rid].generator for rid in order if engine.requests[rid].generator is not None}
    for rid, g in generators.items():  # the HPU runner's own bonus-row draw, mirrored (spec_sampled.mirror_hpu_draws)
        if rid in block:
            torch.empty(VOCAB).exponential_(generator=g)
    kept = {rid: generators[rid].get_state() for i, rid in enumerate(order) if i in discarded and rid in generators}
    tokens, lists = spec_decode.rejection_step(engine.real, [drafts.get(rid, []) for rid in order], per_request,
                                               batch.sampling_metadata, VOCAB, discarded)
    for rid, state in kept.items():  # _bookkeeping_sync: a discarded row's draw is rewound
        generators[rid].set_state(state)
    returned, logprobs, spec, rows = {}, {}, {}, {}
    for i, rid in enumerate(order):
        toks = [int(t) for t in tokens[i]]
        returned[rid] = toks
        lp = None
        if toks and lists is not None:
            cu = lists.cu_num_generated_tokens
            lp = [(int(a[0]), round(float(b[0]), 4)) for a, b in
                  zip(lists.logprob_token_ids[cu[i]:cu[i] + len(toks)], lists.logprobs[cu[i]:cu[i] + len(toks)])]
            logprobs[rid] = ([a for a, _ in lp], [b for _, b in lp])
            rows[rid] = engines.logprob_rows(lists, cu[i], len(toks))
        if rid in block:
            spec[rid] = (drafts.get(rid, []), toks, lp)
        if toks:  # _bookkeeping_sync
            engine.requests[rid].output_token_ids.extend(toks)
            end = batch.num_tokens_no_spec[i]
            batch.token_ids_cpu[i, end:end + len(toks)] = toks
            batch.num_tokens_no_spec[i] = end + len(toks)
            if hasattr(batch, "is_token_ids"):
                batch.is_token_ids[i, end:end + len(toks)] = True
    scheduler.update(scheduled, returned, drafts)
    result = StepOut(dict(scheduled), engine.ends, [], returned, logprobs, own_calls=own, spec=spec, before=before,
                     logprob_rows=rows)
    return split(result, block)


def _asked(r: checks.Request) -> str:
    keys = [k for k in r.asked if k != "temperature"]
    return ", ".join(f"{k}={r.asked[k]}" for k in keys) or "greedy"


@checks.check(FEATURE, checks.Scope.STEP_PAIR)
def spec_tokens(ctx: checks.Ctx, pair: checks.Pair) -> Iterable[str]:
    """Per request of a decode block with drafts whose tokens so far are the same on both sides:
    the tokens it gets back and the logprobs it is served for each, against vLLM's GPU path. Not
    for a request the GPU path itself mishandled (`suspect`)."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    for rid, (drafts, toks, lp) in getattr(hpu, "spec", {}).items():
        theirs = getattr(gpu, "spec", {}).get(rid)
        r = ctx.requests[rid]
        if theirs is None or rid in suspect or hpu.before.get(rid) != gpu.before.get(rid):
            continue
        if r.asked["temperature"] > 0 and not r.seeded:
            continue  # drawn by chance: spec_sampled_tokens and spec_support
        gdrafts, gtoks, glp = theirs
        what = (f"request {rid} ({_asked(r)}) with drafts {drafts} (vLLM's GPU path accepts "
                f"{max(len(gtoks) - 1, 0)} of {len(gdrafts)})")
        if toks != gtoks:
            yield f"{what} got {toks} back; vLLM's GPU path gives {gtoks}"
            continue
        if r.asked.get("logprobs") is None or glp is None:
            continue
        if lp is None or len(lp) != len(glp):
            yield f"{what} got {toks} back and was served logprobs for {'none' if lp is None else len(lp)} of them"
        elif [i for i, _ in lp] != toks:
            yield f"{what} got {toks} back; the logprobs it was served are for tokens {[i for i, _ in lp]}"
        elif any(abs(a - b) > 1e-3 for (_, a), (_, b) in zip(lp, glp)):
            yield (f"{what} is served logprobs {[v for _, v in lp]} for {toks}; vLLM's GPU path serves "
                   f"{[v for _, v in glp]}")


@checks.check(FEATURE, checks.Scope.STEP)
def spec_sampled_tokens(ctx: checks.Ctx, step: Any) -> Iterable[str]:
    """Per sampled request of a decode block with drafts (seeded or not): what a rejection step
    may emit: 1 to (drafts + 1) tokens, every one but the last an accepted draft, and the last,
    where it stands at a draft's position, not that draft (the draft was rejected, and an ngram
    draft's recovered token is drawn with the draft's own probability zeroed)."""
    for rid, (drafts, toks, _) in getattr(step, "spec", {}).items():
        r = ctx.requests[rid]
        if r.asked["temperature"] == 0:
            continue
        n, what = len(toks), f"request {rid} ({_asked(r)}, temperature={r.asked['temperature']}) with drafts {drafts}"
        if not 1 <= n <= len(drafts) + 1:
            yield f"{what} got {toks} back: a speculative step emits 1 to {len(drafts) + 1} tokens"
        elif toks[:n - 1] != drafts[:n - 1]:
            yield f"{what} got {toks} back: the tokens before its last are not the drafts it accepted"
        elif n <= len(drafts) and toks[-1] == drafts[n - 1]:
            yield (f"{what} got {toks} back: draft {drafts[n - 1]} was rejected, yet emitted in its place (the "
                   "recovered token of an ngram draft is drawn with the draft's probability zeroed)")


def support(r: checks.Request, tokens: list[int], generated: list[int], eos: bool) -> torch.Tensor:
    """The tokens vLLM's GPU path may draw for sampled request `r` after `tokens` (its prompt and
    `generated`), at a draft position or its bonus position alike: the model's row with its grammar,
    allowed_token_ids and bad_words (after `generated`) masked, EOS too unless `eos`, divided by its
    temperature, then vLLM's own top_k / top_p of the tree (``apply_top_k_top_p_pytorch``); the
    tokens of probability > 0."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    a, x = r.asked, row(tokens)
    keep = torch.ones(VOCAB, dtype=torch.bool)
    if r.grammar is not None:  # a decode of a structured request always reaches its end: structured
        keep &= allowed(r.grammar)
    if a.get("allowed_token_ids"):
        only = torch.zeros(VOCAB, dtype=torch.bool)
        only[a["allowed_token_ids"]] = True
        keep &= only
    for t in checks._bad_words_want(r, generated):  # noqa: SLF001
        keep[t] = False
    if not eos:
        keep[EOS] = False
    x = (x.masked_fill(~keep, float("-inf")) / a["temperature"]).unsqueeze(0)
    k = torch.tensor([a["top_k"]]) if "top_k" in a else None
    p = torch.tensor([a["top_p"]], dtype=torch.float32) if "top_p" in a else None
    if k is not None or p is not None:
        x = apply_top_k_top_p_pytorch(x, k, p)
    return x.softmax(dim=-1)[0] > 0


@checks.check(FEATURE, checks.Scope.STEP)
def spec_support(ctx: checks.Ctx, step: Any) -> Iterable[str]:
    """Per sampled request of a decode block with drafts (seeded or not), every token it got back,
    accepted draft, recovered or bonus token, lies in the support vLLM's GPU path draws it from
    (``support``: the target row after the request's own tokens up to it, its masks, temperature,
    top_k, top_p): an accepted draft the target cannot sample, or a token top_k / top_p cut, is a
    broken HPU path (vLLM accepts a draft only where the target's probability of it is > 0). With
    min_tokens, EOS masked or not: either set (where vLLM's min_tokens counts a draft position's
    tokens is not this check's; where EOS is the only token its masks leave, any token)."""
    for rid, (drafts, toks, _) in getattr(step, "spec", {}).items():
        r = ctx.requests[rid]
        if r.asked["temperature"] == 0 or rid not in step.before:
            continue
        generated = list(step.before[rid])
        for j, t in enumerate(toks):
            keep = support(r, r.prompt + generated, generated, eos=True)
            if r.asked.get("min_tokens"):
                without = support(r, r.prompt + generated, generated, eos=False)
                # EOS the only token its masks allow: with min_tokens pending vLLM's row is all -inf
                # (NaN probabilities), and what it draws there is no distribution's.
                keep = torch.ones_like(keep) if not bool(without.any()) else keep | without
            if not bool(keep[t]):
                kind = ("accepted draft" if j < len(drafts) and t == drafts[j] else
                        "bonus token" if j == len(drafts) else "recovered token")
                yield (f"request {rid} ({_asked(r)}, temperature={r.asked['temperature']}) with drafts {drafts} got "
                       f"{toks} back: token {t} ({kind} #{j + 1}) lies outside the support vLLM's GPU path draws it "
                       f"from, {torch.nonzero(keep).flatten().tolist()}")
                break
            generated.append(t)
