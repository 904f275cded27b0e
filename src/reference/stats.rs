//! The statistics behind the equivalence suite's gates: a chi-square goodness-of-fit test with
//! bins merged until each expects enough draws, its p-value, the Bonferroni threshold, and the
//! distance between two float32 values in ulps.
//!
//! Written out here (no statistics crate) so the few formulas the verdict rests on can be read
//! and are unit-tested against published table values.

/// A chi-square statistic and its degrees of freedom.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChiSquare {
    /// Σ (observed − expected)² / expected over the merged bins.
    pub statistic: f64,
    /// Merged bins − 1 (0 when everything fell into one bin: nothing to test).
    pub df: usize,
}

impl ChiSquare {
    /// The sum of independent tests (rows of a case): statistics and degrees of freedom add.
    pub fn combine(self, other: ChiSquare) -> ChiSquare {
        ChiSquare { statistic: self.statistic + other.statistic, df: self.df + other.df }
    }

    /// The zero-information test, the identity of [`ChiSquare::combine`].
    pub const EMPTY: ChiSquare = ChiSquare { statistic: 0.0, df: 0 };

    /// P(χ²(df) ≥ statistic): small means the draws do not fit the expected distribution.
    pub fn p_value(self) -> f64 {
        chi_square_sf(self.statistic, self.df)
    }
}

/// Chi-square of `observed` draws against `expected` counts (same order, every expected > 0;
/// draws where nothing was expected are the caller's hard failure, never a bin).
///
/// Bins are taken from the most to the least expected and merged until each expects at least
/// `min_expected` draws; a short remainder joins the last full bin. The usual rule of thumb
/// (≥ 5, here 10 for margin) keeps the χ² approximation honest for the long tail of tiny
/// probabilities that a top-k/top-p support has.
pub fn merged_chi_square(expected: &[f64], observed: &[u64], min_expected: f64) -> ChiSquare {
    assert_eq!(expected.len(), observed.len(), "one observed count per expected count");
    let mut order: Vec<usize> = (0..expected.len()).collect();
    order.sort_by(|&a, &b| expected[b].total_cmp(&expected[a]));
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let (mut exp_acc, mut obs_acc) = (0.0, 0.0);
    for i in order {
        exp_acc += expected[i];
        obs_acc += observed[i] as f64;
        if exp_acc >= min_expected {
            bins.push((exp_acc, obs_acc));
            exp_acc = 0.0;
            obs_acc = 0.0;
        }
    }
    if exp_acc > 0.0 || obs_acc > 0.0 {
        match bins.last_mut() {
            Some(last) => {
                last.0 += exp_acc;
                last.1 += obs_acc;
            }
            None => bins.push((exp_acc, obs_acc)),
        }
    }
    let statistic = bins.iter().map(|&(e, o)| (o - e) * (o - e) / e).sum();
    ChiSquare { statistic, df: bins.len().saturating_sub(1) }
}

/// The Bonferroni per-test threshold: `tests` tests at family-wise level `alpha`.
pub fn bonferroni(alpha: f64, tests: usize) -> f64 {
    alpha / tests.max(1) as f64
}

/// Survival function of the chi-square distribution, Q(df/2, x/2) (regularised upper
/// incomplete gamma): series below a+1, continued fraction above (Numerical Recipes §6.2).
pub fn chi_square_sf(x: f64, df: usize) -> f64 {
    if df == 0 || x <= 0.0 {
        return 1.0;
    }
    let a = df as f64 / 2.0;
    let x = x / 2.0;
    if x < a + 1.0 {
        (1.0 - gamma_p_series(a, x)).clamp(0.0, 1.0)
    } else {
        gamma_q_continued_fraction(a, x).clamp(0.0, 1.0)
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; ~1e-15 relative).
fn ln_gamma(x: f64) -> f64 {
    const COEFFS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let series = COEFFS[1..].iter().enumerate().fold(COEFFS[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

/// P(a, x) by its power series; converges fast for x < a + 1.
fn gamma_p_series(a: f64, x: f64) -> f64 {
    let mut term = 1.0 / a;
    let mut sum = term;
    let mut n = a;
    for _ in 0..10_000 {
        n += 1.0;
        term *= x / n;
        sum += term;
        if term.abs() < sum.abs() * 1e-16 {
            break;
        }
    }
    sum * (-x + a * x.ln() - ln_gamma(a)).exp()
}

/// Q(a, x) by its continued fraction (modified Lentz); converges fast for x ≥ a + 1.
fn gamma_q_continued_fraction(a: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x + a * x.ln() - ln_gamma(a)).exp() * h
}

/// How many representable float32 values lie between `a` and `b` (0 when equal; both finite).
/// Probabilities are non-negative, so the bit patterns order like the values.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    // Map the sign-magnitude bit pattern onto a monotonic integer line so that -0.0 == +0.0
    // and distances across zero count correctly.
    fn ordered(x: f32) -> i64 {
        let bits = x.to_bits() as i32;
        if bits < 0 {
            i64::from(i32::MIN) - i64::from(bits)
        } else {
            i64::from(bits)
        }
    }
    (ordered(a) - ordered(b)).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn chi_square_sf_matches_table_values() {
        // Critical values at 5 % and 1 % from standard chi-square tables.
        for (x, df, p) in [
            (3.841_459, 1, 0.05),
            (6.634_897, 1, 0.01),
            (5.991_465, 2, 0.05),
            (18.307_038, 10, 0.05),
            (124.342_113, 100, 0.05),
            (135.806_723, 100, 0.01),
        ] {
            let got = chi_square_sf(x, df);
            assert!(close(got, p, 1e-6), "sf({x}, {df}) = {got}, table says {p}");
        }
        // df = 2 is exp(-x/2) in closed form.
        assert!(close(chi_square_sf(1.0, 2), (-0.5f64).exp(), 1e-12));
        assert_eq!(chi_square_sf(0.0, 3), 1.0);
        assert_eq!(chi_square_sf(5.0, 0), 1.0);
        assert!(chi_square_sf(1e4, 10) < 1e-100);
    }

    #[test]
    fn merging_gives_every_bin_the_minimum_expectation() {
        // 1000 draws over a head of 3 big tokens and a tail of 100 tiny ones.
        let mut expected = vec![400.0, 300.0, 200.0];
        expected.extend(std::iter::repeat_n(1.0, 100));
        let observed: Vec<u64> = expected.iter().map(|&e| e as u64).collect();
        let chi = merged_chi_square(&expected, &observed, 10.0);
        // 3 head bins + 10 tail bins of 10 expected each.
        assert_eq!(chi.df, 12);
        assert!(chi.statistic.abs() < 1e-12);
        assert!(close(chi.p_value(), 1.0, 1e-12));
    }

    #[test]
    fn a_short_remainder_joins_the_last_bin() {
        let chi = merged_chi_square(&[15.0, 12.0, 3.0], &[15, 12, 3], 10.0);
        assert_eq!(chi.df, 1, "the 3-expected tail must merge, not form its own bin");
        // A lone under-filled bin still yields a (df 0) result rather than nothing.
        let lone = merged_chi_square(&[4.0, 3.0], &[5, 2], 10.0);
        assert_eq!(lone, ChiSquare { statistic: 0.0, df: 0 });
    }

    #[test]
    fn chi_square_flags_a_clearly_wrong_distribution() {
        // Expected a fair coin over 1000 draws; observed 600/400: χ² = 40, df 1.
        let chi = merged_chi_square(&[500.0, 500.0], &[600, 400], 10.0);
        assert!(close(chi.statistic, 40.0, 1e-12));
        assert!(chi.p_value() < 1e-9);
        let both = chi.combine(ChiSquare::EMPTY).combine(chi);
        assert_eq!(both.df, 2);
    }

    #[test]
    fn bonferroni_divides_alpha() {
        assert_eq!(bonferroni(0.01, 4), 0.0025);
        assert_eq!(bonferroni(0.01, 0), 0.01);
    }

    #[test]
    fn ulp_distance_counts_representable_steps() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(ulp_distance(0.25, 0.5), u64::from(1u32 << 23));
    }
}
