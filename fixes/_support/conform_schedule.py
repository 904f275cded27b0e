"""The conformance suite's schedules, as data: what a scheduler decides, drawn from a seed before
any engine runs, so a schedule can be printed, saved and replayed exactly (``--replay FILE``).

A schedule is one JSON object::

    {"version": 1, "seed": 7, "mode": "sync" | "async",
     "requests": {"r0": {"prompt": [...], "params": {...SamplingParams keywords...},
                         "grammar": [allowed ids] | null, "cached": 4}, ...},
     "steps": [{"finish": ["r2"], "preempt": ["r1"], "arrive": ["r3"],
                "scheduled": {"r0": 1, "r3": 8}, "structured": ["r0"]}, ...]}

A speculative-decoding schedule (``"spec": K``, sync: vllm_gaudi turns async scheduling off with
a speculative config) adds per step ``"drafts": {"r0": [null, 17]}``: the draft tokens the
scheduler sends with a decoding request (0..K of them; its scheduled count is 1 + their number),
``null`` standing for the model's own greedy continuation at that position (each engine works it
out from the request's tokens: a right draft) and a number for that token (most likely wrong).
Its requests are greedy but for about one in five (``spec_params``: temperature 0.7 or 1.0 with
its top_k / top_p / seed, no penalties), and ask no ``min_p`` or ``logit_bias`` (vLLM does not
apply them with speculative decoding); no preemptions (the
generator cannot know how many drafts are accepted, so not how many tokens a request has).

A plain schedule may carry ``"logprobs_mode"`` (the server's ``--logprobs-mode``; absent:
``raw_logprobs``), drawn from a generator of its own so the draws above do not move; each side's
Sampler is then the one its runner's ``__init__`` builds for that mode. A request's params may ask
``logprob_token_ids`` (not in a speculative-decoding schedule).

A plain schedule may carry ``"reasoning"`` (``{"think_start": S, "think_end": E}``: the server runs
with a reasoning config, ``--reasoning-parser``), drawn from a generator of its own; a request of
it may ask ``thinking_token_budget`` (its prompt then opens the thinking: thinking_budget.py).

A plain request may ask ``prompt_logprobs`` (k of ``PROMPT_LOGPROBS_K``), drawn from generators
of its own (the request's, and per step its gaps and preemptions), so that a schedule without
such a request is the one the seed drew before they were drawn; in every ``--logprobs-mode`` of
the schedule (``raw_logits`` and ``processed_logits`` too, since the fix prompt-logprobs-mode: the
prompt tokens' scores are then logits). Such a request never reads the prefix
cache, as vLLM's scheduler has it (``skip_reading_prefix_cache``): it arrives with no hit and is
recomputed from position 0 when it resumes. Its prompt is sometimes left out of a step between
two of its chunks (``GAP``), and it is preempted after its prefill more often than other requests
(``PROMPT_PREEMPT``, until it has been once). A schedule with such a request may carry
``"merged_prefill": true`` (``MERGED``, its own generator): the HPU side runs as under
``VLLM_MERGED_PREFILL=true``, each step's prompts one after another in one row of its prefill batch
where ``sample_tokens`` collects their hidden states for prompt logprobs (prompt_logprobs.collect).

Per step, in the order vLLM's scheduler does it: ``finish`` (its ``finished_req_ids``),
``preempt`` (blocks freed, ``num_computed_tokens`` back to 0; the request is left out until it is
scheduled again, then comes back resumed with the block-aligned prefix hit), ``arrive`` (new
requests), ``scheduled`` (tokens per request: a prompt chunk, a recompute chunk or one decode; a
running request left out of a step is paused: the runner drops it from its batch and gets it back
later), ``structured`` (the scheduler's ``structured_output_request_ids``, in its order: the
scheduled structured requests whose chunk reaches their end).

A request with ``"cached": N`` (absent: 0) arrives with a prefix-cache hit: its first schedule
has ``num_computed_tokens`` N (its prompt's first N tokens, full blocks another request computed),
as vLLM's scheduler sends a new request whose prompt starts like one it has seen.

A plain schedule may carry ``"logits_processors": ["ban_tokens", "no_repeat"]`` (the server's
``--logits-processors``: logits_plugins.py), drawn from a generator of its own; a request of it may
then ask ``extra_args`` of them (``{"ban_tokens": [...], "no_repeat": true}``).

The generator keeps each request's progress (prompt, tokens computed, tokens of output so far) but
never a token value: those are the engines'.

In the suite a schedule is a frozen ``Schedule`` (its ``ScheduledRequest``s and ``Step``s), which
``to_json`` writes as above, key for key, and ``from_json`` reads; ``load`` refuses a file of
another ``"version"`` than ``VERSION``, naming it and the file. A saved file's keys the suite does
not read (a corpus file's ``found``, ``answered_by``) ride along in ``Schedule.notes``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any, Mapping, Optional

import logits_plugins
import thinking_budget

VERSION = 1
VOCAB = 64
# --logprobs-mode values a plain schedule is run with (raw_logprobs, vLLM's default, the most often)
LOGPROBS_MODES = ("raw_logprobs", "raw_logprobs", "processed_logprobs", "processed_logits", "raw_logits")
EOS = 2
MAX_REQS = 8
STEPS = 12
CHUNK = 8  # the longest chunk a step schedules for one request
BLOCK = 4  # the prefix cache's block size (harness.BLOCK): resumption hits are multiples of it
SPEC = 3  # the most drafts a spec schedule sends with one decode
RIGHT = 0.6  # the chance of a draft being the model's own greedy continuation


def random_params(rng: random.Random) -> dict[str, Any]:
    """A request's SamplingParams, as keyword arguments; each feature present with some chance."""
    p: dict[str, Any] = {"temperature": rng.choice([0.0, 0.7, 1.0])}
    if rng.random() < 0.3:
        p["top_k"] = rng.randint(1, 20)
    if rng.random() < 0.3:
        p["top_p"] = rng.choice([0.5, 0.9])
    if rng.random() < 0.35:
        p["seed"] = rng.randint(0, 1000)
    if rng.random() < 0.25:
        p["frequency_penalty"], p["presence_penalty"], p["repetition_penalty"] = 0.5, 0.3, 1.2
    if rng.random() < 0.3:
        p["min_p"] = rng.choice([0.1, 0.2, 0.5])
    if rng.random() < 0.3:
        p["logit_bias"] = {str(rng.randrange(3, VOCAB)): rng.choice([-5.0, 8.0])}
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
    if rng.random() < 0.2:  # alone, or beside logprobs (drawn above)
        p["logprob_token_ids"] = rng.sample(range(VOCAB), rng.randint(1, 4))
    return p


class _Progress:
    """What the generator knows of a request: its prompt length, tokens computed, output so far."""

    def __init__(self, prompt: int):
        self.prompt, self.computed, self.output = prompt, 0, 0
        self.cached = 0  # computed when it was preempted: still in the prefix cache
        self.reads_cache = True  # False for a prompt-logprobs request (vLLM's skip_reading_prefix_cache)
        self.recomputes = False  # preempted once its prompt was done
        self.state = "running"  # running | paused | preempted

    @property
    def tokens(self) -> int:
        return self.prompt + self.output

    def hit(self) -> int:
        """The scheduler's prefix-cache hit on resumption: full cached blocks, at most all but one token."""
        if not self.reads_cache:
            return 0
        return min(self.cached, self.tokens - 1) // BLOCK * BLOCK


PROMPT_LOGPROBS = 0.25  # the chance of a plain request asking prompt_logprobs
PROMPT_LOGPROBS_K = (0, 2, 5, -1)  # -1: the whole vocabulary
GAP = 0.4  # the chance of a prompt-logprobs request being left out of a step between its chunks
PROMPT_PREEMPT = 0.3  # its extra chance, per step, of being preempted once its prompt is done (once)
MERGED = 0.5  # the chance of a schedule with a prompt-logprobs request running with VLLM_MERGED_PREFILL


def prompt_logprobs(seed: int, rid: str) -> Optional[int]:
    """The prompt_logprobs request `rid` of schedule `seed` asks (None: none), from its own generator."""
    rng = random.Random(f"conform-prompt-logprobs {seed} {rid}")
    return rng.choice(PROMPT_LOGPROBS_K) if rng.random() < PROMPT_LOGPROBS else None


def prompt_logprobs_event(seed: int, rid: str, step: int, what: str, chance: float) -> bool:
    """Whether a prompt-logprobs request's `what` (a gap, a preemption) happens at `step`, from a
    generator of its own."""
    return random.Random(f"conform-prompt-logprobs-{what} {seed} {rid} {step}").random() < chance


SAMPLED = 0.3  # the chance of a spec-decode request drawn with temperature > 0 keeping it


def spec_params(rng: random.Random, seed: int = 0, rid: str = "") -> dict[str, Any]:
    """A spec-decode request's SamplingParams, without what vLLM ignores with spec decode (min_p,
    logit_bias). Greedy, but where its drawn temperature is > 0 and a generator of its own (so that
    the schedule's other draws stay those of a greedy-only generator) keeps it sampled, with
    ``SAMPLED``'s chance: then with its drawn top_k, top_p and seed, and without the penalties
    (the support check, ``conform_spec.spec_support``, does not work them out) and without
    min_tokens beside top_k / top_p (vllm_gaudi masks the stop tokens after top_k / top_p there,
    vLLM before: the known difference on spec-decode-sampled-rows' page)."""
    p = random_params(rng)
    for k in ("min_p", "logit_bias"):
        p.pop(k, None)
    p.pop("logprob_token_ids", None)  # not drawn with speculative decoding yet
    if p["temperature"] > 0 and random.Random(f"conform-spec-sampled {seed} {rid}").random() < SAMPLED:
        for k in ("frequency_penalty", "presence_penalty", "repetition_penalty"):
            p.pop(k, None)
        if "top_k" in p or "top_p" in p:
            p.pop("min_tokens", None)
        return p
    p.pop("seed", None)
    p["temperature"] = 0.0
    return p


def drafts(rng: random.Random, k: int, grammar: Any) -> list[Any]:
    """0..`k` drafts: ``None`` (the model's greedy continuation) or a token (from the grammar for a
    structured request: vLLM's scheduler truncates drafts its grammar rejects)."""
    return [None if rng.random() < RIGHT else rng.choice(grammar or range(3, VOCAB)) for _ in range(rng.randint(0, k))]


HIT = 0.25  # the chance of a new request finding part of its prompt in the prefix cache


def prefix_hit(seed: int, rid: str) -> list[int]:
    """A new request's prefix found in the prefix cache (another request computed it): 1..3 full
    blocks of tokens put before its prompt, or none. Drawn from a generator of its own, and the
    rest of the prompt is scheduled as it would be without it: the schedule's other draws (chunks,
    finishes, preemptions) are those the seed draws without hits."""
    rng = random.Random(f"conform-prefix-hit {seed} {rid}")
    if rng.random() >= HIT:
        return []
    return [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 3) * BLOCK)]


def generate(seed: int, mode: str, spec: int = 0) -> Schedule:
    """The schedule of `seed` under `mode` scheduling (``sync`` or ``async``); with `spec`,
    speculative decoding with up to `spec` drafts per decode (sync)."""
    assert not spec or mode == "sync", "vllm_gaudi turns async scheduling off with speculative decoding"
    rng = random.Random(seed)
    requests: dict[str, Any] = {}
    live: dict[str, _Progress] = {}
    steps: list[dict[str, Any]] = []
    # the server's --logprobs-mode: a suite parameter, from its own generator (the draws below stay)
    logprobs_mode = "raw_logprobs" if spec else random.Random(f"logprobs_mode {seed}").choice(LOGPROBS_MODES)
    # prompt logprobs: not with spec decoding (module docstring); in every --logprobs-mode
    draw_prompt_logprobs = not spec
    # a reasoning config and thinking_token_budget: plain schedules, from generators of their own
    think = None if spec else thinking_budget.reasoning(seed, VOCAB)
    # logits-processor plugins (--logits-processors): plain schedules (vLLM refuses them with
    # speculative decoding), from generators of their own
    plugins = not spec and logits_plugins.server(seed)
    for number in range(STEPS):
        running = [rid for rid, p in live.items() if p.state == "running"]
        finish = [rid for rid in running if live[rid].output and rng.random() < 0.15]
        for rid in finish:
            del live[rid]
        preempt = [rid for rid in running if rid in live and live[rid].computed and not spec and rng.random() < 0.08]
        preempt += [rid for rid in running if rid in live and rid not in preempt and not live[rid].reads_cache
                    and live[rid].computed >= live[rid].prompt and not live[rid].recomputes
                    and prompt_logprobs_event(seed, rid, number, "preempt", PROMPT_PREEMPT)]
        for rid in preempt:
            p = live[rid]
            p.recomputes = p.recomputes or p.computed >= p.prompt
            p.cached, p.computed, p.state = p.computed, 0, "preempted"
        for rid in running:
            if rid in live and rid not in preempt and live[rid].output and rng.random() < 0.1:
                live[rid].state = "paused"
        for rid, p in live.items():
            if p.state != "running" and rid not in preempt and rng.random() < 0.6:
                if p.state == "preempted":
                    p.computed = p.hit()
                p.state = "running"
        # a prompt-logprobs request's prompt left out of this step between two of its chunks
        gap = {rid for rid in running if rid in live and live[rid].state == "running" and not live[rid].reads_cache
               and 0 < live[rid].computed < live[rid].prompt and prompt_logprobs_event(seed, rid, number, "gap", GAP)}
        arrive = []
        for _ in range(rng.randint(0, min(2, MAX_REQS - len(live)))):
            rid = f"r{len(requests)}"
            params = spec_params(rng, seed, rid) if spec else random_params(rng)
            prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 20))]
            grammar = sorted(rng.sample(range(3, VOCAB), 12) + [EOS]) if rng.random() < 0.25 else None
            prefix = prefix_hit(seed, rid)
            prompt = prefix + prompt  # the prefix is computed already: the chunks below are unchanged
            k = prompt_logprobs(seed, rid) if draw_prompt_logprobs else None
            if k is not None:
                params["prompt_logprobs"] = k
            b = thinking_budget.budget(seed, rid) if think else None
            if b is not None:  # its prompt opens the thinking (the same length: its chunks stay)
                params["thinking_token_budget"] = b[0]
                prompt = thinking_budget.opens_thinking(prompt, b[1], think["think_start"], think["think_end"])
            args = logits_plugins.extra_args(seed, rid, params, grammar, VOCAB, set(think.values()) if think else
                                             set()) if plugins else None
            if args is not None:
                params["extra_args"] = args
            requests[rid] = {"prompt": prompt, "params": params, "grammar": grammar}
            live[rid] = _Progress(len(prompt))
            if k is not None:  # it never reads the prefix cache: the whole prompt is computed
                live[rid].reads_cache = False
            elif prefix:
                requests[rid]["cached"] = live[rid].computed = len(prefix)
            arrive.append(rid)
        scheduled: dict[str, int] = {}
        for rid, p in live.items():
            if p.state == "running" and rid not in gap:
                left = p.tokens - p.computed
                scheduled[rid] = min(left, rng.randint(1, CHUNK)) if left > 1 else 1
        completes = [rid for rid, n in scheduled.items() if live[rid].computed + n >= live[rid].tokens]
        structured = [rid for rid in completes if requests[rid]["grammar"] is not None]
        rng.shuffle(structured)
        for rid, n in scheduled.items():
            live[rid].computed += n
            if rid in completes:
                live[rid].output += 1
        step: dict[str, Any] = {"finish": finish, "preempt": preempt, "arrive": arrive, "scheduled": scheduled,
                                "structured": structured}
        if spec:  # a decode (its prompt done before this step) may carry drafts
            step["drafts"] = {rid: d for rid, n in scheduled.items() if live[rid].output > 1
                              for d in [drafts(rng, spec, requests[rid]["grammar"])] if d}
            for rid, d in step["drafts"].items():
                scheduled[rid] += len(d)
        steps.append(step)
    out = {"version": VERSION, "seed": seed, "mode": mode, "requests": requests, "steps": steps}
    if spec:
        out["spec"] = spec
    elif logprobs_mode != "raw_logprobs":
        out["logprobs_mode"] = logprobs_mode
    if any("prompt_logprobs" in r["params"] for r in requests.values()) and \
            random.Random(f"conform-merged-prefill {seed}").random() < MERGED:
        out["merged_prefill"] = True
    if think:
        out["reasoning"] = think
    if plugins:
        out["logits_processors"] = list(logits_plugins.PLUGINS)
    return Schedule.from_json(out)


def plan(seed: int, count: int) -> list[Schedule]:
    """The `count` schedules of a run from `seed`: schedule s (seed + n) is the one `--seed s
    --schedules 1` runs, whatever run it is part of."""
    return [of(seed + n) for n in range(count)]


def of(s: int) -> Schedule:
    """Schedule s: its mode follows from s alone (a report's "schedule s" reruns as itself): with
    speculative decoding when s % 5 == 4, else async for odd s, sync for even s."""
    return generate(s, "sync", SPEC) if s % 5 == 4 else generate(s, "async" if s % 2 else "sync")


def load(path: Path) -> Schedule:
    """A schedule saved from ``--first`` (or a corpus file); a ValueError naming the file when it is
    not one, or is one of another version than this suite's."""
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "version" in doc and doc["version"] != VERSION:
        raise ValueError(f"{path}: a conform schedule of version {doc['version']!r}; this suite reads version "
                         f"{VERSION} only")
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not {"requests", "steps", "mode"} <= set(doc):
        raise ValueError(f"{path}: not a conform schedule of version {VERSION} (the `failing_schedule` of "
                         "`gaudi-fixes conform --first --format json`)")
    try:
        return Schedule.from_json(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: not a conform schedule of version {VERSION}: {type(e).__name__}: {e}") from None


# --- the schedule as types: what the generator draws, what the engines, checks and shrinker read ---


@dataclasses.dataclass(frozen=True)
class ScheduledRequest:
    """A request of a schedule: its prompt, its SamplingParams keywords (JSON values, never mutated:
    vLLM's ``SamplingParams`` is built from them), its grammar's allowed ids, its prefix-cache hit."""

    prompt: tuple[int, ...]
    params: Mapping[str, Any]
    grammar: Optional[tuple[int, ...]] = None
    cached: int = 0  # tokens found in the prefix cache at its first schedule

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ScheduledRequest:
        grammar = doc["grammar"]
        return cls(tuple(doc["prompt"]), dict(doc["params"]), None if grammar is None else tuple(grammar),
                   doc.get("cached", 0))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": list(self.prompt), "params": json.loads(json.dumps(self.params)),
                               "grammar": None if self.grammar is None else list(self.grammar)}
        if self.cached:
            out["cached"] = self.cached
        return out


@dataclasses.dataclass(frozen=True)
class Step:
    """A step of a schedule, in the order vLLM's scheduler does it (module docstring). ``drafts`` is
    None in a plain schedule; in a spec schedule, per decoding request its drafts (None: the model's
    own greedy continuation)."""

    finish: tuple[str, ...] = ()
    preempt: tuple[str, ...] = ()
    arrive: tuple[str, ...] = ()
    scheduled: Mapping[str, int] = dataclasses.field(default_factory=dict)
    structured: tuple[str, ...] = ()
    drafts: Optional[Mapping[str, tuple[Optional[int], ...]]] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Step:
        drafts = doc.get("drafts")
        return cls(tuple(doc["finish"]), tuple(doc["preempt"]), tuple(doc["arrive"]),
                   {rid: int(n) for rid, n in doc["scheduled"].items()}, tuple(doc["structured"]),
                   None if drafts is None else {rid: tuple(d) for rid, d in drafts.items()})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"finish": list(self.finish), "preempt": list(self.preempt), "arrive": list(self.arrive),
                               "scheduled": dict(self.scheduled), "structured": list(self.structured)}
        if self.drafts is not None:
            out["drafts"] = {rid: list(d) for rid, d in self.drafts.items()}
        return out

    def drafts_of(self, rid: str) -> tuple[Optional[int], ...]:
        return (self.drafts or {}).get(rid, ())


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One schedule (the module docstring gives its JSON form, ``to_json`` / ``from_json``, version
    ``VERSION``). ``notes``: top-level keys of a saved file the suite does not read (a corpus file's
    ``found`` and ``answered_by``), kept as they were."""

    seed: int
    mode: str
    requests: Mapping[str, ScheduledRequest]
    steps: tuple[Step, ...]
    spec: int = 0
    logprobs_mode: Optional[str] = None  # None: raw_logprobs
    merged_prefill: bool = False
    reasoning: Optional[Mapping[str, int]] = None
    logits_processors: tuple[str, ...] = ()
    notes: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    KEYS = ("version", "seed", "mode", "requests", "steps", "spec", "logprobs_mode", "merged_prefill", "reasoning",
            "logits_processors")

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Schedule:
        if doc.get("version") != VERSION:
            raise ValueError(f"a conform schedule of version {doc.get('version')!r}; this suite reads version "
                             f"{VERSION} only")
        return cls(doc["seed"], doc["mode"],
                   {rid: ScheduledRequest.from_json(r) for rid, r in doc["requests"].items()},
                   tuple(Step.from_json(s) for s in doc["steps"]), doc.get("spec", 0), doc.get("logprobs_mode"),
                   bool(doc.get("merged_prefill", False)),
                   None if doc.get("reasoning") is None else dict(doc["reasoning"]),
                   tuple(doc.get("logits_processors") or ()),
                   {k: v for k, v in doc.items() if k not in cls.KEYS})

    def to_json(self) -> dict[str, Any]:
        """The JSON form, key for key what the generator has always printed (version 1)."""
        out: dict[str, Any] = {"version": VERSION, "seed": self.seed, "mode": self.mode,
                               "requests": {rid: r.to_json() for rid, r in self.requests.items()},
                               "steps": [s.to_json() for s in self.steps]}
        if self.spec:
            out["spec"] = self.spec
        if self.logprobs_mode is not None:
            out["logprobs_mode"] = self.logprobs_mode
        if self.merged_prefill:
            out["merged_prefill"] = True
        if self.reasoning is not None:
            out["reasoning"] = dict(self.reasoning)
        if self.logits_processors:
            out["logits_processors"] = list(self.logits_processors)
        out.update(self.notes)
        return out

    def replace(self, **changes: Any) -> Schedule:
        return dataclasses.replace(self, **changes)
