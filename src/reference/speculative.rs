//! Speculative steps: vLLM's random rejection sampling (`RejectionSampler`, as the
//! spec-decode-sampled-rows fix runs it on HPU) written on tch, and the proof that it keeps the
//! target's sampling distribution: the first emitted token, and the first two tokens of a
//! step, follow the same law as non-speculative sampling from the target.
//!
//! The target is a toy language model over [`VOCAB`] tokens: a bigram table of logits (row =
//! the previous token). Its sampling distribution is vLLM's: logits / temperature, then
//! `apply_top_k_top_p` ([`crate::reference::stock`]), then softmax; a greedy row (temperature
//! below 1e-5; HPU stores a greedy row's temperature as −1.0) is the argmax. One step of `n`
//! drafts (ngram: fixed tokens, draft probability one-hot; draft model: each draft drawn from
//! a draft bigram table) reads the target at the context and after each draft, then:
//!
//! - accepts draft j while `q(d_j) > 0` and `p(d_j) / q(d_j) >= u_j` (u float64 in [0, 1));
//! - at the first rejection draws the recovered token from max(p − q, 0) renormalised (ngram:
//!   p with the draft zeroed), by vLLM's race `argmax(residual / Exp(1))`;
//! - when every draft is accepted draws the bonus token from the target after the last draft;
//! - a greedy row accepts a draft equal to the target's argmax and emits the argmax.
//!
//! When the step emits one token, the second comes from the next step, sampled from the target
//! without drafts. The two distributions are computed exactly (the first token: the target row
//! at the context; the pair (a, b): p(a | context) · p(b | a)) and the draws are held to them by
//! the suite's statistical gate ([`crate::reference::statistical`]: chi-square, bins of ≥ 10
//! expected, Bonferroni over these tests, calibrated on draws from the exact distributions and
//! required to catch a total variation of 0.03 in 95 % of runs). Each [`SpecFlaw`] must fail it.

use std::collections::BTreeMap;

use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::reference::cases::Rng;
use crate::reference::statistical::{self, BiasDirection, Calibration, CaseTest, Expected, Power, RowTest};
use crate::reference::stats::bonferroni;
use crate::reference::stock::apply_top_k_top_p;
use crate::reference::Release;

/// The toy target's vocabulary: small, so that the pair test has few bins (VOCAB²) and the
/// gate its power with few draws.
pub const VOCAB: i64 = 8;
/// Draws per test, as a multiple of `--draws` (the speculative tests need more draws per test
/// than a row of the sampler cases to catch a total variation of 0.03: they are few).
pub const DRAWS_PER_DRAW: usize = 30;
/// The temperature HPU stores for a greedy row.
pub const HPU_GREEDY_TEMPERATURE: f32 = -1.0;
/// Below this a temperature is greedy (vllm_gaudi's rule; the fix maps such rows to vLLM's
/// `GREEDY_TEMPERATURE` 0 before the rejection sampler sees them).
const GREEDY_BELOW: f32 = 1e-5;

/// A deliberately broken rejection sampler; each must fail the speculative tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpecFlaw {
    /// Every draft is accepted.
    AcceptAlways,
    /// The recovered token by inverse CDF over max(p − q, 0) as it is (u in [0, 1)): the mass
    /// the residual lacks falls to the last token.
    ResidualNotRenormalised,
    /// The bonus token drawn from the last draft position's draft distribution (ngram: the
    /// draft token again) instead of the target after it.
    BonusFromDraft,
    /// The target's logits divided by the temperature twice.
    TemperatureTwice,
    /// A greedy row's HPU temperature −1.0 taken as a temperature: the argmax of logits / −1.
    GreedyDividedByMinusOne,
}

impl SpecFlaw {
    /// Every speculative mutant the suite must reject.
    pub const ALL: [SpecFlaw; 5] = [
        SpecFlaw::AcceptAlways,
        SpecFlaw::ResidualNotRenormalised,
        SpecFlaw::BonusFromDraft,
        SpecFlaw::TemperatureTwice,
        SpecFlaw::GreedyDividedByMinusOne,
    ];

    /// Short name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            SpecFlaw::AcceptAlways => "spec-accept-always",
            SpecFlaw::ResidualNotRenormalised => "spec-residual-not-renormalised",
            SpecFlaw::BonusFromDraft => "spec-bonus-from-draft",
            SpecFlaw::TemperatureTwice => "spec-temperature-twice",
            SpecFlaw::GreedyDividedByMinusOne => "spec-greedy-divided-by-minus-1",
        }
    }

    /// What the mutant gets wrong, in words.
    pub fn description(self) -> &'static str {
        match self {
            SpecFlaw::AcceptAlways => "accepts every draft",
            SpecFlaw::ResidualNotRenormalised => "residual max(p-q,0) not renormalised",
            SpecFlaw::BonusFromDraft => "bonus token from the draft, not the target",
            SpecFlaw::TemperatureTwice => "temperature applied twice",
            SpecFlaw::GreedyDividedByMinusOne => "greedy row (HPU temperature -1) divided by -1",
        }
    }
}

/// Where a step's drafts come from.
#[derive(Debug)]
pub enum Draft {
    /// Fixed draft tokens with no draft probabilities (vLLM: q one-hot).
    Ngram(Vec<i64>),
    /// `n` drafts, each drawn from the draft model's bigram table `[V, V]` (probabilities).
    Model {
        /// Drafts per step.
        n: usize,
        /// q(· | previous token).
        table: Tensor,
    },
}

impl Draft {
    fn len(&self) -> usize {
        match self {
            Draft::Ngram(tokens) => tokens.len(),
            Draft::Model { n, .. } => *n,
        }
    }
}

/// One speculative request.
#[derive(Debug)]
pub struct SpecCase {
    /// Name.
    pub name: &'static str,
    /// `[V, V]` float32 target logits (row: the previous token).
    pub logits: Tensor,
    /// The last token of the context.
    pub context: i64,
    /// The request's temperature as HPU stores it (−1.0 greedy).
    pub temperature: f32,
    /// top_k (None: off).
    pub top_k: Option<i64>,
    /// top_p (None: off).
    pub top_p: Option<f32>,
    /// The drafts.
    pub draft: Draft,
}

impl SpecCase {
    fn greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
    }

    /// `[V, V]` float32: the target's sampling distribution after each token (greedy: one-hot
    /// at the argmax), as the sampler with `flaw` computes it.
    pub fn target(&self, release: Release, flaw: Option<SpecFlaw>) -> Tensor {
        if self.greedy() {
            let logits = match flaw {
                Some(SpecFlaw::GreedyDividedByMinusOne) => &self.logits / f64::from(self.temperature),
                _ => self.logits.shallow_clone(),
            };
            return logits.argmax(-1, false).one_hot(VOCAB).to_kind(Kind::Float);
        }
        let t = f64::from(self.temperature);
        let mut logits = &self.logits / t;
        if flaw == Some(SpecFlaw::TemperatureTwice) {
            logits /= t;
        }
        let k = self.top_k.map(|k| Tensor::full([VOCAB], k, (Kind::Int64, Device::Cpu)));
        let p = self.top_p.map(|p| Tensor::full([VOCAB], f64::from(p), (Kind::Float, Device::Cpu)));
        apply_top_k_top_p(&logits, k.as_ref(), p.as_ref(), release).softmax(-1, Kind::Float)
    }
}

/// Column `tokens` `[M]` of each row of `rows` `[M, V]`, as `[M]`.
fn at(rows: &Tensor, tokens: &Tensor) -> Tensor {
    rows.gather(1, &tokens.unsqueeze(1), false).squeeze_dim(1)
}

/// One draw per row of `probs` `[M, V]` by vLLM's race.
fn race_rows(probs: &Tensor) -> Tensor {
    probs.divide(&crate::reference::race::exponential_like(probs)).argmax(-1, false)
}

/// The first two tokens `[M, 2]` emitted from the case's context by `m` independent requests:
/// one speculative step through the rejection sampler (with `flaw`), the second token from a
/// following non-speculative step when the speculative one emitted only one.
pub fn first_two(case: &SpecCase, release: Release, m: i64, flaw: Option<SpecFlaw>) -> Tensor {
    let target = case.target(release, flaw);
    let opts = (Kind::Int64, Device::Cpu);
    let n = case.draft.len();
    let context = Tensor::full([m], case.context, opts);
    // Drafts and their draft distributions (None: ngram, q one-hot).
    let mut drafts: Vec<Tensor> = Vec::with_capacity(n);
    let mut q_rows: Vec<Option<Tensor>> = Vec::with_capacity(n);
    for j in 0..n {
        let prev = if j == 0 { &context } else { &drafts[j - 1] };
        match &case.draft {
            Draft::Ngram(tokens) => {
                drafts.push(Tensor::full([m], tokens[j], opts));
                q_rows.push(None);
            }
            Draft::Model { table, .. } => {
                let q = table.index_select(0, prev);
                drafts.push(q.multinomial(1, true).squeeze_dim(1));
                q_rows.push(Some(q));
            }
        }
    }
    // The target read at the context and after each draft: n + 1 rows per request.
    let p_rows: Vec<Tensor> =
        std::iter::once(&context).chain(drafts.iter()).map(|prev| target.index_select(0, prev)).collect();

    let mut accepted = Vec::with_capacity(n);
    let mut recovered = Vec::with_capacity(n);
    for j in 0..n {
        let (p, d) = (&p_rows[j], &drafts[j]);
        if case.greedy() {
            let argmax = p.argmax(-1, false);
            accepted.push(d.eq_tensor(&argmax));
            recovered.push(argmax);
            continue;
        }
        let p_d = at(p, d).to_kind(Kind::Double);
        let q_d = q_rows[j].as_ref().map_or_else(|| p_d.ones_like(), |q| at(q, d).to_kind(Kind::Double));
        let u = Tensor::rand([m], (Kind::Double, Device::Cpu));
        let accept = q_d.gt(0.0).logical_and(&p_d.divide(&q_d).ge_tensor(&u));
        accepted.push(match flaw {
            Some(SpecFlaw::AcceptAlways) => accept.ones_like(),
            _ => accept,
        });
        let residual = match &q_rows[j] {
            Some(q) => (p - q).clamp_min(0.0),
            None => p.scatter(1, &d.unsqueeze(1), &p.zeros_like()),
        };
        recovered.push(match flaw {
            Some(SpecFlaw::ResidualNotRenormalised) => {
                let u = Tensor::rand([m, 1], (Kind::Float, Device::Cpu));
                let below = residual.cumsum(-1, Kind::Float).le_tensor(&u);
                below.sum_dim_intlist(1, false, Kind::Int64).clamp_max(VOCAB - 1)
            }
            _ => race_rows(&residual),
        });
    }
    let last = &drafts[n - 1];
    let bonus = match (flaw, &q_rows[n - 1]) {
        (Some(SpecFlaw::BonusFromDraft), Some(q)) => race_rows(q),
        (Some(SpecFlaw::BonusFromDraft), None) => last.shallow_clone(),
        _ if case.greedy() => p_rows[n].argmax(-1, false),
        _ => race_rows(&p_rows[n]),
    };

    let first = drafts[0].where_self(&accepted[0], &recovered[0]);
    let second_in_step = if n == 1 { bonus } else { drafts[1].where_self(&accepted[1], &recovered[1]) };
    let next_rows = target.index_select(0, &first);
    let next = if case.greedy() { next_rows.argmax(-1, false) } else { race_rows(&next_rows) };
    let second = second_in_step.where_self(&accepted[0], &next);
    Tensor::stack(&[first, second], 1)
}

/// What a test looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Emitted {
    /// The first emitted token.
    FirstToken,
    /// The first two emitted tokens, jointly.
    TwoTokens,
}

/// `[V · V]` float32: what each request asks for after each token, written apart from the
/// sampler's [`SpecCase::target`] (whose mapping of HPU's greedy −1.0 is under test): a
/// request with HPU's greedy temperature takes the argmax of the raw logits; any other,
/// softmax(`apply_top_k_top_p`(logits / T)).
fn sampling_law(case: &SpecCase, release: Release) -> Vec<f32> {
    let v = VOCAB as usize;
    if case.temperature == HPU_GREEDY_TEMPERATURE {
        let logits = Vec::<f32>::try_from(&case.logits.flatten(0, -1)).expect("float32 logits");
        let mut law = vec![0f32; v * v];
        for (prev, row) in logits.chunks(v).enumerate() {
            let top = (0..v).fold(0, |best, t| if row[t] > row[best] { t } else { best });
            law[prev * v + top] = 1.0;
        }
        return law;
    }
    let k = case.top_k.map(|k| Tensor::full([VOCAB], k, (Kind::Int64, Device::Cpu)));
    let p = case.top_p.map(|p| Tensor::full([VOCAB], f64::from(p), (Kind::Float, Device::Cpu)));
    let scaled = &case.logits / f64::from(case.temperature);
    let table = apply_top_k_top_p(&scaled, k.as_ref(), p.as_ref(), release).softmax(-1, Kind::Float);
    Vec::<f32>::try_from(&table.flatten(0, -1)).expect("float32 law")
}

/// The exact law of non-speculative sampling from the target ([`sampling_law`]), as bins: token
/// ids, or `a · V + b` for a pair.
fn exact_law(target: &[f32], context: i64, what: Emitted) -> (Vec<i32>, Vec<f64>) {
    let v = VOCAB as usize;
    let row = |prev: usize| &target[prev * v..(prev + 1) * v];
    let first = row(context as usize);
    match what {
        Emitted::FirstToken => ((0..v as i32).collect(), first.iter().map(|&p| f64::from(p)).collect()),
        Emitted::TwoTokens => {
            let mut ids = Vec::with_capacity(v * v);
            let mut probs = Vec::with_capacity(v * v);
            for (a, &pa) in first.iter().enumerate() {
                for (b, &pb) in row(a).iter().enumerate() {
                    ids.push((a * v + b) as i32);
                    probs.push(f64::from(pa) * f64::from(pb));
                }
            }
            (ids, probs)
        }
    }
}

/// One test of one sampler.
#[derive(Debug, Clone, Serialize)]
pub struct SpecTest {
    /// Case name.
    pub case: &'static str,
    /// What was tested.
    pub emitted: Emitted,
    /// Requests drawn.
    pub draws: usize,
    /// Total variation between the draws' frequencies and the exact law (sampling noise
    /// included: not 0 for a right sampler).
    pub observed_tvd: f64,
    /// The gate's test.
    pub test: CaseTest,
    /// Whether it fails at the speculative family's threshold.
    pub failed: bool,
}

/// A speculative mutant and the tests that caught it.
#[derive(Debug, Clone, Serialize)]
pub struct SpecMutantResult {
    /// Name.
    pub name: &'static str,
    /// The mistake.
    pub description: &'static str,
    /// Whether any test rejected it.
    pub caught: bool,
    /// The tests that rejected it (`case: first_token|two_tokens`).
    pub caught_by: Vec<String>,
}

/// The speculative part of `equiv`.
#[derive(Debug, Clone, Serialize)]
pub struct SpecReport {
    /// The toy target's vocabulary.
    pub vocab: i64,
    /// Requests drawn per test.
    pub draws_per_test: usize,
    /// Tests (the Bonferroni divisor).
    pub tests: usize,
    /// Per-test p-value threshold.
    pub threshold: f64,
    /// The reference rejection sampler's tests.
    pub reference: Vec<SpecTest>,
    /// Whether every one passed.
    pub passed: bool,
    /// The gate on draws from the exact laws.
    pub calibration: Calibration,
    /// The gate against laws biased by total variation 0.01, 0.03, 0.1 (every test at once,
    /// as the sampler cases' power table).
    pub power: Power,
    /// Each test alone against its law biased by 0.03 (both directions; tests whose law is one
    /// token, the greedy ones, cannot be biased and are left out): the weakest test's power.
    /// A mistake that shows in one test only must still be caught.
    pub weakest_test_power: f64,
    /// That test (`case: first token|two tokens`).
    pub weakest_test: String,
    /// Every speculative mutant.
    pub mutants: Vec<SpecMutantResult>,
    /// Seconds for the whole speculative part.
    pub seconds: f64,
}

impl SpecReport {
    /// Whether the speculative gate can be trusted: calibrated, powerful, every mutant caught.
    pub fn sound(&self) -> bool {
        self.calibration.ok
            && self.power.ok
            && self.weakest_test_power >= statistical::REQUIRED_POWER
            && self.mutants.iter().all(|m| m.caught)
    }
}

/// The speculative requests: a temperature-1.0 ngram draft, top_k/top_p, a draft outside
/// top_k, two drafts, draft models, and a greedy row with HPU's temperature −1.0.
pub fn cases(seed: u64, release: Release) -> Vec<SpecCase> {
    let mut rng = Rng::new(seed ^ 0x5BEC_0000_0000);
    let mut table = |scale: f64| {
        let host: Vec<f32> = (0..VOCAB * VOCAB).map(|_| (rng.normal() * scale) as f32).collect();
        Tensor::from_slice(&host).view([VOCAB, VOCAB])
    };
    // Tokens of the target's row after `prev`, most probable first.
    let ranked = |case: &SpecCase, prev: i64| -> Vec<i64> {
        let row = case.target(release, None).get(prev);
        Vec::<i64>::try_from(&row.argsort(-1, true)).expect("int64 ranks")
    };
    let mut out = Vec::new();
    let base = |name, logits, temperature, top_k, top_p| SpecCase {
        name,
        logits,
        context: 3,
        temperature,
        top_k,
        top_p,
        draft: Draft::Ngram(Vec::new()),
    };

    let mut c = base("ngram-t1.0", table(1.5), 1.0, None, None);
    c.draft = Draft::Ngram(vec![ranked(&c, c.context)[1]]);
    out.push(c);

    let mut c = base("ngram-t0.7-top-k4-top-p0.9", table(1.5), 0.7, Some(4), Some(0.9));
    c.draft = Draft::Ngram(vec![ranked(&c, c.context)[0]]);
    out.push(c);

    let mut c = base("ngram-draft-outside-top-k3", table(1.5), 0.7, Some(3), None);
    c.draft = Draft::Ngram(vec![ranked(&c, c.context)[VOCAB as usize - 1]]);
    out.push(c);

    let mut c = base("ngram-two-drafts-t1.0", table(1.5), 1.0, None, None);
    let d0 = ranked(&c, c.context)[0];
    c.draft = Draft::Ngram(vec![d0, ranked(&c, d0)[1]]);
    out.push(c);

    let logits = table(1.5);
    let q = (&logits * 0.5 + table(1.0)).softmax(-1, Kind::Float);
    let mut c = base("draft-model-t1.0", logits, 1.0, None, None);
    c.draft = Draft::Model { n: 1, table: q };
    out.push(c);

    let logits = table(1.5);
    let q = (&logits + table(1.0)).softmax(-1, Kind::Float);
    let mut c = base("draft-model-two-drafts-t0.7-top-p0.95", logits, 0.7, None, Some(0.95));
    c.draft = Draft::Model { n: 2, table: q };
    out.push(c);

    let mut c = base("greedy-hpu-temperature-minus-1", table(1.5), HPU_GREEDY_TEMPERATURE, None, None);
    c.draft = Draft::Ngram(vec![ranked(&c, c.context)[0]]);
    out.push(c);
    out
}

/// The draws of one sampler on one case, binned as `what` says.
fn drawn_bins(
    case: &SpecCase,
    release: Release,
    draws: usize,
    flaw: Option<SpecFlaw>,
    what: Emitted,
) -> Vec<(i32, u64)> {
    let tokens = Vec::<i64>::try_from(&first_two(case, release, draws as i64, flaw).flatten(0, -1)).expect("int64");
    let mut counts = BTreeMap::<i32, u64>::new();
    for pair in tokens.chunks(2) {
        let bin = match what {
            Emitted::FirstToken => pair[0],
            Emitted::TwoTokens => pair[0] * VOCAB + pair[1],
        };
        *counts.entry(bin as i32).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// The exact laws of every test, in test order: (case index, what, ids, probs).
type Law = (usize, Emitted, Vec<i32>, Vec<f64>);

fn laws(cases: &[SpecCase], release: Release) -> Vec<Law> {
    let mut out = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let target = sampling_law(case, release);
        for what in [Emitted::FirstToken, Emitted::TwoTokens] {
            let (ids, probs) = exact_law(&target, case.context, what);
            out.push((i, what, ids, probs));
        }
    }
    out
}

/// Run one sampler (`flaw` None: the reference) through every test.
fn run_sampler(
    cases: &[SpecCase],
    laws: &[Law],
    release: Release,
    draws: usize,
    threshold: f64,
    seed: u64,
    flaw: Option<SpecFlaw>,
) -> Vec<SpecTest> {
    laws.iter()
        .enumerate()
        .map(|(t, (i, what, ids, probs))| {
            let case = &cases[*i];
            tch::manual_seed((seed ^ ((t as u64) << 8)) as i64);
            let bins = drawn_bins(case, release, draws, flaw, *what);
            let probs32: Vec<f32> = probs.iter().map(|&p| p as f32).collect();
            let expected = Expected::new(ids, &probs32);
            let row: RowTest = statistical::test_row(&expected, &bins, draws);
            let test = CaseTest::from_rows(&[row]);
            let mut freq = vec![0f64; probs.len()];
            for &(bin, n) in &bins {
                freq[bin as usize] = n as f64 / draws as f64;
            }
            let observed_tvd = 0.5 * freq.iter().zip(probs).map(|(f, p)| (f - p).abs()).sum::<f64>();
            SpecTest { case: case.name, emitted: *what, draws, observed_tvd, failed: test.fails(threshold), test }
        })
        .collect()
}

/// The speculative settings `equiv` hands in.
#[derive(Debug, Clone, Copy)]
pub struct SpecConfig {
    /// Stock release whose top-k/top-p the target uses.
    pub release: Release,
    /// `--draws`; each test draws [`DRAWS_PER_DRAW`] times as many requests.
    pub draws: usize,
    /// Family-wise level.
    pub alpha: f64,
    /// Calibration runs.
    pub calibration_runs: usize,
    /// Runs per power-table row.
    pub power_runs: usize,
    /// Base seed.
    pub seed: u64,
}

/// Run the reference and every mutant through the speculative tests, and calibrate the gate.
pub fn run(config: &SpecConfig, mut progress: impl FnMut(usize, usize)) -> SpecReport {
    let started = std::time::Instant::now();
    let cases = cases(config.seed, config.release);
    let laws = laws(&cases, config.release);
    let draws = config.draws * DRAWS_PER_DRAW;
    let threshold = bonferroni(config.alpha, laws.len());
    let total = 1 + SpecFlaw::ALL.len();
    progress(0, total);
    let seed = config.seed ^ 0x5BEC_5EED;
    let reference = run_sampler(&cases, &laws, config.release, draws, threshold, seed, None);
    let mutants = SpecFlaw::ALL
        .iter()
        .enumerate()
        .map(|(m, &flaw)| {
            progress(m + 1, total);
            let tests =
                run_sampler(&cases, &laws, config.release, draws, threshold, seed ^ ((m as u64 + 1) << 40), Some(flaw));
            let caught_by: Vec<String> =
                tests.iter().filter(|t| t.failed).map(|t| format!("{}: {}", t.case, emitted_name(t.emitted))).collect();
            SpecMutantResult {
                name: flaw.name(),
                description: flaw.description(),
                caught: !caught_by.is_empty(),
                caught_by,
            }
        })
        .collect();
    let expected: Vec<Vec<Expected>> = laws
        .iter()
        .map(|(_, _, ids, probs)| {
            let probs32: Vec<f32> = probs.iter().map(|&p| p as f32).collect();
            vec![Expected::new(ids, &probs32)]
        })
        .collect();
    let calibration =
        statistical::calibrate(&expected, draws, config.calibration_runs, config.alpha, config.seed ^ 0x5BEC, |_| {});
    let power = statistical::power(&expected, draws, config.power_runs, config.alpha, config.seed ^ 0x5BEC, |_, _| {});
    // One test alone, at the family's per-test threshold (Bonferroni over one test at it).
    let (mut weakest_test_power, mut weakest_test) = (1.0, String::new());
    for (t, ((i, what, ..), law)) in laws.iter().zip(&expected).enumerate() {
        if law[0].biased(statistical::REQUIRED_TVD, BiasDirection::FromTop).1 == 0.0 {
            continue;
        }
        let alone = [BiasDirection::FromTop, BiasDirection::ToTop]
            .into_iter()
            .map(|direction| {
                let seed = config.seed ^ 0x5BEC ^ ((t as u64) << 24) ^ ((direction as u64) << 32);
                let law = std::slice::from_ref(law);
                statistical::power_at(
                    law,
                    draws,
                    config.power_runs,
                    threshold,
                    seed,
                    statistical::REQUIRED_TVD,
                    direction,
                )
            })
            .fold(1.0, f64::min);
        if alone < weakest_test_power || weakest_test.is_empty() {
            weakest_test_power = alone;
            weakest_test = format!("{}: {}", cases[*i].name, emitted_name(*what));
        }
    }
    SpecReport {
        vocab: VOCAB,
        draws_per_test: draws,
        tests: laws.len(),
        threshold,
        passed: reference.iter().all(|t| !t.failed),
        reference,
        calibration,
        power,
        weakest_test_power,
        weakest_test,
        mutants,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// `first_token` / `two_tokens`.
pub fn emitted_name(emitted: Emitted) -> &'static str {
    match emitted {
        Emitted::FirstToken => "first token",
        Emitted::TwoTokens => "two tokens",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn law_of(case: &SpecCase, what: Emitted) -> Vec<f64> {
        exact_law(&sampling_law(case, Release::V0_30_0), case.context, what).1
    }

    #[test]
    fn every_speculative_mutant_has_a_distinct_name() {
        let mut names: Vec<&str> = SpecFlaw::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SpecFlaw::ALL.len());
    }

    #[test]
    fn the_exact_laws_sum_to_one_and_the_greedy_one_is_the_argmax_chain() {
        let cases = cases(1, Release::V0_30_0);
        for case in &cases {
            for what in [Emitted::FirstToken, Emitted::TwoTokens] {
                let total: f64 = law_of(case, what).iter().sum();
                assert!((total - 1.0).abs() < 1e-5, "{} {what:?}: {total}", case.name);
            }
        }
        let greedy = cases.iter().find(|c| c.temperature == HPU_GREEDY_TEMPERATURE).unwrap();
        let a = greedy.logits.get(greedy.context).argmax(-1, false).int64_value(&[]);
        let b = greedy.logits.get(a).argmax(-1, false).int64_value(&[]);
        let law = law_of(greedy, Emitted::TwoTokens);
        assert_eq!(law[(a * VOCAB + b) as usize], 1.0);
    }

    #[test]
    fn the_law_agrees_with_the_samplers_target() {
        for case in &cases(5, Release::V0_30_0) {
            let target = Vec::<f32>::try_from(&case.target(Release::V0_30_0, None).flatten(0, -1)).unwrap();
            assert_eq!(sampling_law(case, Release::V0_30_0), target, "{}", case.name);
        }
    }

    #[test]
    fn a_greedy_step_emits_the_argmax_chain_and_the_minus_1_mutant_the_argmin() {
        let cases = cases(2, Release::V0_30_0);
        let greedy = cases.iter().find(|c| c.temperature == HPU_GREEDY_TEMPERATURE).unwrap();
        let argmax = greedy.logits.get(greedy.context).argmax(-1, false).int64_value(&[]);
        let argmin = greedy.logits.get(greedy.context).argmin(-1, false).int64_value(&[]);
        let right = first_two(greedy, Release::V0_30_0, 50, None);
        assert!(right.select(1, 0).eq(argmax).all().int64_value(&[]) == 1);
        let wrong = first_two(greedy, Release::V0_30_0, 50, Some(SpecFlaw::GreedyDividedByMinusOne));
        assert!(wrong.select(1, 0).eq(argmin).all().int64_value(&[]) == 1);
    }

    #[test]
    fn a_draft_outside_top_k_is_never_emitted_first() {
        let cases = cases(3, Release::V0_30_0);
        let case = cases.iter().find(|c| c.name == "ngram-draft-outside-top-k3").unwrap();
        let Draft::Ngram(drafts) = &case.draft else { panic!("ngram case") };
        tch::manual_seed(4);
        let out = first_two(case, Release::V0_30_0, 2_000, None);
        assert_eq!(out.select(1, 0).eq(drafts[0]).sum(Kind::Int64).int64_value(&[]), 0);
        let always = first_two(case, Release::V0_30_0, 2_000, Some(SpecFlaw::AcceptAlways));
        assert_eq!(always.select(1, 0).eq(drafts[0]).sum(Kind::Int64).int64_value(&[]), 2_000);
    }
}
