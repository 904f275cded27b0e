"""The conformance suite: what vllm_gaudi's sampling path hands the sampler and hands back, per
step and per request, held against what each request asked and against vLLM's own GPU path of
the same tree fed the same schedule (CPU; needs torch, numpy and vLLM's pinned pure-Python deps).

A pipeline of three parts:

1. **Schedules** (conform_schedule.py): a seeded generator returns each schedule as data before
   anything runs: requests with their prompts and SamplingParams (greedy / temperature, top_k,
   top_p, min_p, seed, the three penalties, allowed_token_ids, logit_bias, min_tokens, logprobs
   incl. -1, logprob_token_ids (alone or beside logprobs; not with speculative decoding), bad_words
   incl. multi-token, a grammar for about a quarter; prompt_logprobs, its prompt sometimes left out
   of a step between its chunks and preempted after its prefill), and per step finishes,
   preemptions (blocks freed, computed tokens back to 0; resumed later with the block-aligned
   prefix-cache hit, the rest recomputed in one or several chunks), pauses (a running request left
   out of a step), arrivals, tokens per request (prompt chunks, recompute chunks, decodes) and the
   structured-output requests; sync or async scheduling; a plain schedule's ``--logprobs-mode``
   (``logprobs_mode``, from a generator of its own: each side's Sampler as its runner builds it);
   a plain schedule's reasoning config (``reasoning``, from a generator of its own: both batches
   built with it, the HPU one by the runner's own statement), whose requests may ask
   ``thinking_token_budget`` (thinking_budget.py).
2. **Engines** (conform_engines.py): the HPU side is the harness (harness.py): vllm_gaudi's real
   ``_update_states`` fed by vLLM's real ``SchedulerOutput``, its ``InputBatch``, ``sample_tokens``'
   blocks; the GPU side is vLLM's ``gpu_input_batch.InputBatch`` updated from the same scheduler
   output as ``GPUModelRunner._update_states`` does (``--no-reference`` leaves it out). Both use
   vLLM's ``SamplingParams`` of the tree, the same forward pass (each logits row marked with the
   request and position it was taken for) and vLLM's own ``Sampler`` drawing, each seeded row from
   the generator it is handed. Where a request asks prompt_logprobs, after each step's sampling
   each side's own ``_get_prompt_logprobs_dict`` (vllm_gaudi's with the hidden states its
   ``sample_tokens`` collects, vLLM's ``GPUModelRunner``'s with the step's), its deliveries kept.
3. **Checks** (conform_checks.py): functions in one table (``CHECKS``), from which the feature list
   comes. An exception in the HPU path is its own feature, ``raised``, with the step and the last
   frame of the traceback inside the tree; one in vLLM's GPU path is the reference's
   (``reference_errors``), never counted against HPU; where the GPU path itself disagrees with the
   request, the difference is listed under ``gpu_disagrees`` and not counted. What goes wrong in a
   structured-output step's one sampler call counts as ``structured_output``.

Every fifth schedule drives speculative decoding instead (conform_spec.py: vllm_gaudi's
the spec ``harness.Harness`` against vLLM's GPU path with its ``RejectionSampler``; 0..3 drafts per decode,
right or wrong, decodes padded to the buckets 2, 4, 8; greedy requests with the penalties,
min_tokens, logprobs, bad_words, allowed_token_ids and grammars, and about one in five sampled, with
top_k / top_p / seeds: each emitted token in the support vLLM's GPU path draws it from, the accepted
drafts consistent with it, a seeded request's tokens equal vLLM's with the HPU's random draws
mirrored): every difference such a schedule shows counts as ``spec_decode`` (the sentence ends with
the check's own feature in brackets).

    python conform.py --root DIR [--schedules N] [--seed S] [--first] [--replay FILE...]
                      [--no-reference] [--progress] [--jobs N]

prints one JSON object: per feature, the schedules that exercised it, the differences and the
first one as a sentence; with ``--first``, it stops at the first schedule with a difference and
adds it as ``failing_schedule`` (save it to a file: ``--replay FILE`` runs exactly that schedule
again). Exit 0 when it ran (whatever it found), 3 when it cannot run (the reason, and a pip line
when a module is missing). With ``--progress``, one ``conform-progress {json}`` line on stderr per
schedule. With ``--jobs N``, N forked workers (vLLM imported once, before the fork) run the
schedules, handed out one number at a time, and their findings are merged back in schedule order:
the report is the same for every N but for ``seconds``, ``jobs`` and ``schedules_per_minute``.

Not covered (yet): prompt_logprobs with speculative decoding and in merged prefill batches;
penalties on sampled requests with speculative decoding, multi-modal inputs; see the fix pages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

# Bytecode of the trees goes to a cache of ours, never into a tree (it may be read-only or shared):
# with it, a run does not recompile vLLM (gaudi-fixes runs the suite with PYTHONDONTWRITEBYTECODE).
if sys.pycache_prefix is None:
    sys.pycache_prefix = str(Path.home() / ".cache" / "gaudi-fixes" / "pycache")
sys.dont_write_bytecode = False


def _cannot_run(reason: str, module: Optional[str] = None) -> None:
    out: dict[str, Any] = {"error": reason}
    if module:
        out["missing"] = [module]
        out["pip"] = f"{sys.executable} -m pip install --no-deps {module}"
    print(json.dumps(out))
    sys.exit(3)


try:
    import torch

    import conform_checks as checks
    import conform_spec
    import harness
    import lift
    import conform_schedule as schedules
    import vllm_gaudi_stubs as stubs
    from conform_engines import OWN_ONLY, GpuEngine, GpuModules, HpuEngine

    torch.set_num_threads(1)  # tiny tensors: a thread pool only costs time
    torch._dynamo.config.disable = True  # vLLM compiles gather_logprobs: 9 s per process for 4-row batches
except ModuleNotFoundError as e:  # noqa: BLE001 - named in the report
    _cannot_run(f"the suite needs the Python module {e.name}", e.name)

STRUCTURED = "structured_output"
RETURNED = "returned_tokens"


def tree_frame(e: BaseException, root: Path) -> str:
    """The last frame of `e`'s traceback inside the tree (``file:line in function``), else the last."""
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if str(root) in str(Path(f.filename).resolve())] or frames
    if not inside:
        return "no frame"
    f = inside[-1]
    name = str(Path(f.filename).resolve()).replace(str(root) + "/", "")
    return f"{name}:{f.lineno} in {f.name}"


class Sampler:
    """vLLM's own Sampler, one per engine (it keeps no state between calls). It is handed vLLM's
    ``SamplingMetadata`` with the fields the runner set (the HPU side's InputBatch is loaded
    with a stand-in class): a field the runner does not know gets vLLM's default."""

    def __init__(self, root: Path, runner: Optional[tuple[str, str]] = None, logprobs_mode: Optional[str] = None):
        """With `logprobs_mode` (the server's ``--logprobs-mode``), the Sampler is the one `runner`
        (file, class) builds in its ``__init__`` from a model config asking for that mode."""
        from vllm.v1.sample.metadata import SamplingMetadata
        self.sampler, self.metadata = GpuModules.get(root).Sampler(), SamplingMetadata
        if logprobs_mode is not None and runner is not None:
            owner = types.SimpleNamespace(model_config=types.SimpleNamespace(logprobs_mode=logprobs_mode,
                                                                             use_fp64_gumbel=False))
            self.sampler = lift.assigned(root / runner[0], f"{runner[1]}.__init__", "self.sampler", owner,
                                         {"Sampler": GpuModules.get(root).Sampler})
        self.fields = [f.name for f in dataclasses.fields(SamplingMetadata)]

    def __call__(self, logits: torch.Tensor, md: Any) -> Any:
        if not isinstance(md, self.metadata):
            md = harness.make(self.metadata, **{k: getattr(md, k) for k in self.fields if hasattr(md, k)})
        return self.sampler(logits.float(), md)


class Findings:
    """One schedule's findings: differences by feature, the reference's disagreements and errors."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []
        self.gpu_disagrees: list[tuple[str, str]] = []
        self.reference_errors: list[str] = []
        self.gpu_suspect: set[str] = set()  # requests vLLM's GPU path itself mishandled

    def add(self, feature: str, sentence: str) -> None:
        self.found.append((feature, sentence))


def exercised(schedule: schedules.Schedule) -> set[str]:
    """The features a schedule exercises: those its requests ask for, and the always-present ones."""
    out = {RETURNED, checks.RAISED, "metadata_rows", "logits_positions", "temperature/top_k/top_p", "penalties"}
    for r in schedule.requests.values():
        out |= {checks.PARAM_FEATURE[k] for k in r.params}
        if r.grammar is not None:
            out.add(STRUCTURED)
        if "seed" in r.params and r.params["temperature"] > 0:
            out.add("seeded_tokens")
    if schedule.spec:
        out.add(conform_spec.FEATURE)
    return out


DISAGREES = "; vLLM's GPU path disagrees with the request"


def _call_findings(ctx: checks.Ctx, call: checks.Call, only: Optional[frozenset[str]] = None) -> list[tuple[str, str]]:
    # A structured-output step samples every row in one call: what goes wrong there is the
    # structured-output path's (the sentence still names the parameter).
    return [(STRUCTURED if call.structured else d.feature, f"{call.where}: {d.sentence}")
            for _, d in checks.judge(ctx, {checks.Scope.CALL: call}, only)]


def judge_step(ctx: checks.Ctx, hpu: Any, gpu: Any, f: Findings) -> None:
    """Every check of one step: the HPU calls against the requests and vLLM's GPU call, what was
    handed back."""
    own: set[tuple[str, Optional[str]]] = set()
    gpu_calls = [(c, None) for c in gpu.calls] + [(c, OWN_ONLY) for c in gpu.own_calls] if gpu else []
    for call, only in gpu_calls:
        for feature, sentence in _call_findings(ctx, call, only):
            rid = next((r for r in call.rows if r and f"request {r} " in sentence), None)
            own.add((feature, rid))
            f.gpu_suspect.add(rid)
            ctx.suspect.add(rid)
            f.gpu_disagrees.append((feature, f"{sentence}{DISAGREES}"))
    for call in hpu.calls:
        f.found.extend(_call_findings(ctx, call))
        if gpu and gpu.calls:
            pair = checks.Pair(call, gpu.calls[0], gpu_own=frozenset(own))
            for _, d in checks.judge(ctx, {checks.Scope.CALL_PAIR: pair}):
                if d.gpu_disagrees:  # listed under "views", whatever the feature
                    f.gpu_disagrees.append(("views", f"{call.where}: {d.sentence}{DISAGREES}"))
                else:
                    f.add(STRUCTURED if call.structured else d.feature, f"{call.where}: {d.sentence}")
    where = f"step {ctx.number} ({ctx.mode}{', structured-output step' if hpu.structured else ''})"
    views: dict[checks.Scope, Any] = {checks.Scope.STEP: hpu}
    if gpu:
        views[checks.Scope.STEP_PAIR] = checks.Pair(hpu, gpu, suspect=frozenset(f.gpu_suspect))
    for scope, d in checks.judge(ctx, views):
        if d.gpu_disagrees:
            f.gpu_disagrees.append((d.feature, f"{where}: {d.sentence}{DISAGREES}"))
        elif scope is checks.Scope.STEP and hpu.structured and d.feature != RETURNED:
            f.add(STRUCTURED, f"{where}: {d.sentence}")
        else:
            f.add(d.feature, f"{where}: {d.sentence}")


def run_schedule(root: Path, schedule: schedules.Schedule, reference: bool) -> Findings:
    """Both engines through one schedule, judged step by step, then the token streams."""
    f = Findings()
    torch.manual_seed(schedule.seed)  # unseeded draws: the same on a replay, whatever ran before
    requests = {rid: checks.Request(rid, r.params, None if r.grammar is None else list(r.grammar), list(r.prompt))
                for rid, r in schedule.requests.items()}
    ctx = checks.Ctx(requests, stubs_bad_words(root), schedule.mode,
                     think=None if schedule.reasoning is None else dict(schedule.reasoning),
                     server=frozenset(("logits_processors",) if schedule.logits_processors else ()))
    spec = bool(schedule.spec)
    lm = schedule.logprobs_mode  # each side's Sampler as its runner builds it for that mode
    hpu = HpuEngine(root, schedule, Sampler(root, ("vllm_gaudi/v1/worker/hpu_model_runner.py", "HPUModelRunner"), lm))
    gpu: Optional[GpuEngine] = (GpuEngine(root, schedule, Sampler(root, ("vllm/v1/worker/gpu_model_runner.py",
                                                                          "GPUModelRunner"), lm))
                                if reference else None)
    # per request, each delivery of its prompt logprobs: (step, rows)
    hpu_delivered: dict[str, list[tuple[int, Any]]] = {}
    gpu_delivered: dict[str, list[tuple[int, Any]]] = {}
    for number, step in enumerate(schedule.steps):
        ctx.number = number
        try:
            h = hpu.step(number, step)
        except Exception as e:  # noqa: BLE001 - the HPU path raised: EngineCore ends, every request fails
            # counted under the feature whose path raised where an engine says so (prompt logprobs)
            f.found.append((getattr(e, "conform_feature", checks.RAISED),
                            f"step {number} ({schedule.mode}): the HPU path raised "
                            f"{type(e).__name__}: {e} (at {tree_frame(e, root)})"))
            return spec_findings(f) if spec else f
        g = None
        if gpu is not None:
            try:
                g = gpu.step(number, step)
            except Exception as e:  # noqa: BLE001 - the reference's own failure
                f.reference_errors.append(f"step {number}: vLLM's GPU path raised {type(e).__name__}: {e} "
                                          f"(at {tree_frame(e, root)})")
                gpu = None
        for out, into in ((h, hpu_delivered), (g, gpu_delivered)):
            for rid, rows in getattr(out, "prompt_logprobs", {}).items():
                into.setdefault(rid, []).append((number, rows))
        judge_step(ctx, h, g, f)
    if gpu is not None:
        views = {checks.Scope.RUN: checks.Pair(hpu.outputs(), gpu.outputs(), suspect=frozenset(f.gpu_suspect)),
                 checks.Scope.DELIVERIES: checks.Pair(hpu_delivered, gpu_delivered)}
        for _, d in checks.judge(ctx, views):
            f.add(d.feature, f"{schedule.mode}: {d.sentence}")
    return spec_findings(f) if spec else f


def spec_findings(f: Findings) -> Findings:
    """A spec-decode schedule's differences are ``spec_decode``'s, whatever check found them (the
    sentence names it): vllm_gaudi runs another configuration then (its InputBatch built for spec
    decode, vLLM's logits processors for it), and a request that lost a token in a spec step
    differs in whatever reads its history afterwards."""
    f.found = [(conform_spec.FEATURE, sentence if feature == conform_spec.FEATURE else f"{sentence} [{feature}]")
               for feature, sentence in f.found]
    return f


def stubs_bad_words(root: Path) -> Any:
    """vLLM's apply_bad_words of the tree (vllm/v1/sample/ops/bad_words.py; it imports only torch)."""
    path = root / "vllm/v1/sample/ops/bad_words.py"
    ns: dict[str, Any] = {"__name__": "conform_bad_words"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["apply_bad_words"]


class Report:
    """The report being built: per feature, schedules that exercised it, differences, the first."""

    def __init__(self, root: Path, seed: int, requested: int, reference: bool):
        self.root, self.seed, self.requested, self.reference = root, seed, requested, reference
        self.features = {f: {"schedules": 0, "differences": 0, "first": None} for f in checks.features()}
        self.disagrees: dict[str, dict[str, Any]] = {}
        self.reference_errors: list[dict[str, Any]] = []
        self.done = 0
        self.started = time.monotonic()
        self.failing: Optional[dict[str, Any]] = None
        self.jobs = 1
        self.last_seed: Optional[int] = None

    def add(self, schedule: schedules.Schedule, f: Findings) -> None:
        self.done += 1
        self.last_seed = schedule.seed
        label = f"schedule {schedule.seed}"
        for name in exercised(schedule):
            self.features[name]["schedules"] += 1
        for name, sentence in f.found:
            row = self.features[name]
            row["differences"] += 1
            row["first"] = row["first"] or f"{label}, {sentence}"
        for name, sentence in f.gpu_disagrees:
            d = self.disagrees.setdefault(name, {"name": name, "count": 0, "first": None})
            d["count"] += 1
            d["first"] = d["first"] or f"{label}, {sentence}"
        for sentence in f.reference_errors:
            self.reference_errors.append({"name": "reference", "first": f"{label}, {sentence}"})

    @property
    def differences(self) -> int:
        return sum(v["differences"] for v in self.features.values())

    def json(self, first: bool) -> dict[str, Any]:
        out = {"root": str(self.root), "schedules": self.done, "requested": self.requested,
               "complete": self.done >= self.requested or (first and self.differences > 0), "seed": self.seed,
               "seconds": round(time.monotonic() - self.started, 3), "jobs": self.jobs,
               "schedules_per_minute": round(self.done * 60 / max(time.monotonic() - self.started, 1e-9), 1),
               "last_seed": self.last_seed,
               "reference": "vLLM's GPU path of the tree (gpu_input_batch.InputBatch)" if self.reference else None,
               "features": [{"name": name, **v} for name, v in self.features.items()],
               "gpu_disagrees": list(self.disagrees.values()), "reference_errors": self.reference_errors[:20]}
        if self.failing is not None:
            out["failing_schedule"] = self.failing
        return out


def _task_schedule(task: Any) -> schedules.Schedule:
    """A task is a schedule's number (a seeded run: the worker draws it, so no plan is held in
    memory or sent whole) or a schedule itself (a replay)."""
    return schedules.of(task) if isinstance(task, int) else task


_WORKER: dict[str, Any] = {}


def _worker_init(root: Path, reference: bool) -> None:
    """A pool worker: vLLM's modules once (inherited when the parent imported them), then many
    schedules."""
    torch.set_num_threads(1)
    GpuModules.get(root)
    _WORKER.update(root=root, reference=reference, saved=GpuModules.get(root).saved)


def _worker_run(task: Any) -> tuple[schedules.Schedule, Findings]:
    schedule = _task_schedule(task)
    f = run_schedule(_WORKER["root"], schedule, _WORKER["reference"])
    sys.modules.update(_WORKER["saved"])
    return schedule, f


def _results(root: Path, tasks: Iterable[Any], reference: bool, jobs: int
             ) -> Iterator[tuple[schedules.Schedule, Findings]]:
    """Each schedule's findings, in schedule order whatever the number of workers: with ``jobs`` > 1
    a pool of forked workers (each imports vLLM at most once, then runs schedule after schedule;
    tasks are handed out one at a time and results merged back in order; a seeded run hands out
    schedule numbers, so no plan is held whole)."""
    if jobs <= 1:
        _worker_init(root, reference)
        yield from map(_worker_run, tasks)
        return
    import multiprocessing
    GpuModules.get(root)  # imported once here: the forked workers inherit it
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(jobs, initializer=_worker_init, initargs=(root, reference))
    try:
        yield from pool.imap(_worker_run, tasks, chunksize=1)
    finally:
        pool.terminate()
        pool.join()


def run(root: Path, tasks: Iterable[Any], total: int, seed: int, first: bool, reference: bool,
        progress: bool = False, jobs: int = 1) -> dict[str, Any]:
    """Run the schedules of ``tasks`` (numbers or schedules, see _task_schedule) and build the
    report; the same report for every ``jobs`` but for the time taken."""
    report = Report(root, seed, total, reference)
    report.jobs = jobs
    for schedule, f in _results(root, tasks, reference, jobs):
        report.add(schedule, f)
        if progress:
            tick = {"done": report.done, "total": total, "differences": report.differences,
                    "seconds": round(time.monotonic() - report.started, 3)}
            print("conform-progress " + json.dumps(tick), file=sys.stderr, flush=True)
        if first and f.found:
            report.failing = schedule.to_json()
            break
    return report.json(first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--schedules", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", action="store_true", help="stop at the first schedule with a difference, and print it")
    ap.add_argument("--replay", type=Path, nargs="+",
                    help="run exactly these schedules (each a `failing_schedule` saved to a file: the corpus)")
    ap.add_argument("--no-reference", action="store_true", help="leave out vLLM's GPU path (the differential half)")
    ap.add_argument("--progress", action="store_true", help="a conform-progress line on stderr per schedule")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes (each imports vLLM once, then runs schedule after schedule); "
                    "the report is the same for every N but for its time")
    args = ap.parse_args()
    for rel in (stubs.INPUT_BATCH_REL, stubs.RUNNER_REL, stubs.LOGITSPROCS_REL / "builtin.py"):
        if not (args.root / rel).is_file():
            _cannot_run(f"no {rel} under {args.root}: the suite needs a vllm tree and a vllm_gaudi tree")
    if args.jobs < 1:
        _cannot_run(f"--jobs {args.jobs}: give 1 or more worker processes")
    tasks: Iterable[Any]
    if args.replay:
        plan = []
        for path in args.replay:
            try:
                plan.append(schedules.load(path))
            except (OSError, ValueError) as e:
                _cannot_run(f"cannot replay {path}: {e}")
        tasks, total = plan, len(plan)
    else:
        # Streamed: schedule numbers, each drawn by the worker that runs it.
        tasks, total = range(args.seed, args.seed + args.schedules), args.schedules
    try:
        GpuModules.get(args.root.resolve())
    except ModuleNotFoundError as e:
        _cannot_run(f"vLLM's modules (the sampler, the GPU reference) need the Python module {e.name}; "
                    "install fixes/_support/requirements.txt with --no-deps", e.name)
    seed = plan[0].seed if args.replay else args.seed
    print(json.dumps(run(args.root.resolve(), tasks, total, seed, args.first, not args.no_reference, args.progress,
                         args.jobs)))


if __name__ == "__main__":
    main()
