//! The statistical check: many independent draws of a sampler, per row, against stock's
//! probabilities — a chi-square per row (bins merged to ≥ 10 expected), summed over a case's
//! rows, one p-value per case, Bonferroni across cases. A draw of a token stock gives
//! probability 0 fails outright. The draws go through the sampler's own race and tie-class
//! member pick ([`crate::reference::filtered::Filtered::draw_row_counts`]). Where stock's top-p
//! cut splits an equal-logit class (which members it keeps is arbitrary), that class is one
//! bin ([`CLASS_BIN`]): the contract there is the class's mass.
//!
//! Power: the same gate, run on draws from samplers biased by a total variation δ per row
//! ([`Expected::biased`]), must alarm often enough ([`power`]).
//!
//! The gate is calibrated by running it, many times, on draws from stock's own distribution:
//! its false-alarm rate must be small, or its verdict on the fix means little. Those draws are
//! made by inverse-CDF sampling in float64 rather than by the exponential race: the two are
//! exact samplers of the same distribution (the race's exactness is the classic
//! exponential-race/Gumbel-max theorem), and inverse CDF costs O(log S) per draw instead of S
//! Exp(1) variates, which makes hundreds of runs of the full gate affordable.

use serde::Serialize;

use crate::reference::cases::Rng;
use crate::reference::race::race_counts;
use crate::reference::stats::{bonferroni, merged_chi_square, ChiSquare};

/// Minimum expected draws per merged bin.
pub const MIN_EXPECTED: f64 = 10.0;

/// The bin id of an equal-logit class that stock's top-p cut splits (below every token id).
pub const CLASS_BIN: i32 = -1;

/// Stock's distribution of one row: support ids (ascending) and probabilities.
#[derive(Debug, Clone)]
pub struct Expected {
    ids: Vec<i32>,
    probs: Vec<f64>,
}

/// Which way a biased sampler moves its mass δ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BiasDirection {
    /// From the most probable token (and the next ones if it has less than δ) to the others,
    /// in proportion to their probability.
    FromTop,
    /// From the others, in proportion, to the most probable token.
    ToTop,
}

impl Expected {
    /// From stock's support of a row (ascending ids, float32 probabilities).
    pub fn new(ids: &[i32], probs: &[f32]) -> Expected {
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        Expected { ids: ids.to_vec(), probs: probs.iter().map(|&p| f64::from(p) / total).collect() }
    }

    /// Like [`Expected::new`], with the tokens of `class` (their logit in `logits` equal to
    /// it) merged into one bin [`CLASS_BIN`].
    pub fn with_class(ids: &[i32], probs: &[f32], logits: &[f32], class: Option<f32>) -> Expected {
        let Some(class) = class else {
            return Expected::new(ids, probs);
        };
        let mut merged_ids = vec![CLASS_BIN];
        let mut merged = vec![0f32];
        let mut class_mass = 0f64;
        for (&id, &p) in ids.iter().zip(probs) {
            if logits[id as usize] == class {
                class_mass += f64::from(p);
            } else {
                merged_ids.push(id);
                merged.push(p);
            }
        }
        merged[0] = class_mass as f32;
        Expected::new(&merged_ids, &merged)
    }

    /// The distribution of a sampler biased by total variation `delta` (at most what the
    /// row allows: nothing when its support is one token) in `direction`, and the total
    /// variation actually applied.
    pub fn biased(&self, delta: f64, direction: BiasDirection) -> (Expected, f64) {
        let mut probs = self.probs.clone();
        let top = (0..probs.len()).max_by(|&a, &b| probs[a].total_cmp(&probs[b]));
        let Some(top) = top.filter(|_| probs.len() > 1) else {
            return (self.clone(), 0.0);
        };
        let moved = match direction {
            BiasDirection::FromTop => {
                // Take δ from the largest tokens down, give it to the untouched rest.
                let mut order: Vec<usize> = (0..probs.len()).collect();
                order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
                let (mut left, mut touched) = (delta, Vec::new());
                for &i in &order[..order.len() - 1] {
                    if left <= 0.0 {
                        break;
                    }
                    let take = left.min(probs[i]);
                    probs[i] -= take;
                    left -= take;
                    touched.push(i);
                }
                let moved = delta - left;
                let rest: f64 = (0..probs.len()).filter(|i| !touched.contains(i)).map(|i| probs[i]).sum();
                if rest <= 0.0 {
                    return (self.clone(), 0.0);
                }
                for i in (0..probs.len()).filter(|i| !touched.contains(i)) {
                    probs[i] += moved * probs[i] / rest;
                }
                moved
            }
            BiasDirection::ToTop => {
                let rest = 1.0 - probs[top];
                let moved = delta.min(rest);
                if rest <= 0.0 {
                    return (self.clone(), 0.0);
                }
                for (i, p) in probs.iter_mut().enumerate() {
                    if i != top {
                        *p -= moved * *p / rest;
                    }
                }
                probs[top] += moved;
                moved
            }
        };
        (Expected { ids: self.ids.clone(), probs }, moved)
    }

    /// `draws` draws from this distribution by inverse CDF, as `(id, count)` pairs.
    #[cfg(test)]
    fn inverse_cdf_draws(&self, draws: usize, rng: &mut Rng) -> Vec<(i32, u64)> {
        let cdf: Vec<f64> = self
            .probs
            .iter()
            .scan(0.0, |acc, &p| {
                *acc += p;
                Some(*acc)
            })
            .collect();
        let mut counts = vec![0u64; cdf.len()];
        for _ in 0..draws {
            let u = rng.uniform() * cdf.last().copied().unwrap_or(0.0);
            // The first entry whose cumulative probability exceeds u; zero-probability
            // entries have an empty interval and are never chosen.
            let at = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1);
            counts[at] += 1;
        }
        self.ids.iter().copied().zip(counts).collect()
    }
}

/// One row's test result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowTest {
    /// Chi-square over the row's merged bins.
    pub chi: ChiSquare,
    /// Draws of tokens stock gives probability 0.
    pub outside_support: u64,
    /// Whether the sampler had nothing to draw from (no positive probability).
    pub empty: bool,
}

/// Test `draws` draws of a sampler on one row (`(bin, count)` pairs: token ids, or
/// [`CLASS_BIN`] for a split class; empty when the sampler had nothing to draw from) against
/// stock's `expected`.
pub fn test_row(expected: &Expected, drawn: &[(i32, u64)], draws: usize) -> RowTest {
    if drawn.is_empty() {
        return RowTest { chi: ChiSquare::EMPTY, outside_support: 0, empty: true };
    }
    score(expected, drawn, draws)
}

/// Draw `draws` tokens from a plain distribution (`ids` with float32 `probs`) by the race and
/// test them against `expected` (the unit tests' stand-in for a sampler).
pub fn test_probs(expected: &Expected, ids: &[i32], probs: &[f32], draws: usize) -> RowTest {
    let positive: Vec<(i32, f32)> =
        ids.iter().zip(probs).filter(|(_, &p)| p > 0.0 && p.is_finite()).map(|(&id, &p)| (id, p)).collect();
    let weights: Vec<f32> = positive.iter().map(|&(_, p)| p).collect();
    let counts = race_counts(&weights, draws);
    let drawn: Vec<(i32, u64)> = positive.iter().map(|&(id, _)| id).zip(counts).collect();
    test_row(expected, &drawn, draws)
}

/// Chi-square of drawn `(id, count)` pairs against `expected`.
fn score(expected: &Expected, drawn: &[(i32, u64)], draws: usize) -> RowTest {
    let mut observed = vec![0u64; expected.ids.len()];
    let mut outside_support = 0u64;
    for &(id, count) in drawn.iter().filter(|&&(_, count)| count > 0) {
        match expected.ids.binary_search(&id) {
            Ok(at) if expected.probs[at] > 0.0 => observed[at] += count,
            _ => outside_support += count,
        }
    }
    // Zero-probability stock tokens are not bins: any draw there was counted above.
    let (exp, obs): (Vec<f64>, Vec<u64>) =
        expected.probs.iter().zip(&observed).filter(|(&p, _)| p > 0.0).map(|(&p, &o)| (p * draws as f64, o)).unzip();
    RowTest { chi: merged_chi_square(&exp, &obs, MIN_EXPECTED), outside_support, empty: false }
}

/// One case's combined test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CaseTest {
    /// Σ of the rows' chi-square statistics.
    pub chi2: f64,
    /// Σ of their degrees of freedom.
    pub df: usize,
    /// P(χ²(df) ≥ chi2).
    pub p_value: f64,
    /// Draws outside stock's support.
    pub outside_support: u64,
    /// Rows with nothing to draw from.
    pub empty_rows: usize,
}

impl CaseTest {
    /// Combine a case's row tests.
    pub fn from_rows(rows: &[RowTest]) -> CaseTest {
        let chi = rows.iter().fold(ChiSquare::EMPTY, |acc, r| acc.combine(r.chi));
        CaseTest {
            chi2: chi.statistic,
            df: chi.df,
            p_value: chi.p_value(),
            outside_support: rows.iter().map(|r| r.outside_support).sum(),
            empty_rows: rows.iter().filter(|r| r.empty).count(),
        }
    }

    /// Whether the case fails the gate at per-case threshold `threshold`.
    pub fn fails(&self, threshold: f64) -> bool {
        self.p_value < threshold || self.outside_support > 0 || self.empty_rows > 0
    }
}

/// The gate's false-alarm rate on stock vs stock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// How the null draws were made.
    pub method: &'static str,
    /// Full runs of the gate (every statistical case each time).
    pub runs: usize,
    /// Runs where the gate rejected stock's own draws.
    pub alarms: usize,
    /// alarms / runs.
    pub false_alarm_rate: f64,
    /// The largest acceptable rate.
    pub limit: f64,
    /// Whether the rate is within the limit.
    pub ok: bool,
}

/// The acceptable false-alarm rate of the gate.
pub const FALSE_ALARM_LIMIT: f64 = 0.01;

/// Run the gate `runs` times with draws from stock's distribution against stock's
/// probabilities, over `cases` (each a list of rows), at family-wise level `alpha`. `seed`
/// makes it repeatable.
pub fn calibrate(
    cases: &[Vec<Expected>],
    draws: usize,
    runs: usize,
    alpha: f64,
    seed: u64,
    progress: impl FnMut(usize),
) -> Calibration {
    let alarms = gate_alarms(cases, cases, draws, runs, alpha, seed ^ 0xCA1B_0000_0000, progress);
    let false_alarm_rate = if runs == 0 { 0.0 } else { alarms as f64 / runs as f64 };
    Calibration {
        method: "inverse-CDF draws from stock's probabilities",
        runs,
        alarms,
        false_alarm_rate,
        limit: FALSE_ALARM_LIMIT,
        ok: false_alarm_rate <= FALSE_ALARM_LIMIT,
    }
}

/// In how many of `runs` runs the gate rejects draws from `drawn_from` (inverse CDF) tested
/// against `expected` (the same cases and rows, same bins).
fn gate_alarms(
    expected: &[Vec<Expected>],
    drawn_from: &[Vec<Expected>],
    draws: usize,
    runs: usize,
    alpha: f64,
    seed: u64,
    mut progress: impl FnMut(usize),
) -> usize {
    let threshold = bonferroni(alpha, expected.len());
    let prepared: Vec<Vec<PreparedRow>> = expected
        .iter()
        .zip(drawn_from)
        .map(|(rows, sources)| rows.iter().zip(sources).map(|(e, source)| PreparedRow::new(e, source, draws)).collect())
        .collect();
    let mut rng = Rng::new(seed);
    let mut alarms = 0;
    for run in 0..runs {
        progress(run);
        let failed = prepared
            .iter()
            .map(|rows| {
                let tests: Vec<RowTest> = rows.iter().map(|row| row.run(draws, &mut rng)).collect();
                CaseTest::from_rows(&tests).fails(threshold)
            })
            // Every row is tested (no short-circuit), so each run draws the same noise.
            .filter(|failed| *failed)
            .count()
            > 0;
        alarms += usize::from(failed);
    }
    alarms
}

/// Stock's row with its bins merged once, as [`merged_chi_square`] merges them (which depends on
/// the expected counts alone): a sampler's draws are then scored in O(drawn · log S) instead of
/// O(S log S), with the same statistic bit for bit as [`test_row`] (same bins, same order of
/// the float sums; see the tests). The suite prepares each stock row once for all samplers.
#[derive(Debug, Clone)]
pub struct Binned {
    /// Stock's ids (ascending; [`CLASS_BIN`] first when a class is merged).
    ids: Vec<i32>,
    /// Per id index: its merged bin, `None` where stock's probability is 0 (outside).
    bin_of: Vec<Option<usize>>,
    /// Expected draws per merged bin.
    bin_expected: Vec<f64>,
}

impl Binned {
    /// `expected`'s bins for `draws` draws.
    pub fn new(expected: &Expected, draws: usize) -> Binned {
        let positive: Vec<usize> = (0..expected.probs.len()).filter(|&i| expected.probs[i] > 0.0).collect();
        let exp: Vec<f64> = positive.iter().map(|&i| expected.probs[i] * draws as f64).collect();
        let mut order: Vec<usize> = (0..exp.len()).collect();
        order.sort_by(|&a, &b| exp[b].total_cmp(&exp[a]));
        let mut bin_of = vec![None; expected.probs.len()];
        let mut bin_expected = Vec::new();
        let (mut acc, mut pending) = (0.0, Vec::new());
        for j in order {
            acc += exp[j];
            pending.push(positive[j]);
            if acc >= MIN_EXPECTED {
                for i in pending.drain(..) {
                    bin_of[i] = Some(bin_expected.len());
                }
                bin_expected.push(acc);
                acc = 0.0;
            }
        }
        if !pending.is_empty() {
            let bin = match bin_expected.last_mut() {
                Some(last) => {
                    *last += acc;
                    bin_expected.len() - 1
                }
                None => {
                    bin_expected.push(acc);
                    0
                }
            };
            for i in pending {
                bin_of[i] = Some(bin);
            }
        }
        Binned { ids: expected.ids.clone(), bin_of, bin_expected }
    }

    /// The chi-square of observed counts per bin (and the draws outside stock's support).
    fn chi(&self, observed: &[u64], outside_support: u64) -> RowTest {
        let statistic =
            self.bin_expected.iter().zip(observed).map(|(&e, &o)| (o as f64 - e) * (o as f64 - e) / e).sum();
        let chi = ChiSquare { statistic, df: self.bin_expected.len().saturating_sub(1) };
        RowTest { chi, outside_support, empty: false }
    }

    /// [`test_row`] on these bins: `(bin, count)` pairs of a sampler's draws.
    pub fn test(&self, drawn: &[(i32, u64)]) -> RowTest {
        if drawn.is_empty() {
            return RowTest { chi: ChiSquare::EMPTY, outside_support: 0, empty: true };
        }
        let mut observed = vec![0u64; self.bin_expected.len()];
        let mut outside_support = 0u64;
        for &(id, count) in drawn.iter().filter(|&&(_, count)| count > 0) {
            match self.ids.binary_search(&id).ok().and_then(|at| self.bin_of[at]) {
                Some(bin) => observed[bin] += count,
                None => outside_support += count,
            }
        }
        self.chi(&observed, outside_support)
    }
}

/// One row of [`gate_alarms`] prepared once for all its runs: the source's cumulative
/// probabilities, and the expected row's bins merged as [`merged_chi_square`] merges them
/// (which depends on the expected counts alone). A run then costs O(draws · log S) instead of
/// O(S log S) per row, and gives the same statistic bit for bit as [`score`] on
/// [`Expected::inverse_cdf_draws`] with the same generator (same uniforms, same bins, same
/// order of the float sums; see the test).
struct PreparedRow {
    /// Source cumulative probabilities (ids shared with the expected row).
    cdf: Vec<f64>,
    /// The expected row's bins.
    bins: Binned,
}

impl PreparedRow {
    fn new(expected: &Expected, source: &Expected, draws: usize) -> PreparedRow {
        assert_eq!(expected.ids, source.ids, "a row is drawn from a distribution over the same ids");
        let cdf: Vec<f64> = source
            .probs
            .iter()
            .scan(0.0, |acc, &p| {
                *acc += p;
                Some(*acc)
            })
            .collect();
        PreparedRow { cdf, bins: Binned::new(expected, draws) }
    }

    /// One run: `draws` inverse-CDF draws from the source, scored against the expected bins.
    fn run(&self, draws: usize, rng: &mut Rng) -> RowTest {
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let mut observed = vec![0u64; self.bins.bin_expected.len()];
        let mut outside_support = 0u64;
        for _ in 0..draws {
            let u = rng.uniform() * total;
            let at = self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1);
            match self.bins.bin_of[at] {
                Some(bin) => observed[bin] += 1,
                None => outside_support += 1,
            }
        }
        self.bins.chi(&observed, outside_support)
    }
}

/// The total variations the power table measures.
pub const POWER_TVDS: [f64; 3] = [0.01, 0.03, 0.1];
/// The total variation the gate must catch, and how often.
pub const REQUIRED_TVD: f64 = 0.03;
/// Required power at [`REQUIRED_TVD`].
pub const REQUIRED_POWER: f64 = 0.95;

/// One row of the power table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PowerRow {
    /// δ asked for per row.
    pub tvd: f64,
    /// Where the mass goes.
    pub direction: BiasDirection,
    /// Mean total variation actually applied per row (rows whose support is one token
    /// cannot be biased within it).
    pub mean_row_tvd: f64,
    /// Runs of the full gate.
    pub runs: usize,
    /// Runs where it rejected the biased sampler.
    pub alarms: usize,
    /// alarms / runs.
    pub power: f64,
}

/// The gate's measured power.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Power {
    /// How the biased draws were made.
    pub method: &'static str,
    /// One row per δ and direction.
    pub rows: Vec<PowerRow>,
    /// δ that must be caught.
    pub required_tvd: f64,
    /// How often.
    pub required_power: f64,
    /// The smallest power at the required δ, over directions.
    pub power_at_required: f64,
    /// Whether it is at least the required power.
    pub ok: bool,
}

/// Measure the gate's power: for each δ in [`POWER_TVDS`] and each direction, `runs` runs of
/// the full gate on every row's distribution biased by δ, tested against stock's.
pub fn power(
    cases: &[Vec<Expected>],
    draws: usize,
    runs: usize,
    alpha: f64,
    seed: u64,
    mut progress: impl FnMut(usize, usize),
) -> Power {
    let mut rows = Vec::new();
    let total = POWER_TVDS.len() * 2;
    for (i, &tvd) in POWER_TVDS.iter().enumerate() {
        for (j, direction) in [BiasDirection::FromTop, BiasDirection::ToTop].into_iter().enumerate() {
            let (mut applied, mut count) = (0.0, 0usize);
            let biased: Vec<Vec<Expected>> = cases
                .iter()
                .map(|rows| {
                    rows.iter()
                        .map(|e| {
                            let (b, moved) = e.biased(tvd, direction);
                            applied += moved;
                            count += 1;
                            b
                        })
                        .collect()
                })
                .collect();
            let step = i * 2 + j;
            let salt = seed ^ 0x9043_0000_0000 ^ ((step as u64) << 20);
            let alarms =
                gate_alarms(cases, &biased, draws, runs, alpha, salt, |run| progress(step * runs + run, total * runs));
            rows.push(PowerRow {
                tvd,
                direction,
                mean_row_tvd: if count == 0 { 0.0 } else { applied / count as f64 },
                runs,
                alarms,
                power: if runs == 0 { 0.0 } else { alarms as f64 / runs as f64 },
            });
        }
    }
    let power_at_required =
        rows.iter().filter(|r| r.tvd == REQUIRED_TVD).map(|r| r.power).fold(f64::INFINITY, f64::min);
    Power {
        method: "inverse-CDF draws from stock's probabilities biased by δ per row",
        ok: power_at_required >= REQUIRED_POWER,
        rows,
        required_tvd: REQUIRED_TVD,
        required_power: REQUIRED_POWER,
        power_at_required,
    }
}

/// How often the gate (Bonferroni over `cases` at `alpha`) rejects draws from every row biased
/// by `tvd` in `direction`, over `runs` runs: one row of [`power`]'s table, for a caller that
/// needs only that row.
pub fn power_at(
    cases: &[Vec<Expected>],
    draws: usize,
    runs: usize,
    alpha: f64,
    seed: u64,
    tvd: f64,
    direction: BiasDirection,
) -> f64 {
    let biased: Vec<Vec<Expected>> =
        cases.iter().map(|rows| rows.iter().map(|e| e.biased(tvd, direction).0).collect()).collect();
    let alarms = gate_alarms(cases, &biased, draws, runs, alpha, seed ^ 0x9043_0000_0000, |_| {});
    if runs == 0 {
        0.0
    } else {
        alarms as f64 / runs as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_row_scores_as_the_merged_chi_square_bit_for_bit() {
        // A skewed row over 3000 ids (many bins merged), a zero entry, a class bin, and a
        // source biased away from it.
        let mut rng = Rng::new(5);
        let ids: Vec<i32> = std::iter::once(CLASS_BIN).chain(0..3000).collect();
        let probs: Vec<f32> =
            (0..ids.len()).map(|i| if i == 7 { 0.0 } else { (rng.uniform() as f32).powi(4) }).collect();
        let expected = Expected::new(&ids, &probs);
        for source in [expected.clone(), expected.biased(0.05, BiasDirection::FromTop).0] {
            let prepared = PreparedRow::new(&expected, &source, 1000);
            let (mut a, mut b) = (Rng::new(9), Rng::new(9));
            let binned = Binned::new(&expected, 1000);
            for _ in 0..20 {
                let fast = prepared.run(1000, &mut a);
                let drawn = source.inverse_cdf_draws(1000, &mut b);
                let slow = score(&expected, &drawn, 1000);
                assert_eq!(fast, slow);
                // A sampler's draws, with some outside stock's support: id 6 (index 7) has
                // probability 0, id 5000 is not in it.
                let mut leaky = drawn.clone();
                leaky.extend([(6, 3), (5000, 2)]);
                assert_eq!(binned.test(&leaky).outside_support, 5);
                assert_eq!(binned.test(&leaky), test_row(&expected, &leaky, 1000));
            }
            assert_eq!(binned.test(&[]), test_row(&expected, &[], 1000));
        }
    }

    #[test]
    fn draws_from_the_same_distribution_pass_and_outside_draws_fail() {
        tch::manual_seed(11);
        let expected = Expected::new(&[3, 7, 9], &[0.5, 0.3, 0.2]);
        let same = test_probs(&expected, &[3, 7, 9], &[0.5, 0.3, 0.2], 5_000);
        assert!(same.chi.p_value() > 1e-4, "{same:?}");
        assert_eq!(same.outside_support, 0);
        let leaky = test_probs(&expected, &[3, 7, 8], &[0.5, 0.3, 0.2], 5_000);
        assert!(leaky.outside_support > 0, "token 8 is outside stock's support");
        let empty = test_probs(&expected, &[3], &[f32::NAN], 10);
        assert!(empty.empty);
        assert!(CaseTest::from_rows(&[same, empty]).fails(0.0));
    }

    #[test]
    fn a_shifted_distribution_is_rejected() {
        tch::manual_seed(12);
        let expected = Expected::new(&[0, 1], &[0.5, 0.5]);
        let shifted = test_probs(&expected, &[0, 1], &[0.6, 0.4], 5_000);
        assert!(shifted.chi.p_value() < 1e-6, "{shifted:?}");
    }

    #[test]
    fn inverse_cdf_draws_follow_the_probabilities_and_skip_zeros() {
        let expected = Expected::new(&[1, 2, 3], &[0.25, 0.0, 0.75]);
        let drawn = expected.inverse_cdf_draws(40_000, &mut Rng::new(3));
        assert_eq!(drawn[1], (2, 0), "a zero-probability token is never drawn");
        assert!((9_565..=10_435).contains(&drawn[0].1), "{drawn:?}");
    }

    #[test]
    fn calibration_counts_alarms_against_the_limit() {
        let cases = vec![vec![Expected::new(&[0, 1, 2], &[0.2, 0.3, 0.5])]];
        let calibration = calibrate(&cases, 1_000, 20, 0.001, 5, |_| {});
        assert_eq!(calibration.runs, 20);
        assert!(calibration.ok, "{calibration:?}");
        // alpha = 1 makes every run alarm: the rate must say so.
        let always = calibrate(&cases, 1_000, 5, 1.0 + f64::EPSILON, 5, |_| {});
        assert_eq!(always.alarms, 5);
        assert!(!always.ok);
    }
}
