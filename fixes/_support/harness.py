"""One engine step of vllm_gaudi on CPU, through the runner's own state update and sampling.

What runs is the trees' code:

- vllm_gaudi's ``InputBatch`` (``hpu_input_batch.py``, with vLLM's logits-processor package of the
  tree: ``vllm_gaudi_stubs.load``);
- vllm_gaudi's **real** ``HPUModelRunner._update_states``, lifted out of ``hpu_model_runner.py`` and
  bound to a small stand-in runner (``vllm_gaudi_stubs.Runner``) carrying only what it reads;
- driven by vLLM's **real** ``SchedulerOutput`` / ``NewRequestData`` / ``CachedRequestData`` (imported
  from the tree's ``vllm/``), filled as vLLM's scheduler fills them (``Scheduler`` below: new
  requests, running and resumed ones with ``resumed_req_ids``, ``num_computed_tokens``,
  ``new_block_ids``, ``num_output_tokens`` and ``all_token_ids`` for those not scheduled on the
  previous step, finished and unscheduled ids); vLLM's real ``SamplingParams``;
- then ``sample_tokens``' reordering, its head, ``_extract_prefill_batch_contents`` (how many logits
  rows each prompt chunk gets), ``_run_sampling`` / ``_prepare_sampling`` for every sampler call, and
  its tail up to the loop extending ``output_token_ids`` (``engine_step.lift_step``);
- the sampler: vLLM's ``TopKTopPSampler.forward_native`` (the branch Gaudi runs; its
  ``random_sample`` draws each seeded row from the generator it is handed) for random rows,
  argmax for greedy rows, as vLLM's ``Sampler.sample``.

Stood in for: the model (``Model``: a logits row is a fixed function of the request's tokens up to
its position, so a recomputed position predicts what it predicted before), attention and the
device (CPU tensors; ``torch.hpu`` is never reached).

What runs is one ``Harness`` whose ``Config`` says what it needs: sync or async scheduling, the
structured-output block, logits-processor plugins, and speculative decoding (``spec_tokens``: the
scheduler sends each decode's drafts in ``scheduled_spec_decode_tokens`` and takes the rejected ones
back; the runner's spec-decode pieces and vLLM's rejection sampler, spec_decode.py).

A resumed-after-preemption request comes back as vLLM's scheduler sends it: in the cached requests,
in ``resumed_req_ids``, with ``num_computed_tokens`` the block-aligned prefix-cache hit, all its
blocks in ``new_block_ids`` and its tokens in ``all_token_ids``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import types
import zlib
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

import engine_step
import lift
import vllm_gaudi_stubs as stubs

VOCAB = 256
BLOCK = 4  # the scheduler's block size: prefix-cache hits are multiples of it
MAX_REQS = 8
MAX_MODEL_LEN = 128


class Vllm:
    """vLLM's own scheduler-output dataclasses, SamplingParams and sampler of the tree, imported
    for real (one vllm tree per process; bytecode cached outside the tree)."""

    _loaded: dict[Path, Any] = {}

    @classmethod
    def get(cls, root: Path) -> Any:
        root = root.resolve()
        if root not in cls._loaded:
            if cls._loaded:
                raise RuntimeError("one vllm tree per process: the harness imports `vllm` by name")
            if sys.pycache_prefix is None:
                sys.pycache_prefix = os.path.join(os.path.expanduser("~"), ".cache", "gaudi-fixes", "pycache")
            sys.path.insert(0, str(root))
            level = logging.root.manager.disable
            logging.disable(logging.WARNING)
            try:
                from vllm.sampling_params import SamplingParams, SamplingType
                from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
            finally:
                logging.disable(level)
            sampler = stubs.load_sampler(root, name="gaudi_fixes_harness_sampler")
            cls._loaded[root] = types.SimpleNamespace(SamplingParams=SamplingParams, SamplingType=SamplingType,
                                                      CachedRequestData=CachedRequestData,
                                                      NewRequestData=NewRequestData, SchedulerOutput=SchedulerOutput,
                                                      TopKTopPSampler=sampler.TopKTopPSampler, sampler_module=sampler)
        return cls._loaded[root]


def _empty(field: dataclasses.Field) -> Any:
    """A field's value for what the scheduler leaves empty (its default, or an empty value of
    its annotated type)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    kind = str(field.type)
    for prefix, value in (("dict", {}), ("list", []), ("set", set()), ("int", 0), ("bool", False)):
        if kind.startswith(prefix):
            return type(value)()
    return None


def make(cls: type, **values: Any) -> Any:
    """A vLLM dataclass with `values`, every other field empty."""
    return cls(**{f.name: values[f.name] if f.name in values else _empty(f) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class Request:
    """The scheduler's view of one request."""

    rid: str
    prompt: list[int]
    params: Any
    output: list[int] = dataclasses.field(default_factory=list)
    computed: int = 0
    blocks: list[int] = dataclasses.field(default_factory=list)
    arrived: bool = False  # sent to the runner as a new request
    preempted: bool = False
    cached: int = 0  # tokens of its prefix still in the prefix cache

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output


class Scheduler:
    """Builds each step's SchedulerOutput as vLLM's scheduler does, from a plan of scheduled
    token counts; preempts and resumes with a prefix-cache hit."""

    def __init__(self, vllm: Any):
        self.vllm = vllm
        self.requests: dict[str, Request] = {}
        self.prev_scheduled: set[str] = set()
        self.finished: set[str] = set()
        self._next_block = 1

    def add(self, rid: str, prompt: list[int], params: Any) -> Request:
        self.requests[rid] = Request(rid, list(prompt), params)
        return self.requests[rid]

    def preempt(self, rid: str) -> None:
        """As ``Scheduler._preempt_request``: blocks freed, ``num_computed_tokens = 0``; what it had
        computed stays in the prefix cache (nothing evicted it)."""
        r = self.requests[rid]
        r.cached, r.computed, r.blocks, r.preempted = r.computed, 0, [], True

    def hit(self, rid: str) -> int:
        """``get_computed_blocks``' hit on resumption: the full cached blocks, at most
        ``num_tokens - 1`` tokens; none for a request that skips reading the prefix cache
        (``SamplingParams.skip_reading_prefix_cache``: one asking prompt_logprobs)."""
        r = self.requests[rid]
        if getattr(r.params, "skip_reading_prefix_cache", False):
            return 0
        return min(r.cached, len(r.tokens) - 1) // BLOCK * BLOCK

    def finish(self, rid: str) -> None:
        self.finished.add(rid)

    def _blocks(self, r: Request, upto: int) -> list[int]:
        new = []
        while len(r.blocks) * BLOCK < upto:
            r.blocks.append(self._next_block)
            new.append(self._next_block)
            self._next_block += 1
        return new

    def output(self, scheduled: dict[str, int], drafts: Optional[dict[str, list[int]]] = None) -> Any:
        """The step's ``SchedulerOutput``; `drafts`: the draft tokens sent per decoding request
        (``scheduled_spec_decode_tokens``)."""
        v = self.vllm
        new_reqs, cached_ids, resumed, all_token_ids, new_block_ids, computed, num_output = [], [], set(), {}, [], [], []
        for rid, n in scheduled.items():
            r = self.requests[rid]
            if not r.arrived:
                r.arrived = True
                blocks = self._blocks(r, r.computed + n)
                new_reqs.append(make(v.NewRequestData, req_id=rid, prompt_token_ids=list(r.prompt), mm_features=[],
                                     sampling_params=r.params, pooling_params=None, block_ids=(list(blocks), ),
                                     num_computed_tokens=r.computed, lora_request=None))
                continue
            cached_ids.append(rid)
            if r.preempted:
                r.preempted = False
                r.computed = self.hit(rid)
                resumed.add(rid)
                blocks = self._blocks(r, r.computed + n)
                new_block_ids.append((list(r.blocks), ))  # all of them: replaces the old ids
            else:
                new = self._blocks(r, r.computed + n)
                new_block_ids.append((new, ) if new else None)
            if rid not in self.prev_scheduled:
                all_token_ids[rid] = list(r.tokens)
            computed.append(r.computed)
            num_output.append(len(r.output))
        cached = make(v.CachedRequestData, req_ids=cached_ids, resumed_req_ids=resumed, new_token_ids=[],
                      all_token_ids=all_token_ids, new_block_ids=new_block_ids, num_computed_tokens=computed,
                      num_output_tokens=num_output)
        out = make(v.SchedulerOutput, scheduled_new_reqs=new_reqs, scheduled_cached_reqs=cached,
                   num_scheduled_tokens=dict(scheduled), total_num_scheduled_tokens=sum(scheduled.values()),
                   scheduled_spec_decode_tokens={rid: list(d) for rid, d in (drafts or {}).items()},
                   scheduled_encoder_inputs={}, num_common_prefix_blocks=[0],
                   finished_req_ids=set(self.finished), free_encoder_mm_hashes=[], kv_connector_metadata=None)
        self.finished = set()
        self.prev_scheduled = set(scheduled)
        return out

    def update(self, scheduled: dict[str, int], returned: dict[str, list[int]],
               drafts: Optional[dict[str, list[int]]] = None) -> None:
        """``update_from_output``: progress (less a request's rejected `drafts`), and every token
        handed back joins the output."""
        drafts = drafts or {}
        for rid, n in scheduled.items():
            r = self.requests[rid]
            r.computed += n - (1 + len(drafts[rid]) - len(returned.get(rid, [])) if rid in drafts else 0)
            r.output.extend(returned.get(rid, []))


class Model:
    """The forward pass: logits row of a request at position q depends only on its tokens
    ``[0, q]`` (as the scheduler knows them), so recomputing a position predicts the same.
    ``context_row(context)``: the row after any context (a draft position's: the request's tokens
    and the drafts before it)."""

    def __init__(self, scheduler: Scheduler, vocab: int = VOCAB,
                 context_row: Optional[Callable[[list[int]], torch.Tensor]] = None):
        self.scheduler, self.vocab = scheduler, vocab
        self.context_row = context_row or (lambda context: context_row_of(context, vocab))
        self.made: list[tuple[str, torch.Tensor]] = []  # this step's rows, whose they are

    def row(self, rid: str, position: int) -> torch.Tensor:
        return self.context_row(self.scheduler.requests[rid].tokens[:position + 1])

    def logits(self, rows: list[tuple[str, int]]) -> torch.Tensor:
        if not rows:
            return torch.zeros(0, self.vocab)
        made = [(rid, self.row(rid, q)) for rid, q in rows]
        self.made.extend(made)
        return torch.stack([t for _, t in made])

    def owners(self, logits: torch.Tensor) -> list[Optional[str]]:
        """Whose row each row of `logits` is (made this step; None: no request's)."""
        return [next((rid for rid, t in self.made if torch.equal(t, row)), None) for row in logits]


def context_row_of(context: list[int], vocab: int = VOCAB) -> torch.Tensor:
    """The model's logits row after `context`, `vocab` wide."""
    seed = zlib.crc32(np.asarray(context, dtype=np.int64).tobytes())
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 4.0


class Sampler:
    """vLLM's ``Sampler.sample`` on the metadata the runner hands it: greedy rows argmax; random
    rows through vLLM's ``TopKTopPSampler.forward_native`` with the row's generator. Records each
    call (rows, generators handed)."""

    def __init__(self, top_k_top_p: Any):
        self.top_k_top_p = top_k_top_p
        self.calls: list[dict[str, Any]] = []
        # watch(logits, metadata): what a test reads of a call as it is made (the batch's tensors
        # that the metadata views change on later calls), kept as the call's "seen"
        self.watch: Optional[Callable[[torch.Tensor, Any], Any]] = None

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        md = sampling_metadata
        logits = logits.to(torch.float32)
        greedy = logits.argmax(dim=-1)
        self.calls.append({"rows": logits.shape[0], "generators": dict(md.generators), "logits": logits.clone(),
                           "metadata": md, "seen": None if self.watch is None else self.watch(logits, md)})
        if md.all_greedy:
            tokens = greedy
        else:
            temperature = md.temperature[:logits.shape[0]]
            temp = torch.where(temperature < 1e-5, torch.ones_like(temperature), temperature)
            random, _ = self.top_k_top_p.forward_native(logits / temp.unsqueeze(1), md.generators,
                                                        _rows(md.top_k, logits.shape[0]), _rows(md.top_p, logits.shape[0]))
            tokens = greedy if md.all_random is None else torch.where(temperature < 1e-5, greedy, random)
        tokens = tokens.to(torch.int32)
        # logprobs only when a request asked for them (vLLM: max_num_logprobs is not None): the
        # sampled token as the top-1 entry of its row
        logprobs = None if getattr(md, "max_num_logprobs", None) is None else engine_step.LogprobsTensors(tokens)
        return types.SimpleNamespace(sampled_token_ids=tokens.view(-1, 1), logprobs_tensors=logprobs)


def _rows(t: Optional[torch.Tensor], n: int) -> Optional[torch.Tensor]:
    """A metadata tensor for `n` logits rows: itself when it has them (what it carries, such as
    topk-subset-sampler's window hint, is kept), else its first `n` rows."""
    return t if t is None or t.shape[0] == n else t[:n]


@dataclasses.dataclass
class Step:
    number: int
    scheduled: dict[str, int]
    returned: dict[str, list[int]]
    rows: dict[str, int]  # logits rows per prompt chunk
    batch_changed: bool
    structured: bool = False  # the step ran sample_tokens' structured-output branch
    logprobs: Any = None  # ``_build_logprobs_output``'s LogprobsLists (rows by batch index), or None
    ns: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)  # sample_tokens' locals


_LOADED: dict[tuple[Path, int], tuple[Any, stubs.H2DRecorder]] = {}


def _load(root: Path) -> Any:
    """The tree's InputBatch module and logits processors, loaded once per version of the file."""
    key = (root.resolve(), (root / stubs.INPUT_BATCH_REL).stat().st_mtime_ns)
    if key not in _LOADED:
        h2d = stubs.H2DRecorder(root / stubs.UTILS_REL)
        _LOADED[key] = (stubs.load(root, h2d, name="gaudi_fixes_harness_ib"), h2d)
    return _LOADED[key]


def logitsprocs_package(root: Path) -> Any:
    """The tree's vLLM logits-processor package as the harness's batch loads it (``interface``,
    ``builtin``, ``state``): what a logits-processor plugin is written against."""
    return _load(root)[0].logitsprocs


def input_batch(module: Any, vocab: int, logitsprocs: Any = None, *, max_num_reqs: int = MAX_REQS,
                max_model_len: int = MAX_MODEL_LEN, max_num_batched_tokens: int = 256, block_size: int = BLOCK,
                **kw: Any) -> Any:
    """The tree's ``InputBatch`` (of `module`) as the harness runs it: the one place a batch is
    built (the bench scripts size theirs through the keywords)."""
    return module.InputBatch(max_num_reqs=max_num_reqs, max_model_len=max_model_len,
                             max_num_batched_tokens=max_num_batched_tokens, device=torch.device("cpu"),
                             pin_memory=False, vocab_size=vocab, block_sizes=[block_size],
                             kernel_block_sizes=[block_size], logitsprocs=logitsprocs, **kw)


def request_state(module: Any, rid: str, prompt: list[int], params: Any, computed: int,
                  output: Optional[list[int]] = None) -> Any:
    """The tree's ``CachedRequestState`` (of `module`) of a request that has `computed` tokens
    and the list `output` (kept, not copied: a logits processor holds it by reference), as
    ``_update_states`` makes one: for the bench scripts, which fill a batch without stepping it.
    A fix test gets its states from the runner's own ``_update_states`` (``Harness.step``)."""
    return module.CachedRequestState(req_id=rid, prompt_token_ids=list(prompt), mm_features=[],
                                     sampling_params=params, generator=None, block_ids=[[0]],
                                     num_computed_tokens=computed, output_token_ids=[] if output is None else output)


@dataclasses.dataclass(frozen=True)
class Config:
    """What a ``Harness`` runs. `mode`: sync or async scheduling; `grammar`: the runner's own
    ``apply_grammar_bitmask`` and structured-output block run (``step(..., grammar_output=…)``);
    `vocab`: the logits' width; `plugins`: logits-processor classes, as ``--logits-processors``
    gives them to ``build_logitsprocs``; `batch`: builds the InputBatch from (the tree's
    hpu_input_batch module, the logits processors) in place of ``input_batch`` (a test that builds
    it as the runner does); `row`: the model's logits row after a context (``Model.context_row``).

    `spec_tokens` > 0: speculative decoding with that ``num_speculative_tokens`` (sync only:
    vllm_gaudi turns async scheduling off with a speculative config; no plugins: vLLM then builds
    only ``MinTokensLogitsProcessor``), its decodes padded to the smallest of `buckets` that holds
    them (HPU's decode buckets); see spec_decode.py for what runs."""

    mode: str = "sync"
    grammar: bool = False
    vocab: int = VOCAB
    plugins: tuple = ()
    batch: Optional[Callable[[Any, Any], Any]] = None
    row: Optional[Callable[[list[int]], torch.Tensor]] = None
    spec_tokens: int = 0
    buckets: tuple[int, ...] = (2, 4, 8)


class Harness:
    """vllm_gaudi's runner driven step by step (``step``), as its `config` says (``Config``; a mode
    string and ``Config``'s keywords also do)."""

    def __init__(self, root: Path, config: Any = None, **kw: Any):
        config = Config(mode=config, **kw) if isinstance(config, str) else config or Config(**kw)
        assert config.mode in ("sync", "async") and not (config.spec_tokens and config.mode == "async")
        self.root, self.config, self.mode, self.vocab = root, config, config.mode, config.vocab
        self.vllm = Vllm.get(root)
        loaded, self.h2d = _load(root)  # h2d: every async_h2d_update of the batch (shared by the module)
        namespace = {"torch": torch, "np": np, "SamplingType": self.vllm.SamplingType,
                     "logger": logging.getLogger("harness"), "cast": lambda t, v: v,
                     "get_pp_group": lambda: types.SimpleNamespace(is_last_rank=True)}
        lifted = ["HPUModelRunner._update_states"]
        spec = (types.SimpleNamespace(num_speculative_tokens=config.spec_tokens, method="ngram")
                if config.spec_tokens else None)
        batch_config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQS),
                                             speculative_config=spec)
        if spec:  # the batch with vLLM's real modules, and the runner's spec-decode pieces
            import spec_decode
            self.real = spec_decode.RealVllm.get(root)
            self.h2d = stubs.H2DRecorder(root / stubs.UTILS_REL)
            self.module = spec_decode.load_input_batch(root, self.h2d)
            build = self.real.logits_processor.build_logitsprocs
            logitsprocs = build(batch_config, torch.device("cpu"), False, False, [])
            self.batch = input_batch(self.module, config.vocab, logitsprocs, is_spec_decode=True)
            namespace.update(SpecDecodeMetadata=self.real.SpecDecodeMetadata, Optional=Optional)
            lifted += ["HPUModelRunner._prepare_spec_decode_inputs", "HPUModelRunner._get_cumsum_and_arange"]
        else:
            self.module = loaded.input_batch
            logitsprocs = loaded.build_logitsprocs(batch_config, torch.device("cpu"), False, False,
                                                   list(config.plugins))
            self.batch = (input_batch(self.module, config.vocab, logitsprocs) if config.batch is None
                          else config.batch(self.module, logitsprocs))
        runner = self.runner = stubs.Runner(root, self.batch, reorder=True)
        self.code = engine_step.lift_step(runner, root, grammar=config.grammar)
        runner.max_model_len = MAX_MODEL_LEN
        runner.use_async_scheduling = config.mode == "async"
        runner.encoder_cache = {}
        runner._compact_gdn_group_ids = set()
        runner.uses_mrope = False
        path = root / stubs.RUNNER_REL
        namespace["CachedRequestState"] = self.module.CachedRequestState
        lift.bind(runner, path, lifted, namespace)
        self.scheduler = Scheduler(self.vllm)
        self.model = Model(self.scheduler, config.vocab, config.row)
        if spec:
            runner.vllm_config = types.SimpleNamespace(speculative_config=spec)
            runner.speculative_config = spec
            runner.arange_np = np.arange(1024, dtype=np.int64)
            runner.sampler = self.sampler = self.real.Sampler()
            runner.rejection_sampler = self.real.RejectionSampler(self.sampler)
            self.decode_code = spec_decode.decode_sampling_statement(path)
        else:
            runner.sampler = self.sampler = Sampler(self.vllm.TopKTopPSampler())
        self.drafts: dict[str, list[int]] = {}  # the step's drafts
        self.in_spec = False  # the spec decode block runs
        self.steps: list[Step] = []
        # the decode bucket for n decodes (padded with copies of the first decode's row)
        self.decode_bucket: Callable[[int], int] = lambda n: max(n, 4)

    def record_swaps(self) -> list[tuple[int, int]]:
        """From now on, every ``swap_states(i1, i2)`` of the batch (the runner's reorders) is
        appended to the list returned."""
        swaps: list[tuple[int, int]] = []
        swap_states = self.batch.swap_states

        def recording_swap(i1: int, i2: int) -> None:
            swaps.append((i1, i2))
            swap_states(i1, i2)

        self.batch.swap_states = recording_swap
        return swaps

    def params(self, **kw: Any) -> Any:
        return self.vllm.SamplingParams(**kw)

    def add(self, rid: str, prompt: list[int], **params: Any) -> None:
        self.scheduler.add(rid, prompt, self.params(**params))

    def step(self, scheduled: dict[str, int], grammar_output: Any = None,
             drafts: Optional[dict[str, list[int]]] = None) -> Step:
        """One engine step: the scheduler's output, ``_update_states``, ``sample_tokens``; the tokens
        each request gets back (as the engine reads them) go to the scheduler. `grammar_output`:
        the scheduler's ``GrammarOutput`` (``structured_output_request_ids``, ``grammar_bitmask``);
        `drafts` (speculative decoding): the draft tokens the scheduler sends per decoding request,
        whose scheduled count must be ``1 + len(drafts[rid])``."""
        drafts = {rid: list(d) for rid, d in (drafts or {}).items() if rid in scheduled}
        assert not drafts or self.config.spec_tokens, "drafts need Config(spec_tokens=…)"
        for rid, d in drafts.items():
            assert scheduled[rid] == 1 + len(d), f"{rid}: scheduled {scheduled[rid]} with {len(d)} drafts"
        self.drafts = drafts
        if not self.config.spec_tokens:
            return self._step(scheduled, grammar_output)
        import spec_decode  # vllm_gaudi's rejection_sample, as it installs it at import
        real = self.real
        with spec_decode.installed(real.rejection_sampler, real.hpu_rejection_sample, real.hpu_installs):
            return self._step(scheduled, grammar_output)

    def _step(self, scheduled: dict[str, int], grammar_output: Any) -> Step:
        runner, batch = self.runner, self.batch
        self.model.made = []
        sched = self.scheduler.output(scheduled, self.drafts)
        batch_changed = runner._update_states(sched)
        runner._sample_tokens_reorder(sched)
        pd_info = runner._get_prompts_and_decodes(sched)
        num_decodes, num_prefills = len(pd_info.decode_req_ids), len(pd_info.prompt_req_ids)
        ns: dict[str, Any] = {"self": runner, "torch": torch, "num_decodes": num_decodes, "num_prefills": num_prefills,
                              "num_reqs": num_decodes + num_prefills, "pd_info": pd_info, "batch_changed": batch_changed,
                              "scheduler_output": sched, "spec_decode_num_tokens": None, "grammar_output": grammar_output}
        exec(self.code["head"], ns)
        num_scheduled = [scheduled[rid] for rid in batch.req_ids]
        contents, _ = runner._extract_prefill_batch_contents(num_prefills, num_decodes, num_scheduled)
        exec(self.code["flag"], ns)
        rows = self._forward_and_sample(ns, contents, pd_info, num_decodes, batch_changed)
        if runner.use_structured_output:
            exec(self.code["structured"], ns)
        exec(self.code["tail"], ns)
        returned = engine_step.returned(runner, ns)
        # sample_tokens' "Build combined logprobs from all sampling calls"
        logprobs = runner._build_logprobs_output(ns["logprobs_segments"], max(batch.req_id_to_index.values()) + 1)
        step = Step(len(self.steps) + 1, dict(scheduled), returned, rows, batch_changed, runner.use_structured_output,
                    logprobs, ns)
        self.steps.append(step)
        self.scheduler.update(scheduled, returned, self.drafts)
        return step

    def _forward_and_sample(self, ns: dict[str, Any], contents: Any, pd_info: Any, num_decodes: int,
                            batch_changed: bool) -> dict[str, int]:
        """sample_tokens' prefill loop and decode block (the lines that collect rows and tokens);
        the model stands in for ``_execute_model_generic``. A step with drafts: its decode block
        is the spec one (``_spec_decode``)."""
        runner, batch = self.runner, self.batch
        if self.drafts and num_decodes:
            rows = self._forward_and_sample(ns, contents, pd_info, 0, batch_changed)  # the prefills
            self.in_spec = True
            try:
                self._spec_decode(ns, pd_info, num_decodes, batch_changed)
            finally:
                self.in_spec = False
            return rows
        ns.update(prefill_sampled_token_ids=[], prefill_sampled_requests=[], decode_sampled_token_ids=[],
                  decode_sampled_requests=[], logprobs_segments=[], logits_prompt=[], logits_decode=[])
        rows: dict[str, int] = {}
        for bc in contents:
            if not bc.req_ids:
                continue
            positions = [(rid, ctx + p) for rid, ctx, pos in zip(bc.req_ids, bc.context_lens, bc.logits_positions)
                         for p in pos]
            logits_requests = [rid for rid, _ in positions]
            for rid in bc.req_ids:
                rows[rid] = logits_requests.count(rid)
            logits = self.model.logits(positions)
            if runner.use_structured_output:  # one sampler call after the loop (the structured block)
                ns["logits_prompt"].append(logits)
                ns["prefill_sampled_requests"].extend(logits_requests)
            elif logits.numel() > 0:
                out, _ = runner._run_sampling(batch_changed, logits, bc.req_ids, logits.shape[0], logits_requests)
                ns["prefill_sampled_token_ids"].append(out.sampled_token_ids.flatten())
                ns["prefill_sampled_requests"].extend(logits_requests)
                ns["logprobs_segments"].append((list(logits_requests), out.logprobs_tensors))
        if num_decodes:
            decode = [(rid, int(batch.num_computed_tokens_cpu[i])) for i, rid in enumerate(pd_info.decode_req_ids)]
            padded = decode + [decode[0]] * (self.decode_bucket(num_decodes) - num_decodes)
            logits = self.model.logits(padded)
            if runner.use_structured_output:
                ns["logits_decode"].append(logits[:num_decodes])
            else:
                out, _ = runner._run_sampling(batch_changed, logits, pd_info.decode_req_ids, logits.shape[0])
                ns["decode_sampled_token_ids"].append(out.sampled_token_ids.flatten())
                ns["logprobs_segments"].append((list(pd_info.decode_req_ids), out.logprobs_tensors))
            ns["decode_sampled_requests"].extend(batch.req_ids[:num_decodes])
        return rows

    def _spec_decode(self, ns: dict[str, Any], pd_info: Any, num_decodes: int, batch_changed: bool) -> None:
        """The decode block of a spec step: the HPU layout of ``_create_decode_input_data`` (every
        request ``max_spec_len + 1`` token slots, padded to a bucket), the runner's
        ``_prepare_spec_decode_inputs``, the model's logits at its ``logits_indices`` (``-1``: the
        last slot's row), and the runner's decode-sampling statement."""
        runner = self.runner
        decodes = list(pd_info.decode_req_ids)
        slots = max(1 + len(self.drafts.get(rid, [])) for rid in decodes)
        padded = min(b for b in self.config.buckets if b >= num_decodes)
        token_ids = torch.zeros(padded * slots, 1, dtype=torch.int64)
        contexts: list[list[int]] = []
        for b in range(padded):
            rid = decodes[b] if b < num_decodes else None
            tokens = self.scheduler.requests[rid].tokens if rid else [0]
            d = self.drafts.get(rid, []) if rid else []
            row = [tokens[-1], *d]
            token_ids[b * slots:b * slots + len(row), 0] = torch.tensor(row)
            for j in range(slots):
                contexts.append(tokens + d[:j] if rid and j <= len(d) else [7, b, j])
        logits_indices = torch.zeros(padded, dtype=torch.int32)
        indices, metadata = runner._prepare_spec_decode_inputs(
            types.SimpleNamespace(scheduled_spec_decode_tokens=self.drafts), logits_indices, token_ids, slots)
        rows = [contexts[i] for i in indices.tolist()]  # -1: the last slot
        logits = torch.stack([self.model.context_row(c) for c in rows])
        ns.update(decode_data=types.SimpleNamespace(spec_decode_metadata=metadata), logits_device=logits,
                  batch_changed=batch_changed, decode_sampled_token_ids_device=None)
        exec(self.decode_code, ns)

    def output(self, rid: str) -> list[int]:
        """Everything request `rid` got back so far, as the user sees it."""
        return list(self.scheduler.requests[rid].output)


def prompt(n: int, salt: int) -> list[int]:
    return [(7 * i + 13 * salt + 5) % VOCAB for i in range(n)]


def root_or_skip(env: str = "GAUDI_FIXES_ROOT") -> Optional[Path]:
    value = os.environ.get(env)
    return Path(value) if value else None


def no_pinned_memory() -> None:
    """No pinned host memory on CPU: vLLM's modules imported so far (its penalties, its GPU input
    batch) ask for it when they see no GPU otherwise."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and module is not None:
            if hasattr(module, "PIN_MEMORY"):
                module.PIN_MEMORY = False
            if hasattr(module, "is_pin_memory_available"):
                module.is_pin_memory_available = lambda: False
