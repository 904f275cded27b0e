//! The topk-subset-sampler fix's path for rows with top_p and no top_k (issue 47, "the pivot
//! path": `_topk_subset_nucleus_pivot`, `_topk_subset_pick`, `_topk_subset_nucleus_sample` of
//! the patch), op for op on tch.
//!
//! e = exp(logit − row max) is in [0, 1], so its float32 bits read as int32 order as the values.
//! A radix select over those bits finds stock's top-p pivot (the value of the first token stock
//! keeps in its ascending order) in two fixed passes of a per-row histogram of the mass e
//! (`scatter_add_`): the high 16 bits (65,536 bins plus one below and one above), then the low
//! 15 bits of the tokens in the crossing bin. The threshold is (1 − p)·Z, Z the first
//! histogram's total; each pass takes its own "below" bin as the mass already passed and picks
//! the crossing among non-empty bins only. Tokens with e > pivot are kept; of the pivot's tie
//! class T (e == pivot) stock keeps `|T| − min(⌊((1 − p)Z − L)/pivot⌋, |T| − 1)` members (L: the
//! mass below the pivot), which the fix models as every member of T carrying
//! `pivot·kept/|T|` (equal by class).
//!
//! Unseeded rows draw by inverse CDF over those weights in id order ([`pick`]: the chunk of 64
//! ids by its running sum, then the place inside it); seeded rows race `weights / noise` over
//! the whole vocabulary (the coupled check's noise plays that part here). In a batch that also
//! has top_k rows (window > 0) those rows take the window path
//! ([`crate::reference::subset::window_filter`]) and each row's token is chosen by
//! `k < vocab`.
//!
//! What the suite compares is a [`Filtered`] in the window path's layout over V + 1 columns:
//! column 0 the tie class (pivot rows: T at the pivot; window rows: the window's class at the
//! k-th value), column j + 1 token j; the pivot rows' probabilities are the fix's own weights
//! normalised ([`Nucleus::mass`]), not a softmax of logits. Draws go through [`Nucleus`].

use tch::{Device, Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::filtered::{Filtered, Route};
use crate::reference::mutants::Flaw;
use crate::reference::race::{Counts, Draw, MemberPick, Noise, TieClass};
use crate::reference::subset;
use crate::reference::Release;

/// (shift, bits) per pass: 16 + 15 bits below the (zero) sign bit (`_TOPK_SUBSET_RADIX`).
pub const RADIX: [(i64, i64); 2] = [(15, 16), (0, 15)];

/// Ids per chunk of the inverse-CDF pick (`_TOPK_SUBSET_CHUNK`).
pub const CHUNK: i64 = 64;

/// The `mass-before-temperature` mutant's factor on `logit − max` (the Python test's 0.6: the
/// mass as if computed on logits another temperature had scaled).
const WRONG_TEMPERATURE: f64 = 0.6;

/// Stock's top-p cut of each row on the value axis.
#[derive(Debug)]
pub struct Cut {
    /// `[B, 1]` float32: the value of the first token stock keeps in its ascending order.
    pub pivot: Tensor,
    /// `[B, 1]` float32: the pivot's mass per member as kept, `pivot·kept/|T|`.
    pub tie_weight: Tensor,
    /// `[B, V]` bool: the pivot's tie class T (e == pivot).
    pub tied: Tensor,
    /// `[B, 1]` float32 |T|.
    pub num_tied: Tensor,
    /// `[B, 1]` float32: T's members stock keeps.
    pub kept: Tensor,
}

/// Number of true per row, `[B, 1]` int64 (the patch counts into int32; same numbers).
fn count(mask: &Tensor) -> Tensor {
    mask.sum_dim_intlist(-1, true, Kind::Int64)
}

/// `_topk_subset_nucleus_pivot(e, p)`. `mass`: the row mass Z to use instead of the first
/// histogram's total (only the `window-mass-for-row` mutant passes one).
pub fn nucleus_pivot(e: &Tensor, p: &Tensor, flaw: Option<Flaw>, mass: Option<&Tensor>) -> Cut {
    let batch = e.size()[0];
    let bits = e.view_dtype(Kind::Int);
    let mut prefix = Tensor::zeros([batch, 1], (Kind::Int, e.device()));
    let mut threshold: Option<Tensor> = None;
    let mut below = Tensor::zeros([batch, 1], (Kind::Float, e.device()));
    for (shift, width) in RADIX {
        let bins = 1i64 << width;
        let offset = prefix.bitwise_left_shift_tensor_scalar(width) - 1;
        let shifted = if shift > 0 { bits.bitwise_right_shift_tensor_scalar(shift) } else { bits.shallow_clone() };
        let index = (shifted - &offset).clamp(0, bins + 1).to_kind(Kind::Int64);
        let hist = Tensor::zeros([batch, bins + 2], (Kind::Float, e.device())).scatter_add(1, &index, e);
        let threshold = threshold.get_or_insert_with(|| {
            // The row's mass Z, from this histogram's own sums.
            let z = match mass {
                Some(z) => z.shallow_clone(),
                None => hist.sum_dim_intlist(-1, true, Kind::Float),
            };
            (1f64 - p.unsqueeze(1)) * z
        });
        let below_bin = hist.narrow(1, 0, 1);
        let inside = hist.narrow(1, 1, bins).cumsum(-1, Kind::Float);
        let rest = (&*threshold - &below_bin).clamp_min(0.0);
        let last = inside.narrow(1, bins - 1, 1);
        let place = count(&inside.le_tensor(&rest)).minimum(&count(&inside.lt_tensor(&last)));
        let step = if flaw == Some(Flaw::PivotOffByOne) { &place + 1 } else { place.shallow_clone() };
        prefix = prefix.bitwise_left_shift_tensor_scalar(width) + step.to_kind(Kind::Int);
        let before = inside.gather(1, &(&place - 1).clamp_min(0), false).masked_fill(&place.eq(0), 0.0);
        below = below_bin + before;
    }
    let threshold = threshold.expect("two passes");
    let pivot = prefix.view_dtype(Kind::Float);
    let tied = e.eq_tensor(&pivot);
    let num_tied = tied.sum_dim_intlist(-1, true, Kind::Float);
    let dropped = ((threshold - below) / &pivot).floor().clamp_min(0.0);
    let kept = (&num_tied - dropped.minimum(&(&num_tied - 1.0))).clamp_min(1.0);
    let tie_weight = &pivot * (&kept / &num_tied);
    Cut { pivot, tie_weight, tied, num_tied, kept }
}

/// `_topk_subset_pick(weights, u)`: an id per uniform, drawn proportional to `weights` (`[B, V]`
/// float32 ≥ 0, or `[1, V]` for one row drawn `N` times) by inverse CDF in id order with `u`
/// (`[N, 1]` in [0, 1); N = B unless weights is one row): the chunk of [`CHUNK`] ids by its
/// running sum, then the place inside it; only ids of positive weight can be picked. `[N]`
/// int64.
pub fn pick(weights: &Tensor, u: &Tensor) -> Tensor {
    let (rows, vocab) = weights.size2().expect("[B, V] weights");
    let n = u.size()[0];
    let full = vocab - vocab % CHUNK;
    let mut sums = weights.narrow(1, 0, full).view([rows, full / CHUNK, CHUNK]).sum_dim_intlist(-1, false, Kind::Float);
    if full < vocab {
        let tail = weights.narrow(1, full, vocab - full).sum_dim_intlist(-1, true, Kind::Float);
        sums = Tensor::cat(&[sums, tail], 1);
    }
    let chunks = sums.size()[1];
    let cum = sums.cumsum(-1, Kind::Float).expand([n, chunks], false);
    let target = u * cum.narrow(1, chunks - 1, 1);
    let chunk = count(&cum.le_tensor(&target)).minimum(&count(&cum.lt_tensor(&cum.narrow(1, chunks - 1, 1))));
    let before = cum.gather(1, &(&chunk - 1).clamp_min(0), false).masked_fill(&chunk.eq(0), 0.0);
    let ids = &chunk * CHUNK + Tensor::arange(CHUNK, (Kind::Int64, weights.device())).unsqueeze(0);
    let inside = weights
        .expand([n, vocab], false)
        .gather(1, &ids.clamp_max(vocab - 1), false)
        .masked_fill(&ids.ge(vocab), 0.0)
        .cumsum(-1, Kind::Float);
    let rest = (target - before).clamp_min(0.0);
    let place = count(&inside.le_tensor(&rest)).minimum(&count(&inside.lt_tensor(&inside.narrow(1, CHUNK - 1, 1))));
    (chunk * CHUNK + place).view([-1])
}

/// The pivot path's own draw, kept beside the [`Filtered`] view the checks compare.
#[derive(Debug)]
pub struct Nucleus {
    /// `[B]` bool: rows drawn through the pivot (no top_k: k == vocab).
    pub rows: Tensor,
    /// The same on the host.
    pub pivot_rows: Vec<bool>,
    /// `[B, V]` float32: the fix's weights (e above the pivot, `pivot·kept/|T|` on T, else 0).
    pub weights: Tensor,
    /// `[B, V + 1]` float32 mass per view column (column 0: T's kept mass `pivot·kept`;
    /// column j + 1: token j's weight outside T); the pivot rows' probabilities.
    pub mass: Tensor,
    /// The window path's own output for the top_k rows of a mixed batch.
    pub window: Option<Box<Filtered>>,
}

impl Nucleus {
    /// One draw per row: pivot rows by [`pick`] (fresh noise) or `(weights / noise).argmax`
    /// (coupled noise, as the patch races seeded rows), top_k rows through the window path,
    /// chosen per row by `k < vocab`. `columns` are columns of the V + 1 view.
    pub fn draw(&self, view: &Filtered, noise: Noise<'_>) -> Draw {
        let rows = self.weights.size()[0];
        let pivot_tokens = match noise {
            Noise::Fresh => pick(&self.weights, &Tensor::rand([rows, 1], (Kind::Float, Device::Cpu))),
            Noise::Coupled(full) => (&self.weights / full).argmax(1, false),
        };
        let tokens = match &self.window {
            Some(window) => pivot_tokens.where_self(&self.rows, &window.draw(noise).tokens),
            None => pivot_tokens,
        };
        let in_class = view
            .tie
            .as_ref()
            .expect("the pivot view has a tie class")
            .members
            .gather(1, &tokens.unsqueeze(1), false)
            .squeeze_dim(1);
        let columns = tokens.zeros_like().where_self(&in_class, &(&tokens + 1));
        Draw { tokens, columns }
    }

    /// `draws` fresh draws of pivot row `r` by [`pick`], as `(token, count)` pairs.
    pub fn draw_row_counts(&self, r: usize, draws: usize) -> Vec<(i64, u64)> {
        let weights = self.weights.narrow(0, r as i64, 1);
        let mut tally = std::collections::BTreeMap::<i64, u64>::new();
        // Bound each chunk's [N, C] / [N, 64] tensors.
        let per_chunk = 4096usize;
        let mut left = draws;
        while left > 0 {
            let n = left.min(per_chunk);
            let u = Tensor::rand([n as i64, 1], (Kind::Float, Device::Cpu));
            let tokens = Vec::<i64>::try_from(&pick(&weights, &u)).expect("int64 tokens");
            for token in tokens {
                *tally.entry(token).or_default() += 1;
            }
            left -= n;
        }
        tally.into_iter().collect()
    }
}

/// The pivot path's filter (`Route::Pivot { window }`), or a deliberately broken variant.
pub fn filter(batch: &Batch, release: Release, flaw: Option<Flaw>, window: i64) -> Filtered {
    let (rows, vocab) = (batch.rows, batch.vocab);
    let p = batch.p_tensor().expect("the pivot path implies a top_p tensor");
    let logits = &batch.logits;
    let shifted = logits - logits.amax(-1, true);
    let e = if flaw == Some(Flaw::MassBeforeTemperature) { (shifted * WRONG_TEMPERATURE).exp() } else { shifted.exp() };
    let window_filtered = (window > 0).then(|| Box::new(subset::window_filter(batch, release, flaw, false, window)));
    let mass = match (flaw, &window_filtered) {
        // The window's mass taken for the row's: Z over the row's topk(window) only.
        (Some(Flaw::WindowMassForRow), Some(_)) => {
            Some(e.topk(window, -1, true, true).0.sum_dim_intlist(-1, true, Kind::Float))
        }
        _ => None,
    };
    let cut = nucleus_pivot(&e, &p, flaw, mass.as_ref());
    let above = e.masked_fill(&e.lt_tensor(&cut.pivot), 0.0);
    let weights = if flaw == Some(Flaw::PivotTiesDropped) {
        e.masked_fill(&e.le_tensor(&cut.pivot), 0.0)
    } else {
        cut.tie_weight.expand_as(&e).where_self(&cut.tied, &above)
    };
    // The view: T's kept mass in column 0 (none when T is empty or dropped), the rest by id.
    let class_mass = if flaw == Some(Flaw::PivotTiesDropped) {
        cut.num_tied.zeros_like()
    } else {
        (&cut.pivot * &cut.kept).where_self(&cut.num_tied.gt(0.0), &cut.num_tied.zeros_like())
    };
    let outside = weights.masked_fill(&cut.tied, 0.0);
    let mass = Tensor::cat(&[&class_mass, &outside], 1);
    let pivot_rows: Vec<bool> = (0..rows as usize).map(|r| batch.k_of(r) >= vocab).collect();
    let rows_t = Tensor::from_slice(&pivot_rows);
    // Logits of the view (used for the support: finite where kept): T's column at its largest
    // member logit + log(kept), the others the row's logits where kept.
    let t_logit = logits.masked_fill(&cut.tied.logical_not(), f64::NEG_INFINITY).amax(-1, true);
    let class_logit = (t_logit + cut.kept.log()).masked_fill(&class_mass.le(0.0), f64::NEG_INFINITY);
    let own_logits = Tensor::cat(&[class_logit, logits.masked_fill(&outside.le(0.0), f64::NEG_INFINITY)], 1);
    let (view_logits, members, size, kept) = match &window_filtered {
        None => (own_logits, cut.tied.shallow_clone(), cut.num_tied.squeeze_dim(1), kept_of(&cut, &class_mass)),
        Some(w) => {
            let ids = w.ids.as_ref().expect("the window has ids");
            let width = ids.size()[1];
            let scattered = Tensor::full([rows, vocab], f64::NEG_INFINITY, (Kind::Float, Device::Cpu)).scatter(
                1,
                &ids.narrow(1, 1, width - 1),
                &w.logits.narrow(1, 1, width - 1),
            );
            let (w_col0, w_members, w_size, w_kept) = match &w.tie {
                Some(tie) => (
                    w.logits.narrow(1, 0, 1),
                    tie.members.shallow_clone(),
                    tie.size.shallow_clone(),
                    tie.kept.shallow_clone(),
                ),
                // The v1 mutants' window has no class column: all of it is in the window.
                None => (
                    Tensor::full([rows, 1], f64::NEG_INFINITY, (Kind::Float, Device::Cpu)),
                    Tensor::zeros([rows, vocab], (Kind::Bool, Device::Cpu)),
                    Tensor::zeros([rows], (Kind::Float, Device::Cpu)),
                    Tensor::zeros([rows], (Kind::Float, Device::Cpu)),
                ),
            };
            let w_view = if w.tie.is_some() {
                Tensor::cat(&[w_col0, scattered], 1)
            } else {
                // Without a class column the window's column 0 is a token: scatter all of it.
                let all = Tensor::full([rows, vocab], f64::NEG_INFINITY, (Kind::Float, Device::Cpu))
                    .scatter(1, ids, &w.logits);
                Tensor::cat(&[w_col0, all], 1)
            };
            let r1 = rows_t.unsqueeze(1);
            (
                own_logits.where_self(&r1, &w_view),
                cut.tied.where_self(&r1, &w_members),
                cut.num_tied.squeeze_dim(1).where_self(&rows_t, &w_size),
                kept_of(&cut, &class_mass).where_self(&rows_t, &w_kept),
            )
        }
    };
    let (counts, _) = Counts::new(&members, vocab < crate::reference::race::BLOCK);
    let ids = Tensor::cat(
        &[
            Tensor::zeros([rows, 1], (Kind::Int64, Device::Cpu)),
            Tensor::arange(vocab, (Kind::Int64, Device::Cpu)).unsqueeze(0).expand([rows, vocab], false),
        ],
        1,
    );
    let tie = TieClass { members, counts, size, kept, pick: MemberPick::Uniform };
    let nucleus = Nucleus { rows: rows_t, pivot_rows, weights, mass, window: window_filtered };
    Filtered {
        logits: view_logits,
        ids: Some(ids),
        route: Route::Pivot { window },
        tie: Some(tie),
        nucleus: Some(Box::new(nucleus)),
    }
}

/// T's kept members for the view (`[B]`; 0 when T is empty or carries no mass).
fn kept_of(cut: &Cut, class_mass: &Tensor) -> Tensor {
    cut.kept.where_self(&class_mass.gt(0.0), &cut.kept.zeros_like()).squeeze_dim(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::filtered::Fallback;
    use crate::reference::masks::row_supports as supports;
    use crate::reference::race::exponential_like;
    use crate::reference::stock;

    fn batch(rows: usize, vocab: usize, k: &[i64], p: &[f32], seed: i64) -> Batch {
        tch::manual_seed(seed);
        let logits = Tensor::randn([rows as i64, vocab as i64], (Kind::Float, Device::Cpu)) * 3.0;
        let host = Vec::<f32>::try_from(&logits.flatten(0, -1)).unwrap();
        Batch::new(host, rows as i64, vocab as i64, k, p)
    }

    #[test]
    fn batches_route_as_the_patched_forward_native() {
        let route = |k: &[i64], p: &[f32]| subset::route_batch(&Batch::new(vec![0.0; 4 * 2000], 4, 2000, k, p));
        // Every row with top_k <= 1024: the window path, with or without top_p.
        assert_eq!(route(&[5, 50, 20, 1], &[0.9, 1.0, 1.0, 1.0]), Route::Subset { window: 64 });
        // Rows without top_k and a top_p tensor: the pivot (window of the top_k rows, 0 if none).
        assert_eq!(route(&[0, 0, 0, 0], &[0.9, 1.0, 0.5, 1.0]), Route::Pivot { window: 0 });
        assert_eq!(route(&[0, 100, 0, 7], &[0.9, 1.0, 1.0, 1.0]), Route::Pivot { window: 128 });
        assert_eq!(route(&[2000, 1024, 0, 7], &[0.9, 1.0, 1.0, 1.0]), Route::Pivot { window: 1024 });
        // A row with 1024 < top_k < vocab, or no top_p with a row without top_k: stock.
        assert_eq!(
            route(&[0, 1025, 0, 7], &[0.9, 1.0, 1.0, 1.0]),
            Route::Fallback { reason: Fallback::TopKAboveWindows { max_top_k: 1025 } }
        );
        assert_eq!(route(&[0, 100, 0, 7], &[1.0; 4]), Route::Fallback { reason: Fallback::RowWithoutTopK });
        assert_eq!(route(&[0; 4], &[1.0; 4]), Route::Fallback { reason: Fallback::RowWithoutTopK });
        // The window must stay below the vocabulary (V = 1000: K = 1024 saves nothing).
        let small = Batch::new(vec![0.0; 2 * 1000], 2, 1000, &[0, 600], &[0.9, 1.0]);
        assert_eq!(
            subset::route_batch(&small),
            Route::Fallback { reason: Fallback::WindowAboveVocab { window: 1024 } }
        );
    }

    #[test]
    fn the_pivot_keeps_stocks_support_on_distinct_values() {
        // f32 logits over V = 3000: no ties; p from tiny to 1 (neither rows), and mixed rows.
        let p = [0.9, 0.5, 1e-6, 1.0, 0.99, 0.3];
        let b = batch(6, 3000, &[0, 0, 0, 0, 40, 0], &p, 1);
        let pivot = subset::filter(&b, Release::V0_30_0, None);
        assert_eq!(pivot.route, Route::Pivot { window: 64 });
        let stock = stock::filter(&b, Release::V0_30_0);
        for (r, (a, b)) in supports(&stock).into_iter().zip(supports(&pivot)).enumerate() {
            assert_eq!(a.0, b.0, "row {r}: support");
            let ulps = crate::reference::exact::normalized_ulps(&a.1, &b.1);
            assert!(ulps <= 16, "row {r}: {ulps} ulps");
        }
        // The mutants move it.
        for flaw in [Flaw::PivotOffByOne, Flaw::MassBeforeTemperature] {
            let mutant = supports(&subset::filter(&b, Release::V0_30_0, Some(flaw)));
            assert_ne!(mutant[0].0, supports(&stock)[0].0, "{flaw:?}");
        }
    }

    #[test]
    fn top_p_inside_the_pivots_tie_class_keeps_stocks_member_count() {
        // 8 equal tokens (1/8 each, exact): p = 0.5 cuts j = 1..4 (j/8 <= 0.5), 0.3 keeps 3.
        let mut row = vec![f32::NEG_INFINITY; 300];
        (0..8).for_each(|i| row[i * 11] = 0.0);
        let b = Batch::new([row.clone(), row].concat(), 2, 300, &[0, 0], &[0.5, 0.3]);
        let pivot = subset::filter(&b, Release::V0_30_0, None);
        let (ours, theirs) = (supports(&pivot), supports(&stock::filter(&b, Release::V0_30_0)));
        assert_eq!((ours[0].0.len(), ours[1].0.len()), (4, 3));
        assert_eq!((theirs[0].0.len(), theirs[1].0.len()), (4, 3));
        assert!(ours[0].1.iter().all(|&p| p == 0.25));
        // Every member carries pivot·kept/|T|: all 8 drawable, the class's mass 1.
        let n = pivot.nucleus.as_ref().unwrap();
        let weights = Vec::<f32>::try_from(&n.weights.get(0)).unwrap();
        assert_eq!(weights.iter().filter(|&&w| w == 0.5).count(), 8);
        // Dropping the class leaves nothing.
        let dropped = subset::filter(&b, Release::V0_30_0, Some(Flaw::PivotTiesDropped));
        assert!(supports(&dropped)[0].0.is_empty());
    }

    #[test]
    fn the_inverse_cdf_pick_follows_the_weights() {
        tch::manual_seed(3);
        // 200 ids (3 whole chunks and a short one), weight on ids 5 (1), 130 (3), 199 (4).
        let mut w = vec![0f32; 200];
        (w[5], w[130], w[199]) = (1.0, 3.0, 4.0);
        let weights = Tensor::from_slice(&w).unsqueeze(0);
        let u = Tensor::rand([40_000, 1], (Kind::Float, Device::Cpu));
        let tokens = Vec::<i64>::try_from(&pick(&weights, &u)).unwrap();
        let count = |id: i64| tokens.iter().filter(|&&t| t == id).count();
        assert_eq!(count(5) + count(130) + count(199), 40_000, "only positive weights are picked");
        // 5000, 15000, 20000 expected; sd <= 100: 5 sd.
        assert!((4_500..=5_500).contains(&count(5)), "{}", count(5));
        assert!((14_500..=15_500).contains(&count(130)), "{}", count(130));
    }

    #[test]
    fn coupled_noise_gives_stocks_token_on_pivot_and_window_rows() {
        let b = batch(16, 4096, &[0, 20, 0, 0, 64, 0, 0, 5, 0, 0, 0, 50, 0, 0, 0, 0], &[0.9; 16], 7);
        let noise = exponential_like(&b.logits);
        let ours = subset::filter(&b, Release::V0_30_0, None).draw(Noise::Coupled(&noise)).tokens;
        let theirs = stock::filter(&b, Release::V0_30_0).draw(Noise::Coupled(&noise)).tokens;
        assert!(ours.equal(&theirs), "{ours:?} vs {theirs:?}");
        // A top_k row given the pivot's token instead would differ (k = 5 vs top_p 0.9).
        let mass = subset::filter(&b, Release::V0_30_0, Some(Flaw::WindowMassForRow));
        assert!(
            !mass.draw(Noise::Coupled(&noise)).tokens.equal(&theirs) || {
                // Tokens may coincide by chance; the support cannot.
                supports(&mass)[0].0 != supports(&stock::filter(&b, Release::V0_30_0))[0].0
            }
        );
    }
}
