"""The conformance suite's checks: each one function ``fn(ctx, view)`` registered in ``CHECKS``
(the ``@check(feature, scope)`` line above it: the row) with the feature it reports under and the
scope it looks at; the feature list of the report comes from this table.

Scopes (``Scope``), each with the view its checks are handed:

- ``Scope.CALL``: one sampler call as one side handed it (``Call``: the logits rows with the
  request and position each was taken from, the sampling metadata, the sampler's output), held
  against what each request asked; run on the HPU side and on vLLM's GPU path (there its findings
  are the reference's disagreement with the request, never counted against HPU);
- ``Scope.CALL_PAIR``: ``Pair(hpu call, gpu call, gpu_own=…)``: per request, what the sampler sees
  (``views``), HPU against vLLM's GPU path of the same step;
- ``Scope.STEP``: one step of the HPU side (the engine's ``StepOut``): what each request was
  handed back at the end of the step;
- ``Scope.STEP_PAIR``: ``Pair(hpu step, gpu step, suspect=…)``: the step against vLLM's GPU path's;
- ``Scope.RUN``: ``Pair(hpu outputs, gpu outputs, suspect=…)``: each request's whole token stream;
- ``Scope.DELIVERIES``: ``Pair(hpu, gpu)`` of what each request was delivered once over the whole
  run (its prompt logprobs): per request, (step, rows) for each delivery.

A check yields ``Difference``s (a plain string is short for ``Difference(sentence)``: the row's
feature, counted against HPU); ``Difference.gpu_disagrees`` marks one where vLLM's GPU path itself
disagrees with the request (listed under ``gpu_disagrees``, not counted). A new check is one
function and one row (docs/development.md, "Adding a conform feature").
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Union

import torch

import logits_plugins
from conform_schedule import EOS, VOCAB

NEG_INF = float("-inf")
RAISED = "raised"


@dataclasses.dataclass
class Request:
    """A request of the schedule as the suite knows it: what it asked, its grammar."""

    rid: str
    asked: dict[str, Any]
    grammar: Optional[list[int]]
    prompt: list[int]

    @property
    def seeded(self) -> bool:
        return "seed" in self.asked and self.asked["temperature"] > 0

    def describe(self, key: str) -> str:
        return f"request {self.rid} asked {key}={self.asked[key]}"


@dataclasses.dataclass
class Call:
    """One sampler call: its rows (request and position per logits row; ``None`` for a row of no
    request), what it was handed, what it returned, and the side's state then."""

    side: str  # "HPU" or "GPU"
    where: str
    rows: list[Optional[str]]
    positions: list[int]
    logits: torch.Tensor  # as handed to the sampler
    probe: torch.Tensor  # per row, noise fixed by its request and position: what the processors are tried on
    md: Any
    states: dict[str, Any]  # the side's CachedRequestState per request id
    generated: dict[str, list[int]]  # each request's output before this step, as its scheduler knows it
    structured: list[str]  # the step's structured-output request ids, when this is that step's one call
    ends: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # per request: computed after
    # the chunk, and its tokens (prompt and output) at this step
    tokens: Optional[list[int]] = None  # sampled per row
    logprobs: Any = None
    error: Optional[str] = None
    forced: list[int] = dataclasses.field(default_factory=list)  # rows whose end-of-think token was forced
    # per row, what the logits-processor plugins ban on the probe when the call is made (None: none loaded)
    plugin_bans: Optional[list[set[int]]] = None
    # the call's logits through its processors and bad_words, worked out once (``processed_view``)
    processed: Optional[Processed] = dataclasses.field(default=None, repr=False, compare=False)

    def discarded(self, rid: str) -> bool:
        """Whether request `rid`'s first row is one whose token is dropped (its chunk does not
        reach the request's end): such a row may be handed no generator."""
        ends = self.ends.get(rid)
        return ends is not None and ends[0] < ends[1]

    def first_rows(self) -> Iterable[tuple[int, str]]:
        """(row, request) for each request's first row: later ones are padding or recompute rows."""
        seen: set[str] = set()
        for i, rid in enumerate(self.rows):
            if rid is not None and rid not in seen:
                seen.add(rid)
                yield i, rid


@dataclasses.dataclass
class Ctx:
    """What every check may read: the schedule's requests, vLLM's bad-words op."""

    requests: dict[str, Request]
    bad_words: Callable[..., None]
    mode: str
    number: int = 0  # the step being judged
    # Requests vLLM's GPU path itself mishandled (its own checks disagreed with the request): their
    # history there is not the reference's.
    suspect: set[str] = dataclasses.field(default_factory=set)
    # The schedule's reasoning config (think_start, think_end token ids; thinking_budget.py), or None.
    think: Optional[dict[str, int]] = None
    # The server's options the checks read: "logits_processors" when it loads the plugins.
    server: frozenset[str] = frozenset()


class Scope(enum.Enum):
    """What a check looks at: the view it is handed (module docstring)."""

    CALL = "call"
    CALL_PAIR = "call_pair"
    STEP = "step"
    STEP_PAIR = "step_pair"
    RUN = "run"
    DELIVERIES = "deliveries"


@dataclasses.dataclass(frozen=True)
class Pair:
    """The view of a check holding the HPU side against vLLM's GPU path: the two sides' calls,
    steps, token streams or deliveries. ``suspect``: requests vLLM's GPU path itself mishandled
    (its own call checks disagreed with the request); ``gpu_own``: (feature, request) of those
    disagreements in the step being judged."""

    hpu: Any
    gpu: Any
    suspect: frozenset[str] = frozenset()
    gpu_own: frozenset[tuple[str, Optional[str]]] = frozenset()


@dataclasses.dataclass(frozen=True)
class Difference:
    """One difference a check found: a sentence, under the check's feature unless it names its own
    (a check whose row says ``None``); with ``gpu_disagrees``, vLLM's GPU path disagrees with the
    request there (the reference's, not counted against HPU)."""

    sentence: str
    feature: Optional[str] = None
    gpu_disagrees: bool = False


@dataclasses.dataclass(frozen=True)
class Check:
    """A row of ``CHECKS``: the feature (None: each difference names its own), the scope, the
    function, and the SamplingParams keywords whose asking exercises the feature (a schedule with
    a request asking one counts for it in the report; once per feature, on any of its rows)."""

    feature: Optional[str]
    scope: Scope
    fn: Callable[[Any, Any], Iterable[Union[Difference, str]]]
    asked: tuple[str, ...] = ()


CHECKS: list[Check] = []
# Which feature a SamplingParams keyword exercises: the rows' ``asked``.
PARAM_FEATURE: dict[str, str] = {}


def check(feature: Optional[str], scope: Scope, asked: tuple[str, ...] = ()
          ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The row of the function below it: ``@check("min_p", Scope.CALL, asked=("min_p",))``."""
    assert isinstance(scope, Scope), scope
    for key in asked:
        assert feature is not None and PARAM_FEATURE.get(key, feature) == feature, (key, feature)
        PARAM_FEATURE[key] = feature

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CHECKS.append(Check(feature, scope, fn, tuple(asked)))
        return fn
    return register


def judge(ctx: Ctx, views: Mapping[Scope, Any], only: Optional[frozenset[str]] = None
          ) -> Iterator[tuple[Scope, Difference]]:
    """Every check of the scopes in `views` (in table order: the order of the report's first
    sentences), each handed its scope's view; only the features in `only` when given. Each
    difference comes back with its scope and its feature."""
    for c in CHECKS:
        if c.scope in views and (only is None or c.feature in only):
            for d in c.fn(ctx, views[c.scope]):
                if isinstance(d, str):
                    d = Difference(d)
                yield c.scope, (d if d.feature is not None else dataclasses.replace(d, feature=c.feature))


def features() -> list[str]:
    """Every feature the checks report under, in table order, then ``raised``."""
    out: list[str] = []
    for c in CHECKS:
        if c.feature is not None and c.feature not in out:
            out.append(c.feature)
    return out + [RAISED]


def asked_for(r: Request, feature: str) -> str:
    keys = [k for k in r.asked if PARAM_FEATURE[k] == feature]
    return ", ".join(f"{k}={r.asked[k]}" for k in keys) or f"no {feature}"


def allowed_text(row: Optional[torch.Tensor]) -> str:
    if row is None:
        return "every token"
    ids = torch.nonzero(~row[:VOCAB].bool()).flatten().tolist()
    return str(ids) if len(ids) < VOCAB else "every token"


def logit_bias(r: Request) -> dict[int, float]:
    return {int(t): b for t, b in r.asked.get("logit_bias", {}).items()}


# --- what the sampler sees, per request of a call ----------------------------------------------


@dataclasses.dataclass
class Processed:
    """The call's logits through its logits processors and bad_words (``None`` where they raised)."""

    greedy: Optional[torch.Tensor]  # after the non-argmax-invariant processors (a greedy row's view)
    random: Optional[torch.Tensor]  # after all of them
    banned: Optional[torch.Tensor]
    error: Optional[str]
    bad_words_error: Optional[str]


def processed(ctx: Ctx, call: Call) -> Processed:
    probe = call.probe.clone()
    md = call.md
    greedy = random = None
    error = bad_words_error = None
    try:
        out = probe.clone()
        # the plugins as they stood when the call was made (their state moves on with the batch)
        for proc in logits_plugins.without(md.logitsprocs.non_argmax_invariant):
            out = proc.apply(out)
        for i, tokens in enumerate(plugin_rows(call)):
            out[i, list(tokens)] = NEG_INF
        greedy = out.clone()
        for proc in md.logitsprocs.argmax_invariant:
            out = proc.apply(out)
        random = out
    except Exception as e:  # noqa: BLE001 - the sampler would raise it
        error = f"{type(e).__name__}: {e}"
    banned: Optional[torch.Tensor] = probe.clone()
    try:
        if md.bad_words_token_ids:
            ctx.bad_words(banned, md.bad_words_token_ids, md.output_token_ids)
    except Exception as e:  # noqa: BLE001
        bad_words_error, banned = f"{type(e).__name__}: {e}", None
    return Processed(greedy, random, banned, error, bad_words_error)


def plugin_rows(call: Call) -> list[set[int]]:
    """Per row of the call, the tokens the logits-processor plugins ban (``Call.plugin_bans``,
    read when the call was made); none where they raised (min_p's check names that)."""
    return call.plugin_bans or [set() for _ in range(call.probe.shape[0])]


def processed_view(call: Call, ctx: Ctx) -> Processed:
    """The call's ``Processed``, worked out the first time a check asks (``Call.processed``)."""
    if call.processed is None:
        call.processed = processed(ctx, call)
    return call.processed


def views(ctx: Ctx, call: Call) -> dict[str, dict[str, Any]]:
    """Per request of the call, what its row is handed, per feature, in terms both sides share (a
    generator is named by the request that owns it; tokens by value)."""
    md, p = call.md, processed_view(call, ctx)
    owner = {id(st.generator): rid for rid, st in call.states.items() if st.generator is not None}
    out: dict[str, dict[str, Any]] = {}
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        a = r.asked
        v: dict[str, Any] = {}
        # Every row's parameters, whether or not its request asked for them: a leak is a difference.
        top_k = None if md.top_k is None else int(md.top_k[i])
        top_p = None if md.top_p is None else round(float(md.top_p[i]), 5)
        temperature = None if md.temperature is None else float(md.temperature[i])
        if md.all_greedy:  # the sampler reads no temperature then (vLLM's GPU batch hands none)
            temperature = 0.0
        v["temperature/top_k/top_p"] = (
            None if temperature is None else "greedy" if temperature < 1e-5 else round(temperature, 5),
            None if top_k is None or top_k <= 0 or top_k >= VOCAB else top_k,
            None if top_p is None or top_p >= 1.0 else top_p)
        if a["temperature"] > 0:
            v["seeds"] = owner.get(id((md.generators or {}).get(i)), "none")
        # A request drawn by chance (no seed) has other tokens on each side: what depends on its
        # history is compared as "its own history" or not.
        chance = (a["temperature"] > 0 and "seed" not in a) or rid in ctx.suspect
        values = ((0.0, 0.0, 1.0) if md.no_penalties else
                  tuple(round(float(t[i]), 5) for t in (md.frequency_penalties, md.presence_penalties,
                                                        md.repetition_penalties)))
        if "frequency_penalty" in a:
            seen = _seen(call, i, rid)
            if chance and seen == call.generated[rid]:
                seen = "its own output"
            v["penalties"] = (values, seen)
        else:
            v["penalties"] = values
        want = a.get("logprobs")
        if want is not None:
            got = md.max_num_logprobs
            v["logprobs"] = got is not None and (got == -1 or got >= (VOCAB if want == -1 else want))
        mask = md.allowed_token_ids_mask
        v["allowed_token_ids"] = allowed_text(None if mask is None or i >= mask.shape[0] else mask[i])
        v["bad_words"] = (None if p.banned is None else
                          sorted(int(t) for t in torch.nonzero(torch.isinf(p.banned[i])).flatten()))
        if chance and v["bad_words"] is not None and set(v["bad_words"]) == _bad_words_want(r, call.generated[rid]):
            v["bad_words"] = "its own bad words"
        if p.error is None:
            got = p.random[i] if a["temperature"] > 0 else p.greedy[i]
            v["min_tokens"] = bool(got[EOS] == NEG_INF)
            if chance and "min_tokens" in a and v["min_tokens"] == (len(call.generated[rid]) < a["min_tokens"]):
                # A sampled spec step emits 1 to drafts + 1 tokens by chance: how many this request
                # has generated differs by side (the call check ``min_tokens`` holds each side).
                v["min_tokens"] = "as its own output asks"
            v["logit_bias"] = tuple(round(float(got[t] - call.probe[i][t]), 3) for t in sorted(logit_bias(r))
                                    if torch.isfinite(got[t]))
            keep = torch.ones(VOCAB, dtype=torch.bool)
            keep[EOS] = False
            own = plugin_rows(call)[i]  # what the plugins ban in the row: compared on its own below
            keep[list(own)] = False
            v["min_p"] = tuple(int(t) for t in torch.nonzero(torch.isinf(got[:VOCAB]) & keep).flatten())
            if chance and (a.get("extra_args") or {}).get("no_repeat"):
                # no_repeat bans the last token of a history drawn by chance (EOS, a biased token, the
                # most likely one min_p cuts against): where the row is what the request's own
                # output asks (the call checks hold that per side), it is compared as such
                x = _expected(ctx, call, i, rid)[:VOCAB]
                if torch.equal(torch.isinf(got[:VOCAB]), torch.isinf(x)):
                    for feature in ("min_tokens", "logit_bias", "min_p"):
                        v[feature] = "as its own output asks"
            if "logits_processors" in ctx.server:
                v["logits_plugins"] = sorted(own)
                if chance and own == logits_plugins.bans(a, call.generated[rid]):
                    v["logits_plugins"] = "as its own output asks"  # no_repeat of a token drawn by chance
        out[rid] = v
    return out


# --- call checks: what each request asked -------------------------------------------------------


@check("temperature/top_k/top_p", Scope.CALL, asked=("temperature", "top_k", "top_p"))
def temperature_top_k_top_p(ctx: Ctx, call: Call) -> Iterable[str]:
    md = call.md
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        a, t = r.asked, r.asked["temperature"]
        if t > 0 and md.temperature is not None and abs(float(md.temperature[i]) - t) > 1e-6:
            yield f"{r.describe('temperature')}; the {call.side} sampler used {float(md.temperature[i]):g}"
        if "top_k" in a and t > 0 and (md.top_k is None or int(md.top_k[i]) != a["top_k"]):
            got = "none" if md.top_k is None else int(md.top_k[i])
            yield f"{r.describe('top_k')}; the {call.side} sampler used {got}"
        if "top_p" in a and t > 0 and (md.top_p is None or abs(float(md.top_p[i]) - a["top_p"]) > 1e-6):
            got = "none" if md.top_p is None else f"{float(md.top_p[i]):g}"
            yield f"{r.describe('top_p')}; the {call.side} sampler used {got}"


@check("temperature/top_k/top_p", Scope.CALL)
def greedy_and_random(ctx: Ctx, call: Call) -> Iterable[str]:
    """``all_greedy`` / ``all_random`` hold for the call's rows (the sampler skips one kind)."""
    kinds = {rid: ctx.requests[rid].asked["temperature"] > 0 for _, rid in call.first_rows()}
    if call.md.all_greedy and any(kinds.values()):
        yield (f"the {call.side} sampler was told all_greedy, but request "
               f"{next(r for r, random in kinds.items() if random)} samples at random")
    if call.md.all_random and not all(kinds.values()):
        yield (f"the {call.side} sampler was told all_random, but request "
               f"{next(r for r, random in kinds.items() if not random)} is greedy")


@check("metadata_rows", Scope.CALL)
def metadata_rows(ctx: Ctx, call: Call) -> Iterable[str]:
    """Every per-row tensor of the metadata has a row for each logits row."""
    rows = len(call.rows)
    for name in ("temperature", "top_k", "top_p", "frequency_penalties", "presence_penalties", "repetition_penalties",
                 "allowed_token_ids_mask"):
        value = getattr(call.md, name, None)
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] < rows:
            yield f"the {call.side} sampler got {rows} logits rows but {value.shape[0]} rows of {name}"
    ids = getattr(call.md, "output_token_ids", None)
    if not call.md.no_penalties and ids is not None and len(ids) < rows:  # read by the penalties
        yield f"the {call.side} sampler got {rows} logits rows but {len(ids)} lists of output ids"


@check("logits_positions", Scope.CALL)
def logits_positions(ctx: Ctx, call: Call) -> Iterable[str]:
    """Every logits row of a request was taken at the last position its chunk schedules (where
    vLLM's GPU path takes its one row, ``query_start_loc[1:] - 1``), read from the row's mark: a row
    taken one position early predicts from a context one token short."""
    for i, rid in enumerate(call.rows):
        if rid is None or rid not in call.ends:
            continue
        last = call.ends[rid][0] - 1
        if call.positions[i] != last:
            yield (f"request {rid}'s logits row {i} was taken at position {call.positions[i]}; its chunk's last "
                   f"scheduled position is {last}")


@check("seeds", Scope.CALL, asked=("seed",))
def seeds(ctx: Ctx, call: Call) -> Iterable[str]:
    md = call.md
    first = dict((rid, i) for i, rid in call.first_rows())
    for i, rid in enumerate(call.rows):
        if rid is None or not ctx.requests[rid].seeded:
            continue
        r, gen = ctx.requests[rid], (md.generators or {}).get(i)
        own = call.states[rid].generator
        if first[rid] != i:
            if gen is own and call.side == "HPU" and call.positions[i] == call.positions[first[rid]]:
                yield (f"{r.describe('seed')}; a padding row of the decode bucket drew from its generator too, so "
                       "its tokens depend on the bucket's padding")
        elif gen is not own and not (gen is None and call.discarded(rid)):
            yield (f"{r.describe('seed')}; the {call.side} sampler drew from "
                   f"{'no generator' if gen is None else chr(39).join(['another request', 's generator'])}")


def _seen(call: Call, i: int, rid: str) -> Optional[list[int]]:
    md = call.md
    seen = md.output_token_ids[i] if i < len(md.output_token_ids or []) else None
    if seen is None:
        return None
    # As the sampler receives them: an async placeholder (-1) left in is a difference (vLLM's
    # penalties and bad_words would read it as a token).
    return list(seen)


@check("penalties", Scope.CALL, asked=("frequency_penalty", "presence_penalty", "repetition_penalty"))
def penalties(ctx: Ctx, call: Call) -> Iterable[str]:
    md = call.md
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        a = r.asked
        if "frequency_penalty" not in a:
            continue
        seen = _seen(call, i, rid)
        if seen is None or seen != call.generated[rid]:
            yield (f"request {rid} has generated {call.generated[rid]}; the {call.side} sampler saw "
                   f"{'nothing' if seen is None else seen} for its penalties")
        if md.no_penalties:
            yield f"{r.describe('frequency_penalty')}; the {call.side} sampler applied no penalties"
        elif abs(float(md.frequency_penalties[i]) - a["frequency_penalty"]) > 1e-6:
            yield f"{r.describe('frequency_penalty')}; the {call.side} sampler used {float(md.frequency_penalties[i]):g}"


@check("penalties", Scope.CALL)
def prompt_ids(ctx: Ctx, call: Call) -> Iterable[str]:
    """The prompt ids the penalties read (``prompt_token_ids``, padded with the vocabulary size)
    are the request's prompt, as far as they count: the repetition penalty reads the tokens of
    the prompt and the output together (a recompute from 0 may count earlier output as prompt)."""
    md = call.md
    if md.no_penalties or md.prompt_token_ids is None:
        return
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        if "frequency_penalty" not in r.asked or i >= md.prompt_token_ids.shape[0]:
            continue
        seen = [int(t) for t in md.prompt_token_ids[i] if 0 <= int(t) < VOCAB]
        generated = set(call.generated[rid])
        if set(seen) | generated != set(r.prompt) | generated:
            yield (f"request {rid} has the prompt {r.prompt}; the {call.side} sampler's penalties read the prompt "
                   f"{seen}")


@check("logprobs", Scope.CALL, asked=("logprobs",))
def logprobs(ctx: Ctx, call: Call) -> Iterable[str]:
    got = call.md.max_num_logprobs
    for _, rid in call.first_rows():
        r = ctx.requests[rid]
        want = r.asked.get("logprobs")
        if want is not None and (got is None or (got != -1 and got < (VOCAB if want == -1 else want))):
            yield f"{r.describe('logprobs')}; the {call.side} sampler serves {'none' if got is None else got}"


@check("allowed_token_ids", Scope.CALL, asked=("allowed_token_ids",))
def allowed_token_ids(ctx: Ctx, call: Call) -> Iterable[str]:
    mask = call.md.allowed_token_ids_mask
    for i, rid in call.first_rows():
        allowed = ctx.requests[rid].asked.get("allowed_token_ids")
        row = None if mask is None or i >= mask.shape[0] else mask[i]
        if allowed is not None:
            want = torch.ones(VOCAB, dtype=torch.bool)
            want[allowed] = False
            if row is None or not torch.equal(row[:VOCAB].bool(), want):
                yield f"request {rid} asked allowed_token_ids={allowed}; the {call.side} sampler allowed {allowed_text(row)}"
        elif row is not None and bool(row.any()):
            yield f"request {rid} asked no allowed_token_ids; the {call.side} sampler allowed only {allowed_text(row)}"


def _expected(ctx: Ctx, call: Call, i: int, rid: str) -> torch.Tensor:
    """Row `i` as request `rid`'s own parameters would process it: logit_bias, min_tokens, min_p,
    its logits-processor plugins' bans."""
    r = ctx.requests[rid]
    a = r.asked
    x = call.probe[i].clone()
    for tok, b in logit_bias(r).items():
        x[tok] += b
    if len(call.generated[rid]) < a.get("min_tokens", 0):
        x[EOS] = NEG_INF
    for tok in logits_plugins.bans(a, call.generated[rid]):  # its plugins' (logits_plugins' check)
        x[tok] = NEG_INF
    if "min_p" in a and a["temperature"] > 0:
        p = torch.softmax(x, -1)
        x = x.masked_fill(p < a["min_p"] * p.max(), NEG_INF)
    return x


def _processed_rows(ctx: Ctx, call: Call) -> Iterable[tuple[str, Request, torch.Tensor, torch.Tensor]]:
    """Per request of the call: its row as the call's processors left it (the greedy view for a
    greedy request) and as its own parameters would (``_expected``); nothing where they raised."""
    p = processed_view(call, ctx)
    if p.error is not None:
        return
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        yield rid, r, (p.random[i] if r.asked["temperature"] > 0 else p.greedy[i]), _expected(ctx, call, i, rid)


@check("min_p", Scope.CALL, asked=("min_p",))
def min_p(ctx: Ctx, call: Call) -> Iterable[str]:
    p = processed_view(call, ctx)
    if p.error is not None:
        yield f"the {call.side} sampler's logits processors raised {p.error}"
    for rid, r, got, x in _processed_rows(ctx, call):
        a = r.asked
        keep = torch.ones(got.shape[0], dtype=torch.bool)  # EOS is min_tokens' (its own check)
        keep[EOS] = not a.get("min_tokens")
        if "min_p" in a and not torch.equal(torch.isinf(got)[keep], torch.isinf(x)[keep]):
            applied = "none" if not torch.isinf(got).any() else "another mask"
            yield f"{r.describe('min_p')}; the {call.side} sampler applied {applied}"
        extra = torch.isinf(got) & ~torch.isinf(x)  # what its own plugins ban is theirs (below)
        if "min_p" not in a and not a.get("min_tokens") and bool(extra.any()):
            yield (f"request {rid} asked no min_p and no min_tokens; the {call.side} sampler masked "
                   f"{int(extra.sum())} tokens")


@check("logit_bias", Scope.CALL, asked=("logit_bias",))
def logit_bias_check(ctx: Ctx, call: Call) -> Iterable[str]:
    for rid, r, got, x in _processed_rows(ctx, call):
        for tok, b in logit_bias(r).items():
            if torch.isfinite(x[tok]) and abs(float(got[tok] - x[tok])) > 1e-4:
                yield (f"request {rid} asked logit_bias={{{tok}: {b:g}}}; the {call.side} sampler added "
                       f"{float(got[tok] - x[tok]) + b:g}")


@check("min_tokens", Scope.CALL, asked=("min_tokens",))
def min_tokens(ctx: Ctx, call: Call) -> Iterable[str]:
    for rid, r, got, x in _processed_rows(ctx, call):
        if r.asked.get("min_tokens") and (got[EOS] == NEG_INF) != (x[EOS] == NEG_INF):
            masked = "masked EOS" if got[EOS] == NEG_INF else "allowed EOS"
            yield (f"request {rid} asked min_tokens={r.asked['min_tokens']} and has generated "
                   f"{len(call.generated[rid])}; the {call.side} sampler {masked}")


@check("bad_words", Scope.CALL, asked=("bad_words_token_ids",))
def bad_words(ctx: Ctx, call: Call) -> Iterable[str]:
    p = processed_view(call, ctx)
    if p.bad_words_error is not None:
        yield f"the {call.side} sampler's bad_words step raised {p.bad_words_error}"
        return
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        words = r.asked.get("bad_words_token_ids", [])
        generated = call.generated[rid]
        if any(len(w) > 1 for w in words):
            seen = _seen(call, i, rid)
            if seen is None or seen != generated:
                yield (f"request {rid} has generated {generated}; the {call.side} sampler saw "
                       f"{'nothing' if seen is None else seen} for its multi-token bad_words")
        want = _bad_words_want(r, generated)
        have = {int(t) for t in torch.nonzero(torch.isinf(p.banned[i])).flatten()}
        if want != have:
            asked = f"asked bad_words={words} after {generated[-2:]}" if words else "asked no bad_words"
            yield f"request {rid} {asked}; the {call.side} sampler blocked {sorted(have) or 'nothing'}"


def _bad_words_want(r: Request, generated: list[int]) -> set[int]:
    """The tokens request `r`'s bad_words block after `generated`."""
    return {w[-1] for w in r.asked.get("bad_words_token_ids", []) if len(w) == 1 or generated[-(len(w) - 1):] == w[:-1]}


@check("thinking_token_budget", Scope.CALL, asked=("thinking_token_budget",))
def thinking_forced_rows(ctx: Ctx, call: Call) -> Iterable[str]:
    """The sampler forces the end-of-think token only on the rows of requests that asked a
    ``thinking_token_budget`` (the batch's thinking-budget state follows each request's row)."""
    for i in call.forced:
        rid = call.rows[i]
        if rid is not None and "thinking_token_budget" not in ctx.requests[rid].asked:
            yield (f"request {rid} asked no thinking_token_budget; the {call.side} sampler forced the end-of-think "
                   f"token on its row")


@check("logits_plugins", Scope.CALL, asked=("extra_args",))
def logits_plugins_bans(ctx: Ctx, call: Call) -> Iterable[str]:
    """A request's row is banned what it asked its plugins (``extra_args``) and nothing else: its
    ``ban_tokens``, and under ``no_repeat`` its last generated token (as the scheduler knows it)."""
    if "logits_processors" not in ctx.server:
        return
    rows = plugin_rows(call)
    for i, rid in call.first_rows():
        want = logits_plugins.bans(ctx.requests[rid].asked, call.generated[rid])
        if rows[i] != want:
            asked = ctx.requests[rid].asked.get("extra_args") or "nothing"
            yield (f"request {rid} asked the logits-processor plugins {asked} and has generated "
                   f"{call.generated[rid][-3:]} last; the {call.side} sampler's plugins banned "
                   f"{sorted(rows[i]) or 'nothing'} (want {sorted(want) or 'nothing'})")


@check("structured_output", Scope.CALL)
def grammar_rows(ctx: Ctx, call: Call) -> Iterable[str]:
    """The grammar bitmask went on each structured request's own row, and on no other."""
    if call.side != "HPU" or not call.structured:
        return
    for i, rid in call.first_rows():
        r = ctx.requests[rid]
        want = set() if rid not in call.structured else set(range(2, VOCAB)) - set(r.grammar or [])
        have = {int(t) + 2 for t in torch.nonzero(torch.isneginf(call.logits[i, 2:VOCAB])).flatten()}
        if want != have:
            asked = (f"request {rid} is structured (its grammar allows {r.grammar})" if rid in call.structured else
                     f"request {rid} has no grammar this step")
            yield (f"{asked}; the grammar bitmask on its row "
                   f"{'masked nothing' if not have else 'allows ' + str(sorted(set(range(2, VOCAB)) - have))}")


# --- HPU against vLLM's GPU path -----------------------------------------------------------------


@check(None, Scope.CALL_PAIR)
def same_views(ctx: Ctx, pair: Pair) -> Iterable[Difference]:
    """Per request of the HPU call, what its row is handed against its row of vLLM's GPU path
    (same step), feature by feature. Where the GPU path itself disagrees with the request
    (`gpu_own`: (feature, request) its own call checks found), the difference is the reference's:
    yielded with ``gpu_disagrees``."""
    hpu, gpu, gpu_own = pair.hpu, pair.gpu, pair.gpu_own
    theirs = views(ctx, gpu)
    for rid, v in views(ctx, hpu).items():
        g = theirs.get(rid, {})
        discarded = hpu.discarded(rid)
        for feature, value in v.items():
            if feature not in g or g[feature] == value or (feature == "seeds" and discarded and value == "none"):
                continue
            sentence = (f"request {rid} ({asked_for(ctx.requests[rid], feature)}): the HPU path hands the "
                        f"sampler {value!r} for {feature}, vLLM's GPU path {g[feature]!r}")
            yield Difference(sentence, feature, gpu_disagrees=(feature, rid) in gpu_own)


@check("returned_tokens", Scope.STEP)
def returned_tokens(ctx: Ctx, step: Any) -> Iterable[str]:
    """What the runner hands back per request: the token sampled at its last position when the
    chunk reaches its end (a decode, a prompt or a recompute that finishes), nothing otherwise."""
    drawn = step.drawn()
    for rid, n in step.scheduled.items():
        done, end = step.ends[rid]
        have = step.returned.get(rid, [])
        if step.completes(rid):
            token = drawn.get((rid, end - 1))
            want = [] if token is None else [token]
            why = (f"it sampled {want} at its last position {end - 1}" if token is not None
                   else f"its last position {end - 1} was never sampled")
            what = f"request {rid}"
        else:
            want, why = [], "a token predicted mid-prompt"
            what = f"request {rid} ({done} of its {end} tokens computed)"
        if have != want:
            yield f"{what} got {have} back, {why}"


@check("logprobs", Scope.STEP)
def logprobs_served(ctx: Ctx, step: Any) -> Iterable[str]:
    """The logprobs a request is served are for the token it got back."""
    for rid, toks in step.returned.items():
        if ctx.requests[rid].asked.get("logprobs") is None or not toks or rid not in step.logprobs:
            continue
        served = step.logprobs[rid][0][:1]
        if served != toks[:1]:
            yield f"request {rid} got {toks[0]} back; the logprobs it was served are for token {served}"


@check("logprobs", Scope.STEP_PAIR)
def logprob_values(ctx: Ctx, pair: Pair) -> Iterable[Union[Difference, str]]:
    """The logprob values each request is served, against vLLM's GPU path for the same token (not
    for a request drawn by chance, whose earlier tokens differ, nor one the GPU path itself
    mishandled)."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    for rid, (ids, values) in hpu.logprobs.items():
        r = ctx.requests[rid]
        if (r.asked.get("logprobs") is None or not hpu.returned.get(rid) or rid not in gpu.logprobs
                or rid in suspect or (r.asked["temperature"] > 0 and not r.seeded)):
            continue
        gids, gvalues = gpu.logprobs[rid]
        if ids[:1] == gids[:1] and any(abs(a - b) > 1e-3 for a, b in zip(values[:1], gvalues[:1])):
            yield (f"request {rid} is served logprob {values[0]} for token {ids[0]}; vLLM's GPU path serves "
                   f"{gvalues[0]}")


def _got(step: Any, rid: str) -> list[int]:
    """The tokens request `rid` got back in a step (a spec step's decode block: its spec tokens)."""
    return step.returned.get(rid) or (getattr(step, "spec", {}).get(rid) or (None, []))[1]


def _others_ids(gpu: Any, rid: str) -> list[str]:
    """The other requests whose logprob_token_ids rode in the GPU sampler call that sampled `rid`."""
    for call in getattr(gpu, "calls", []):
        asked = getattr(call.md, "logprob_token_ids", None) or {}
        if rid in call.rows and asked:
            return sorted({call.rows[i] for i in asked if i < len(call.rows) and call.rows[i] not in (None, rid)})
    return []


@check("logprobs", Scope.STEP_PAIR)
def logprob_ranks_and_alternatives(ctx: Ctx, pair: Pair) -> Iterable[Union[Difference, str]]:
    """Every column of the logprobs rows a request is served, against vLLM's GPU path's: the
    sampled token's rank and each of its top-k alternatives with its logprob (k its ``logprobs``,
    the whole vocabulary for -1), token by token (several in a spec step) while both sides got the
    same token; not for a request drawn by chance or one the GPU path itself mishandled."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    for rid, rows in getattr(hpu, "logprob_rows", {}).items():
        r = ctx.requests[rid]
        want = r.asked.get("logprobs")
        theirs = getattr(gpu, "logprob_rows", {}).get(rid)
        if (want is None or theirs is None or rid in suspect or (r.asked["temperature"] > 0 and not r.seeded)):
            continue
        if r.asked.get("logprob_token_ids"):
            continue  # served its ids' columns, not top-k ones (vLLM prefers the ids): logprob_token_ids' checks
        k = VOCAB if want == -1 else want
        others = _others_ids(gpu, rid)
        if others:
            # vLLM's Sampler serves a call that carries any logprob_token_ids those ids' columns for
            # every row (sampler.py: "prefer logprob_token_ids as it's more specific"): the GPU path,
            # which samples the batch in one call, hands this request requests {others}' columns
            # instead of its top-k.
            yield Difference(f"request {rid} (logprobs={want}) is served the columns of the logprob_token_ids "
                             f"of {', '.join(others)} sampled in the same call, not its top-{k} alternatives",
                             gpu_disagrees=True)
            continue
        mine, got = _got(hpu, rid), _got(gpu, rid)
        for j, (h, g) in enumerate(zip(rows[:len(mine)], theirs[:len(got)])):
            if mine[j] != got[j] or h.ids[:1] != [mine[j]] or g.ids[:1] != [got[j]]:
                break  # another token (its own check), or logprobs for another token (logprobs_served)
            what = f"request {rid} (logprobs={want}) got {mine[j]} back"
            if h.rank != g.rank:
                yield f"{what}, served with rank {h.rank}; vLLM's GPU path ranks it {g.rank}"
            ha, ga = list(zip(h.ids, h.values))[1:k + 1], list(zip(g.ids, g.values))[1:k + 1]
            if len(ha) < len(ga) or any(a[0] != b[0] or abs(a[1] - b[1]) > 1e-3 for a, b in zip(ha, ga)):
                at = next((c for c, (a, b) in enumerate(zip(ha, ga), 1) if a[0] != b[0] or abs(a[1] - b[1]) > 1e-3),
                          len(ha) + 1)
                yield (f"{what}; its top-{k} alternative {at} is served as {ha[at - 1] if at <= len(ha) else 'none'} "
                       f"(token, logprob); vLLM's GPU path serves {ga[at - 1]}")


@check("thinking_token_budget", Scope.STEP_PAIR)
def thinking_ended(ctx: Ctx, pair: Pair) -> Iterable[Union[Difference, str]]:
    """A request whose prompt opens the thinking, with ``thinking_token_budget``, gets the
    end-of-think token once its budget is spent (its prompt's thinking tokens counted), as vLLM's
    GPU path forces it (``ThinkingBudgetStateHolder``), unless it ended its thinking before: held
    on each side's own tokens, at the step the token is due (a schedule the HPU path raised in
    later is judged up to there), so a request drawn by chance is judged too. Where vLLM's GPU
    path itself does not, the sentence is the reference's (``gpu_disagrees``) and HPU is not judged."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    if ctx.think is None:
        return
    import thinking_budget
    start, end = ctx.think["think_start"], ctx.think["think_end"]
    for rid, r in ctx.requests.items():
        budget = r.asked.get("thinking_token_budget")
        at = None if budget is None else thinking_budget.due(r.prompt, budget, start, end)
        if at is None:
            continue
        for side, step in (("GPU", gpu), ("HPU", hpu)):
            got = step.returned.get(rid) if step is not None and step.calls else None
            if not got:
                continue
            out = step.calls[0].generated[rid] + got  # its tokens so far, this step's last
            if len(out) != at + 1 or end in out:
                continue
            thinking = len(r.prompt) - 1 - max(i for i, t in enumerate(r.prompt) if t == start)
            sentence = (f"request {rid} with thinking_token_budget={budget} (its prompt opens the thinking, "
                        f"{thinking} thinking token{'s' * (thinking != 1)} in it) is still thinking after "
                        f"{len(out)} tokens ({out}); vLLM's GPU path ends thinking after the budget: the "
                        f"end-of-think token {end} as its token {at + 1}")
            if side == "GPU":
                yield Difference(sentence, gpu_disagrees=True)
                break
            yield sentence


@check("seeded_tokens", Scope.RUN)
def seeded_tokens(ctx: Ctx, pair: Pair) -> Iterable[Difference]:
    """Each request whose tokens do not depend on chance (greedy, or seeded) gets the tokens vLLM's
    GPU path gives it for the same schedule; a seeded one's under ``seeded_tokens``, a greedy one's
    under ``returned_tokens``. Not for a request the GPU path itself mishandled (`suspect`: its
    own checks disagreed with the request). The view: each side's tokens per request."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    for rid, r in ctx.requests.items():
        if rid not in hpu or rid not in gpu or rid in suspect or not (r.seeded or r.asked["temperature"] == 0):
            continue
        n = min(len(hpu[rid]), len(gpu[rid]))
        if hpu[rid][:n] != gpu[rid][:n] or len(hpu[rid]) != len(gpu[rid]):
            at = next((k for k in range(n) if hpu[rid][k] != gpu[rid][k]), n)
            asked = f"seed={r.asked['seed']}" if r.seeded else "temperature=0"
            # where one side has the end-of-think token, a thinking_token_budget difference
            thinks = ("thinking_token_budget" in r.asked and ctx.think is not None
                      and ctx.think["think_end"] in (hpu[rid][at:at + 1] + gpu[rid][at:at + 1]))
            yield Difference(f"request {rid} ({asked}) got {hpu[rid]} where vLLM's GPU path gives it {gpu[rid]} "
                             f"(first difference at token {at})",
                             "thinking_token_budget" if thinks else "seeded_tokens" if r.seeded else "returned_tokens")


@check("logprob_token_ids", Scope.STEP, asked=("logprob_token_ids",))
def logprob_token_ids_served(ctx: Ctx, step: Any) -> Iterable[str]:
    """A request with logprob_token_ids is served, for each token it gets back, that token's
    logprob and those of the ids it asked for, in its order (vLLM's ``gather_specific_token_logprobs``)."""
    for rid, toks in step.returned.items():
        ids = ctx.requests[rid].asked.get("logprob_token_ids")
        if not ids or not toks:
            continue
        if rid not in step.logprobs:
            yield f"request {rid} asked for the logprobs of tokens {ids} and was served no logprobs"
            continue
        served = step.logprobs[rid][0][:len(ids) + 1]
        if served != [toks[0], *ids]:
            yield (f"request {rid} asked for the logprobs of tokens {ids} (after its token {toks[0]}) and was served "
                   f"those of tokens {served}")


@check("logprob_token_ids", Scope.STEP_PAIR)
def logprob_token_ids_values(ctx: Ctx, pair: Pair) -> Iterable[Union[Difference, str]]:
    """The logprobs of the ids a request asked for, against vLLM's GPU path for the same token (not
    for a request drawn by chance, nor one the GPU path itself mishandled)."""
    hpu, gpu, suspect = pair.hpu, pair.gpu, pair.suspect
    for rid, (ids, values) in hpu.logprobs.items():
        r = ctx.requests[rid]
        asked = r.asked.get("logprob_token_ids")
        if (not asked or not hpu.returned.get(rid) or rid not in gpu.logprobs or rid in suspect
                or (r.asked["temperature"] > 0 and not r.seeded)):
            continue
        n = len(asked) + 1
        gids, gvalues = gpu.logprobs[rid]
        if ids[:n] == gids[:n] and any(abs(a - b) > 1e-3 for a, b in zip(values[:n], gvalues[:n])):
            yield (f"request {rid} is served logprobs {values[:n]} for tokens {ids[:n]}; vLLM's GPU path serves "
                   f"{gvalues[:n]}")


@check("prompt_logprobs", Scope.DELIVERIES, asked=("prompt_logprobs",))
def prompt_logprobs_delivered(ctx: Ctx, pair: Pair) -> Iterable[str]:
    """The prompt logprobs a request asking prompt_logprobs=k is delivered, against vLLM's GPU
    path's: as many times (once, when its prompt is done), each with a row per prompt position but
    the last: the next prompt token, its logprob and rank, then the top-k tokens with theirs. A
    chunked prompt's earlier rows kept while it is out of a step; none delivered again after a
    preemption. (Prompt rows do not depend on sampling: every request is compared, however drawn.)
    The view: each side's deliveries per request, (step, rows) each."""
    hpu, gpu = pair.hpu, pair.gpu
    for rid, r in ctx.requests.items():
        k = r.asked.get("prompt_logprobs")
        if k is None:
            continue
        mine, theirs = hpu.get(rid, []), gpu.get(rid, [])
        what = f"request {rid} (prompt_logprobs={k}, {len(r.prompt)} prompt tokens)"
        if len(mine) != len(theirs):
            yield (f"{what} is delivered its prompt logprobs {len(mine)} times (steps {[n for n, _ in mine]}, "
                   f"{sum(len(rows) for _, rows in mine) + len(mine)} entries); vLLM's GPU path delivers them "
                   f"{len(theirs)} times (steps {[n for n, _ in theirs]})")
            continue
        for (n, h), (_, g) in zip(mine, theirs):
            if len(h) != len(g):
                yield f"{what} is delivered {len(h)} prompt-logprobs rows at step {n}; vLLM's GPU path {len(g)}"
                continue
            for q, (a, b) in enumerate(zip(h, g)):
                if a.ids != b.ids or a.rank != b.rank or any(abs(x - y) > 1e-3 for x, y in zip(a.values, b.values)):
                    yield (f"{what}'s prompt logprobs at position {q} (delivered at step {n}) are tokens {a.ids}, "
                           f"logprobs {a.values}, rank {a.rank}; vLLM's GPU path gives tokens {b.ids}, logprobs "
                           f"{b.values}, rank {b.rank}")
                    break
