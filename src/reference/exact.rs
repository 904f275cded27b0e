//! The exact check: per row, the subset's support must be stock's, with probabilities equal up
//! to a few ulps. A differing support is allowed only where the difference is explained, and
//! each explanation is recomputed here from the logits (in float64), independent of the
//! sampler under test:
//!
//! - **top-p boundary tie**: same size, and every token in the difference has the boundary
//!   value; which copies of a tied value the cut removes follows the (unstable) sort order,
//!   so stock itself may keep either. Compared by class mass: the supports, paired class by
//!   class (equal logits), must carry the same probabilities within the ulp bound.
//! - **top-p boundary rounding**: each token in the difference sits at a cumulative
//!   probability within float32 cumsum rounding of 1 − p, but not exactly on it (exactly on
//!   it, `<=` decides the same way in any summation order of exact values); or the
//!   difference is how many members of one equal-logit class the cut keeps, and every member
//!   count in between puts the cumulative sum within rounding of 1 − p.
//!
//! A difference at a tie group at the k-th value that reaches past the window
//! ([`RowOutcome::KthTieCut`]: the subset v1's flaw) is never excused: v2 completes the class
//! over the whole vocabulary, so stock's support is reproduced exactly there.

use serde::Serialize;

use crate::reference::batch::Batch;
use crate::reference::stats::ulp_distance;

/// Why a row's support may legitimately differ from stock's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Explanation {
    /// Different copies of a tied value kept at the top-p cut.
    TopPBoundaryTie,
    /// The top-p cut flips on a cumulative sum within rounding of 1 − p.
    TopPRounding,
}

impl Explanation {
    /// Words for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Explanation::TopPBoundaryTie => "tie at the top-p boundary",
            Explanation::TopPRounding => "top-p boundary within float32 rounding",
        }
    }
}

/// How one row of a sampler compares with stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOutcome {
    /// Same support; the largest probability difference in ulps.
    Identical {
        /// max over the support of |p_stock − p_other| in float32 ulps.
        max_ulps: u64,
    },
    /// Different support, for an allowed reason.
    Explained(Explanation),
    /// Different support at a tie group at the k-th value that reaches past the window:
    /// tokens stock keeps were lost (or kept wrongly). Never allowed; counted on its own.
    KthTieCut,
    /// Different support, and nothing explains it: a distribution difference.
    Unexplained,
}

/// The k-th largest value of a row and how many tokens are at or above it (ties included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KthFacts {
    /// The row's k-th largest logit.
    pub value: f32,
    /// Tokens with a logit ≥ `value`: stock's top-k set.
    pub kept: usize,
}

/// Facts about row `row`'s k-th value, or `None` when the row has no top_k.
pub fn kth_facts(row: &[f32], k: i64) -> Option<KthFacts> {
    if k <= 0 || k as usize >= row.len() {
        return None;
    }
    let mut scratch = row.to_vec();
    let (_, &mut value, _) = scratch.select_nth_unstable_by(k as usize - 1, |a, b| b.total_cmp(a));
    // Only finite tokens can be in a support: when the k-th value is -inf (fewer finite
    // tokens than k), the "tie group" of -inf tokens is masked anyway.
    let kept = row.iter().filter(|&&x| x >= value && x.is_finite()).count();
    Some(KthFacts { value, kept })
}

/// Compare row `r` of another sampler with stock. `window` is the K the fix should use for
/// this batch (`None` on the stock path, where nothing may differ); supports are ascending
/// ids with their float32 probabilities; `ulp_bound` bounds the class-mass comparison of a
/// top-p boundary tie.
pub fn compare_row(
    batch: &Batch,
    r: usize,
    window: Option<i64>,
    stock: (&[i32], &[f32]),
    other: (&[i32], &[f32]),
    ulp_bound: u64,
) -> RowOutcome {
    if stock.0 == other.0 {
        let max_ulps = stock.1.iter().zip(other.1).map(|(&a, &b)| ulp_distance(a, b)).max().unwrap_or(0);
        return RowOutcome::Identical { max_ulps };
    }
    let Some(window) = window else {
        return RowOutcome::Unexplained;
    };
    let logits = batch.row(r);
    let facts = kth_facts(logits, batch.k_of(r));
    let differing = symmetric_difference(stock.0, other.0);
    let logit = |id: i32| logits[id as usize];
    let p = batch.p_of(r);
    if p < 1.0 {
        let boundary = stock.0.iter().map(|&id| logit(id)).fold(f32::INFINITY, f32::min);
        let other_boundary = other.0.iter().map(|&id| logit(id)).fold(f32::INFINITY, f32::min);
        if stock.0.len() == other.0.len()
            && boundary == other_boundary
            && differing.iter().all(|&id| logit(id) == boundary)
            && class_ulps(logits, stock, other) <= ulp_bound
        {
            return RowOutcome::Explained(Explanation::TopPBoundaryTie);
        }
    }
    if p < 1.0 {
        let cut = TopPCut::new(logits, facts.map(|f| f.value), p);
        if differing.iter().all(|&id| cut.within_rounding(logit(id))) {
            return RowOutcome::Explained(Explanation::TopPRounding);
        }
        // The difference is the count kept of one equal-logit class.
        let class = logit(differing[0]);
        if differing.iter().all(|&id| logit(id) == class) {
            let count = |ids: &[i32]| ids.iter().filter(|&&id| logit(id) == class).count();
            if cut.class_count_within_rounding(class, count(stock.0), count(other.0)) {
                return RowOutcome::Explained(Explanation::TopPRounding);
            }
        }
    }
    // A k-th value tie group wider than the window, and the difference touches it.
    if facts.is_some_and(|f| f.kept as i64 > window && differing.iter().any(|&id| logit(id) == f.value)) {
        return RowOutcome::KthTieCut;
    }
    RowOutcome::Unexplained
}

/// Largest ulp difference between two equal supports after each side is divided by its own
/// total (in float64): the pivot path's probabilities are its weights over their own sum, and
/// stock's a softmax whose denominator sums the same terms in another order, a factor common
/// to the whole row that moves no draw (the same argument as in [`class_ulps`]; on
/// 100,000-token supports that factor alone is hundreds of ulps).
pub fn normalized_ulps(stock: &[f32], other: &[f32]) -> u64 {
    let scaled = |probs: &[f32]| {
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        let scale = if total > 0.0 { 1.0 / total } else { 1.0 };
        probs.iter().map(move |&p| (f64::from(p) * scale) as f32).collect::<Vec<f32>>()
    };
    scaled(stock).into_iter().zip(scaled(other)).map(|(a, b)| ulp_distance(a, b)).max().unwrap_or(0)
}

/// Largest ulp difference between two supports paired class by class: each sorted by
/// (logit, probability), then zipped. Equal per-class counts and probabilities within the
/// bound mean equal mass per equal-logit class. `u64::MAX` when the sizes differ.
///
/// Each side is first divided by its own total (in float64): the two supports are different
/// copies of a tie class, so their softmax denominators are float32 sums of the same values
/// in a different order and over different vector widths. That error is one factor common to
/// a whole row (it moves no draw: sampling divides by noise and takes the argmax), and it
/// grows with the support — 1,458 tokens put it at 16 ulps with ATen's AVX2 kernels, 13 with
/// its AVX-512 ones. What is left is each probability's own rounding.
fn class_ulps(logits: &[f32], stock: (&[i32], &[f32]), other: (&[i32], &[f32])) -> u64 {
    if stock.0.len() != other.0.len() {
        return u64::MAX;
    }
    let sorted = |(ids, probs): (&[i32], &[f32])| {
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        let scale = if total > 0.0 { 1.0 / total } else { 1.0 };
        let mut pairs: Vec<(f32, f32)> =
            ids.iter().zip(probs).map(|(&id, &p)| (logits[id as usize], (f64::from(p) * scale) as f32)).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        pairs
    };
    sorted(stock)
        .into_iter()
        .zip(sorted(other))
        .map(|(a, b)| if a.0 == b.0 { ulp_distance(a.1, b.1) } else { u64::MAX })
        .max()
        .unwrap_or(0)
}

/// The value of the equal-logit class stock's top-p cut splits on row `r` (some copies kept,
/// some cut), judged from the row and stock's support.
pub fn cut_class(batch: &Batch, r: usize, stock: &[i32]) -> Option<f32> {
    if batch.p_of(r) >= 1.0 || stock.is_empty() {
        return None;
    }
    let logits = batch.row(r);
    let floor = kth_facts(logits, batch.k_of(r)).map_or(f32::NEG_INFINITY, |f| f.value);
    let boundary = stock.iter().map(|&id| logits[id as usize]).fold(f32::INFINITY, f32::min);
    let copies = logits.iter().filter(|&&x| x == boundary && x >= floor && x.is_finite()).count();
    let kept = stock.iter().filter(|&&id| logits[id as usize] == boundary).count();
    (copies > kept).then_some(boundary)
}

/// Whether any correct subset sampler may legitimately keep another support than stock on
/// row `r`, judged from the row and stock's support alone (not from a particular subset
/// implementation, whose tie order may differ from this reference's): the conditions behind
/// each [`Explanation`], checked before the fact. `window` as in [`compare_row`].
pub fn ambiguity(batch: &Batch, r: usize, window: Option<i64>, stock: &[i32]) -> Option<Explanation> {
    window?;
    let logits = batch.row(r);
    let facts = kth_facts(logits, batch.k_of(r));
    let p = batch.p_of(r);
    if p >= 1.0 {
        return None;
    }
    if cut_class(batch, r, stock).is_some() {
        return Some(Explanation::TopPBoundaryTie);
    }
    let floor = facts.map_or(f32::NEG_INFINITY, |f| f.value);
    let in_top_k = |x: f32| x >= floor && x.is_finite();
    let boundary = stock.iter().map(|&id| logits[id as usize]).fold(f32::INFINITY, f32::min);
    // The last kept or the first cut token sits within rounding of 1 - p.
    let cut = TopPCut::new(logits, facts.map(|f| f.value), p);
    let first_cut = logits
        .iter()
        .copied()
        .filter(|&x| in_top_k(x) && x < boundary)
        .fold(None, |m: Option<f32>, x| Some(m.map_or(x, |m| m.max(x))));
    if cut.within_rounding(boundary) || first_cut.is_some_and(|x| cut.within_rounding(x)) {
        return Some(Explanation::TopPRounding);
    }
    // A tie class at the boundary kept whole, whose member count sits within rounding.
    let copies = logits.iter().filter(|&&x| x == boundary && in_top_k(x)).count();
    if copies > 1 && cut.class_count_within_rounding(boundary, copies, copies - 1) {
        return Some(Explanation::TopPRounding);
    }
    None
}

/// Ids in exactly one of two ascending lists.
fn symmetric_difference(a: &[i32], b: &[i32]) -> Vec<i32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => {
                out.push(*x);
                i += 1;
            }
            (Some(_), Some(y)) => {
                out.push(*y);
                j += 1;
            }
            (Some(x), None) => {
                out.push(*x);
                i += 1;
            }
            (None, Some(y)) => {
                out.push(*y);
                j += 1;
            }
            (None, None) => unreachable!("loop condition"),
        }
    }
    out
}

/// Stock's top-p cut of one row in exact (float64) arithmetic: the ascending cumulative
/// probability over the top-k set, and the float32 threshold 1 − p it is compared with.
struct TopPCut {
    /// Top-k set logits, ascending.
    ascending: Vec<f64>,
    /// Inclusive cumulative probability at each entry of `ascending`.
    cumulative: Vec<f64>,
    threshold: f64,
    tolerance: f64,
}

impl TopPCut {
    fn new(row: &[f32], kth_value: Option<f32>, p: f32) -> TopPCut {
        let floor = kth_value.unwrap_or(f32::NEG_INFINITY);
        let mut ascending: Vec<f64> =
            row.iter().filter(|&&x| x >= floor && x.is_finite()).map(|&x| f64::from(x)).collect();
        ascending.sort_by(f64::total_cmp);
        let max = ascending.last().copied().unwrap_or(0.0);
        let weights: Vec<f64> = ascending.iter().map(|&x| (x - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        let cumulative = weights
            .iter()
            .scan(0.0, |acc, w| {
                *acc += w / total;
                Some(*acc)
            })
            .collect();
        // The float32 cumsum of n terms is within n·ε of the exact sum (standard bound).
        let tolerance = (ascending.len() + 1) as f64 * f64::from(f32::EPSILON);
        TopPCut { ascending, cumulative, threshold: f64::from(1.0f32 - p), tolerance }
    }

    /// Whether keeping `a` or `b` members of the class with logit `class` can both follow from
    /// rounding: every member count in between puts the cumulative sum within rounding of
    /// the threshold. Landing exactly on the threshold counts only when the member
    /// probability is not a float32 value (stock's float32 cumsum of such terms is itself
    /// inexact); with exact terms `<=` decides the same way in any order. The class holding
    /// the row's largest value never drops to no member (keep at least one).
    fn class_count_within_rounding(&self, class: f32, a: usize, b: usize) -> bool {
        let class = f64::from(class);
        let first = self.ascending.partition_point(|&x| x < class);
        let end = self.ascending.partition_point(|&x| x <= class);
        let size = end - first;
        if size == 0 || a > size || b > size || (end == self.ascending.len() && a.min(b) == 0) {
            return false;
        }
        let before = first.checked_sub(1).map_or(0.0, |i| self.cumulative[i]);
        let each = (self.cumulative[end - 1] - before) / size as f64;
        let exact_terms = f64::from(each as f32) == each;
        // Cutting j members puts member j at cumulative `before + j·each`; the members one
        // side cuts and the other keeps are j = lo+1 ..= hi.
        let (lo, hi) = (size - a.max(b), size - a.min(b));
        lo != hi
            && (lo + 1..=hi).all(|j| {
                let distance = (before + j as f64 * each - self.threshold).abs();
                distance <= self.tolerance && (distance > 0.0 || !exact_terms)
            })
    }

    /// Whether the cumulative probability at a token with this logit is within rounding of
    /// the threshold, but not exactly on it. The largest token never is: keep-at-least-one
    /// keeps it whatever its cumulative sum.
    fn within_rounding(&self, logit: f32) -> bool {
        if self.ascending.last().is_some_and(|&max| f64::from(logit) >= max) {
            return false;
        }
        let at = self.ascending.partition_point(|&x| x <= f64::from(logit));
        let Some(&cumulative) = at.checked_sub(1).and_then(|i| self.cumulative.get(i)) else {
            return false;
        };
        let distance = (cumulative - self.threshold).abs();
        distance > 0.0 && distance <= self.tolerance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(row: Vec<f32>, k: i64, p: f32) -> Batch {
        let vocab = row.len() as i64;
        Batch::new(row, 1, vocab, &[k], &[p])
    }

    #[test]
    fn kth_facts_count_every_token_tied_with_the_kth_value() {
        let facts = kth_facts(&[1.0, 3.0, 2.0, 2.0, 2.0, 0.0], 2).unwrap();
        assert_eq!(facts, KthFacts { value: 2.0, kept: 4 });
        assert!(kth_facts(&[1.0, 2.0], 2).is_none(), "k == vocab is no top_k");
        let neg = f32::NEG_INFINITY;
        let facts = kth_facts(&[neg, 1.0, neg, neg, neg], 3).unwrap();
        assert_eq!(facts, KthFacts { value: neg, kept: 1 }, "-inf ties are never kept");
    }

    #[test]
    fn same_support_reports_ulps() {
        let b = batch(vec![0.0; 4], 2, 1.0);
        let one_ulp = f32::from_bits(0.5f32.to_bits() + 1);
        let outcome = compare_row(&b, 0, Some(64), (&[1, 2], &[0.5, 0.5]), (&[1, 2], &[0.5, one_ulp]), 16);
        assert_eq!(outcome, RowOutcome::Identical { max_ulps: 1 });
    }

    #[test]
    fn a_tie_group_wider_than_the_window_must_be_kept_whole() {
        // 100 tokens tie at the top; k = 3 keeps all 100 in stock; losing the 36 past a
        // window of 64 (v1) is a k-th tie cut, never excused, with or without top-p.
        let b = batch(vec![1.0; 100], 3, 1.0);
        let stock: Vec<i32> = (0..100).collect();
        let probs = vec![0.01; 100];
        let subset: Vec<i32> = (0..64).collect();
        let outcome = compare_row(&b, 0, Some(64), (&stock, &probs), (&subset, &probs[..64]), 16);
        assert_eq!(outcome, RowOutcome::KthTieCut);
        let b = batch(vec![1.0; 100], 3, 0.99);
        let outcome = compare_row(&b, 0, Some(64), (&stock, &probs), (&subset, &probs[..64]), 16);
        assert_eq!(outcome, RowOutcome::KthTieCut);
        // The same loss below a window that holds the whole group is plain unexplained.
        let outcome = compare_row(&b, 0, Some(128), (&stock, &probs), (&subset, &probs[..64]), 16);
        assert_eq!(outcome, RowOutcome::Unexplained);
    }

    #[test]
    fn a_boundary_tie_must_carry_the_same_class_mass() {
        // Same tokens' worth of a tied class, but the other gives the class member 2x mass.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, 5.0, -9.0], 5, 0.999);
        let outcome = compare_row(&b, 0, Some(64), (&[0, 4], &[0.1, 0.9]), (&[3, 4], &[0.2, 0.8]), 16);
        assert_eq!(outcome, RowOutcome::Unexplained);
    }

    #[test]
    fn a_class_count_off_by_rounding_is_explained_only_off_the_exact_boundary() {
        // 3 equal tokens (each 1/3, not a float32 value), p with 1 - p = 1/3 in float32:
        // keeping 2 or 3 members both follow from rounding.
        let third = 1.0f32 / 3.0;
        let b = batch(vec![0.0, 0.0, 0.0, f32::NEG_INFINITY], 3, 1.0 - third);
        let outcome = compare_row(&b, 0, Some(64), (&[0, 1], &[0.5, 0.5]), (&[0, 1, 2], &[third; 3]), 16);
        assert_eq!(outcome, RowOutcome::Explained(Explanation::TopPRounding));
        // 4 equal tokens (each 0.25, exact): 1 - p = 0.25 exactly, `<=` decides: no excuse.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, f32::NEG_INFINITY], 4, 0.75);
        let outcome = compare_row(&b, 0, Some(64), (&[1, 2, 3], &[1.0 / 3.0; 3]), (&[0, 1, 2, 3], &[0.25; 4]), 16);
        assert_eq!(outcome, RowOutcome::Unexplained);
    }

    #[test]
    fn a_different_copy_of_a_tied_boundary_value_is_explained() {
        // Four tokens at 0.0 and one at 5.0; the cut keeps one of the tied copies.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, 5.0, -9.0], 5, 0.999);
        let outcome = compare_row(&b, 0, Some(64), (&[0, 4], &[0.1, 0.9]), (&[3, 4], &[0.1, 0.9]), 16);
        assert_eq!(outcome, RowOutcome::Explained(Explanation::TopPBoundaryTie));
    }

    #[test]
    fn a_tie_copy_difference_is_judged_after_each_side_is_normalised() {
        // The ATen AVX2 case of kth-tie-spill-k1024 row 3, in small: stock's float32
        // denominator is off by one factor for the whole row (here 32 ulps), the copies kept
        // differ. The row's distribution is the same, so the copy difference is explained.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, 5.0, -9.0], 5, 0.999);
        let scaled = |p: f32| (f64::from(p) * (1.0 + 32.0 * f64::from(f32::EPSILON))) as f32;
        let stock = (&[0, 4][..], &[scaled(0.1), scaled(0.9)][..]);
        let outcome = compare_row(&b, 0, Some(64), stock, (&[3, 4], &[0.1, 0.9]), 16);
        assert_eq!(outcome, RowOutcome::Explained(Explanation::TopPBoundaryTie));
        // Mass moved between the classes is not a common factor: still a difference.
        let moved = (&[0, 4][..], &[scaled(0.1), 0.9][..]);
        let outcome = compare_row(&b, 0, Some(64), moved, (&[3, 4], &[0.1, 0.9]), 16);
        assert_ne!(outcome, RowOutcome::Explained(Explanation::TopPBoundaryTie));
    }

    #[test]
    fn a_missing_token_far_from_any_boundary_is_unexplained() {
        let b = batch(vec![0.0, 1.0, 2.0, 3.0, -9.0], 4, 1.0);
        let outcome = compare_row(&b, 0, Some(64), (&[0, 1, 2, 3], &[0.0; 4]), (&[1, 2, 3], &[0.0; 3]), 16);
        assert_eq!(outcome, RowOutcome::Unexplained);
        // On the stock path nothing may differ at all.
        let outcome = compare_row(&b, 0, None, (&[0, 1], &[0.0; 2]), (&[1], &[0.0]), 16);
        assert_eq!(outcome, RowOutcome::Unexplained);
    }

    #[test]
    fn keeping_one_more_tied_token_at_the_cut_is_unexplained() {
        // Four equal tokens, p = 0.75: stock cuts one (cumsum 0.25 <= 0.25); keeping all four
        // (`<` for `<=`) changes the count, so it is not a tie-order difference.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, f32::NEG_INFINITY], 4, 0.75);
        let stock = (&[1, 2, 3][..], &[1.0 / 3.0; 3][..]);
        let strict = (&[0, 1, 2, 3][..], &[0.25; 4][..]);
        assert_eq!(compare_row(&b, 0, Some(64), stock, strict, 16), RowOutcome::Unexplained);
    }

    #[test]
    fn rounding_means_near_the_threshold_but_not_on_it() {
        let cut =
            |threshold| TopPCut { ascending: vec![0.0, 1.0], cumulative: vec![0.25, 1.0], threshold, tolerance: 1e-6 };
        assert!(!cut(0.25).within_rounding(0.0), "exactly on 1 - p: `<=` decides, no ambiguity");
        assert!(cut(0.25 + 1e-7).within_rounding(0.0));
        let top =
            TopPCut { ascending: vec![0.0, 1.0], cumulative: vec![0.25, 1.0], threshold: 1.0 - 1e-7, tolerance: 1e-6 };
        assert!(!top.within_rounding(1.0), "the largest token is kept by keep-at-least-one");
        assert!(!cut(0.25 + 1e-5).within_rounding(0.0));
        assert!(!cut(0.25 + 1e-7).within_rounding(-1.0), "below the set: no cumulative sum");
    }

    #[test]
    fn ambiguity_is_judged_from_the_row_alone() {
        // A tie group wider than the window is no ambiguity since v2: stock's support exactly.
        let b = batch(vec![1.0; 100], 3, 1.0);
        let all: Vec<i32> = (0..100).collect();
        assert_eq!(ambiguity(&b, 0, Some(64), &all), None);
        // Four tied tokens, the cut keeps three: another three would do as well.
        let b = batch(vec![0.0, 0.0, 0.0, 0.0, f32::NEG_INFINITY], 4, 0.75);
        assert_eq!(ambiguity(&b, 0, Some(64), &[1, 2, 3]), Some(Explanation::TopPBoundaryTie));
        // Distinct values far from any boundary, or no top-p, or the stock path: unambiguous.
        let b = batch(vec![0.0, 1.0, 2.0, 3.0, -9.0], 4, 0.5);
        assert_eq!(ambiguity(&b, 0, Some(64), &[2, 3]), None);
        let b = batch(vec![0.0, 1.0, 2.0, 3.0, -9.0], 4, 1.0);
        assert_eq!(ambiguity(&b, 0, Some(64), &[0, 1, 2, 3]), None);
        assert_eq!(ambiguity(&b, 0, None, &[0, 1, 2, 3]), None);
    }

    #[test]
    fn symmetric_difference_of_sorted_ids() {
        assert_eq!(symmetric_difference(&[1, 3, 5], &[1, 4, 5, 9]), vec![3, 4, 9]);
        assert!(symmetric_difference(&[], &[]).is_empty());
    }
}
