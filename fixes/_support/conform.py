"""The conformance suite: what vllm_gaudi's sampling path hands the sampler, per step and per
request id, held against what each request asked for (CPU; needs torch and numpy).

Under test is the tree's own code, as it is: vllm_gaudi's ``hpu_input_batch.py``, vLLM's logits
processors of the tree (``load``), the runner's reorder, ``_prepare_sampling`` and the tail of
``sample_tokens`` that hands sampled ids back (lifted out of ``hpu_model_runner.py``, never
rewritten). Seeded random schedules drive it: arrivals with random ``SamplingParams`` (greedy /
temperature, top_k, top_p, min_p, seed, the three penalties, allowed_token_ids, logit_bias,
min_tokens, logprobs incl. -1, bad_words incl. multi-token), finishes, chunked prefills and padded
decode buckets, under sync and async scheduling. Each sampler call is checked per request:
sampling parameters at its row, its generator, the output ids the penalties / bad_words / min_tokens
see, the allowed and bad_words masks, the processors' effect on a probe logits tensor, the logprobs
served.

    python conform.py --root DIR --schedules N --seed S [--first]

prints one JSON object: per feature, the schedules that exercised it, the differences and the first
one as a sentence; exit 0 when it ran (whatever it found), 3 when it cannot run (the reason, and a
pip line when a module is missing).

Not covered (yet): vLLM's own GPU path as a second, differential reference (gpu_input_batch with
``GPUModelRunner._update_states``) and structured-output steps; see the fix pages.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import json
import random
import sys
import time
import types
from pathlib import Path
from typing import Any, Optional

FEATURES = ("temperature/top_k/top_p", "seeds", "penalties", "min_p", "logit_bias", "min_tokens", "bad_words",
            "allowed_token_ids", "logprobs")

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

    import vllm_gaudi_stubs as stubs
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
        path = root / stubs.RUNNER_REL
        cls = stubs.runner_class(path)
        tail = stubs.tail_of_sample_tokens(cls, path)
        self.tail = compile(ast.Module(tail, []), str(path), "exec")
        stubs.lift_called(runner, cls, path, tail, (*stubs.RUNNER_METHODS, "_sample_tokens_reorder"))
        runner.use_async_scheduling = use_async
        runner.use_structured_output = False
        runner.device = torch.device("cpu")
        runner.max_model_len = 128
        runner.speculative_config = None
        runner.profiler = types.SimpleNamespace(enabled=False, record_event=lambda *a: contextlib.nullcontext())


class Request:

    def __init__(self, rid: str, params: Any, prompt: list[int], asked: dict[str, Any]):
        self.rid, self.params, self.prompt, self.asked = rid, params, prompt, asked
        self.computed = 0
        self.generated: list[int] = []


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

    def __init__(self, root: Path, seed: int, use_async: bool):
        self.rng = random.Random(seed)
        self.mode = "async" if use_async else "sync"
        self.hpu = Hpu(root, use_async)
        self.requests: dict[str, Request] = {}
        self.next_id = 0
        self.found: list[tuple[str, str]] = []
        self.exercised: set[str] = set()
        self.noise = torch.Generator().manual_seed(seed)
        self.bad_words = bad_words_op(root)

    def _arrive(self) -> None:
        rid = f"r{self.next_id}"
        self.next_id += 1
        asked = random_params(self.rng)
        params = stubs.SamplingParams(eos_token_id=EOS, **asked)
        prompt = [self.rng.randrange(3, VOCAB) for _ in range(self.rng.randint(2, 20))]
        req = self.requests[rid] = Request(rid, params, prompt, asked)
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

    def step(self, number: int) -> None:
        batch, runner = self.hpu.batch, self.hpu.runner
        rng = self.rng
        # What the scheduler decides: finishes, arrivals, tokens per request.
        finished = [r for r in self.requests.values() if r.generated and rng.random() < 0.15]
        self.arrived: list[Any] = []
        free = MAX_REQS - (len(self.requests) - len(finished))
        for _ in range(rng.randint(0, min(2, free))):
            self._arrive()
        # HPUModelRunner._update_states: removals, arrivals into the freed rows, condense, refresh.
        removed = sorted((batch.remove_request(r.rid) for r in finished), reverse=True)
        for r in finished:
            runner.requests.pop(r.rid)
            del self.requests[r.rid]
        for rid, state in runner.requests.items():
            if rid in batch.req_id_to_index:
                batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = state.num_computed_tokens
        for state in self.arrived:
            batch.add_request(state, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)
        # As _update_states: the device copies are refreshed only when a request came or went.
        self.batch_changed = bool(self.arrived or finished)
        if self.batch_changed:
            batch.refresh_sampling_metadata()
        scheduled = {}
        for r in self.requests.values():
            left = len(r.prompt) - r.computed
            scheduled[r.rid] = min(left, rng.randint(1, CHUNK)) if left > 0 else 1
        if not scheduled:
            return
        sched = stubs.SchedulerOutput(num_scheduled_tokens=scheduled)
        runner._sample_tokens_reorder(sched)
        prompts = [rid for i, rid in enumerate(batch.req_ids) if runner._is_prompt(i, sched)]
        decodes = [rid for rid in batch.req_ids if rid not in prompts]
        completes = [rid for rid in prompts
                     if self.requests[rid].computed + scheduled[rid] >= len(self.requests[rid].prompt)]
        logits_reqs = completes
        if runner.use_async_scheduling:
            # _prepare_inputs: an unfinished chunk still gets one logit under async scheduling, and
            # its row index goes to invalid_req_indices (its token is discarded).
            logits_reqs = prompts
            runner.invalid_req_indices = [batch.req_id_to_index[rid] for rid in prompts if rid not in completes]
        decode_sampled, prefill_sampled = [], []
        if decodes:
            pad_to = 1 << (len(decodes) - 1).bit_length()
            decode_sampled.append(self._call(number, False, decodes, pad_to, None))
        if logits_reqs:
            prefill_sampled.append(self._call(number, True, prompts, len(logits_reqs), logits_reqs))
        sampled = [*decodes, *completes]
        namespace = {
            "self": runner, "torch": torch, "num_reqs": len(batch.req_ids), "num_decodes": len(decodes),
            "decode_sampled_token_ids": decode_sampled, "prefill_sampled_token_ids": prefill_sampled,
            "decode_sampled_requests": list(decodes), "prefill_sampled_requests": list(logits_reqs),
            "spec_decode_num_tokens": None
        }
        exec(self.hpu.tail, namespace)
        for rid, n in scheduled.items():
            self.requests[rid].computed += n
            runner.requests[rid].num_computed_tokens += n
        for rid in sampled:
            self.requests[rid].generated.append(self.tokens[rid])

    def _call(self, number: int, is_prompt: bool, rids: list[str], pad_to: int, logits_reqs) -> torch.Tensor:
        runner = self.hpu.runner
        rows = [r for r, _ in runner._generate_req_id_output_token_ids_lst(rids, pad_to, logits_reqs)]
        md = runner._prepare_sampling(self.batch_changed, rids, pad_to, logits_reqs)
        probe = torch.randn(len(rows), VOCAB, generator=self.noise) * 3
        where = f"step {number} ({self.mode}, {'prefill' if is_prompt else 'decode'} call)"
        self._check_metadata(where, rows, md)
        self._check_processors(where, rows, md, probe)
        self.tokens = getattr(self, "tokens", {})
        out = []
        for i, rid in enumerate(rows):
            r = self.requests[rid]
            allowed = r.asked.get("allowed_token_ids") or list(range(3, VOCAB))
            token = allowed[(number * 7 + i) % len(allowed)]
            self.tokens.setdefault(rid, token) if rid in rows[:i] else self.tokens.__setitem__(rid, token)
            out.append(token)
        return torch.tensor(out, dtype=torch.int32)

    def _diff(self, feature: str, where: str, sentence: str) -> None:
        self.found.append((feature, f"{where}: {sentence}"))

    def _check_metadata(self, where: str, rows: list[str], md: Any) -> None:
        for i, rid in enumerate(rows):
            r = self.requests[rid]
            a = r.asked
            if rid in rows[:i]:  # a padding row: its token is discarded, it must not draw
                if "seed" in a and a["temperature"] > 0 and (md.generators or {}).get(i) is r.state.generator:
                    self._diff("seeds", where, f"{_describe(rid, a, 'seed')}; a padding row of the decode bucket "
                               "drew from its generator too, so its tokens depend on the bucket's padding")
                continue
            t = a["temperature"]
            if t > 0 and md.temperature is not None and abs(float(md.temperature[i]) - t) > 1e-6:
                self._diff("temperature/top_k/top_p", where,
                           f"{_describe(rid, a, 'temperature')}; the HPU sampler used {float(md.temperature[i]):g}")
            if "top_k" in a and t > 0 and (md.top_k is None or int(md.top_k[i]) != a["top_k"]):
                got = "none" if md.top_k is None else int(md.top_k[i])
                self._diff("temperature/top_k/top_p", where, f"{_describe(rid, a, 'top_k')}; the HPU sampler used {got}")
            if "top_p" in a and t > 0 and (md.top_p is None or abs(float(md.top_p[i]) - a["top_p"]) > 1e-6):
                got = "none" if md.top_p is None else f"{float(md.top_p[i]):g}"
                self._diff("temperature/top_k/top_p", where, f"{_describe(rid, a, 'top_p')}; the HPU sampler used {got}")
            if "seed" in a and t > 0:
                gen = (md.generators or {}).get(i)
                if gen is not r.state.generator:
                    self._diff("seeds", where, f"{_describe(rid, a, 'seed')}; the HPU sampler drew from "
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
                    self._diff(feature, where, f"request {rid} has generated {r.generated}; the HPU sampler saw "
                               f"{'nothing' if seen is None else list(seen)} for its "
                               f"{'penalties' if feature == 'penalties' else 'multi-token bad_words'}")
            if "frequency_penalty" in a and not md.no_penalties:
                if abs(float(md.frequency_penalties[i]) - a["frequency_penalty"]) > 1e-6:
                    self._diff("penalties", where, f"{_describe(rid, a, 'frequency_penalty')}; the HPU sampler "
                               f"used {float(md.frequency_penalties[i]):g}")
            elif "frequency_penalty" in a:
                self._diff("penalties", where, f"{_describe(rid, a, 'frequency_penalty')}; the HPU sampler applied "
                           "no penalties")
            want = a.get("logprobs")
            if want is not None:
                need = VOCAB if want == -1 else want
                got = md.max_num_logprobs
                if got is None or (got != -1 and got < need):
                    self._diff("logprobs", where, f"{_describe(rid, a, 'logprobs')}; the HPU sampler serves "
                               f"{'none' if got is None else got}")
            allowed = a.get("allowed_token_ids")
            mask = md.allowed_token_ids_mask
            row = None if mask is None or i >= mask.shape[0] else mask[i]
            if allowed is not None:
                want_mask = torch.ones(VOCAB, dtype=torch.bool)
                want_mask[allowed] = False
                if row is None or not torch.equal(row[:VOCAB].bool(), want_mask):
                    self._diff("allowed_token_ids", where, f"request {rid} asked allowed_token_ids={allowed}; "
                               f"the HPU sampler allowed {_allowed(row)}")
            elif row is not None and bool(row.any()):
                self._diff("allowed_token_ids", where, f"request {rid} asked no allowed_token_ids; the HPU sampler "
                           f"allowed only {_allowed(row)}")

    def _check_processors(self, where: str, rows: list[str], md: Any, probe: torch.Tensor) -> None:
        out = probe.clone()
        try:
            for proc in md.logitsprocs.non_argmax_invariant:
                out = proc.apply(out)
            for proc in md.logitsprocs.argmax_invariant:
                out = proc.apply(out)
        except Exception as e:  # noqa: BLE001 - the sampler would raise it
            self._diff("min_p", where, f"the HPU sampler's logits processors raised {type(e).__name__}: {e}")
            return
        banned = probe.clone()
        try:
            if md.bad_words_token_ids:
                self.bad_words(banned, md.bad_words_token_ids, md.output_token_ids)
        except Exception as e:  # noqa: BLE001
            self._diff("bad_words", where, f"the HPU sampler's bad_words step raised {type(e).__name__}: {e}")
            banned = None
        for i, rid in enumerate(rows):
            if rid in rows[:i]:
                continue  # a padding row: its token is discarded
            r = self.requests[rid]
            a = r.asked
            x = probe[i].clone()
            for tok, b in a.get("logit_bias", {}).items():
                x[tok] += b
            if len(r.generated) < a.get("min_tokens", 0):
                x[EOS] = NEG_INF
            if "min_p" in a:
                p = torch.softmax(x, -1)
                x = x.masked_fill(p < a["min_p"] * p.max(), NEG_INF)
            got = out[i]
            for tok, b in a.get("logit_bias", {}).items():
                if torch.isfinite(x[tok]) and abs(float(got[tok] - x[tok])) > 1e-4:
                    self._diff("logit_bias", where, f"request {rid} asked logit_bias={{{tok}: {b:g}}}; the HPU "
                               f"sampler added {float(got[tok] - probe[i][tok]):g}")
            if a.get("min_tokens") and (got[EOS] == NEG_INF) != (x[EOS] == NEG_INF):
                masked = "masked EOS" if got[EOS] == NEG_INF else "allowed EOS"
                self._diff("min_tokens", where, f"request {rid} asked min_tokens={a['min_tokens']} and has "
                           f"generated {len(r.generated)}; the HPU sampler {masked}")
            # EOS is min_tokens' (checked above); the rest of the mask is min_p's.
            keep = torch.ones(VOCAB, dtype=torch.bool)
            keep[EOS] = not a.get("min_tokens")
            if "min_p" in a and not torch.equal(torch.isinf(got)[keep], torch.isinf(x)[keep]):
                applied = "none" if not torch.isinf(got).any() else "another mask"
                self._diff("min_p", where, f"{_describe(rid, a, 'min_p')}; the HPU sampler applied {applied}")
            if "min_p" not in a and not a.get("min_tokens") and bool(torch.isinf(got).any()):
                self._diff("min_p", where, f"request {rid} asked no min_p and no min_tokens; the HPU sampler masked "
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
                    self._diff("bad_words", where, f"request {rid} {asked}; the HPU sampler blocked "
                               f"{sorted(have) or 'nothing'}")


def _allowed(row) -> str:
    if row is None:
        return "every token"
    ids = [i for i in range(VOCAB) if not bool(row[i])]
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


def run(root: Path, schedules: int, seed: int, first: bool) -> dict[str, Any]:
    features = {f: {"schedules": 0, "differences": 0, "first": None} for f in FEATURES}
    started = time.monotonic()
    done = 0
    for n in range(schedules):
        use_async = n % 2 == 1
        s = Schedule(root, seed + n, use_async)
        try:
            for number in range(STEPS):
                s.step(number)
        except Exception as e:  # noqa: BLE001 - the HPU path raised: that is a difference too
            s.found.append(("min_p" if not s.found else s.found[0][0],
                            f"schedule {seed + n} ({s.mode}): the HPU path raised {type(e).__name__}: {e}"))
        done += 1
        for f in s.exercised:
            features[f]["schedules"] += 1
        for f, sentence in s.found:
            features[f]["differences"] += 1
            if features[f]["first"] is None:
                features[f]["first"] = f"schedule {seed + n}, {sentence}"
        if first and s.found:
            break
    return {"root": str(root), "schedules": done, "seed": seed, "seconds": round(time.monotonic() - started, 3),
            "features": [{"name": f, **v} for f, v in features.items()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--schedules", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", action="store_true", help="stop at the first schedule with a difference")
    args = ap.parse_args()
    for rel in (stubs.INPUT_BATCH_REL, stubs.RUNNER_REL, stubs.LOGITSPROCS_REL / "builtin.py"):
        if not (args.root / rel).is_file():
            _cannot_run(f"no {rel} under {args.root}: the suite needs a vllm tree and a vllm_gaudi tree")
    print(json.dumps(run(args.root, args.schedules, args.seed, args.first)))


if __name__ == "__main__":
    main()
