"""The conformance suite: what vllm_gaudi's sampling path hands the sampler, per step and per
request id, held against what each request asked for (CPU; needs torch and numpy).

Under test is the tree's own code, as it is: vllm_gaudi's ``hpu_input_batch.py``, vLLM's logits
processors of the tree (``load``), and of ``hpu_model_runner.py`` (lifted, never rewritten; see
engine_step.py) the reorder, ``sample_tokens``' head, ``_extract_prefill_batch_contents`` (which
prompt chunk gets a logits row), the structured-output flag and block, ``apply_grammar_bitmask``
(with xgrammar's CPU kernel contract), ``_run_sampling`` / ``_prepare_sampling``, the tail that
hands sampled ids back and ``_build_logprobs_output``. The suite is the forward pass (one logits row
per request the runner asks for, marked with its request) and the sampler (it checks what it is
handed and samples each request's own token). Seeded random schedules drive it: arrivals with
random ``SamplingParams`` (greedy / temperature, top_k, top_p, min_p, seed, the three penalties,
allowed_token_ids, logit_bias, min_tokens, logprobs incl. -1, bad_words incl. multi-token) and, for
about a quarter of them, a grammar (structured output: the scheduler's
``structured_output_request_ids``, shuffled, with their bitmask rows, for the requests that are not
a prefill chunk), finishes, pauses (a running request left out of steps: removed from the batch,
its state kept, re-added when scheduled again, with its output ids recovered under async as the
scheduler's ``all_token_ids`` do), chunked prefills and padded decode buckets, under sync and async
scheduling. Each sampler call is checked per request: sampling parameters at its row, its
generator, the output ids the penalties / bad_words / min_tokens see, the allowed and bad_words
masks, the grammar bitmask on its row, the processors' effect on a probe logits tensor, the
logprobs served; each step, the tokens handed back (the sampled one for a decode or a prompt that
finishes, none for a chunk mid-prompt) and the logprobs each request is served. What goes wrong in
a structured-output step's one sampler call counts as ``structured_output``.

    python conform.py --root DIR --schedules N --seed S [--first]

prints one JSON object: per feature, the schedules that exercised it, the differences and the first
one as a sentence; exit 0 when it ran (whatever it found), 3 when it cannot run (the reason, and a
pip line when a module is missing).

The differential half: the same schedule drives vLLM's own GPU path of the tree (its
``vllm/v1/worker/gpu_input_batch.py`` InputBatch, imported for real with the pinned deps of
requirements.txt; pinned memory off), updated as ``GPUModelRunner._update_states`` does
(remove_request, add_request, condense, refresh_metadata every step; the runner method itself is not
lifted), and per HPU sampler call each request's row is compared with its GPU row: sampling
parameters, generator, output ids, allowed and bad_words masks, the processors' effect on the same
probe row, logprobs served. A difference where the GPU path itself disagrees with the request is
listed under ``gpu_disagrees`` ("vLLM's GPU path disagrees with the request") and does not count.
``--no-reference`` skips it.

Not covered (yet): a preempted request's recompute (num_computed_tokens back to 0), prompt_logprobs,
the generator's state (its owner is checked), speculative decoding; see the fix pages.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
import types
from pathlib import Path
from typing import Any, Optional

STRUCTURED = "structured_output"  # what a structured-output step's one sampler call is handed, its bitmask rows
RETURNED = "returned_tokens"  # the tokens handed back to the scheduler (none for a chunk mid-prompt)
FEATURES = ("temperature/top_k/top_p", "seeds", "penalties", "min_p", "logit_bias", "min_tokens", "bad_words",
            "allowed_token_ids", "logprobs", STRUCTURED, RETURNED)

VOCAB = 64
EOS = 2
MAX_REQS = 8
STEPS = 12
CHUNK = 8  # the longest prompt chunk a step schedules
NEG_INF = float("-inf")


def _cannot_run(reason: str, module: Optional[str] = None) -> None:
    out: dict[str, Any] = {"error": reason}
    if module:
        out["missing"] = module
        out["pip"] = f"{sys.executable} -m pip install --no-deps {module}"
    print(json.dumps(out))
    sys.exit(3)


try:
    import torch

    import numpy as np

    import engine_step
    import vllm_gaudi_stubs as stubs

    torch.set_num_threads(1)  # tiny tensors: a thread pool only costs time
except ModuleNotFoundError as e:  # noqa: BLE001 - named in the report
    _cannot_run(f"the suite needs the Python module {e.name}", e.name)


class Hpu:
    """The tree's InputBatch, logits processors and runner functions, driven as HPUModelRunner does."""

    _loaded: dict[Path, Any] = {}

    def __init__(self, root: Path, use_async: bool):
        # The tree's modules are loaded once; each schedule gets its own batch and processors.
        if root not in Hpu._loaded:
            Hpu._loaded[root] = stubs.load(root, stubs.H2DRecorder(root / stubs.UTILS_REL),
                                           name=f"conform_ib_{len(Hpu._loaded)}")
        loaded = Hpu._loaded[root]
        self.module = loaded.input_batch
        config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQS),
                                       speculative_config=None)
        logitsprocs = loaded.build_logitsprocs(config, torch.device("cpu"), False, False, [])
        self.batch = self.module.InputBatch(max_num_reqs=MAX_REQS, max_model_len=128, max_num_batched_tokens=256,
                                            device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                            block_sizes=[128], kernel_block_sizes=[128], logitsprocs=logitsprocs)
        runner = self.runner = stubs.Runner(root, self.batch, reorder=True)
        # What one engine step runs of sample_tokens (its head, the structured-output flag and
        # block, the tail), _extract_prefill_batch_contents, _run_sampling, apply_grammar_bitmask,
        # _build_logprobs_output: lifted from the tree's hpu_model_runner.py.
        self.code = engine_step.lift_step(runner, root, grammar=True)
        runner.use_async_scheduling = use_async


class GpuModules:
    """vLLM's own GPU-path modules of the tree (vllm/ under the root), imported for real with the
    pinned pure-Python deps; only what cannot run on CPU is turned off (pinned memory)."""

    _loaded: dict[Path, Any] = {}

    @classmethod
    def get(cls, root: Path) -> Any:
        if root not in cls._loaded:
            if cls._loaded:
                raise RuntimeError("one vllm tree per process: the GPU reference imports `vllm` by name")
            sys.path.insert(0, str(root))
            # Bytecode goes to a cache of ours, never into the tree (it may be shared, read-only).
            import os
            if sys.pycache_prefix is None:
                sys.pycache_prefix = os.path.join(os.path.expanduser("~"), ".cache", "gaudi-fixes", "pycache")
            import logging
            logging.disable(logging.WARNING)
            import warnings
            warnings.simplefilter("ignore")
            try:
                import vllm.v1.worker.gpu_input_batch as gib
                from vllm.sampling_params import SamplingParams
                from vllm.v1.sample.logits_processor import build_logitsprocs
            except ModuleNotFoundError as e:
                _cannot_run(f"vLLM's GPU path (the differential reference) needs the Python module {e.name}; "
                            "install fixes/_support/requirements.txt with --no-deps", e.name)
            for name, module in list(sys.modules.items()):
                if name.startswith("vllm") and module is not None:
                    if hasattr(module, "PIN_MEMORY"):
                        module.PIN_MEMORY = False
                    if hasattr(module, "is_pin_memory_available"):
                        module.is_pin_memory_available = lambda: False
            cls._loaded[root] = types.SimpleNamespace(gib=gib, SamplingParams=SamplingParams,
                                                      build_logitsprocs=build_logitsprocs,
                                                      saved={n: m for n, m in sys.modules.items()
                                                             if n == "vllm" or n.startswith("vllm.")})
        return cls._loaded[root]


class GpuBatch:
    """vLLM's InputBatch (gpu_input_batch.py of the tree) driven as GPUModelRunner._update_states
    drives it: remove_request for finished ones, add_request for new ones, condense, then
    refresh_metadata (every step); sampled ids are appended to the request's output ids
    as _bookkeeping_sync does."""

    def __init__(self, root: Path):
        m = self.m = GpuModules.get(root)
        config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQS),
                                       speculative_config=None)
        kw: dict[str, Any] = dict(max_num_reqs=MAX_REQS, max_model_len=128, max_num_batched_tokens=256,
                                  device=torch.device("cpu"), vocab_size=VOCAB, block_sizes=[128],
                                  max_num_blocks_per_req=[1],
                                  logitsprocs=m.build_logitsprocs(config, torch.device("cpu"), False, False, ()))
        if "kernel_block_sizes" in _parameters(m.gib.InputBatch.__init__):
            kw["kernel_block_sizes"] = [128]
        self.batch = m.gib.InputBatch(**kw)
        self.states: dict[str, Any] = {}
        self.new: list[Any] = []

    def arrive(self, rid: str, asked: dict[str, Any], prompt: list[int]) -> None:
        kw = {k: v for k, v in asked.items() if k != "bad_words_token_ids"}
        params = self.m.SamplingParams(**kw)
        # What update_from_generation_config / update_from_tokenizer would have set.
        params._all_stop_token_ids = {EOS}
        if "bad_words_token_ids" in asked:
            params._bad_words_token_ids = [list(w) for w in asked["bad_words_token_ids"]]
        generator = None
        if params.sampling_type == self.m.gib.SamplingType.RANDOM_SEED:
            generator = torch.Generator().manual_seed(params.seed)
        state = self.m.gib.CachedRequestState(req_id=rid, prompt_token_ids=prompt, mm_features=[],
                                              sampling_params=params, generator=generator, pooling_params=None,
                                              block_ids=([0], ), num_computed_tokens=0, output_token_ids=[])
        self.states[rid] = state
        self.new.append(state)

    def update(self, finished: list[Any], pausing: list[Any], resumed: list[Any], use_async: bool) -> None:
        batch = self.batch
        removed = [batch.remove_request(r.rid) for r in finished + pausing]  # finished and unscheduled
        for r in finished:
            self.states.pop(r.rid)
        for rid, state in self.states.items():
            if rid in batch.req_id_to_index:
                batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        for r in resumed:
            if use_async:  # the scheduler's all_token_ids recover the output ids
                self.states[r.rid].output_token_ids = list(r.generated)
        for state in [*self.new, *(self.states[r.rid] for r in resumed)]:
            batch.add_request(state)
        self.new = []
        if removed:
            batch.condense()
        batch.refresh_metadata()  # every step, as _update_states; it rebuilds the metadata on a change


def _parameters(fn: Any) -> set[str]:
    import inspect
    return set(inspect.signature(fn).parameters)


def _asked(asked: dict[str, Any], feature: str) -> str:
    keys = [k for k in asked if _feature(k) == feature]
    return ", ".join(f"{k}={asked[k]}" for k in keys) or f"no {feature}"


class Request:

    def __init__(self, rid: str, params: Any, prompt: list[int], asked: dict[str, Any]):
        self.rid, self.params, self.prompt, self.asked = rid, params, prompt, asked
        self.computed = 0
        self.generated: list[int] = []
        self.grammar: Optional[list[int]] = None


def random_params(rng: random.Random) -> dict[str, Any]:
    """The request's SamplingParams, as keyword arguments; each feature present with some chance."""
    p: dict[str, Any] = {"temperature": rng.choice([0.0, 0.7, 1.0])}
    if rng.random() < 0.3:
        p["top_k"] = rng.randint(1, 20)
    if rng.random() < 0.3:
        p["top_p"] = rng.choice([0.5, 0.9])
    if rng.random() < 0.3:
        p["seed"] = rng.randint(0, 1000)
    if rng.random() < 0.25:
        p["frequency_penalty"], p["presence_penalty"], p["repetition_penalty"] = 0.5, 0.3, 1.2
    if rng.random() < 0.3:
        p["min_p"] = rng.choice([0.1, 0.2, 0.5])
    if rng.random() < 0.3:
        p["logit_bias"] = {rng.randrange(3, VOCAB): rng.choice([-5.0, 8.0])}
    if rng.random() < 0.3:
        p["min_tokens"] = rng.randint(1, 5)
    if rng.random() < 0.3:
        p["logprobs"] = rng.choice([-1, 0, 3])
    if rng.random() < 0.3:
        words = [[rng.randrange(3, VOCAB)]]
        if rng.random() < 0.7:
            words.append([rng.randrange(3, VOCAB), rng.randrange(3, VOCAB)])
        p["bad_words_token_ids"] = words
    if rng.random() < 0.2:
        p["allowed_token_ids"] = sorted(rng.sample(range(3, VOCAB), 8) + [EOS])
    return p


def _describe(rid: str, asked: dict[str, Any], key: str) -> str:
    return f"request {rid} asked {key}={asked[key]}"


class Schedule:
    """One seeded schedule on one side; `found` collects (feature, sentence)."""

    def __init__(self, root: Path, seed: int, use_async: bool, with_reference: bool = True):
        self.rng = random.Random(seed)
        self.mode = "async" if use_async else "sync"
        self.hpu = Hpu(root, use_async)
        self.number = 0
        self.paused: set[str] = set()
        self.requests: dict[str, Request] = {}
        self.next_id = 0
        self.found: list[tuple[str, str]] = []
        self.sink = self.found
        self.side = "HPU"
        self.states = self.hpu.runner.requests
        # vLLM's GPU path of the same tree, fed the same schedule: the differential reference.
        self.gpu = GpuBatch(root) if with_reference else None
        self.gpu_disagrees: list[tuple[str, str]] = []
        self.exercised: set[str] = set()
        self.noise = torch.Generator().manual_seed(seed)
        self.bad_words = bad_words_op(root)
        self.hpu.runner.sampler = self
        self.structured = False
        self.exercised.add(RETURNED)  # every step hands tokens back

    def _arrive(self) -> None:
        rid = f"r{self.next_id}"
        self.next_id += 1
        asked = random_params(self.rng)
        params = stubs.SamplingParams(eos_token_id=EOS, **asked)
        prompt = [self.rng.randrange(3, VOCAB) for _ in range(self.rng.randint(2, 20))]
        req = self.requests[rid] = Request(rid, params, prompt, asked)
        if self.rng.random() < 0.25:  # structured output: the grammar's allowed tokens
            req.grammar = sorted(self.rng.sample(range(3, VOCAB), 12) + [EOS])
            self.exercised.add(STRUCTURED)
        state = self.hpu.module.CachedRequestState(req_id=rid, prompt_token_ids=prompt, mm_features=[],
                                                   sampling_params=params, generator=None, block_ids=[[0]],
                                                   num_computed_tokens=0, output_token_ids=[])
        if params.seed is not None:
            state.generator = torch.Generator().manual_seed(params.seed)
        self.hpu.runner.requests[rid] = state
        self.arrived.append(state)
        req.state = state
        for key in asked:
            self.exercised.add(_feature(key))
        if self.gpu is not None:
            self.gpu.arrive(rid, asked, prompt)

    def step(self, number: int) -> None:
        batch, runner = self.hpu.batch, self.hpu.runner
        rng = self.rng
        # What the scheduler decides: finishes, pauses (a running request left out of the step:
        # the token budget, or preempted), resumes, arrivals, tokens per request.
        running = [r for r in self.requests.values() if r.rid not in self.paused]
        finished = [r for r in running if r.generated and rng.random() < 0.15]
        pausing = [r for r in running if r.generated and r not in finished and rng.random() < 0.1]
        resumed = [self.requests[rid] for rid in sorted(self.paused) if rng.random() < 0.6]
        self.paused = (self.paused - {r.rid for r in resumed}) | {r.rid for r in pausing}
        self.arrived: list[Any] = []
        free = MAX_REQS - (len(self.requests) - len(finished))
        for _ in range(rng.randint(0, min(2, free))):
            self._arrive()
        # HPUModelRunner._update_states: removals (finished and unscheduled requests), new and
        # resumed requests into the freed rows (the lowest first), condense, refresh.
        removed = sorted((batch.remove_request(r.rid) for r in finished + pausing), reverse=True)
        for r in finished:
            runner.requests.pop(r.rid)
            del self.requests[r.rid]
        for rid, state in runner.requests.items():
            if rid in batch.req_id_to_index:
                batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        for r in resumed:
            if runner.use_async_scheduling:  # the scheduler's all_token_ids recover the output ids
                r.state.output_token_ids = list(r.generated)
        for state in [*self.arrived, *(r.state for r in resumed)]:
            batch.add_request(state, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)
        if self.gpu is not None:
            self.gpu.update(finished, pausing, resumed, runner.use_async_scheduling)
        # As _update_states: the device copies are refreshed only when a request came or went.
        self.batch_changed = bool(self.arrived or finished or pausing or resumed)
        if self.batch_changed:
            batch.refresh_sampling_metadata()
        scheduled = {}
        for r in self.requests.values():
            if r.rid in self.paused:
                continue
            left = len(r.prompt) - r.computed
            scheduled[r.rid] = min(left, rng.randint(1, CHUNK)) if left > 0 else 1
        if not scheduled:
            return
        completes = {rid for rid, n in scheduled.items() if self.requests[rid].computed + n >= len(self.requests[rid].prompt)}
        # Scheduler.get_grammar_bitmask: the scheduled structured requests that are not a prefill
        # chunk, in the scheduler's order, each with its grammar's bitmask row.
        so_ids = [rid for rid in scheduled if self.requests[rid].grammar is not None and rid in completes]
        rng.shuffle(so_ids)
        grammar_output = None
        if so_ids:
            words = (VOCAB + 31) // 32
            bitmask = np.zeros((len(so_ids), words), dtype=np.uint32)
            for j, rid in enumerate(so_ids):
                for t in (0, 1, *self.requests[rid].grammar):  # columns 0 and 1 carry the row's mark
                    bitmask[j, t // 32] |= np.uint32(1 << (t % 32))
            grammar_output = types.SimpleNamespace(structured_output_request_ids=so_ids,
                                                   grammar_bitmask=bitmask.view(np.int32))
        sched = stubs.SchedulerOutput(num_scheduled_tokens=scheduled)
        sched.total_num_scheduled_tokens = sum(scheduled.values())
        sched.kv_connector_metadata = None
        runner._sample_tokens_reorder(sched)
        pd_info = runner._get_prompts_and_decodes(sched)
        num_decodes, num_prefills = len(pd_info.decode_req_ids), len(pd_info.prompt_req_ids)
        self.number, self.so_ids, self.decodes = number, so_ids, set(pd_info.decode_req_ids)
        self.structured = False
        ns: dict[str, Any] = {"self": runner, "torch": torch, "num_decodes": num_decodes, "num_prefills": num_prefills,
                              "num_reqs": num_decodes + num_prefills, "pd_info": pd_info,
                              "batch_changed": self.batch_changed, "scheduler_output": sched,
                              "spec_decode_num_tokens": None, "grammar_output": grammar_output}
        code = self.hpu.code
        self.sampled: dict[str, int] = {}
        exec(code["head"], ns)
        # _prepare_inputs, which reads the structured-output flag before sample_tokens sets it.
        contents, _ = runner._extract_prefill_batch_contents(num_prefills, num_decodes,
                                                             [scheduled[rid] for rid in batch.req_ids])
        exec(code["flag"], ns)
        self.structured = runner.use_structured_output
        rows: dict[str, int] = {}
        engine_step.forward_and_sample(runner, ns, contents, pd_info, num_decodes, self.batch_changed, self._logits,
                                       rows, lambda n: 1 << (n - 1).bit_length())
        if self.structured:
            exec(code["structured"], ns)
        exec(code["tail"], ns)
        logprobs = runner._build_logprobs_output(ns["logprobs_segments"], max(batch.req_id_to_index.values()) + 1)
        got = engine_step.returned(runner, ns)
        self._check_returned(number, scheduled, completes, got, logprobs)
        for rid, n in scheduled.items():
            self.requests[rid].computed += n
            runner.requests[rid].num_computed_tokens += n
            if self.gpu is not None:
                self.gpu.states[rid].num_computed_tokens += n
        for rid in [*pd_info.decode_req_ids, *(r for r in pd_info.prompt_req_ids if r in completes)]:
            token = self._token(rid)
            self.requests[rid].generated.append(token)
            if self.gpu is not None:  # _bookkeeping_sync: the sampled id joins the request's output ids
                self.gpu.states[rid].output_token_ids.append(token)

    def _token(self, rid: str) -> int:
        """The token request `rid` samples at this step: one its grammar and allowed_token_ids allow."""
        r = self.requests[rid]
        allowed = set(r.asked.get("allowed_token_ids") or range(3, VOCAB))
        if r.grammar is not None:
            allowed &= set(r.grammar)
        allowed = sorted(allowed) or [EOS]
        return allowed[(self.number * 7 + int(rid[1:])) % len(allowed)]

    def _logits(self, rids: list[str]) -> torch.Tensor:
        """The forward pass: a logits row per request id, marked with the request in column 0."""
        out = torch.zeros(len(rids), VOCAB)
        for i, rid in enumerate(rids):
            out[i, 0] = int(rid[1:])
        return out

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        """The sampler (HPUModelRunner.sampler): checks what it is handed, per row's request, and
        samples each request's own token."""
        rows = [f"r{int(v)}" for v in logits[:, 0].tolist()]
        md = sampling_metadata
        kind = "structured-output" if self.structured else ("decode" if rows and rows[0] in self.decodes else "prefill")
        where = f"step {self.number} ({self.mode}, {kind} call)"
        probe = torch.randn(len(rows), VOCAB, generator=self.noise) * 3
        found = len(self.found)
        self._check_metadata(where, rows, md)
        self._check_processors(where, rows, md, probe)
        if self.gpu is not None:
            self._differential(where, rows, md, probe)
        if self.structured:
            self._check_grammar(where, rows, logits)
            # A structured-output step samples every row in one call: what goes wrong there is
            # the structured-output path's (the sentence still names the parameter).
            self.found[found:] = [(STRUCTURED, sentence) for _, sentence in self.found[found:]]
        tokens = torch.tensor([self._token(rid) for rid in rows], dtype=torch.int32)
        lp = None if md.max_num_logprobs is None else engine_step._LogprobsTensors(tokens)
        return types.SimpleNamespace(sampled_token_ids=tokens.view(-1, 1), logprobs_tensors=lp)

    def _check_grammar(self, where: str, rows: list[str], logits: torch.Tensor) -> None:
        """The grammar bitmask went on each structured request's own row, and on no other."""
        for i, rid in enumerate(rows):
            if rid in rows[:i]:
                continue
            r = self.requests[rid]
            want = set() if rid not in self.so_ids else set(range(2, VOCAB)) - set(r.grammar)
            have = {int(t) + 2 for t in torch.nonzero(torch.isneginf(logits[i, 2:VOCAB])).flatten()}
            if want != have:
                asked = (f"request {rid} is structured (its grammar allows {r.grammar})" if rid in self.so_ids else
                         f"request {rid} has no grammar this step")
                self._diff(STRUCTURED, where, f"{asked}; the grammar bitmask on its row "
                           f"{'masked nothing' if not have else 'allows ' + str(sorted(set(range(2, VOCAB)) - have))}")

    def _check_returned(self, number: int, scheduled: dict[str, int], completes: set[str], got: dict[str, list[int]],
                        logprobs: Any) -> None:
        """What the runner hands back to the scheduler per request: the sampled token for a decode
        or a prompt that finishes, nothing for a prompt chunk that does not; the logprobs of it."""
        where = f"step {number} ({self.mode}{', structured-output step' if self.structured else ''})"
        index = self.hpu.batch.req_id_to_index
        for rid, n in scheduled.items():
            r = self.requests[rid]
            want = [self._token(rid)] if rid in completes else []
            have = got.get(rid, [])
            if have != want:
                what = (f"request {rid} ({r.computed + n} of its {len(r.prompt)} prompt tokens computed)"
                        if rid not in completes else f"request {rid}")
                why = ("a token predicted mid-prompt" if rid not in completes else f"it sampled {want}")
                self._diff(RETURNED, where, f"{what} got {have} back, {why}")
            elif want and r.asked.get("logprobs") is not None and logprobs is not None:
                ids = logprobs.logprob_token_ids
                served = int(ids[index[rid]][0]) if index[rid] < len(ids) else None
                if served != want[0]:
                    feature = STRUCTURED if self.structured else "logprobs"
                    self._diff(feature, where, f"request {rid} sampled {want[0]}; the logprobs it was served are for "
                               f"token {served}")

    def _diff(self, feature: str, where: str, sentence: str) -> None:
        self.sink.append((feature, f"{where}: {sentence}"))

    def _check_metadata(self, where: str, rows: list[str], md: Any) -> None:
        for i, rid in enumerate(rows):
            if rid is None:  # a reference row the HPU call does not have
                continue
            r = self.requests[rid]
            a = r.asked
            if rid in rows[:i]:  # a padding row: its token is discarded, it must not draw
                if "seed" in a and a["temperature"] > 0 and (md.generators or {}).get(i) is self.states[rid].generator:
                    self._diff("seeds", where, f"{_describe(rid, a, 'seed')}; a padding row of the decode bucket "
                               "drew from its generator too, so its tokens depend on the bucket's padding")
                continue
            t = a["temperature"]
            if t > 0 and md.temperature is not None and abs(float(md.temperature[i]) - t) > 1e-6:
                self._diff("temperature/top_k/top_p", where,
                           f"{_describe(rid, a, 'temperature')}; the {self.side} sampler used {float(md.temperature[i]):g}")
            if "top_k" in a and t > 0 and (md.top_k is None or int(md.top_k[i]) != a["top_k"]):
                got = "none" if md.top_k is None else int(md.top_k[i])
                self._diff("temperature/top_k/top_p", where, f"{_describe(rid, a, 'top_k')}; the {self.side} sampler used {got}")
            if "top_p" in a and t > 0 and (md.top_p is None or abs(float(md.top_p[i]) - a["top_p"]) > 1e-6):
                got = "none" if md.top_p is None else f"{float(md.top_p[i]):g}"
                self._diff("temperature/top_k/top_p", where, f"{_describe(rid, a, 'top_p')}; the {self.side} sampler used {got}")
            if "seed" in a and t > 0:
                gen = (md.generators or {}).get(i)
                if gen is not self.states[rid].generator:
                    self._diff("seeds", where, f"{_describe(rid, a, 'seed')}; the {self.side} sampler drew from "
                               f"{'no generator' if gen is None else 'another request' + chr(39) + 's generator'}")
            needs_ids = "frequency_penalty" in a or any(len(w) > 1 for w in a.get("bad_words_token_ids", []))
            if needs_ids:
                seen = md.output_token_ids[i] if i < len(md.output_token_ids or []) else None
                # Under async scheduling the ids are placeholders until the next step's
                # _update_states fills them (not driven here): only their number is checked.
                if self.mode == "async" and seen is not None:
                    seen = [t if t >= 0 else g for t, g in zip(seen, r.generated)] + list(seen[len(r.generated):])
                if seen is None or list(seen) != r.generated:
                    feature = "penalties" if "frequency_penalty" in a else "bad_words"
                    self._diff(feature, where, f"request {rid} has generated {r.generated}; the {self.side} sampler saw "
                               f"{'nothing' if seen is None else list(seen)} for its "
                               f"{'penalties' if feature == 'penalties' else 'multi-token bad_words'}")
            if "frequency_penalty" in a and not md.no_penalties:
                if abs(float(md.frequency_penalties[i]) - a["frequency_penalty"]) > 1e-6:
                    self._diff("penalties", where, f"{_describe(rid, a, 'frequency_penalty')}; the {self.side} sampler "
                               f"used {float(md.frequency_penalties[i]):g}")
            elif "frequency_penalty" in a:
                self._diff("penalties", where, f"{_describe(rid, a, 'frequency_penalty')}; the {self.side} sampler applied "
                           "no penalties")
            want = a.get("logprobs")
            if want is not None:
                need = VOCAB if want == -1 else want
                got = md.max_num_logprobs
                if got is None or (got != -1 and got < need):
                    self._diff("logprobs", where, f"{_describe(rid, a, 'logprobs')}; the {self.side} sampler serves "
                               f"{'none' if got is None else got}")
            allowed = a.get("allowed_token_ids")
            mask = md.allowed_token_ids_mask
            row = None if mask is None or i >= mask.shape[0] else mask[i]
            if allowed is not None:
                want_mask = torch.ones(VOCAB, dtype=torch.bool)
                want_mask[allowed] = False
                if row is None or not torch.equal(row[:VOCAB].bool(), want_mask):
                    self._diff("allowed_token_ids", where, f"request {rid} asked allowed_token_ids={allowed}; "
                               f"the {self.side} sampler allowed {_allowed(row)}")
            elif row is not None and bool(row.any()):
                self._diff("allowed_token_ids", where, f"request {rid} asked no allowed_token_ids; the {self.side} sampler "
                           f"allowed only {_allowed(row)}")

    def _check_processors(self, where: str, rows: list[str], md: Any, probe: torch.Tensor) -> None:
        out = probe.clone()
        try:
            for proc in md.logitsprocs.non_argmax_invariant:
                out = proc.apply(out)
            # A greedy row's token is the argmax before the argmax-invariant ones (min_p) run.
            greedy = out.clone()
            for proc in md.logitsprocs.argmax_invariant:
                out = proc.apply(out)
        except Exception as e:  # noqa: BLE001 - the sampler would raise it
            self._diff("min_p", where, f"the {self.side} sampler's logits processors raised {type(e).__name__}: {e}")
            return
        banned = probe.clone()
        try:
            if md.bad_words_token_ids:
                self.bad_words(banned, md.bad_words_token_ids, md.output_token_ids)
        except Exception as e:  # noqa: BLE001
            self._diff("bad_words", where, f"the {self.side} sampler's bad_words step raised {type(e).__name__}: {e}")
            banned = None
        for i, rid in enumerate(rows):
            if rid is None or rid in rows[:i]:
                continue  # not in the HPU call / a padding row: its token is discarded
            r = self.requests[rid]
            a = r.asked
            x = probe[i].clone()
            for tok, b in a.get("logit_bias", {}).items():
                x[tok] += b
            if len(r.generated) < a.get("min_tokens", 0):
                x[EOS] = NEG_INF
            if "min_p" in a and a["temperature"] > 0:
                p = torch.softmax(x, -1)
                x = x.masked_fill(p < a["min_p"] * p.max(), NEG_INF)
            got = out[i] if a["temperature"] > 0 else greedy[i]
            for tok, b in a.get("logit_bias", {}).items():
                if torch.isfinite(x[tok]) and abs(float(got[tok] - x[tok])) > 1e-4:
                    self._diff("logit_bias", where, f"request {rid} asked logit_bias={{{tok}: {b:g}}}; the HPU "
                               f"sampler added {float(got[tok] - probe[i][tok]):g}")
            if a.get("min_tokens") and (got[EOS] == NEG_INF) != (x[EOS] == NEG_INF):
                masked = "masked EOS" if got[EOS] == NEG_INF else "allowed EOS"
                self._diff("min_tokens", where, f"request {rid} asked min_tokens={a['min_tokens']} and has "
                           f"generated {len(r.generated)}; the {self.side} sampler {masked}")
            # EOS is min_tokens' (checked above); the rest of the mask is min_p's.
            keep = torch.ones(VOCAB, dtype=torch.bool)
            keep[EOS] = not a.get("min_tokens")
            if "min_p" in a and not torch.equal(torch.isinf(got)[keep], torch.isinf(x)[keep]):
                applied = "none" if not torch.isinf(got).any() else "another mask"
                self._diff("min_p", where, f"{_describe(rid, a, 'min_p')}; the {self.side} sampler applied {applied}")
            if "min_p" not in a and not a.get("min_tokens") and bool(torch.isinf(got).any()):
                self._diff("min_p", where, f"request {rid} asked no min_p and no min_tokens; the {self.side} sampler masked "
                           f"{int(torch.isinf(got).sum())} tokens")
            if banned is not None:
                want = set()
                for w in a.get("bad_words_token_ids", []):
                    if len(w) == 1 or r.generated[-(len(w) - 1):] == w[:-1]:
                        want.add(w[-1])
                have = {int(t) for t in torch.nonzero(torch.isinf(banned[i])).flatten()}
                if want != have:
                    asked = (f"asked bad_words={a['bad_words_token_ids']} after {r.generated[-2:]}"
                             if "bad_words_token_ids" in a else "asked no bad_words")
                    self._diff("bad_words", where, f"request {rid} {asked}; the {self.side} sampler blocked "
                               f"{sorted(have) or 'nothing'}")

    def _views(self, rows: list, md: Any, probe: torch.Tensor, states: dict) -> dict[str, dict[str, Any]]:
        """Per request id of the HPU call, what one side hands the sampler, per feature, in terms
        both sides share (a generator is named by the request that owns it)."""
        owner = {id(st.generator): rid for rid, st in states.items() if st.generator is not None}
        out = probe.clone()
        errors = None
        try:
            for proc in md.logitsprocs.non_argmax_invariant:
                out = proc.apply(out)
            greedy = out.clone()
            for proc in md.logitsprocs.argmax_invariant:
                out = proc.apply(out)
        except Exception as e:  # noqa: BLE001 - the request checks name it
            errors = f"{type(e).__name__}"
        banned = probe.clone()
        try:
            if md.bad_words_token_ids:
                self.bad_words(banned, md.bad_words_token_ids, md.output_token_ids)
        except Exception:  # noqa: BLE001 - the request checks name it
            banned = None
        views: dict[str, dict[str, Any]] = {}
        for i, rid in enumerate(rows):
            if rid is None or rid in views:
                continue
            r = self.requests[rid]
            a = r.asked
            v: dict[str, Any] = {}
            if a["temperature"] > 0:
                top_k = None if md.top_k is None else int(md.top_k[i])
                top_p = None if md.top_p is None else round(float(md.top_p[i]), 5)
                v["temperature/top_k/top_p"] = (
                    round(float(md.temperature[i]), 5) if md.temperature is not None else None,
                    None if top_k is None or top_k <= 0 or top_k >= VOCAB else top_k,
                    None if top_p is None or top_p >= 1.0 else top_p)
                if "seed" in a:
                    v["seeds"] = owner.get(id((md.generators or {}).get(i)), "none")
            if "frequency_penalty" in a:
                seen = md.output_token_ids[i] if i < len(md.output_token_ids or []) else None
                if seen is not None:  # async placeholders (-1) are filled by the next _update_states
                    seen = [t if t >= 0 else g for t, g in zip(seen, r.generated)] + list(seen[len(r.generated):])
                v["penalties"] = (md.no_penalties, None if md.no_penalties else
                                  tuple(round(float(t[i]), 5) for t in (md.frequency_penalties, md.presence_penalties,
                                                                        md.repetition_penalties)), seen)
            want = a.get("logprobs")
            if want is not None:
                got = md.max_num_logprobs
                v["logprobs"] = got is not None and (got == -1 or got >= (VOCAB if want == -1 else want))
            mask = md.allowed_token_ids_mask
            v["allowed_token_ids"] = _allowed(None if mask is None or i >= mask.shape[0] else mask[i])
            v["bad_words"] = (None if banned is None else
                              sorted(int(t) for t in torch.nonzero(torch.isinf(banned[i])).flatten()))
            if errors is None:
                got = out[i] if a["temperature"] > 0 else greedy[i]
                v["min_tokens"] = bool(got[EOS] == NEG_INF)
                v["logit_bias"] = tuple(round(float(got[t] - probe[i][t]), 3) for t in sorted(a.get("logit_bias", {}))
                                        if torch.isfinite(got[t]))
                keep = torch.ones(VOCAB, dtype=torch.bool)
                keep[EOS] = False
                v["min_p"] = tuple(int(t) for t in torch.nonzero(torch.isinf(got) & keep).flatten())
            views[rid] = v
        return views

    def _differential(self, where: str, rows: list[str], md: Any, probe: torch.Tensor) -> None:
        """The same requests on vLLM's GPU path: its InputBatch's sampling metadata, rows by request
        id. A difference counts against HPU unless the GPU path itself disagrees with the request."""
        gpu = self.gpu
        gmd = gpu.batch.sampling_metadata
        grows = [rid if rid in rows else None for rid in gpu.batch.req_ids]
        gprobe = torch.zeros(len(grows), VOCAB)
        for j, rid in enumerate(grows):
            if rid is not None:
                gprobe[j] = probe[rows.index(rid)]
        own: list[tuple[str, str]] = []
        self.sink, self.side, self.states = own, "GPU", gpu.states
        try:
            self._check_metadata(where, grows, gmd)
            self._check_processors(where, grows, gmd, gprobe)
            theirs = self._views(grows, gmd, gprobe, gpu.states)
        finally:
            self.sink, self.side, self.states = self.found, "HPU", self.hpu.runner.requests
        ours = self._views(rows, md, probe, self.states)
        for rid, v in ours.items():
            g = theirs.get(rid, {})
            for feature, value in v.items():
                if feature not in g or g[feature] == value:
                    continue
                sentence = (f"request {rid} ({_asked(self.requests[rid].asked, feature)}): the HPU path hands the "
                            f"sampler {value!r} for {feature}, vLLM's GPU path {g[feature]!r}")
                if any(f == feature and f"request {rid} " in s for f, s in own):
                    self.gpu_disagrees.append((feature, f"{where}: {sentence}; vLLM's GPU path disagrees with the "
                                               "request"))
                else:
                    self._diff(feature, where, sentence)


def _allowed(row) -> str:
    if row is None:
        return "every token"
    ids = torch.nonzero(~row[:VOCAB].bool()).flatten().tolist()
    return str(ids) if len(ids) < VOCAB else "every token"


def _feature(key: str) -> str:
    return {"temperature": "temperature/top_k/top_p", "top_k": "temperature/top_k/top_p",
            "top_p": "temperature/top_k/top_p", "seed": "seeds", "frequency_penalty": "penalties",
            "presence_penalty": "penalties", "repetition_penalty": "penalties", "min_p": "min_p",
            "logit_bias": "logit_bias", "min_tokens": "min_tokens", "logprobs": "logprobs",
            "bad_words_token_ids": "bad_words", "allowed_token_ids": "allowed_token_ids"}[key]


@functools.lru_cache(maxsize=4)
def bad_words_op(root: Path):
    """vLLM's apply_bad_words (vllm/v1/sample/ops/bad_words.py of the tree; it imports only torch)."""
    path = root / "vllm/v1/sample/ops/bad_words.py"
    ns: dict[str, Any] = {"__name__": "conform_bad_words"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["apply_bad_words"]


def run(root: Path, schedules: int, seed: int, first: bool, reference: bool = True) -> dict[str, Any]:
    features = {f: {"schedules": 0, "differences": 0, "first": None} for f in FEATURES}
    disagrees: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    if reference:
        # The real vllm package first: loading the HPU side sets some vllm.* names to its own copies,
        # which are put back afterwards.
        gpu = GpuModules.get(root)
        Hpu(root, False)
        sys.modules.update(gpu.saved)
    done = 0
    for n in range(schedules):
        use_async = n % 2 == 1
        s = Schedule(root, seed + n, use_async, reference)
        try:
            for number in range(STEPS):
                s.step(number)
        except Exception as e:  # noqa: BLE001 - the HPU path raised: that is a difference too
            if s.structured:
                s.found.append((STRUCTURED, f"step {s.number} ({s.mode}, structured-output step): sample_tokens raised "
                                f"{type(e).__name__}: {e} (EngineCore ends; every request in flight fails)"))
            else:
                s.found.append(("min_p" if not s.found else s.found[0][0],
                                f"schedule {seed + n} ({s.mode}): the HPU path raised {type(e).__name__}: {e}"))
        done += 1
        for f in s.exercised:
            features[f]["schedules"] += 1
        for f, sentence in s.found:
            features[f]["differences"] += 1
            if features[f]["first"] is None:
                features[f]["first"] = f"schedule {seed + n}, {sentence}"
        for f, sentence in s.gpu_disagrees:
            d = disagrees.setdefault(f, {"name": f, "count": 0, "first": None})
            d["count"] += 1
            d["first"] = d["first"] or f"schedule {seed + n}, {sentence}"
        if first and s.found:
            break
    return {"root": str(root), "schedules": done, "seed": seed, "seconds": round(time.monotonic() - started, 3),
            "reference": "vLLM's GPU path of the tree (gpu_input_batch.InputBatch)" if reference else None,
            "features": [{"name": f, **v} for f, v in features.items()],
            "gpu_disagrees": list(disagrees.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--schedules", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", action="store_true", help="stop at the first schedule with a difference")
    ap.add_argument("--no-reference", action="store_true",
                    help="only the request-parameter checks (vLLM's GPU path not imported)")
    args = ap.parse_args()
    for rel in (stubs.INPUT_BATCH_REL, stubs.RUNNER_REL, stubs.LOGITSPROCS_REL / "builtin.py"):
        if not (args.root / rel).is_file():
            _cannot_run(f"no {rel} under {args.root}: the suite needs a vllm tree and a vllm_gaudi tree")
    print(json.dumps(run(args.root.resolve(), args.schedules, args.seed, args.first, not args.no_reference)))


if __name__ == "__main__":
    main()
