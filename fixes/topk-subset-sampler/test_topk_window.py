"""Tests for the topk-subset-sampler fix, v2: the window (top_k) path (CPU; needs torch).

The subset sampler is checked against the stock functions of the same file
(``apply_top_k_top_p_pytorch`` + the exponential race); loading: ``_topk_support.py``.

* exact ties: per row the same support and the same probabilities as stock, also when
  the tie group at the k-th value reaches past the window (it enters the race as one
  aggregate column); only ties and rounding at the top-p boundary may differ, and then
  every equal-logit class keeps stock's mass (counted, never excused silently);
* coupled noise: Exp(1) noise over the whole vocabulary, gathered at the window ids
  (and its minimum over the tie class), makes the subset race pick the stock token;
* seeded rows take the fast path, draw their noise from their own generator exactly as
  stock does (>= 10,000 rows: the same tokens, the same generator states after);
* greedy rows (top_k = vocab in a batch whose window comes from the sampled rows) keep
  the fast path; fallbacks; no device reads;
* mutants: broken copies of the patched source must each be rejected by the checks.
"""

from __future__ import annotations

import functools
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import torch
from _topk_support import (
    FIX_DIR,
    HINT_ATTR,
    SAMPLER_PATH,
    WINDOWS,
    _forbid_device_reads,
    _function_span,
    _generators,
    _mutations,
    _record_paths,
    _with_hint,
    base,
    bf16_round,
    coupled_race,
    expected_window,
    llm_like_logits,
    load_sampler,
    patched_source,
    random_k,
    random_p,
    subset,
)

SWITCH_ENV = "GAUDI_FIXES_TOPK_SUBSET"
# Largest probability difference, in float32 ulps, accepted for a token outside the
# tie class: the stock softmax normalises over the whole vocabulary, the subset over
# its K+1 columns, so the sums are accumulated in a different order.
MAX_PROB_ULPS = 16
# Relative difference accepted for the tie class's members (its mass comes from one
# column of logit kth + log(n), so exp/log rounding adds a few ulps of the logit).
MAX_TIE_REL = 1e-5
# A top-p boundary decided by rounding: the boundary token's exact cumulative
# probability lies within this of 1 - p, plus the float32 error bound n * 2**-24 of
# stock's sequential cumulative sum over its n kept tokens.
TOP_P_ROUNDING = 1e-5
# Two race scores this close (relative) are a float tie: the argmax may go either way.
RACE_TIE_REL = 1e-5


# --------------------------------------------------------------------------
# Fixtures: batches of logits with k, p and noise
# --------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    logits: torch.Tensor  # float32 [B, V]
    k: torch.Tensor  # int32 [B]
    p: torch.Tensor | None  # float32 [B]
    noise: torch.Tensor = field(init=False)  # float32 [B, V], Exp(1), > 0

    def __post_init__(self) -> None:
        gen = torch.Generator().manual_seed(zlib.crc32(self.name.encode()))
        noise = torch.empty(self.logits.shape, dtype=torch.float32)
        noise.exponential_(generator=gen)
        # Exp(1) can round to 0; 0 noise would make 0/0 in the race.
        self.noise = noise.clamp_min_(torch.finfo(torch.float32).tiny)

    @property
    def max_top_k(self) -> int:
        return int(self.k.max())


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


@functools.cache
def cases() -> tuple[Case, ...]:
    g = torch.Generator().manual_seed(20261130)
    out = []
    B, V = 32, 32000
    k = random_k(g, B)
    k[:6] = ints(1, 2, 63, 64, 65, 1024)
    out.append(Case("f32_topk_topp", llm_like_logits(g, B, V), k, random_p(g, B)))
    out.append(Case("bf16_topk_topp", bf16_round(llm_like_logits(g, B, V)), random_k(g, B), random_p(g, B)))
    out.append(Case("bf16_topk_only", bf16_round(llm_like_logits(g, B, V)), random_k(g, B), None))
    out.append(Case("bf16_small_k", bf16_round(llm_like_logits(g, B, V)), random_k(g, B, 1, 100), random_p(g, B)))
    out.append(
        Case("bf16_large_vocab", bf16_round(llm_like_logits(g, 8, 151936)), random_k(g, 8, 512, 1024), random_p(g, 8))
    )
    # Bucket edges: the batch maximum is exactly a window, or one above it.
    out.append(Case("max_k_64", llm_like_logits(g, 4, V), ints(1, 63, 64, 64), random_p(g, 4)))
    out.append(Case("max_k_65", llm_like_logits(g, 4, V), ints(65, 2, 64, 65), random_p(g, 4)))
    out.append(Case("p_one", bf16_round(llm_like_logits(g, 8, V)), random_k(g, 8), torch.ones(8)))
    out.append(
        Case(
            "p_tiny",
            bf16_round(llm_like_logits(g, 6, V)),
            random_k(g, 6),
            torch.tensor([0.01, 0.005, 1e-3, 1e-5, 1e-9, 0.01]),
        )
    )
    # Every logit tied: stock keeps the whole vocabulary, the window only K tokens.
    out.append(Case("all_equal", torch.zeros(4, V), ints(1, 5, 64, 1000), random_p(g, 4)))
    # Mostly -inf: a few finite logits per row, k above and below their count.
    masked = torch.full((6, V), -float("inf"))
    for row, n in enumerate((1, 3, 10, 50, 200, 700)):
        ids = torch.randperm(V, generator=g)[:n]
        masked[row, ids] = bf16_round(torch.randn(n, generator=g) * 2)
    out.append(Case("mostly_neg_inf", masked, ints(1, 5, 5, 100, 150, 1000), random_p(g, 6)))
    # Exactly representable top-p boundaries: n equal finite logits give probs 1/n,
    # and 1 - p equals a partial cumulative sum, so `<=` and `<` disagree.
    dyadic = torch.full((4, V), -float("inf"))
    for row, n in enumerate((4, 8, 4, 16)):
        dyadic[row, torch.randperm(V, generator=g)[:n]] = 0.5
    # k above n: the k-th value is -inf (mass 0), so the equal logits are ordinary window
    # entries and the top-p mask itself decides; k <= n: they are the tie class, cut by
    # its member count.
    out.append(
        Case("dyadic_top_p", dyadic, ints(5, 9, 5, 17), torch.tensor([0.5, 0.25, 0.5, 0.75]))
    )
    out.append(
        Case("dyadic_top_p_tied", dyadic.clone(), ints(4, 8, 2, 16), torch.tensor([0.5, 0.25, 0.5, 0.75]))
    )
    # A unique largest logit with k = 1 and p ~ 0: top-p would drop the whole tie class
    # (that one token) but for stock's "at least one".
    out.append(Case("k1_p_zero", llm_like_logits(g, 2, V), ints(1, 1), torch.tensor([1e-9, 1e-12])))
    # bf16 rows of a 151936-token vocabulary with top_k equal to a window size: the tie
    # group at the k-th value reaches past the window in most rows (issue 11).
    for w in (64, 128, 1024):
        out.append(
            Case(f"bf16_v151936_k{w}", bf16_round(llm_like_logits(g, 8, 151936)), torch.full((8,), w, dtype=torch.int32), None)
        )
    out.append(
        Case("bf16_v151936_k64_topp", bf16_round(llm_like_logits(g, 8, 151936)), torch.full((8,), 64, dtype=torch.int32), random_p(g, 8))
    )
    # Every logit tied (k = 50: stock keeps the whole vocabulary); p = 1e-9 leaves only
    # stock's "at least one", a member of the tie class.
    out.append(Case("all_equal_p_none", torch.zeros(4, V), ints(1, 50, 64, 1000), None))
    out.append(Case("all_equal_p_tiny", torch.zeros(2, V), ints(50, 1000), torch.tensor([1e-9, 1e-9])))
    # A vocabulary not a multiple of 4 (the tie count's other branch) nor of the chunk.
    out.append(Case("odd_vocab_k64", bf16_round(llm_like_logits(g, 4, 4099)), ints(64, 64, 10, 64), None))
    out.append(Case("batch_of_one", bf16_round(llm_like_logits(g, 1, V)), ints(700), torch.tensor([0.9])))
    return tuple(out)


# --------------------------------------------------------------------------
# Stock reference and the checks
# --------------------------------------------------------------------------


@dataclass
class Stock:
    probs: torch.Tensor  # [B, V] after top-k and top-p
    topk_probs: torch.Tensor  # [B, V] after top-k only
    tokens: torch.Tensor  # [B] under the case's noise
    kth: torch.Tensor  # [B] the k-th largest logit


@functools.cache
def stock(case_name: str) -> Stock:
    case = case_by_name(case_name)
    mod = base()
    masked = mod.apply_top_k_top_p_pytorch(case.logits.clone(), case.k, case.p)
    probs = masked.softmax(dim=-1, dtype=torch.float32)
    topk_only = mod.apply_top_k_top_p_pytorch(case.logits.clone(), case.k, None)
    topk_probs = topk_only.softmax(dim=-1, dtype=torch.float32)
    tokens = mod.sample_with_exponential_noise(probs.clone(), case.noise.clone())
    kth = case.logits.sort(dim=-1, descending=True).values.gather(1, case.k.long().unsqueeze(1) - 1).squeeze(1)
    return Stock(probs, topk_probs, tokens, kth)


def case_by_name(name: str) -> Case:
    return next(c for c in cases() if c.name == name)


@dataclass
class Stats:
    rows: int = 0
    exact: int = 0
    crossing: int = 0  # the k-th value's tie group reaches past the window
    crossing_exact: int = 0
    top_p_tie: int = 0
    top_p_rounding: int = 0
    race_float_tie: int = 0
    max_ulp: int = 0
    max_tie_rel: float = 0.0


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest |a - b| in float32 ulps of b (0 where both are 0)."""
    if a.numel() == 0:
        return 0
    spacing = torch.where(b > 0, torch.abs(torch.nextafter(b, torch.full_like(b, 2.0)) - b), torch.ones_like(b))
    return int(torch.ceil((a - b).abs() / spacing).max())


def classify_row(logits: torch.Tensor, kth: float, s: torch.Tensor, pk: torch.Tensor, p: float | None,
                 o: torch.Tensor, tie_mass: float, tie_kept: int, stats: Stats) -> str | None:
    """Compare one row of the subset (o: non-tie tokens; tie class as mass/count) with
    stock (s). Returns None when it agrees (counted in stats), else the failure."""
    tied = logits == kth
    other = ~tied
    s_kept_tied = int((s[tied] > 0).sum())
    same_support = torch.equal(s[other] > 0, o[other] > 0) and s_kept_tied == tie_kept
    if tie_kept == 0 and not bool((o > 0).any()):
        return "keeps no token (stock keeps at least one)"
    if bool((o[tied] > 0).any()):
        return "a tie-class member kept a window column of its own (counted twice)"
    if same_support:
        if 0 < s_kept_tied < int(tied.sum()):
            # Top-p cuts inside the tie class: same count, stock's members follow its
            # unstable sort (class contract; the probabilities are still checked).
            stats.top_p_tie += 1
        else:
            stats.exact += 1
        stats.max_ulp = max(stats.max_ulp, _ulps(o[other], s[other]))
        if stats.max_ulp > MAX_PROB_ULPS:
            return f"probabilities differ by {stats.max_ulp} ulps"
        if tie_kept:
            member = tie_mass / tie_kept
            want = s[tied][s[tied] > 0].double()
            rel = float(((want - member).abs() / want).max())
            stats.max_tie_rel = max(stats.max_tie_rel, rel)
            if rel > MAX_TIE_REL:
                return f"tie-class member probability {member:.9g}, stock {float(want[0]):.9g}"
        return None
    # Per equal-logit class: kept counts and masses.
    values, inverse, counts = torch.unique(logits, return_inverse=True, return_counts=True)
    n = len(values)
    kept_s = torch.zeros(n, dtype=torch.long).index_add_(0, inverse, (s > 0).long())
    kept_o = torch.zeros(n, dtype=torch.long).index_add_(0, inverse, (o > 0).long())
    mass_s = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, s.double())
    mass_o = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, o.double())
    t_class = int(inverse[tied.nonzero()[0, 0]])
    kept_o[t_class] = tie_kept
    mass_o[t_class] = tie_mass
    if torch.equal(kept_s, kept_o):
        if bool(((mass_s - mass_o).abs() > 1e-6 + 1e-5 * mass_s).any()):
            return "same kept counts per equal-logit class, different class mass"
        # Top-p cut inside a class of equal logits: stock's choice of members follows its
        # unstable sort; same count and mass per class.
        stats.top_p_tie += 1
        return None
    if p is None:
        return f"support differs without top-p: {int((kept_s != kept_o).sum())} classes differ"
    # Rounding at the top-p boundary: every member cut by one side only sits where its
    # exact cumulative top-k probability is within the float32 error of 1 - p.
    tolerance = TOP_P_ROUNDING + int((pk > 0).sum()) * 2.0**-24
    for c in (kept_s != kept_o).nonzero().flatten().tolist():
        below = float(pk[logits < values[c]].double().sum())
        member = float(pk[inverse == c][0])
        lo, hi = sorted((int(kept_s[c]), int(kept_o[c])))
        size = int(counts[c])
        for j in range(size - hi + 1, size - lo + 1):
            gap = abs(below + j * member - (1.0 - p))
            # Exactly at 1 - p (dyadic values) the comparison decides, not rounding.
            if gap == 0.0 or gap > tolerance:
                return (
                    f"support differs: class {float(values[c])} keeps {int(kept_s[c])} (stock) vs "
                    f"{int(kept_o[c])} of {size}, not at the top-p boundary"
                )
    stats.top_p_rounding += 1
    return None


def check_case(mod, case: Case, stats: Stats | None = None, stop_early: bool = False) -> list[str]:
    """Compare the subset sampler of `mod` with the stock sampler on one case."""
    stats = stats if stats is not None else Stats()
    ref = stock(case.name)
    window = expected_window(case.max_top_k)
    try:
        sub = subset(mod, case.logits, case.k, case.p, window)
        tokens = coupled_race(mod, sub, case.logits, case.noise)
    except Exception as exc:  # a broken sampler may raise; that is a failure
        return [f"{case.name}: subset sampler raised {type(exc).__name__}: {exc}"]
    if tokens.shape != ref.tokens.shape:
        return [f"{case.name}: {tuple(tokens.shape)} tokens, stock gives {tuple(ref.tokens.shape)}"]
    failures = []
    if not torch.equal(sub.kth, ref.kth):
        failures.append(f"{case.name}: k-th values differ from stock's in rows {(sub.kth != ref.kth).nonzero().flatten().tolist()}")
        return failures
    crossing = (case.logits >= ref.kth.unsqueeze(1)).sum(dim=1) > window
    for row in range(case.logits.shape[0]):
        stats.rows += 1
        exact_before = stats.exact
        failure = classify_row(
            case.logits[row], float(ref.kth[row]), ref.probs[row], ref.topk_probs[row],
            None if case.p is None else float(case.p[row]), sub.probs[row],
            float(sub.tie_mass[row]), int(sub.tie_kept[row]), stats,
        )
        if failure:
            failures.append(f"{case.name} row {row} (k={int(case.k[row])}): {failure}")
            if stop_early:
                break
            continue
        exact = stats.exact > exact_before
        if bool(crossing[row]):
            stats.crossing += 1
            stats.crossing_exact += int(exact)
        tok, want = int(tokens[row]), int(ref.tokens[row])
        if exact and tok != want:
            # The same noise must pick stock's token, up to a float tie of the two scores.
            scores = ref.probs[row].double() / case.noise[row].double()
            a, b = float(scores[tok]), float(scores[want])
            if abs(a - b) <= RACE_TIE_REL * max(a, b):
                stats.race_float_tie += 1
            else:
                failures.append(f"{case.name} row {row}: coupled noise picks {tok}, stock {want}")
    return failures


def check_windows(mod) -> list[str]:
    failures = []
    table = {1: 64, 63: 64, 64: 64, 65: 128, 128: 128, 129: 256, 256: 256, 257: 512, 512: 512, 513: 1024,
             1000: 1024, 1024: 1024, 1025: None, 4096: None, 151936: None, 0: None, None: None}
    for max_top_k, want in table.items():
        got = mod._topk_subset_bucket(max_top_k)
        if got != want:
            failures.append(f"window for max top_k {max_top_k}: {got}, want {want}")
    if tuple(mod._TOPK_SUBSET_WINDOWS) != WINDOWS or mod._TOPK_SUBSET_HINT_ATTR != HINT_ATTR:
        failures.append("module constants _TOPK_SUBSET_WINDOWS / _TOPK_SUBSET_HINT_ATTR changed")
    return failures


def check_greedy_rows(mod) -> list[str]:
    """Greedy rows carry top_k = vocab; the window comes from the sampled rows. Their k is
    clamped to the window; the sampled rows must match stock exactly."""
    g = torch.Generator().manual_seed(31)
    B, V = 8, 4096
    logits = bf16_round(llm_like_logits(g, B, V))
    k = random_k(g, B, 1, 64)
    greedy = torch.tensor([0, 3, 6])
    k[greedy] = V
    p = random_p(g, B)
    try:
        sub = subset(mod, logits, k, p, 64)
    except Exception as exc:
        return [f"greedy rows: subset sampler raised {type(exc).__name__}: {exc}"]
    masked = mod.apply_top_k_top_p_pytorch(logits.clone(), k, p)
    s = masked.softmax(dim=-1, dtype=torch.float32)
    pk = mod.apply_top_k_top_p_pytorch(logits.clone(), k, None).softmax(dim=-1, dtype=torch.float32)
    kth = logits.sort(dim=-1, descending=True).values.gather(1, k.long().clamp(max=V).unsqueeze(1) - 1).squeeze(1)
    failures = []
    stats = Stats()
    for row in range(B):
        if row in greedy.tolist():
            continue
        f = classify_row(logits[row], float(kth[row]), s[row], pk[row], float(p[row]), sub.probs[row],
                         float(sub.tie_mass[row]), int(sub.tie_kept[row]), stats)
        if f:
            failures.append(f"greedy-mix batch, sampled row {row}: {f}")
    return failures


@contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@dataclass
class Scenario:
    name: str
    want: str  # "subset" or "stock"
    vocab: int = 4096
    k: str = "small"  # small | none | vocab | greedy_mix
    hint: str = "window"  # window | absent | raw_max | 2048 | string | tensor
    p: bool = True
    generators: str = ""  # "" | some | all
    fp64: bool = False
    mode: str = "raw_logprobs"
    env: str | None = None


SCENARIOS = (
    Scenario("hint_set", "subset"),
    Scenario("hint_set_topk_only", "subset", p=False),
    Scenario("raw_logits_mode", "subset", mode="raw_logits"),
    Scenario("switch_on", "subset", env="1"),
    Scenario("greedy_rows_in_batch", "subset", k="greedy_mix"),
    Scenario("seeded_rows", "subset", generators="some"),
    Scenario("all_rows_seeded", "subset", generators="all"),
    Scenario("k_none", "stock", k="none"),
    Scenario("fp64_gumbel", "stock", fp64=True),
    Scenario("processed_logits", "stock", mode="processed_logits"),
    Scenario("processed_logprobs", "stock", mode="processed_logprobs"),
    Scenario("hint_not_a_window", "stock", hint="raw_max"),
    Scenario("hint_above_windows", "stock", hint="2048"),
    Scenario("hint_a_string", "stock", hint="string"),
    Scenario("hint_a_tensor", "stock", hint="tensor"),
    Scenario("hint_absent", "stock", hint="absent"),
    Scenario("switch_off", "stock", env="0"),
    Scenario("k_equals_vocab", "stock", k="vocab", hint="absent"),
    Scenario("window_not_below_small_vocab", "stock", vocab=500, k="small"),
)


def run_scenario(mod, sc: Scenario) -> list[str]:
    """Run forward_native in one situation; check the path it took and, on the
    stock path, that it returns exactly what the stock code returns."""
    g = torch.Generator().manual_seed(7)
    B = 6
    logits = llm_like_logits(g, B, sc.vocab)
    k = None
    if sc.k != "none":
        if sc.k == "vocab":
            k = torch.full((B,), sc.vocab, dtype=torch.int32)
        else:
            k = random_k(g, B, 1, 300)
            if sc.k == "greedy_mix":
                k[[0, 5]] = sc.vocab
        window = expected_window(300)  # every k above is <= 300
        hint = {"window": window, "absent": None, "raw_max": 300, "2048": 2048,
                "string": "512", "tensor": torch.tensor(512)}[sc.hint]
        k = _with_hint(k, hint)
    p = random_p(g, B) if sc.p else None

    try:
        with _env(SWITCH_ENV, sc.env):
            sampler = mod.TopKTopPSampler(logprobs_mode=sc.mode, use_fp64_gumbel=sc.fp64)
        with _record_paths(mod) as taken:
            torch.manual_seed(1234)
            tokens, returned = sampler.forward_native(logits.clone(), _generators(sc.generators, B), k, p)
    except Exception as exc:
        return [f"{sc.name}: forward_native raised {type(exc).__name__}: {exc}"]
    failures = []
    if taken != [sc.want]:
        failures.append(f"{sc.name}: took {taken}, want [{sc.want!r}]")
    if sc.want == "stock":
        ref_mod = base()
        torch.manual_seed(1234)
        masked = ref_mod.apply_top_k_top_p(logits.clone(), k, p)
        want_returned = None
        if sc.mode == "processed_logits":
            want_returned = masked
        elif sc.mode == "processed_logprobs":
            want_returned = masked.log_softmax(dim=-1, dtype=torch.float32)
        probs = masked.softmax(dim=-1, dtype=torch.float32)
        want_tokens = ref_mod.random_sample(probs, _generators(sc.generators, B), sc.fp64)
        if not torch.equal(tokens, want_tokens):
            failures.append(f"{sc.name}: stock path tokens differ from the stock code's")
        if (returned is None) != (want_returned is None) or (
            returned is not None and not torch.equal(returned, want_returned)
        ):
            failures.append(f"{sc.name}: returned logits/logprobs differ from the stock code's")
    else:
        if returned is not None:
            failures.append(f"{sc.name}: subset path returned logits for mode {sc.mode}")
        kth = logits.sort(dim=-1, descending=True).values.gather(1, k.long().clamp(max=sc.vocab).unsqueeze(1) - 1)
        sampled = [r for r in range(B) if not (sc.k == "greedy_mix" and r in (0, 5))]
        chosen = logits.gather(1, tokens.unsqueeze(1))
        if bool((chosen[sampled] < kth[sampled]).any()):
            failures.append(f"{sc.name}: a sampled row drew a token outside its top-k")
    return failures


def check_fallbacks(mod) -> list[str]:
    return [f for sc in SCENARIOS for f in run_scenario(mod, sc)]


def check_no_device_reads(mod) -> list[str]:
    case = case_by_name("bf16_topk_topp")
    k = _with_hint(case.k, expected_window(case.max_top_k))
    sampler = mod.TopKTopPSampler()
    generators = {3: torch.Generator().manual_seed(3), 9: torch.Generator().manual_seed(9)}
    try:
        with _record_paths(mod) as taken, _forbid_device_reads():
            sampler.forward_native(case.logits.clone(), generators, k, case.p)
    except AssertionError as exc:
        return [f"subset path: {exc}"]
    except Exception as exc:
        return [f"subset path raised {type(exc).__name__}: {exc}"]
    return [] if taken == ["subset"] else [f"no-sync check: took {taken}, want ['subset']"]


def check_forward_draws(mod) -> list[str]:
    """Unseeded rows: forward_native's tokens all lie in the stock support (top-k and
    top-p), including tie-class members outside the window."""
    failures = []
    for name in ("bf16_topk_topp", "bf16_small_k", "max_k_65", "bf16_v151936_k64", "bf16_v151936_k64_topp"):
        case = case_by_name(name)
        k = _with_hint(case.k, expected_window(case.max_top_k))
        try:
            torch.manual_seed(99)
            tokens, _ = mod.TopKTopPSampler().forward_native(case.logits.clone(), {}, k, case.p)
        except Exception as exc:
            failures.append(f"{case.name}: forward_native raised {type(exc).__name__}: {exc}")
            continue
        ref = stock(case.name)
        # Stock's support, widened to the whole class of every kept logit (top-p may cut
        # inside a class of equal logits; which members is arbitrary).
        kept_values = torch.where(ref.probs > 0, case.logits, float("inf")).min(dim=1, keepdim=True).values
        allowed = (case.logits >= kept_values) & (case.logits >= ref.kth.unsqueeze(1))
        outside = ~allowed.gather(1, tokens.unsqueeze(1)).squeeze(1)
        if bool(outside.any()):
            failures.append(f"{case.name}: forward_native drew {int(outside.sum())} tokens outside the stock support")
    return failures


def check_uniform_tie(mod) -> list[str]:
    """All-equal rows with k = 50: stock keeps the whole vocabulary, so draws must be
    uniform over it (not over the 64 window tokens, not the tie class's first member)."""
    B, V = 1024, 4096
    logits = torch.zeros(B, V)
    k = _with_hint(torch.full((B,), 50, dtype=torch.int32), 64)
    try:
        torch.manual_seed(5)
        tokens, _ = mod.TopKTopPSampler().forward_native(logits, {}, k, None)
    except Exception as exc:
        return [f"all-equal rows: forward_native raised {type(exc).__name__}: {exc}"]
    bins = 16
    counts = torch.bincount(tokens // (V // bins), minlength=bins).double()
    expected = B / bins
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # chi-square, 15 degrees of freedom: P(chi2 > 45) ~ 7e-5 (fixed seed: deterministic).
    if chi2 > 45 or counts.numel() != bins:
        return [f"all-equal rows, k=50: draws not uniform over the vocabulary (chi2 {chi2:.0f}, bins {counts.tolist()})"]
    return []


def check_tie_member(mod) -> list[str]:
    """The tie-class helpers against a direct count: for every row and every j < |T|, the
    (j+1)-th member of T in id order (V = 1100: whole chunks and a short last one; sparse, dense,
    all-tied rows, a member alone in the first and in the last id)."""
    g = torch.Generator().manual_seed(17)
    V = 1100
    logits = (torch.randn(6, V, generator=g) * 0.6).round()
    logits[3] = 0.0
    logits[4] = -5.0
    logits[4, V - 1] = 2.0
    logits[5] = -5.0
    logits[5, 0] = 2.0
    kth = torch.tensor([[0.0], [1.0], [-1.0], [0.0], [2.0], [2.0]])
    failures = []
    try:
        tied = logits == kth
        _, counts, num_tied = mod._topk_subset_tie_counts(logits.clone(), kth)
        sizes = tied.sum(dim=1)
        if not torch.equal(num_tied.view(-1).long(), sizes):
            return [f"tie counts: |T| {num_tied.view(-1).tolist()}, want {sizes.tolist()}"]
        whole = tied[:, : V - V % 64].view(6, -1, 64).sum(dim=-1).cumsum(dim=-1)
        if not torch.equal(counts.long(), whole):
            return ["tie counts: the running count over whole chunks differs from a direct count"]
        rows = torch.repeat_interleave(torch.arange(6), sizes)
        j = torch.cat([torch.arange(int(n)) for n in sizes]).to(torch.float32).unsqueeze(1)
        got = mod._topk_subset_tie_member(tied.float()[rows], counts[rows], j)
    except Exception as exc:
        return [f"tie member: raised {type(exc).__name__}: {exc}"]
    want = torch.cat([tied[r].nonzero().flatten() for r in range(6)])
    wrong = (got.long() != want).nonzero().flatten()
    if wrong.numel():
        i = int(wrong[0])
        failures.append(
            f"tie member: row {int(rows[i])}, j = {int(j[i])}: id {int(got[i])}, want the (j+1)-th member {int(want[i])} "
            f"({wrong.numel()} of {want.numel()} wrong)"
        )
    return failures


def seeded_batches(n_rows: int, batch: int = 256, vocab: int = 4096):
    """Batches where 7 of 8 rows are seeded: float32 logits with top-k and top-p;
    bf16-rounded ones with top_k = 64 (the tie group often crosses the window); and
    plateau rows (logits rounded to integers: large tie classes that often win)."""
    g = torch.Generator().manual_seed(2026)
    seeded = [r for r in range(batch) if r % 8 != 3]
    for i in range(-(-n_rows // len(seeded))):
        if i % 3 == 0:
            logits = llm_like_logits(g, batch, vocab)
            k = random_k(g, batch, 1, 64)
            p = random_p(g, batch)
        elif i % 3 == 1:
            logits = bf16_round(llm_like_logits(g, batch, vocab))
            k = torch.full((batch,), 64, dtype=torch.int32)
            p = None
        else:
            logits = (llm_like_logits(g, batch, vocab) * 0.5).round()
            k = random_k(g, batch, 1, 64)
            p = None
        yield i, logits, k, p, seeded


def check_seeded(mod, n_rows: int, stop_early: bool = False) -> tuple[list[str], dict]:
    """Seeded rows on the fast path: the same token as stock for the same generator
    state, and the same generator state after."""
    sampler = mod.TopKTopPSampler()
    ref_mod = base()
    rows = same = float_ties = 0
    failures: list[str] = []
    for i, logits, k, p, seeded in seeded_batches(n_rows):
        gens_stock = {r: torch.Generator().manual_seed(1_000_003 * i + r) for r in seeded}
        gens_subset = {r: torch.Generator().manual_seed(1_000_003 * i + r) for r in seeded}
        probs = ref_mod.apply_top_k_top_p_pytorch(logits.clone(), k, p).softmax(dim=-1, dtype=torch.float32)
        want = ref_mod.random_sample(probs.clone(), gens_stock)
        try:
            with _record_paths(mod) as taken:
                got, _ = sampler.forward_native(logits.clone(), gens_subset, _with_hint(k, 64), p)
        except Exception as exc:
            return [f"seeded batch {i}: forward_native raised {type(exc).__name__}: {exc}"], {}
        if taken != ["subset"]:
            return [f"seeded batch {i}: took {taken}, want ['subset']"], {}
        for r in seeded:
            if not torch.equal(gens_stock[r].get_state(), gens_subset[r].get_state()):
                failures.append(f"seeded batch {i} row {r}: generator state differs from stock's after the step")
                break
        rows += len(seeded)
        differ = [r for r in seeded if int(got[r]) != int(want[r])]
        same += len(seeded) - len(differ)
        for r in differ:
            # A float tie: the row's top-p boundary or race decided by rounding, or a cut
            # inside a class of equal logits (stock's choice among equal logits is arbitrary).
            a, b = int(got[r]), int(want[r])
            equal_logit = bool(logits[r, a] == logits[r, b])
            row_stats = Stats()
            kth = logits[r].sort(descending=True).values[int(k[r]) - 1]
            sub = subset(mod, logits[r : r + 1], k[r : r + 1], None if p is None else p[r : r + 1], 64)
            pk = ref_mod.apply_top_k_top_p_pytorch(logits[r : r + 1].clone(), k[r : r + 1], None).softmax(-1)[0]
            f = classify_row(logits[r], float(kth), probs[r], pk, None if p is None else float(p[r]), sub.probs[0],
                             float(sub.tie_mass[0]), int(sub.tie_kept[0]), row_stats)
            boundary = f is None and row_stats.exact == 0
            # Or the two race scores under the row's own noise (drawn again from its seed).
            q = torch.empty(logits.shape[1]).exponential_(generator=torch.Generator().manual_seed(1_000_003 * i + r))
            sa, sb = float(probs[r, a] / q[a]), float(probs[r, b] / q[b])
            race_tie = abs(sa - sb) <= RACE_TIE_REL * max(sa, sb)
            if equal_logit or boundary or race_tie:
                float_ties += 1
            else:
                failures.append(f"seeded batch {i} row {r}: token {a}, stock {b}, not a float tie")
                break
        if stop_early and failures:
            return failures, {}
    numbers = {"rows": rows, "same": same, "float_ties": float_ties}
    if rows and same / rows < 0.999:
        failures.append(f"seeded rows: {same} of {rows} tokens identical to stock, want >= 99.9%")
    return failures, numbers


def run_checks(mod, stop_early: bool = False) -> list[str]:
    """Every check, as a list of failures (empty: the sampler passes). stop_early
    (mutants) returns at the first failing check, cheap checks first."""
    checks = [check_windows, check_tie_member, check_fallbacks, check_no_device_reads, check_greedy_rows, check_uniform_tie]
    checks += [functools.partial(check_case, case=case, stop_early=stop_early) for case in cases()]
    checks += [check_forward_draws, lambda m: check_seeded(m, 1024, stop_early)[0]]
    failures: list[str] = []
    for check in checks:
        failures += check(mod)
        if stop_early and failures:
            break
    return failures


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def test_tree_is_patched():
    source = patched_source()
    for name in ("_topk_subset_bucket", "_apply_top_k_top_p_subset", "_topk_subset_race", "_topk_subset_noise",
                 "_topk_subset_tie_counts", "_topk_subset_tie_member",
                 "_topk_subset_window", "_TOPK_SUBSET_WINDOWS", "_TOPK_SUBSET_HINT_ATTR"):
        assert name in source, f"{SAMPLER_PATH}: {name} missing"


@pytest.mark.parametrize("patch", sorted(FIX_DIR.glob("v*/topk_topp_sampler.patch")), ids=lambda p: p.parent.name)
def test_patch_only_adds_lines(patch):
    """The stock code path stays byte for byte: the vLLM patch removes no line."""
    removed = [
        line for line in patch.read_text().splitlines() if line.startswith("-") and not line.startswith("--- ")
    ]
    assert not removed, f"{patch} removes lines: {removed[:3]}"


def test_window_is_smallest_covering():
    assert check_windows(base()) == []


@pytest.mark.parametrize("case_name", [c.name for c in cases()])
def test_subset_matches_stock(case_name):
    case = case_by_name(case_name)
    stats = Stats()
    failures = check_case(base(), case, stats)
    print(f"\n{case_name}: {stats}")
    assert failures == []
    assert stats.rows == case.logits.shape[0]
    # Every row whose tie group crosses the window edge is exact (the class v1 excused).
    assert stats.crossing_exact + stats.top_p_tie + stats.top_p_rounding >= stats.crossing
    if case.p is None:
        assert stats.exact == stats.rows, stats
    if case_name.startswith("bf16_v151936_k"):
        assert stats.crossing > 0, "expected tie groups crossing the window edge"
    if case_name.startswith("bf16_v151936_k") and case.p is None:
        assert stats.crossing_exact == stats.crossing


def test_bf16_ties_cross_the_window_and_are_exact():
    """bf16 rows, V = 151936, top_k = the window size: how often the tie group at the
    k-th value reaches past the window, and the stock mass kept there (v1 lost it)."""
    print()
    for w in (64, 128, 1024):
        case = case_by_name(f"bf16_v151936_k{w}")
        ref = stock(case.name)
        crossing = (case.logits >= ref.kth.unsqueeze(1)).sum(dim=1) > w
        # Mass of the tie-group members stock keeps beyond the first w tokens.
        tied = case.logits == ref.kth.unsqueeze(1)
        in_window = torch.zeros_like(tied).scatter_(1, case.logits.topk(w, dim=-1).indices, True)
        lost = (ref.probs * (tied & ~in_window)).sum(dim=1)
        sub = subset(base(), case.logits, case.k, None, w)
        print(
            f"k={w}: tie group crosses the window in {int(crossing.sum())} of {len(crossing)} rows; "
            f"stock mass beyond the window {float(lost.mean()):.4f} mean, {float(lost.max()):.4f} max; "
            f"subset tie-class mass - stock {float((sub.tie_mass.double() - (ref.probs * tied).sum(1).double()).abs().max()):.2e}"
        )
        assert int(crossing.sum()) > 0


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_path_choice(scenario):
    assert run_scenario(base(), scenario) == []


def test_greedy_rows_keep_the_fast_path():
    assert check_greedy_rows(base()) == []


def test_subset_path_reads_no_device_value():
    assert check_no_device_reads(base()) == []


def test_forward_native_draws_inside_stock_support():
    assert check_forward_draws(base()) == []


def test_tie_member_is_the_jth_in_id_order():
    assert check_tie_member(base()) == []


def test_all_equal_row_is_uniform_over_vocab():
    assert check_uniform_tie(base()) == []


def test_seeded_rows_match_stock_tokens_and_generators():
    """>= 10,000 seeded rows (mixed with unseeded ones) on the fast path."""
    failures, numbers = check_seeded(base(), 10_240)
    print(f"\nseeded rows: {numbers}")
    assert failures == []
    assert numbers["rows"] >= 10_000


# --------------------------------------------------------------------------
# Mutants: broken copies of the patched source, each rejected by the checks above
# --------------------------------------------------------------------------


def _swap_top_k_top_p(source: str) -> str:
    start, end = _function_span(source, "_apply_top_k_top_p_subset")
    body = source[start:end]
    top_k_at = body.index("    # Apply top-k.")
    top_p_at = body.index("    if p is not None:")
    return_at = body.index("    return ")
    top_k_block, top_p_block = body[top_k_at:top_p_at], body[top_p_at:return_at]
    swapped = body[:top_k_at] + top_p_block.rstrip("\n") + "\n\n" + top_k_block + body[return_at:]
    assert swapped != body
    return source[:start] + swapped + source[end:]


MUTANTS = {
    "window_one_bucket_too_small": _mutations("_topk_subset_bucket", ("if max_top_k <= window:", "if max_top_k <= 2 * window:")),
    "top_p_before_top_k": _swap_top_k_top_p,
    "top_p_mask_strict_less": _mutations("_apply_top_k_top_p_subset", ("probs_sum <= 1 - p", "probs_sum < 1 - p")),
    # v1: the tie group only inside the window (no vocabulary-wide completion).
    "v1_no_tie_completion": _mutations(
        "_apply_top_k_top_p_subset",
        ("logits_sort.masked_fill_(logits_sort <= kth,", "logits_sort.masked_fill_(logits_sort < kth,"),
        ("torch.cat((kth + num_tied.log(), logits_sort)", "torch.cat((torch.full_like(kth, -float('inf')), logits_sort)"),
        ("logits_sort[:, :1] = kth + num_kept.log()", "logits_sort[:, :1] = -float('inf')"),
    ),
    "tie_counted_twice": _mutations(
        "_apply_top_k_top_p_subset", ("logits_sort.masked_fill_(logits_sort <= kth,", "logits_sort.masked_fill_(logits_sort < kth,")
    ),
    "aggregate_ignores_count": _mutations(
        "_apply_top_k_top_p_subset", ("torch.cat((kth + num_tied.log(), logits_sort)", "torch.cat((kth, logits_sort)")
    ),
    "top_p_never_cuts_inside_tie": _mutations(
        "_apply_top_k_top_p_subset",
        ("dropped = torch.where(tied_prob > 0, dropped, num_tied)", "dropped = torch.zeros_like(num_tied)"),
    ),
    "no_keep_one_of_tie": _mutations("_apply_top_k_top_p_subset", (".clamp_min_(min_kept)", ".clamp_min_(0)")),
    "no_keep_at_least_one": _mutations("_apply_top_k_top_p_subset", ("top_p_mask[:, -1].fill_(False)", "pass")),
    "descending_cumsum": _mutations(
        "_apply_top_k_top_p_subset",
        ("probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)", "probs_sum = torch.cumsum(probs_sort.flip(-1), dim=-1).flip(-1)"),
    ),
    "top_k_off_by_one": _mutations(
        "_apply_top_k_top_p_subset",
        ("window - k.to(torch.int32).clamp(1, window)", "window - 1 - k.to(torch.int32).clamp(1, window - 1)"),
    ),
    "wrong_rows_k": _mutations("_apply_top_k_top_p_subset", ("window - k.to(torch.int32)", "window - k.flip(0).to(torch.int32)")),
    "greedy_rows_unclamped": _mutations("_apply_top_k_top_p_subset", ("k.to(torch.int32).clamp(1, window)", "k.to(torch.int32)")),
    "race_returns_window_index": _mutations("_topk_subset_race", ("return ids.gather(1, chosen).view(-1)", "return chosen.view(-1)")),
    "tie_member_always_first": _mutations(
        "_topk_subset_noise",
        ("_topk_subset_tie_member(tied, tie_counts, member)", "_topk_subset_tie_member(tied, tie_counts, 0 * member)"),
    ),
    "tie_member_chunk_start": _mutations(
        "_topk_subset_tie_member", ("return (chunk * size + place).view(-1)", "return (chunk * size).view(-1)")
    ),
    "tie_count_drops_tail": _mutations(
        "_topk_subset_tie_counts", ("num_tied = num_tied + tied[:, full:]", "num_tied = num_tied + 0 * tied[:, full:]")
    ),
    "tie_count_chunk_by_prefix": _mutations(
        "_topk_subset_tie_counts",
        ("tied[:, :full].view(batch, -1, size).sum(dim=-1)", "tied[:, :full].view(batch, -1, size)[..., : size // 2].sum(dim=-1)"),
    ),
    "tie_chunk_search_inclusive": _mutations(
        "_topk_subset_tie_member", ("(tie_counts < target)", "(tie_counts <= target)")
    ),
    "tie_place_search_inclusive": _mutations(
        "_topk_subset_tie_member", ("(inside < target - before)", "(inside <= target - before)")
    ),
    "seeded_forcing_stock": _mutations(
        "forward_native",
        ("window = self._topk_subset_window(logits, k)", "window = None if generators else self._topk_subset_window(logits, k)"),
    ),
    "seeded_noise_not_from_generator": _mutations(
        "_topk_subset_noise", ("row_q.exponential_(generator=generator)", "row_q.exponential_()")
    ),
    "seeded_noise_window_shaped": _mutations(
        "_topk_subset_noise", ("q[i, 1:] = row_q.index_select(0, window_ids[i])", "q[i, 1:] = row_q[: window_ids.shape[1]]")
    ),
    "seeded_tie_not_rescaled": _mutations("_topk_subset_noise", ("q[i, 0] = tied_q * num_tied[i, 0]", "q[i, 0] = tied_q")),
    "hint_raw_max": _mutations(
        "_topk_subset_hint",
        ("        if hint == window:\n", "        if hint <= window:\n"),
        ("return window if window < vocab_size else None", "return hint if hint < vocab_size else None"),
    ),
    "max_top_k_from_device": _mutations("_topk_subset_hint", ("getattr(k, _TOPK_SUBSET_HINT_ATTR, None)", "int(k.max())")),
    "ignores_fp64_gumbel": _mutations("_topk_subset_window", ("or self.use_fp64_gumbel\n", "\n")),
    "ignores_processed_logprobs_mode": _mutations(
        "_topk_subset_window", ("or self.logprobs_mode in", "or 'no_such_mode' in")
    ),
    "ignores_switch": _mutations(
        "_topk_subset_enabled", ('os.environ.get(_TOPK_SUBSET_ENV, "1") != "0"', "True")
    ),
}


def test_unmutated_sampler_passes_all_checks():
    assert run_checks(base()) == []


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_rejected(name):
    source = patched_source()
    mutant_source = MUTANTS[name](source)
    assert mutant_source != source, "the mutation changed nothing"
    mutant = load_sampler(mutant_source, f"gaudi_fixes_topk_mutant_{name}", SAMPLER_PATH)
    failures = run_checks(mutant, stop_early=True)
    print(f"\n{name}: rejected by: {failures[:1]}")
    assert failures, f"mutant {name} passed every check"
