//! `gaudi-fixes equiv`: the distribution-equivalence suite. Every case goes through stock and
//! through the subset fix, and is checked four ways (see DESIGN.md, "Equivalence suite"):
//!
//! 1. **exact** — same support per row, probabilities within `--ulp-bound` ulps; differences
//!    only where [`crate::reference::exact`] explains them (top-p boundary ties by class mass,
//!    top-p rounding), counted per reason; a difference at a k-th value tie group crossing the
//!    window is counted on its own and must be 0;
//! 2. **coupled** — with one Exp(1) noise tensor over the whole vocabulary, gathered at the
//!    subset's ids (the tie class: its members' minimum), the subset picks stock's token in
//!    every row, except where stock's top-p cut splits a tie class and one of the two tokens
//!    is a member of it, or the cut moved within rounding (both counted);
//! 3. **statistical** — independent draws through the sampler's own race and tie-class pick
//!    vs stock's probabilities ([`crate::reference::statistical`]), with the gate's
//!    false-alarm rate calibrated on stock against itself and its power measured against
//!    samplers biased by total variation 0.01, 0.03 and 0.1;
//! 4. **fallback** — batches the fix hands to stock come out bit-identical.
//!
//! Batches with rows without top_k and a top_p tensor take the pivot path
//! ([`crate::reference::pivot`]; `Route::Pivot`) and go through checks 1–3 the same way: its
//! rows' probabilities are its own weights normalised (identical supports compared after each
//! side is divided by its own total), coupled draws race `weights / noise` as the patch races
//! seeded rows, statistical draws go through its inverse-CDF pick.
//!
//! Then every mutant ([`crate::reference::mutants`]) goes through the same checks and must
//! fail at least one; a surviving mutant, or a gate that alarms on stock itself, means the
//! suite cannot be trusted, and `equiv` exits 1 whatever the fix did.
//!
//! Last, speculative steps ([`crate::reference::speculative`]): vLLM's rejection sampling must
//! emit tokens that follow the target's sampling distribution, under the same kind of
//! calibrated gate, and each of its mutants must fail it.

use std::time::Instant;

use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::cases::{self, Case, Plan};
use crate::reference::exact::{self, Explanation, RowOutcome};
use crate::reference::filtered::{Filtered, Route};
use crate::reference::masks::{support_rows, FlatRows, Values};
use crate::reference::mutants::Flaw;
use crate::reference::race::{exponential_like, Noise};
use crate::reference::sampler::Sampler;
use crate::reference::speculative::{self, SpecConfig, SpecReport};
use crate::reference::statistical::{self, Binned, Calibration, CaseTest, Expected, Power, RowTest};
use crate::reference::stats::bonferroni;
use crate::reference::subset;
use crate::reference::Release;

/// `equiv` settings (checked by `commands::equiv`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Stock release mirrored.
    pub release: Release,
    /// Generated grid.
    pub plan: Plan,
    /// Vocabulary of the fixtures.
    pub fixture_vocab: usize,
    /// Draws per row in the statistical check.
    pub draws: usize,
    /// Family-wise level of the statistical gate.
    pub alpha: f64,
    /// Calibration runs.
    pub calibration_runs: usize,
    /// Runs per power-table row.
    pub power_runs: usize,
    /// Largest allowed ulp difference on identical supports.
    pub ulp_bound: u64,
    /// Base seed.
    pub seed: u64,
}

/// The overall outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The fix passed every check, and the suite rejected every mutant and is calibrated.
    Equivalent,
    /// The fix failed a check (the suite itself is sound).
    NotEquivalent,
    /// A mutant survived, the gate alarms on stock itself, or it misses a total variation of
    /// 0.03 too often: no verdict can be trusted.
    SuiteBroken,
}

/// A row of a case, for reports.
#[derive(Debug, Clone, Serialize)]
pub struct RowRef {
    /// Case name.
    pub case: String,
    /// Row index.
    pub row: usize,
}

/// How many examples of a failure a report keeps.
const EXAMPLES: usize = 10;

/// The exact check's tally for one sampler.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExactTally {
    /// Rows compared.
    pub rows: usize,
    /// Rows with stock's support.
    pub identical: usize,
    /// Rows with a difference and an allowed reason.
    pub explained: usize,
    /// Rows with a difference and no reason.
    pub unexplained: usize,
    /// Rows with a difference at a k-th value tie group crossing the window (must be 0).
    pub kth_tie_crosses_window: usize,
    /// Largest ulp difference on an identical support.
    pub max_ulps: u64,
    /// Identical-support rows above the bound.
    pub over_ulp_bound: usize,
    /// The first unexplained rows.
    pub examples: Vec<RowRef>,
}

/// The coupled-noise check's tally.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoupledTally {
    /// Rows compared.
    pub rows: usize,
    /// Rows with an explained support difference (compared too; a mismatch there is excused
    /// only as counted below).
    pub skipped_explained: usize,
    /// Rows whose token differs from stock's.
    pub mismatches: usize,
    /// Excused mismatches: stock's top-p cut splits a tie class (which members it keeps
    /// follows its unstable sort; the class races with its members' minimum noise) and one of
    /// the two tokens is a member of that class (verified per row; otherwise a mismatch).
    pub tie_class_cut: usize,
    /// Of those, rows where both tokens are members of the class (equal logits).
    pub tie_class_cut_both_in_class: usize,
    /// Excused mismatches on rows whose top-p cut moved within rounding.
    pub rounding: usize,
    /// The first mismatching rows.
    pub examples: Vec<RowRef>,
}

/// The statistical check's tally.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatTally {
    /// Cases tested (those on the subset path).
    pub cases: usize,
    /// Rows drawn from.
    pub rows: usize,
    /// Smallest case p-value.
    pub min_p_value: Option<f64>,
    /// Cases below the Bonferroni threshold or with an outside or empty draw.
    pub failed_cases: Vec<String>,
    /// Draws of tokens stock gives probability 0.
    pub outside_support_draws: u64,
    /// Rows with nothing to draw from.
    pub empty_rows: usize,
    #[serde(skip)]
    tests: Vec<(String, CaseTest)>,
}

/// The fallback check's tally.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FallbackTally {
    /// Cases the fix hands to stock.
    pub cases: usize,
    /// Of those, bit-identical to stock.
    pub identical: usize,
}

/// One check's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct CheckVerdict {
    /// `exact`, `coupled`, `statistical` or `fallback`.
    pub check: &'static str,
    /// Whether it passed.
    pub passed: bool,
}

/// Every check's tally and verdict for one sampler.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SamplerResult {
    /// Verdicts, in check order.
    pub verdicts: Vec<CheckVerdict>,
    /// Exact.
    pub exact: ExactTally,
    /// Coupled noise.
    pub coupled: CoupledTally,
    /// Statistical.
    pub statistical: StatTally,
    /// Fallback.
    pub fallback: FallbackTally,
}

impl SamplerResult {
    /// Names of the failed checks.
    pub fn failed(&self) -> Vec<&'static str> {
        self.verdicts.iter().filter(|v| !v.passed).map(|v| v.check).collect()
    }

    fn finish(&mut self, threshold: f64) {
        let stat = &mut self.statistical;
        stat.failed_cases = stat.tests.iter().filter(|(_, t)| t.fails(threshold)).map(|(n, _)| n.clone()).collect();
        stat.min_p_value = stat.tests.iter().map(|(_, t)| t.p_value).reduce(f64::min);
        self.verdicts = vec![
            CheckVerdict {
                check: "exact",
                passed: self.exact.unexplained == 0
                    && self.exact.kth_tie_crosses_window == 0
                    && self.exact.over_ulp_bound == 0,
            },
            CheckVerdict { check: "coupled", passed: self.coupled.mismatches == 0 },
            CheckVerdict { check: "statistical", passed: stat.failed_cases.is_empty() },
            CheckVerdict { check: "fallback", passed: self.fallback.identical == self.fallback.cases },
        ];
    }
}

/// Ties seen by the fix, by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TieCounts {
    /// Rows where more tokens tie at the k-th value than k, all inside the window: kept by
    /// value, as stock does.
    pub kth_ties_kept_by_value: usize,
    /// Rows where the fix's support differs from stock's at a tie group at the k-th value
    /// crossing the window's edge: a failure of the exact check (v1's flaw), must be 0.
    pub kth_tie_crosses_window: usize,
    /// Rows whose tie group at the k-th value reaches past the window (stock keeps more
    /// tokens than K): the ones the v2 tie completion is for.
    pub kth_tie_spills_past_window: usize,
    /// Rows where stock's top-p cut splits an equal-logit class (statistics by class mass).
    pub top_p_cuts_tie_class: usize,
    /// Rows with another copy of a tied value kept at the top-p cut (explained difference).
    pub top_p_boundary_tie: usize,
    /// Rows where the top-p cut moved within float32 rounding (explained difference).
    pub top_p_rounding: usize,
}

/// The fix's result on one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// What it exercises.
    pub why: &'static str,
    /// Logit values.
    pub dtype: cases::Dtype,
    /// B.
    pub rows: i64,
    /// V.
    pub vocab: i64,
    /// The path the fix took.
    pub route: String,
    /// Rows with stock's support.
    pub identical: usize,
    /// Rows with an explained difference.
    pub explained: usize,
    /// Rows with an unexplained difference.
    pub unexplained: usize,
    /// Largest ulp difference on identical rows.
    pub max_ulps: u64,
    /// Coupled-noise mismatches.
    pub coupled_mismatches: usize,
    /// Rows with a difference at a k-th value tie crossing the window.
    pub kth_tie_crosses_window: usize,
    /// Statistical test (subset-path cases).
    pub statistical: Option<CaseTest>,
}

/// Statistical settings, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct StatSettings {
    /// Draws per row.
    pub draws_per_row: usize,
    /// Family-wise level.
    pub alpha: f64,
    /// Cases tested (the Bonferroni divisor).
    pub tests: usize,
    /// Per-case p-value threshold.
    pub threshold: f64,
    /// Minimum expected draws per merged bin.
    pub min_expected_per_bin: f64,
}

/// A mutant and the checks that caught it.
#[derive(Debug, Clone, Serialize)]
pub struct MutantResult {
    /// Name.
    pub name: &'static str,
    /// The mistake.
    pub description: &'static str,
    /// Checks that rejected it (empty: it survived).
    pub caught_by: Vec<&'static str>,
    /// Whether any check rejected it.
    pub caught: bool,
    /// Unexplained rows in the exact check.
    pub exact_unexplained_rows: usize,
    /// Rows with a difference at a k-th value tie crossing the window.
    pub kth_tie_crosses_window_rows: usize,
    /// Coupled-noise mismatches.
    pub coupled_mismatches: usize,
    /// Cases failing the statistical gate.
    pub statistical_failed_cases: usize,
    /// The first row where it differed from stock (exact check first, else coupled noise).
    pub first_difference: Option<RowRef>,
}

/// Everything `equiv` found.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// The outcome.
    pub verdict: Verdict,
    /// Stock release mirrored.
    pub release: &'static str,
    /// Base seed.
    pub seed: u64,
    /// libtorch intra-op threads.
    pub torch_threads: i32,
    /// Cases run.
    pub cases: usize,
    /// Rows checked per sampler.
    pub rows_checked: usize,
    /// Cases on the subset path.
    pub subset_cases: usize,
    /// Cases the fix hands to stock.
    pub fallback_cases: usize,
    /// The allowed ulp difference.
    pub ulp_bound: u64,
    /// The fix's checks.
    pub subset: SamplerResult,
    /// Ties the fix met.
    pub ties: TieCounts,
    /// Statistical settings.
    pub statistical: StatSettings,
    /// The gate on stock vs stock.
    pub calibration: Calibration,
    /// The gate against biased samplers.
    pub power: Power,
    /// Every mutant.
    pub mutants: Vec<MutantResult>,
    /// Speculative steps: the rejection sampler's tests, gate and mutants.
    pub speculative: SpecReport,
    /// The fix per case.
    pub case_results: Vec<CaseResult>,
    /// Seconds for the cases (all samplers).
    pub cases_seconds: f64,
    /// Seconds for the calibration.
    pub calibration_seconds: f64,
    /// Seconds for the power table.
    pub power_seconds: f64,
}

/// Where a run of the suite is, for a progress display (the caller decides what to show).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// Case `index` (0-based) of `total` is starting.
    Case {
        /// 0-based.
        index: usize,
        /// Cases in all.
        total: usize,
        /// Case name.
        name: &'a str,
    },
    /// Calibration run `run` (0-based) of `runs` is starting.
    Calibration {
        /// 0-based.
        run: usize,
        /// Runs in all.
        runs: usize,
    },
    /// Power run `run` (0-based) of `runs` (all rows of the table) is starting.
    Power {
        /// 0-based.
        run: usize,
        /// Runs in all.
        runs: usize,
    },
    /// Sampler `index` (0: the reference rejection sampler, then each mutant) of `total` of the
    /// speculative steps is starting.
    Speculative {
        /// 0-based.
        index: usize,
        /// Samplers in all.
        total: usize,
    },
}

/// Stock's side of one case, shared by every sampler checked on it.
struct StockSide {
    filtered: Filtered,
    rows: FlatRows,
    tokens: Vec<i64>,
    noise: Tensor,
    window: Option<i64>,
    expected: Vec<Expected>,
    /// The same, binned once for every sampler's statistical test.
    binned: Vec<Binned>,
    /// Per row: the equal-logit class stock's top-p cut splits (one statistical bin).
    cut_classes: Vec<Option<f32>>,
}

impl StockSide {
    fn new(case: &Case, release: Release, draws: usize) -> StockSide {
        let batch = &case.batch;
        tch::manual_seed(case.seed as i64);
        let noise = exponential_like(&Tensor::empty([batch.rows, batch.vocab], (Kind::Float, Device::Cpu)));
        let filtered = Sampler::Stock.filter(batch, release);
        let rows = support_rows(&filtered, Values::Probs);
        let tokens = tokens_of(&filtered, &noise);
        let window = match subset::route_batch(batch) {
            Route::Subset { window } | Route::Pivot { window } => Some(window),
            _ => None,
        };
        // Only subset-path cases are drawn from (a fallback is checked bit for bit instead).
        let cut_classes: Vec<Option<f32>> = match window {
            Some(_) => (0..batch.rows as usize).map(|r| exact::cut_class(batch, r, rows.row(r).0)).collect(),
            None => Vec::new(),
        };
        let expected: Vec<Expected> = cut_classes
            .iter()
            .enumerate()
            .map(|(r, &class)| {
                let (ids, probs) = rows.row(r);
                Expected::with_class(ids, probs, batch.row(r), class)
            })
            .collect();
        let binned = expected.iter().map(|e| Binned::new(e, draws)).collect();
        StockSide { filtered, rows, tokens, noise, window, expected, binned, cut_classes }
    }
}

fn tokens_of(filtered: &Filtered, noise: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(&filtered.draw(Noise::Coupled(noise)).tokens).expect("int64 tokens")
}

/// One sampler on one case.
struct CaseOutcome {
    outcomes: Vec<RowOutcome>,
    coupled_mismatches: Vec<usize>,
    /// Excused coupled mismatches: (tie class cut, of which equal logits, rounding).
    coupled_excused: (usize, usize, usize),
    fallback_identical: Option<bool>,
    statistical: Option<CaseTest>,
    drawn_rows: usize,
}

fn check_case(config: &Config, case: &Case, stock: &StockSide, sampler: Sampler, salt: u64) -> CaseOutcome {
    let batch = &case.batch;
    let filtered = sampler.filter(batch, config.release);
    let rows = support_rows(&filtered, Values::Probs);
    let pivot = matches!(filtered.route, Route::Pivot { .. });
    let outcomes: Vec<RowOutcome> = (0..batch.rows as usize)
        .map(|r| match exact::compare_row(batch, r, stock.window, stock.rows.row(r), rows.row(r), config.ulp_bound) {
            // The pivot path's probabilities: its weights over their own sum (see
            // `exact::normalized_ulps`); each probability's own rounding is what is bounded.
            RowOutcome::Identical { .. } if pivot => {
                RowOutcome::Identical { max_ulps: exact::normalized_ulps(stock.rows.row(r).1, rows.row(r).1) }
            }
            outcome => outcome,
        })
        .collect();
    let tokens = tokens_of(&filtered, &stock.noise);
    let mut coupled_mismatches = Vec::new();
    let mut coupled_excused = (0, 0, 0);
    for r in (0..outcomes.len()).filter(|&r| tokens[r] != stock.tokens[r]) {
        let logits = batch.row(r);
        let (ours, theirs) = (logits[tokens[r] as usize], logits[stock.tokens[r] as usize]);
        // Top-p cuts inside a tie class: which members stock keeps follows its unstable sort,
        // and the class races with its members' minimum noise; a difference there involves
        // a member of that class (verified), else it is a mismatch.
        let in_cut_class = stock.cut_classes.get(r).copied().flatten().filter(|&c| ours == c || theirs == c);
        match (in_cut_class, outcomes[r]) {
            (Some(_), _) => {
                coupled_excused.0 += 1;
                coupled_excused.1 += usize::from(ours == theirs);
            }
            (None, RowOutcome::Explained(Explanation::TopPRounding)) => coupled_excused.2 += 1,
            _ => coupled_mismatches.push(r),
        }
    }
    let fallback_identical = stock.window.is_none().then(|| filtered.logits.equal(&stock.filtered.logits));
    let (statistical, drawn_rows) = match stock.window {
        Some(_) => {
            tch::manual_seed((case.seed ^ salt.wrapping_mul(0x9E37_79B9)) as i64);
            let probs = Vec::<f32>::try_from(&filtered.probs().flatten(0, -1)).expect("float32 probs");
            let ids = Vec::<i64>::try_from(&filtered.token_ids().flatten(0, -1)).expect("int64 ids");
            let width = probs.len() / batch.rows as usize;
            let tests: Vec<RowTest> = drawable(&outcomes)
                .map(|r| {
                    let span = r * width..(r + 1) * width;
                    let drawn = filtered.draw_row_counts(&probs[span.clone()], &ids[span], r, config.draws);
                    let logits = batch.row(r);
                    let bins: Vec<(i32, u64)> = drawn
                        .into_iter()
                        .map(|(token, n)| match stock.cut_classes[r] {
                            Some(class) if logits[token as usize] == class => (statistical::CLASS_BIN, n),
                            _ => (token as i32, n),
                        })
                        .collect();
                    stock.binned[r].test(&bins)
                })
                .collect();
            (Some(CaseTest::from_rows(&tests)), tests.len())
        }
        None => (None, 0),
    };
    CaseOutcome { outcomes, coupled_mismatches, coupled_excused, fallback_identical, statistical, drawn_rows }
}

/// Rows the statistical check draws from: all but those whose top-p cut moved within
/// rounding (their support may legitimately differ token by token). A split tie class is
/// drawn from, binned as one class.
fn drawable(outcomes: &[RowOutcome]) -> impl Iterator<Item = usize> + '_ {
    (0..outcomes.len()).filter(|&r| !matches!(outcomes[r], RowOutcome::Explained(Explanation::TopPRounding)))
}

impl SamplerResult {
    fn absorb(&mut self, case: &Case, outcome: &CaseOutcome, ulp_bound: u64) {
        let name = &case.name;
        for (row, o) in outcome.outcomes.iter().enumerate() {
            self.exact.rows += 1;
            match o {
                RowOutcome::Identical { max_ulps } => {
                    self.exact.identical += 1;
                    self.exact.max_ulps = self.exact.max_ulps.max(*max_ulps);
                    self.exact.over_ulp_bound += usize::from(*max_ulps > ulp_bound);
                }
                RowOutcome::Explained(_) => {
                    self.exact.explained += 1;
                    self.coupled.skipped_explained += 1;
                }
                RowOutcome::KthTieCut => {
                    self.exact.kth_tie_crosses_window += 1;
                    if self.exact.examples.len() < EXAMPLES {
                        self.exact.examples.push(RowRef { case: name.clone(), row });
                    }
                }
                RowOutcome::Unexplained => {
                    self.exact.unexplained += 1;
                    if self.exact.examples.len() < EXAMPLES {
                        self.exact.examples.push(RowRef { case: name.clone(), row });
                    }
                }
            }
        }
        self.coupled.rows += outcome.outcomes.len();
        self.coupled.mismatches += outcome.coupled_mismatches.len();
        self.coupled.tie_class_cut += outcome.coupled_excused.0;
        self.coupled.tie_class_cut_both_in_class += outcome.coupled_excused.1;
        self.coupled.rounding += outcome.coupled_excused.2;
        for &row in outcome.coupled_mismatches.iter().take(EXAMPLES.saturating_sub(self.coupled.examples.len())) {
            self.coupled.examples.push(RowRef { case: name.clone(), row });
        }
        if let Some(identical) = outcome.fallback_identical {
            self.fallback.cases += 1;
            self.fallback.identical += usize::from(identical);
        }
        if let Some(test) = outcome.statistical {
            self.statistical.cases += 1;
            self.statistical.rows += outcome.drawn_rows;
            self.statistical.outside_support_draws += test.outside_support;
            self.statistical.empty_rows += test.empty_rows;
            self.statistical.tests.push((name.clone(), test));
        }
    }
}

/// Run every case through stock, the fix and the mutants, then calibrate the gate.
///
/// `progress` hears where the run is ([`Step`]); it may ignore it.
pub fn run_suite(config: &Config, torch_threads: i32, progress: &mut dyn FnMut(Step<'_>)) -> SuiteReport {
    let mut cases = cases::generated(&config.plan);
    cases.extend(cases::fixtures(config.seed, config.fixture_vocab));
    cases.extend(cases::model_tie_spills(config.seed, cases::MODEL_VOCAB, 8));
    cases.extend(cases::pivot_fixtures(config.seed, config.fixture_vocab));
    cases.extend(cases::model_nucleus(config.seed, cases::MODEL_VOCAB, 8));
    let mutants: Vec<Flaw> = Flaw::ALL.to_vec();

    let started = Instant::now();
    let mut subset = SamplerResult::default();
    let mut mutant_results: Vec<SamplerResult> = vec![SamplerResult::default(); mutants.len()];
    let mut ties = TieCounts::default();
    let mut case_results = Vec::with_capacity(cases.len());
    let mut calibration_cases: Vec<Vec<Expected>> = Vec::new();

    for (i, case) in cases.iter().enumerate() {
        progress(Step::Case { index: i, total: cases.len(), name: &case.name });
        let stock = StockSide::new(case, config.release, config.draws);
        let outcome = check_case(config, case, &stock, Sampler::Subset, 0);
        count_ties(&case.batch, &stock, &outcome.outcomes, &mut ties);
        if stock.window.is_some() {
            calibration_cases.push(drawable(&outcome.outcomes).map(|r| stock.expected[r].clone()).collect());
        }
        case_results.push(case_result(case, &outcome));
        subset.absorb(case, &outcome, config.ulp_bound);
        let route = subset::route_batch(&case.batch);
        for (m, (&flaw, result)) in mutants.iter().zip(&mut mutant_results).enumerate() {
            // A mistake on a path this batch does not take changes nothing: not run there.
            if !flaw.reaches(route) {
                continue;
            }
            let outcome = check_case(config, case, &stock, Sampler::Mutant(flaw), m as u64 + 1);
            result.absorb(case, &outcome, config.ulp_bound);
        }
    }
    let cases_seconds = started.elapsed().as_secs_f64();

    let tests = subset.statistical.cases;
    let threshold = bonferroni(config.alpha, tests);
    subset.finish(threshold);
    for result in &mut mutant_results {
        result.finish(threshold);
    }

    let started = Instant::now();
    let calibration = statistical::calibrate(
        &calibration_cases,
        config.draws,
        config.calibration_runs,
        config.alpha,
        config.seed,
        |run| progress(Step::Calibration { run, runs: config.calibration_runs }),
    );
    let calibration_seconds = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let power = statistical::power(
        &calibration_cases,
        config.draws,
        config.power_runs,
        config.alpha,
        config.seed,
        |run, runs| progress(Step::Power { run, runs }),
    );
    let power_seconds = started.elapsed().as_secs_f64();

    let mutants: Vec<MutantResult> = mutants
        .iter()
        .zip(&mutant_results)
        .map(|(flaw, result)| {
            let caught_by = result.failed();
            MutantResult {
                name: flaw.name(),
                description: flaw.description(),
                caught: !caught_by.is_empty(),
                caught_by,
                exact_unexplained_rows: result.exact.unexplained,
                kth_tie_crosses_window_rows: result.exact.kth_tie_crosses_window,
                coupled_mismatches: result.coupled.mismatches,
                statistical_failed_cases: result.statistical.failed_cases.len(),
                first_difference: result.exact.examples.first().or(result.coupled.examples.first()).cloned(),
            }
        })
        .collect();

    let spec = SpecConfig {
        release: config.release,
        draws: config.draws,
        alpha: config.alpha,
        calibration_runs: config.calibration_runs,
        power_runs: config.power_runs,
        seed: config.seed,
    };
    let speculative = speculative::run(&spec, |index, total| progress(Step::Speculative { index, total }));

    let suite_sound = calibration.ok && power.ok && mutants.iter().all(|m| m.caught) && speculative.sound();
    let verdict = match (suite_sound, subset.failed().is_empty() && speculative.passed) {
        (false, _) => Verdict::SuiteBroken,
        (true, false) => Verdict::NotEquivalent,
        (true, true) => Verdict::Equivalent,
    };
    let subset_cases = case_results.iter().filter(|c| c.statistical.is_some()).count();
    SuiteReport {
        verdict,
        release: config.release.as_str(),
        seed: config.seed,
        torch_threads,
        cases: cases.len(),
        rows_checked: subset.exact.rows,
        subset_cases,
        fallback_cases: cases.len() - subset_cases,
        ulp_bound: config.ulp_bound,
        subset,
        ties,
        statistical: StatSettings {
            draws_per_row: config.draws,
            alpha: config.alpha,
            tests,
            threshold,
            min_expected_per_bin: statistical::MIN_EXPECTED,
        },
        calibration,
        power,
        mutants,
        speculative,
        case_results,
        cases_seconds,
        calibration_seconds,
        power_seconds,
    }
}

/// Count the ties the fix met in one case.
fn count_ties(batch: &Batch, stock: &StockSide, outcomes: &[RowOutcome], ties: &mut TieCounts) {
    let Some(window) = stock.window else {
        return;
    };
    for (r, outcome) in outcomes.iter().enumerate() {
        match outcome {
            RowOutcome::KthTieCut => ties.kth_tie_crosses_window += 1,
            RowOutcome::Explained(Explanation::TopPBoundaryTie) => ties.top_p_boundary_tie += 1,
            RowOutcome::Explained(Explanation::TopPRounding) => ties.top_p_rounding += 1,
            RowOutcome::Identical { .. } | RowOutcome::Unexplained => {}
        }
        let k = batch.k_of(r);
        let facts = exact::kth_facts(batch.row(r), k);
        ties.kth_ties_kept_by_value += usize::from(facts.is_some_and(|f| f.kept as i64 > k));
        ties.kth_tie_spills_past_window += usize::from(facts.is_some_and(|f| f.kept as i64 > window));
        ties.top_p_cuts_tie_class += usize::from(stock.cut_classes[r].is_some());
    }
}

fn case_result(case: &Case, outcome: &CaseOutcome) -> CaseResult {
    let count = |f: fn(&RowOutcome) -> bool| outcome.outcomes.iter().filter(|o| f(o)).count();
    CaseResult {
        name: case.name.clone(),
        why: case.why,
        dtype: case.dtype,
        rows: case.batch.rows,
        vocab: case.batch.vocab,
        route: subset::route_batch(&case.batch).to_string(),
        identical: count(|o| matches!(o, RowOutcome::Identical { .. })),
        explained: count(|o| matches!(o, RowOutcome::Explained(_))),
        unexplained: count(|o| matches!(o, RowOutcome::Unexplained)),
        max_ulps: outcome
            .outcomes
            .iter()
            .filter_map(|o| match o {
                RowOutcome::Identical { max_ulps } => Some(*max_ulps),
                _ => None,
            })
            .max()
            .unwrap_or(0),
        coupled_mismatches: outcome.coupled_mismatches.len(),
        kth_tie_crosses_window: count(|o| matches!(o, RowOutcome::KthTieCut)),
        statistical: outcome.statistical,
    }
}
