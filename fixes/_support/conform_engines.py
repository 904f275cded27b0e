"""The conformance suite's two engines, each running one schedule (conform_schedule.py) step by
step and recording every sampler call (conform_checks.Call) and what each request got back.

- ``HpuEngine``: the harness (harness.py): vllm_gaudi's real ``_update_states`` fed by vLLM's real
  ``SchedulerOutput``, its real ``InputBatch``, ``sample_tokens``' blocks (prompt chunks' logits
  rows, the structured-output block with the runner's own ``apply_grammar_bitmask``, the tail that
  hands tokens back, ``_build_logprobs_output``), under the schedule's sync or async scheduling.
- ``GpuEngine``: vLLM's own GPU path of the tree: ``gpu_input_batch.InputBatch`` updated from the
  same kind of ``SchedulerOutput`` as ``GPUModelRunner._update_states`` does, one logits row per
  scheduled request at its last scheduled position (``query_start_loc[1:] - 1``), a row whose chunk
  does not reach the request's end discarded with its generator put back (``_bookkeeping_sync``'s
  rewind), the sampled token appended to the request's output ids. Always sync: it is the
  reference.

Both sides: vLLM's ``SamplingParams`` of the tree, the same forward pass (``MarkedModel``: a logits
row is a fixed function of the request's tokens up to its position, and carries a mark saying
which request and position it was taken for) and vLLM's own ``Sampler`` drawing (each seeded row
from the generator it is handed).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import types
from pathlib import Path
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

import harness
import lift
import logits_plugins
import prompt_logprobs
import thinking_budget
from conform_checks import Call
from conform_schedule import EOS, MAX_REQS, VOCAB, Schedule, ScheduledRequest, Step

MARK = 1000.0  # column 0 of a logits row holds -(MARK + code(request, position)); token 0 is never drawn
POSITIONS = 128
GPU_RUNNER_REL = Path("vllm/v1/worker/gpu_model_runner.py")


def mark(rid: str, position: int) -> float:
    return -(MARK + int(rid[1:]) * POSITIONS + position)


def unmark(value: float) -> tuple[Optional[str], int]:
    code = int(round(-value - MARK))
    if code < 0 or not np.isfinite(value):
        return None, -1
    return f"r{code // POSITIONS}", code % POSITIONS


class MarkedModel(harness.Model):
    """The harness's forward pass, each row marked with its request and position in column 0."""

    def row(self, rid: str, position: int) -> torch.Tensor:
        x = super().row(rid, position)
        x[0] = mark(rid, position)
        return x


def sampling_params(vllm: Any, asked: dict[str, Any]) -> Any:
    """vLLM's SamplingParams of the tree for what a request asked, with what the engine's
    input processing adds (the stop ids from the generation config, bad words as token ids)."""
    kw = {k: v for k, v in asked.items() if k != "bad_words_token_ids"}
    if "logit_bias" in kw:
        kw["logit_bias"] = {int(t): b for t, b in kw["logit_bias"].items()}
    params = vllm.SamplingParams(**kw)
    params._all_stop_token_ids = {EOS}
    params._eos_token_id = EOS
    if "bad_words_token_ids" in asked:
        params._bad_words_token_ids = [list(w) for w in asked["bad_words_token_ids"]]
    return params


# The features an own-only call is checked in: vLLM's GPU batch hands a request another request's
# allowed_token_ids mask after a condense (0.26.0 and 0.30.0; the plain schedules note it under
# gpu_disagrees); on a rejection-sampler step that shows only in what the rejection sampler emits.
OWN_ONLY = frozenset({"allowed_token_ids"})


class LogprobRow(NamedTuple):
    """One served logprobs row: token ids (the sampled one first), logprobs, the sampled token's rank."""

    ids: list[int]
    values: list[float]
    rank: int


def logprob_rows(lists: Any, start: int, n: int) -> list[LogprobRow]:
    """Rows `start`..`start + n` of a ``LogprobsLists`` (or ``LogprobsTensors``), whole."""
    ranks = getattr(lists, "sampled_token_ranks", None)
    if ranks is None:
        ranks = getattr(lists, "selected_token_ranks", None)
    return [LogprobRow([int(t) for t in lists.logprob_token_ids[k]], [round(float(v), 4) for v in lists.logprobs[k]],
                       -1 if ranks is None else int(ranks[k])) for k in range(start, start + n)]


def asks_prompt_logprobs(schedule: Schedule) -> bool:
    """Whether a request of `schedule` asks prompt_logprobs (only then are the runners' prompt
    logprobs computed: without such a request both return none)."""
    return any("prompt_logprobs" in r.params for r in schedule.requests.values())


def delivered(tensors: dict[str, Any]) -> dict[str, list[LogprobRow]]:
    """A ``prompt_logprobs_dict`` as the user gets it, read when it is handed over (its tensors are
    the runner's buffers)."""
    return {rid: logprob_rows(t, 0, t.logprob_token_ids.shape[0]) for rid, t in tensors.items() if t is not None}


@dataclasses.dataclass
class StepOut:
    """What one step of one engine did."""

    scheduled: dict[str, int]
    ends: dict[str, tuple[int, int]]  # per request: computed after the chunk, its tokens at this step
    calls: list[Call]
    returned: dict[str, list[int]]  # the tokens each scheduled request got back
    logprobs: dict[str, tuple[list[int], list[float]]]  # served per request: token ids, logprobs
    structured: bool = False
    # Calls held only against the requests' own parameters, in ``OWN_ONLY``'s features (the GPU
    # path's metadata of a rejection-sampler step): they say where the reference itself is wrong.
    own_calls: list[Call] = dataclasses.field(default_factory=list)
    # Per request, per token it got back, the whole logprobs row it is served: the ids (the
    # sampled token, then the top-k alternatives), their logprobs and the sampled token's rank.
    logprob_rows: dict[str, list[LogprobRow]] = dataclasses.field(default_factory=dict)
    # Per request whose prompt logprobs were delivered this step, the rows delivered (one per
    # prompt position but the last: the next prompt token first, then the top-k).
    prompt_logprobs: dict[str, list[LogprobRow]] = dataclasses.field(default_factory=dict)
    # A spec schedule's step (conform_spec.py): the plain fields hold the requests the plain checks
    # can judge (on a step with drafts: those outside the decode block); ``spec``: per request of
    # the decode block, its drafts, its tokens and the logprobs served per token; ``before``: each
    # request's output before the step.
    spec: dict[str, tuple[list[int], list[int], Optional[list[tuple[int, float]]]]] = dataclasses.field(
        default_factory=dict)
    before: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def computed(self) -> dict[str, int]:
        return {rid: self.ends[rid][0] - n for rid, n in self.scheduled.items()}

    def completes(self, rid: str) -> bool:
        done, total = self.ends[rid]
        return done >= total

    def drawn(self) -> dict[tuple[str, int], int]:
        """The token drawn per (request, position), from the first row taken there."""
        out: dict[tuple[str, int], int] = {}
        for call in self.calls:
            for rid, q, t in zip(call.rows, call.positions, call.tokens or []):
                if rid is not None:
                    out.setdefault((rid, q), int(t))
        return out


def ends(scheduler: harness.Scheduler, scheduled: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Per scheduled request: where its chunk ends and how many tokens it has (prompt and output),
    a resumed one's computed tokens being its prefix-cache hit."""
    out = {}
    for rid, n in scheduled.items():
        r = scheduler.requests[rid]
        computed = scheduler.hit(rid) if r.preempted else r.computed
        out[rid] = (computed + n, len(r.tokens))
    return out


def probe(rows: Any, positions: Any) -> torch.Tensor:
    """Per row, noise fixed by its request and position (the same on both sides): what the checks
    try each row's logits processors on."""
    out = torch.zeros(len(rows), VOCAB)
    for i, (rid, q) in enumerate(zip(rows, positions)):
        if rid is not None:
            out[i] = torch.randn(VOCAB, generator=torch.Generator().manual_seed(int(rid[1:]) * POSITIONS + q)) * 3
    return out


def begin_step(engine: Any, scheduler: harness.Scheduler, vllm: Any, number: int, step: Step,
               params: Any) -> dict[str, int]:
    """The scheduler's side of step `number`, the same for every engine: its finishes, preemptions
    and arrivals (``params(vllm, request)`` their ``SamplingParams``), the engine's recorder emptied
    and each scheduled request's chunk end noted (``engine.ends``); returns the scheduled counts."""
    requests = engine.schedule.requests
    engine.number, engine.structured = number, list(step.structured)
    for rid in step.finish:
        scheduler.finish(rid)
    for rid in step.preempt:
        scheduler.preempt(rid)
    for rid in step.arrive:
        r = scheduler.add(rid, list(requests[rid].prompt), params(vllm, requests[rid]))
        r.computed = requests[rid].cached  # a prefix-cache hit at its first schedule
    engine.recorder.calls = []
    scheduled = step.scheduled
    engine.ends = ends(scheduler, scheduled)
    return scheduled


def plain_params(vllm: Any, request: ScheduledRequest) -> Any:
    """A plain schedule's request as vLLM's ``SamplingParams``."""
    return sampling_params(vllm, request.params)


class Recorder:
    """The sampler both runners call: records what it is handed (a ``Call``) and draws with vLLM's
    ``Sampler``."""

    def __init__(self, side: str, sampler: Any, engine: Any):
        self.side, self.sampler, self.engine = side, sampler, engine
        self.calls: list[Call] = []

    def record(self, logits: torch.Tensor, sampling_metadata: Any) -> Call:
        """What the sampler is handed, as a ``Call`` (not drawn, not kept)."""
        rows, positions = zip(*(unmark(float(v)) for v in logits[:, 0])) if logits.shape[0] else ((), ())
        e = self.engine
        # The output ids are the requests' live lists, which grow after the call: kept as handed.
        md = copy.copy(sampling_metadata)
        if getattr(md, "output_token_ids", None) is not None:
            md.output_token_ids = [list(ids) for ids in md.output_token_ids]
        call = Call(self.side, e.where(), list(rows), list(positions), logits.clone(), probe(rows, positions), md,
                    dict(e.states()), {rid: list(o) for rid, o in e.outputs().items()},
                    e.structured_ids(), dict(e.ends))
        plugins = getattr(getattr(e, "schedule", None), "logits_processors", ())
        if plugins and getattr(md, "logitsprocs", None) is not None:
            try:  # the plugins' state moves on with the batch: what they ban is read now
                call.plugin_bans = logits_plugins.banned_rows(md.logitsprocs, call.probe, VOCAB)
            except Exception:  # noqa: BLE001 - the sampler raises it: min_p's check names it
                pass
        return call

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any, **_: Any) -> Any:
        call = self.record(logits, sampling_metadata)
        self.calls.append(call)
        with thinking_budget.recording(sampling_metadata, call):  # the rows its holder forces
            out = self.sampler(logits, sampling_metadata)
        call.tokens = out.sampled_token_ids.flatten().tolist()
        call.logprobs = out.logprobs_tensors
        return out


class HpuEngine:
    """vllm_gaudi's runner through the harness, fed the schedule; a spec schedule's with
    speculative decoding (``harness.Config(spec_tokens=…)``: conform_spec.py)."""

    side = "HPU"

    def __init__(self, root: Path, schedule: Schedule, sampler: Any):
        import conform_spec
        self.schedule, self.spec = schedule, bool(schedule.spec)
        self.mode = "sync" if self.spec else schedule.mode
        if self.spec:
            # vLLM's real modules first (conform.run puts them back after each schedule): the
            # harness pins them for its InputBatch the first time.
            sys.modules.update(GpuModules.get(root).saved)
            config = harness.Config(grammar=True, vocab=VOCAB, row=conform_spec.row, spec_tokens=4,
                                    buckets=conform_spec.BUCKETS)
        else:
            think = schedule.reasoning  # the runner builds its batch with the reasoning config
            batch = (thinking_budget.runner_batch(root, thinking_budget.reasoning_config(think), VOCAB) if think
                     else None)
            plugins = (logits_plugins.classes(harness.logitsprocs_package(root).interface,
                                              harness.logitsprocs_package(root).builtin)
                       if schedule.logits_processors else ())  # the server's --logits-processors
            config = harness.Config(self.mode, grammar=True, vocab=VOCAB, batch=batch, plugins=plugins)
        self.h = harness.Harness(root, config)
        self.h.model = MarkedModel(self.h.scheduler, VOCAB, config.row)
        self.recorder = Recorder("HPU", sampler, self)
        self.h.runner.sampler = self.sample if self.spec else self.recorder
        self.number, self.structured, self.ends = 0, [], {}
        self.prompt_logprobs = asks_prompt_logprobs(schedule)
        if self.prompt_logprobs:  # the runner's own _get_prompt_logprobs_dict and its gather, for the mode
            prompt_logprobs.bind(self.h, schedule.logprobs_mode or "raw_logprobs")

    def sample(self, logits: torch.Tensor, sampling_metadata: Any, **kw: Any) -> Any:
        """The runner's sampler of a spec schedule: the suite's recorder; in a spec decode block, its
        own rows (no mark: conform_spec.UNMARKED) go to the harness's sampler unrecorded (the block
        is judged by its result), a prompt's marked rows sampled there (spec-decode-structured-rows)
        recorded."""
        import conform_spec
        if self.h.in_spec and bool((logits[:, 0] == conform_spec.UNMARKED).all()):
            return self.h.sampler(logits, sampling_metadata, **kw)
        return self.recorder(logits, sampling_metadata, **kw)

    def where(self) -> str:
        kind = "structured-output" if self.h.runner.use_structured_output else "sampler"
        return f"step {self.number} ({self.mode}, {kind} call)"

    def states(self) -> dict[str, Any]:
        return self.h.runner.requests

    def structured_ids(self) -> list[str]:
        """The step's structured requests, when the call is the structured-output step's one call."""
        return list(self.structured) if self.h.runner.use_structured_output else []

    def outputs(self) -> dict[str, list[int]]:
        return {rid: r.output for rid, r in self.h.scheduler.requests.items()}

    def step(self, number: int, step: Step) -> StepOut:
        import conform_spec
        h, requests = self.h, self.schedule.requests
        scheduled = begin_step(self, h.scheduler, h.vllm, number, step, plain_params)
        before = {rid: list(r.output) for rid, r in h.scheduler.requests.items()}
        if not scheduled:
            # execute_model runs _update_states before it returns the empty output: finishes and
            # requests left out (a preemption) leave the batch on such a step too.
            h.runner._update_states(h.scheduler.output({}))
            return StepOut({}, {}, [], {}, {}, before=before)
        drafts = {rid: conform_spec.resolve(h.scheduler.requests[rid].tokens, d, requests[rid].grammar)
                  for rid, d in (step.drafts or {}).items()}
        grammar = grammar_output(step.structured, requests, drafts) if step.structured else None
        block = conform_spec.decode_block(h.scheduler, scheduled) if drafts else set()
        out = h.step(scheduled, grammar, drafts=drafts)
        if self.spec:
            return conform_spec.hpu_step_out(self, out, scheduled, drafts, block, before)
        batch = h.batch
        served = h.runner._build_logprobs_output(out.ns["logprobs_segments"], max(batch.req_id_to_index.values()) + 1)
        logprobs, rows = {}, {}
        if served is not None:
            for rid, i in batch.req_id_to_index.items():
                if i < len(served.logprob_token_ids):
                    logprobs[rid] = ([int(t) for t in served.logprob_token_ids[i]],
                                     [round(float(v), 4) for v in served.logprobs[i]])
                    rows[rid] = logprob_rows(served, i, 1)
        # sample_tokens' _get_prompt_logprobs_dict, after sampling
        merged = bool(self.schedule.merged_prefill)  # VLLM_MERGED_PREFILL (conform_schedule.py)
        try:
            prompt = delivered(prompt_logprobs.collect(h, out, scheduled, merged)) if self.prompt_logprobs else {}
        except Exception as e:  # noqa: BLE001 - it ends EngineCore; what raised is the prompt-logprobs path
            e.conform_feature = "prompt_logprobs"  # type: ignore[attr-defined]
            raise
        return StepOut(dict(scheduled), self.ends, list(self.recorder.calls), out.returned, logprobs,
                       bool(h.runner.use_structured_output), logprob_rows=rows, prompt_logprobs=prompt, before=before)


def grammar_output(ids: list[str], requests: dict[str, Any], drafts: Optional[dict[str, list[int]]] = None) -> Any:
    """The scheduler's GrammarOutput: per structured request, in its order, its bitmask row
    (columns 0 and 1 always allowed: column 0 carries the row's mark), one per draft and one for
    the bonus token (vLLM's ``StructuredOutputManager.grammar_bitmask``)."""
    words = (VOCAB + 31) // 32
    bitmask = np.zeros((len(ids), words), dtype=np.uint32)
    for j, rid in enumerate(ids):
        for t in (0, 1, *requests[rid].grammar):
            bitmask[j, t // 32] |= np.uint32(1 << (t % 32))
    bitmask = bitmask.view(np.int32)
    if drafts:
        bitmask = np.stack([bitmask[j] for j, rid in enumerate(ids) for _ in range(1 + len(drafts.get(rid, [])))])
    return types.SimpleNamespace(structured_output_request_ids=list(ids), grammar_bitmask=bitmask)


class GpuModules:
    """vLLM's own GPU-path modules of the tree (vllm/ under the root), imported for real with the
    pinned pure-Python deps; only what cannot run on CPU is turned off (pinned memory). One tree
    per process: vLLM is imported by name."""

    _loaded: dict[Path, Any] = {}

    @classmethod
    def get(cls, root: Path) -> Any:
        if root not in cls._loaded:
            if cls._loaded:
                raise RuntimeError("one vllm tree per process: the GPU reference imports `vllm` by name")
            vllm = harness.Vllm.get(root)  # sys.path, bytecode cache outside the tree, quiet logging
            import logging
            import warnings
            logging.disable(logging.WARNING)
            warnings.simplefilter("ignore")
            import vllm.v1.worker.gpu_input_batch as gib
            from vllm.v1.sample.logits_processor import build_logitsprocs
            from vllm.v1.sample.sampler import Sampler
            harness.no_pinned_memory()
            cls._loaded[root] = types.SimpleNamespace(gib=gib, vllm=vllm, build_logitsprocs=build_logitsprocs,
                                                      Sampler=Sampler,
                                                      saved={n: m for n, m in sys.modules.items()
                                                             if n == "vllm" or n.startswith("vllm.")})
        return cls._loaded[root]


def gpu_plugins(schedule: Schedule) -> tuple[type, ...]:
    """The schedule's --logits-processors as vLLM's GPU runner hands them to build_logitsprocs:
    written against vLLM's own logits-processor package."""
    if not schedule.logits_processors:
        return ()
    from vllm.v1.sample import logits_processor as lp
    return logits_plugins.classes(lp.interface, lp.builtin)


def gpu_input_batch(m: Any, vocab: int, spec: bool, plugins: tuple[type, ...] = (), reasoning: Any = None) -> Any:
    """vLLM's GPU ``InputBatch`` of the tree (`m`: ``GpuModules``) as ``GPUModelRunner`` builds it, on
    CPU without pinned memory: `vocab` columns, the logits processors ``build_logitsprocs`` gives
    (with a speculative config, when `spec`, only min_tokens' one: `plugins` are then not built),
    `reasoning` its ``vllm_config.reasoning_config``. The one construction of ``GpuEngine`` and of
    the fix tests' spec-decode reference (``spec_decode.gpu_step``)."""
    config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQS),
                                   speculative_config=types.SimpleNamespace(num_speculative_tokens=4) if spec
                                   else None)
    kw: dict[str, Any] = dict(max_num_reqs=MAX_REQS, max_model_len=harness.MAX_MODEL_LEN,
                              max_num_batched_tokens=256, device=torch.device("cpu"), vocab_size=vocab,
                              block_sizes=[harness.BLOCK],
                              max_num_blocks_per_req=[harness.MAX_MODEL_LEN // harness.BLOCK],
                              logitsprocs=m.build_logitsprocs(config, torch.device("cpu"), False, False,
                                                              () if spec else plugins))
    if "kernel_block_sizes" in _parameters(m.gib.InputBatch.__init__):
        kw["kernel_block_sizes"] = [harness.BLOCK]
    if "pin_memory" in _parameters(m.gib.InputBatch.__init__):
        kw["pin_memory"] = False
    if reasoning is not None:
        kw["reasoning_config"] = reasoning
    return m.gib.InputBatch(**kw)


class GpuEngine:
    """vLLM's GPU path of the tree fed the same schedule (sync: the reference); a spec schedule's
    with speculative decoding (conform_spec.gpu_spec_step)."""

    side = "GPU"

    def __init__(self, root: Path, schedule: Schedule, sampler: Any):
        m = self.m = GpuModules.get(root)
        self.schedule, self.mode, self.spec = schedule, "sync", bool(schedule.spec)
        self.scheduler = harness.Scheduler(m.vllm)
        self.model = MarkedModel(self.scheduler, VOCAB)
        self.batch = gpu_input_batch(m, VOCAB, self.spec, () if self.spec else gpu_plugins(schedule),
                                     thinking_budget.reasoning_config(schedule.reasoning) if schedule.reasoning
                                     else None)
        self.requests: dict[str, Any] = {}
        self.runner = _GpuRunner(self.batch, self.requests)
        lift_gpu_update_states(root, self.runner, m)
        self.prompt_logprobs = asks_prompt_logprobs(schedule)
        if self.prompt_logprobs:
            lift_gpu_prompt_logprobs(root, self.runner, sampler.sampler, schedule.logprobs_mode or "raw_logprobs")
        self.recorder = Recorder("GPU", sampler, self)
        self.number, self.ends = 0, {}
        if self.spec:  # vLLM's rejection sampler and spec-decode metadata (spec_decode.rejection_step)
            import spec_decode
            self.real = spec_decode.RealVllm.get(root)

    def where(self) -> str:
        return f"step {self.number} (vLLM's GPU path)"

    def states(self) -> dict[str, Any]:
        return self.requests

    def outputs(self) -> dict[str, list[int]]:
        return {rid: r.output for rid, r in self.scheduler.requests.items()}

    def structured_ids(self) -> list[str]:
        return []

    def step(self, number: int, step: Step) -> StepOut:
        if step.drafts:
            import conform_spec
            return conform_spec.gpu_spec_step(self, number, step)
        requests, scheduler = self.schedule.requests, self.scheduler
        before = {rid: list(r.output) for rid, r in scheduler.requests.items()}
        scheduled = begin_step(self, scheduler, self.m.vllm, number, step, plain_params)
        if not scheduled:
            self._update_states(scheduler.output({}))  # as HpuEngine.step: GPUModelRunner.execute_model
            return StepOut({}, {}, [], {}, {}, before=before)
        self._update_states(scheduler.output(scheduled))
        batch = self.batch
        rows = [(rid, self.ends[rid][0] - 1) for rid in batch.req_ids[:batch.num_reqs]]
        discarded = [rid for rid, _ in rows if self.ends[rid][0] < self.ends[rid][1]]
        kept = {rid: self.requests[rid].generator.get_state() for rid in discarded
                if self.requests[rid].generator is not None}
        logits = self.model.logits(rows)
        for j, (rid, _) in enumerate(rows):  # apply_grammar_bitmask: each structured row its grammar's
            if rid in step.structured:
                allowed = torch.zeros(VOCAB, dtype=torch.bool)
                allowed[[0, 1, *requests[rid].grammar]] = True
                logits[j][~allowed] = float("-inf")
        out = self.recorder(logits, batch.sampling_metadata)
        for rid, state in kept.items():  # _bookkeeping_sync: a discarded row's draw is rewound
            self.requests[rid].generator.set_state(state)
        tokens = out.sampled_token_ids.flatten().tolist()
        returned: dict[str, list[int]] = {}
        logprobs, lp_rows = {}, {}
        for i, (rid, _) in enumerate(rows):
            returned[rid] = [] if rid in discarded else [int(tokens[i])]
            if returned[rid]:
                self.requests[rid].output_token_ids.append(int(tokens[i]))
                end = batch.num_tokens_no_spec[i]  # _bookkeeping_sync: the token joins the batch's ids
                batch.token_ids_cpu[i, end] = int(tokens[i])
                batch.num_tokens_no_spec[i] = end + 1
                if hasattr(batch, "is_token_ids"):
                    batch.is_token_ids[i, end] = True
                if out.logprobs_tensors is not None:
                    lp = out.logprobs_tensors
                    logprobs[rid] = ([int(t) for t in lp.logprob_token_ids[i]],
                                     [round(float(v), 4) for v in lp.logprobs[i]])
                    lp_rows[rid] = logprob_rows(lp, i, 1)
        prompt = delivered(self._prompt_logprobs(scheduled)) if self.prompt_logprobs else {}
        scheduler.update(scheduled, returned)
        return StepOut(dict(scheduled), self.ends, list(self.recorder.calls), returned, logprobs, logprob_rows=lp_rows,
                       prompt_logprobs=prompt, before=before)

    def _prompt_logprobs(self, scheduled: dict[str, int]) -> dict[str, Any]:
        """vLLM's own ``GPUModelRunner._get_prompt_logprobs_dict`` of the tree after sampling, handed
        the step's hidden states as the model lays them out (each request's scheduled positions, in
        batch order; ``query_start_loc`` where each begins): the rows of a request asking prompt
        logprobs are the model's (``compute_logits`` is the identity), the others zeros (never read)."""
        batch, runner = self.batch, self.runner
        ids = batch.req_ids[:batch.num_reqs]
        parts = []
        for rid in ids:
            start = self.requests[rid].num_computed_tokens
            parts.append(torch.stack([self.model.row(rid, start + j) for j in range(scheduled[rid])])
                         if rid in runner.num_prompt_logprobs else torch.zeros(scheduled[rid], VOCAB))
        runner.query_start_loc = types.SimpleNamespace(np=np.cumsum([0] + [scheduled[rid] for rid in ids]))
        return runner._get_prompt_logprobs_dict(torch.cat(parts), dict(scheduled))

    def _update_states(self, so: Any) -> None:
        """vLLM's own ``GPUModelRunner._update_states`` of the tree, lifted and bound to a stand-in
        runner (``_GpuRunner``)."""
        self.runner._update_states(so)


class _GpuRunner:
    """What vLLM's ``GPUModelRunner._update_states`` reads of its runner, for a sync, last-rank,
    text-only, non-pooling runner without speculative decoding; its helper methods for encoder
    caches, KV-block zeroing, pooling and reordering do nothing here. Any other attribute it asks
    for is an error naming it (upstream changed: update the stand-in)."""

    def __init__(self, batch: Any, requests: dict[str, Any]):
        self.input_batch, self.requests = batch, requests
        self.num_prompt_logprobs: dict[str, int] = {}
        self.late_interaction_runner = types.SimpleNamespace(on_requests_finished=lambda ids: None,
                                                             register_request=lambda *a: None)
        self.speculative_config = None
        self.is_pooling_model = self.uses_mrope = self.use_async_spec_decode = self.use_async_scheduling = False
        self.device = torch.device("cpu")
        self.encoder_cache: dict[str, Any] = {}
        self.uses_xdrope_dim = 0  # 0.26.0: no XD-RoPE positions

    _QUIET = ("_sync_device", "_on_request_state_removed", "_zero_block_ids", "_process_encoder_cache_scheduler_output",
              "_may_reorder_batch", "_update_streaming_request", "_init_mrope_positions")

    def __getattr__(self, name: str) -> Any:
        if name in _GpuRunner._QUIET:
            return lambda *a, **k: None
        raise AttributeError(f"the GPU reference's stand-in runner has no {name} (vLLM's _update_states asks it)")


def lift_gpu_update_states(root: Path, runner: _GpuRunner, m: Any) -> None:
    """Bind vLLM's ``GPUModelRunner._update_states`` (vllm/v1/worker/gpu_model_runner.py) to `runner`."""
    namespace = {"torch": torch, "np": np, "SamplingType": m.vllm.SamplingType,
                 "CachedRequestState": m.gib.CachedRequestState, "cast": lambda t, v: v,
                 "get_pp_group": lambda: types.SimpleNamespace(is_last_rank=True)}
    lift.bind(runner, root / GPU_RUNNER_REL, ["GPUModelRunner._update_states"], namespace)


def lift_gpu_prompt_logprobs(root: Path, runner: _GpuRunner, sampler: Any, logprobs_mode: str) -> None:
    """Bind vLLM's ``GPUModelRunner._get_prompt_logprobs_dict`` to `runner`, with `sampler` (vLLM's
    ``Sampler`` the runner builds for `logprobs_mode`) and a model whose ``compute_logits`` is the
    identity (its hidden states are logits rows)."""
    from vllm.v1.outputs import LogprobsTensors
    namespace = {"torch": torch, "np": np, "LogprobsTensors": LogprobsTensors,
                 "async_tensor_h2d": lambda data, *a, **k: torch.tensor(data)}
    lift.bind(runner, root / GPU_RUNNER_REL, ["GPUModelRunner._get_prompt_logprobs_dict"], namespace)
    runner.sampler = sampler
    runner.model = types.SimpleNamespace(compute_logits=lambda hidden: hidden)
    runner.model_config = types.SimpleNamespace(logprobs_mode=logprobs_mode)


def _parameters(fn: Any) -> set[str]:
    import inspect
    return set(inspect.signature(fn).parameters)
