//! The topk-subset-sampler fix: instead of sorting the whole vocabulary, take one `topk(K)`
//! with K the smallest of 64/128/256/512/1024 covering the batch's largest top_k (few graph
//! shapes to compile), and apply each row's top_k and top_p inside that window exactly as
//! stock does over the sorted vocabulary: top_k by value (`<` the row's k-th value), top_p on
//! the ascending window with a float32 cumsum, `<= 1 - p`, keep at least one.
//!
//! v2 makes ties at the k-th value exact: the tie class T (every token whose logit equals the
//! k-th value, over the whole vocabulary, also past the window's edge) races as one aggregate
//! entry with the class's total mass, and a win is one member of T picked uniformly (see
//! [`filter`] and [`crate::reference::race`]). Beyond the `topk` it costs one vocabulary-wide
//! compare-and-count (T's members counted per block of 64 tokens in float32; the member of a
//! winning T is then found by compare-and-count over the block counts and inside one block),
//! as the patched vLLM code does, and no host sync.
//!
//! A batch where some row has no top_k (k = vocab) takes the top-p pivot path if it has a top_p
//! tensor ([`crate::reference::pivot`], issue 47; its top_k rows still take the window here),
//! else the stock path; a largest top_k above 1024 (below vocab) keeps the stock path. The window is the hint vllm_gaudi attaches (computed on the host from the rows
//! that sample), so routing adds no device sync.
//!
//! [`filter`] takes an optional [`Flaw`] so the suite can run deliberately broken variants of
//! this very code (see [`crate::reference::mutants`]); `None` is the fix, and
//! `Some(Flaw::NoTieCompletion)` is v1 (kept for `bench`'s before/after row).

use tch::{Device, Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::filtered::{Fallback, Filtered, Route};
use crate::reference::mutants::Flaw;
use crate::reference::race::{Counts, MemberPick, TieClass};
use crate::reference::Release;
use crate::reference::{pivot, stock};

/// The window sizes the fix compiles for, smallest first.
pub const WINDOWS: [i64; 5] = [64, 128, 256, 512, 1024];

/// The smallest window covering `max_top_k`, or `None` above 1024.
pub fn window_for(max_top_k: i64) -> Option<i64> {
    WINDOWS.into_iter().find(|&window| window >= max_top_k)
}

/// Which path the fix takes for per-row top_k `k` (`None`: no row has top_k) over `vocab`.
pub fn route(k: Option<&[i64]>, vocab: i64) -> Route {
    let Some(k) = k else {
        return Route::Fallback { reason: Fallback::RowWithoutTopK };
    };
    if k.iter().any(|&k| k >= vocab) {
        return Route::Fallback { reason: Fallback::RowWithoutTopK };
    }
    let max_top_k = k.iter().copied().max().unwrap_or(vocab);
    match window_for(max_top_k) {
        None => Route::Fallback { reason: Fallback::TopKAboveWindows { max_top_k } },
        // As the patched vLLM code: a window as wide as the vocabulary saves nothing.
        Some(window) if window >= vocab => Route::Fallback { reason: Fallback::WindowAboveVocab { window } },
        Some(window) => Route::Subset { window },
    }
}

/// The fix's filter step (`flaw: None`), or a deliberately broken variant of it.
///
/// v2 (`/work/handoff/SAMPLER_V2.md`), per row with t its k-th largest value:
/// 1. `topk(K)` window, ascending; mask window values `< t` (stock's by-value top-k);
/// 2. T = every token of the row with logit == t, over the whole vocabulary (a bf16 tie
///    group may run past the window): `eq`, its running count (cumsum) and nT; T's window
///    members are masked and T enters as ONE column 0 with logit `t + log(nT)`;
/// 3. top-p on the K+1 columns exactly as stock on its sorted vocabulary (T has the lowest
///    kept value, so it comes first in stock's ascending cumsum); inside T, stock drops the
///    members j = 1..nT with `j·p_t <= 1 − p`: `nT_kept = nT − min(nT, floor((1 − p)/p_t))`,
///    at least one when T holds the row's largest value; column 0 becomes `t + log(nT_kept)`.
///
/// No host sync: every step is a tensor op over the batch; the route comes from the host k.
pub fn filter(batch: &Batch, release: Release, flaw: Option<Flaw>) -> Filtered {
    filter_with(batch, release, flaw, false)
}

/// [`filter`], with `full_cumsum` choosing SAMPLER_V2.md's literal member counting (a
/// `[B, V]` int32 cumsum, then `(cs <= j).sum(1)`) instead of the blocked counts that give the
/// same numbers for less (see [`crate::reference::race::Counts`]); `bench` times both.
pub fn filter_with(batch: &Batch, release: Release, flaw: Option<Flaw>, full_cumsum: bool) -> Filtered {
    match route_batch(batch) {
        Route::Subset { window } => window_filter(batch, release, flaw, full_cumsum, window),
        Route::Pivot { window } => pivot::filter(batch, release, flaw, window),
        route => Filtered { route, ..stock::filter(batch, release) },
    }
}

/// The path the fix takes for `batch`, as the patched `forward_native` chooses it: every row
/// with top_k ≤ 1024 → the window ([`route`]); else rows without top_k and a top_p tensor →
/// the pivot path (with the window of the batch's top_k rows, 0 if none); else stock (a row with 1024 < top_k < vocab, or no top_p with a row without top_k).
pub fn route_batch(batch: &Batch) -> Route {
    let window_route = route(batch.k.as_deref(), batch.vocab);
    let vocab = batch.vocab;
    let without_top_k = batch.k.as_ref().is_none_or(|k| k.iter().any(|&k| k >= vocab));
    if matches!(window_route, Route::Subset { .. }) || !without_top_k {
        return window_route;
    }
    if batch.p.is_none() {
        return Route::Fallback { reason: Fallback::RowWithoutTopK };
    }
    let max_top_k = batch.k.as_deref().unwrap_or(&[]).iter().copied().filter(|&k| k < vocab).max();
    let Some(max_top_k) = max_top_k else {
        return Route::Pivot { window: 0 };
    };
    match window_for(max_top_k) {
        None => Route::Fallback { reason: Fallback::TopKAboveWindows { max_top_k } },
        Some(window) if window >= vocab => Route::Fallback { reason: Fallback::WindowAboveVocab { window } },
        Some(window) => Route::Pivot { window },
    }
}

/// The window path for `window` (K), the body of [`filter_with`]; the pivot path runs it for
/// the top_k rows of a mixed batch (rows without top_k are clamped to K, as in the patch, and
/// their result is not used).
pub fn window_filter(batch: &Batch, release: Release, flaw: Option<Flaw>, full_cumsum: bool, window: i64) -> Filtered {
    let route = Route::Subset { window };
    let window = if flaw == Some(Flaw::WindowTooSmall) { window / 2 } else { window };
    let k = batch.k_tensor().expect("the subset route implies per-row top_k");
    let k = match flaw {
        Some(Flaw::KOffByOne) => (k + 1).clamp_max(window),
        Some(Flaw::RolledK) => k.roll([1], [0]),
        _ => k,
    }
    .clamp(1, window);
    let p = batch.p_tensor();

    // topk returns the window descending; flipping gives stock's ascending order, so the
    // cumsum below adds the same values in the same order as stock's sorted cumsum.
    let (values, ids) = batch.logits.topk(window, -1, true, true);
    let mut values = values.flip([1]);
    let ids = ids.flip([1]);

    if matches!(flaw, Some(Flaw::NoTieCompletion | Flaw::MaskByPosition)) {
        // v1: the window alone (a tie group at t past the window's edge is lost).
        mask_top_k(&mut values, &k, flaw);
        if let Some(p) = &p {
            let _ = mask_top_p(&mut values, p, release, flaw);
        }
        return Filtered { logits: values, ids: Some(ids), route, tie: None, nucleus: None };
    }
    if flaw == Some(Flaw::TopPBeforeTopK) {
        if let Some(p) = &p {
            let _ = mask_top_p(&mut values, p, release, flaw);
        }
    }

    // 1. t and the in-window top-k mask; whether T holds the row's largest value.
    let t = values.gather(1, &(k.neg() + window).unsqueeze(1), false);
    let t_is_max = values.narrow(1, window - 1, 1).eq_tensor(&t).squeeze_dim(1);
    // 2. T over the whole vocabulary (passes 1 and 2), then out of the window.
    let members = batch.logits.eq_tensor(&t);
    let (counts, size) = Counts::new(&members, full_cumsum);
    let drop = values.le_tensor(&t);
    let _ = values.masked_fill_(&drop, f64::NEG_INFINITY);
    // 3. The aggregate column, then top-p over the K+1 columns.
    let mut logits = Tensor::cat(&[&t + size.log().unsqueeze(1), values], 1);
    let kept = match p.as_ref().filter(|_| flaw != Some(Flaw::TopPBeforeTopK)) {
        None => size.shallow_clone(),
        Some(p) => {
            let p_t = mask_top_p(&mut logits, p, release, flaw).select(1, 0) / &size;
            let room = (1f64 - p) / &p_t;
            let cut = if flaw == Some(Flaw::StrictTopP) { room.ceil() - 1.0 } else { room.floor() };
            // A member whose probability underflows to 0 sits at a cumsum <= 1 - p: cut.
            let cut = cut.where_self(&p_t.gt(0.0), &size).minimum(&size).clamp_min(0.0);
            let kept = &size - cut;
            if flaw == Some(Flaw::NoKeepOne) {
                kept
            } else {
                kept.clamp_min(1.0).where_self(&t_is_max, &kept)
            }
        }
    };
    logits.narrow(1, 0, 1).copy_(&(t + kept.log().unsqueeze(1)));
    let ids = Tensor::cat(&[ids.narrow(1, 0, 1).zeros_like(), ids], 1);
    let pick = if flaw == Some(Flaw::TieFirstMember) { MemberPick::First } else { MemberPick::Uniform };
    let tie = Some(TieClass { members, counts, size, kept, pick });
    Filtered { logits, ids: Some(ids), route, tie, nucleus: None }
}

/// Mask each row below its k-th largest value (`values` ascending, `k` ≤ window).
fn mask_top_k(values: &mut Tensor, k: &Tensor, flaw: Option<Flaw>) {
    let window = values.size()[1];
    let kth_column = (k.neg() + window).unsqueeze(1);
    let mask = if flaw == Some(Flaw::MaskByPosition) {
        // Keeps exactly k columns, dropping tokens tied with the k-th value.
        Tensor::arange(window, (Kind::Int64, Device::Cpu)).unsqueeze(0).lt_tensor(&kth_column)
    } else {
        values.lt_tensor(&values.gather(1, &kth_column, false))
    };
    let _ = values.masked_fill_(&mask, f64::NEG_INFINITY);
}

/// Mask each row's low tail whose cumulative probability is at most 1 − p (`values`
/// ascending); returns the probabilities the cut was computed from. With a tie class in
/// column 0 the caller decides that column's fate by count (its mask here is undone).
fn mask_top_p(values: &mut Tensor, p: &Tensor, release: Release, flaw: Option<Flaw>) -> Tensor {
    let window = values.size()[1];
    let probs = values.softmax(-1, release.top_p_softmax_kind());
    let cumulative = if flaw == Some(Flaw::DescendingCumsum) {
        probs.flip([1]).cumsum(-1, None::<Kind>).flip([1])
    } else {
        probs.cumsum(-1, None::<Kind>)
    };
    let threshold = (1f64 - p).unsqueeze(1);
    let mask = if flaw == Some(Flaw::StrictTopP) {
        cumulative.lt_tensor(&threshold)
    } else {
        cumulative.le_tensor(&threshold)
    };
    if flaw != Some(Flaw::NoKeepOne) {
        let _ = mask.narrow(1, window - 1, 1).fill_(0);
    }
    let _ = values.masked_fill_(&mask, f64::NEG_INFINITY);
    probs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_smallest_bucket_covering_the_largest_top_k() {
        assert_eq!(window_for(1), Some(64));
        assert_eq!(window_for(64), Some(64));
        assert_eq!(window_for(65), Some(128));
        assert_eq!(window_for(512), Some(512));
        assert_eq!(window_for(513), Some(1024));
        assert_eq!(window_for(1024), Some(1024));
        assert_eq!(window_for(1025), None);
    }

    #[test]
    fn batches_the_window_cannot_cover_keep_the_stock_path() {
        assert_eq!(route(Some(&[5, 100]), 32000), Route::Subset { window: 128 });
        assert_eq!(route(None, 32000), Route::Fallback { reason: Fallback::RowWithoutTopK });
        assert_eq!(route(Some(&[5, 32000]), 32000), Route::Fallback { reason: Fallback::RowWithoutTopK });
        assert_eq!(
            route(Some(&[5, 1025]), 32000),
            Route::Fallback { reason: Fallback::TopKAboveWindows { max_top_k: 1025 } }
        );
        assert_eq!(route(Some(&[100]), 100), Route::Fallback { reason: Fallback::RowWithoutTopK });
        assert_eq!(route(Some(&[90]), 100), Route::Fallback { reason: Fallback::WindowAboveVocab { window: 128 } });
        assert_eq!(route(Some(&[512, 3]), 512), Route::Fallback { reason: Fallback::RowWithoutTopK });
        // K == V saves nothing: stock, as in the patched vLLM code.
        assert_eq!(route(Some(&[511, 3]), 512), Route::Fallback { reason: Fallback::WindowAboveVocab { window: 512 } });
        assert_eq!(route(Some(&[511, 3]), 513), Route::Subset { window: 512 });
    }

    use crate::reference::masks::row_supports as supports;
    use crate::reference::race::Noise;

    /// Same supports and probabilities; on rows in `cut_inside` (top-p cuts inside a tie
    /// class, where which members stock keeps follows its unstable sort) the same count.
    fn assert_same_supports(batch: &Batch, cut_inside: &[usize]) {
        let subset = filter(batch, Release::V0_30_0, None);
        assert!(matches!(subset.route, Route::Subset { .. }));
        let stock = stock::filter(batch, Release::V0_30_0);
        for (r, (a, b)) in supports(&stock).into_iter().zip(supports(&subset)).enumerate() {
            if cut_inside.contains(&r) {
                assert_eq!(a.0.len(), b.0.len(), "row {r}: support size");
                continue;
            }
            assert_eq!(a.0, b.0, "row {r}: support");
            for (x, y) in a.1.iter().zip(&b.1) {
                assert!((x - y).abs() <= 1e-6 * x.max(*y), "row {r}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn the_window_filter_matches_stock_on_a_small_batch() {
        tch::manual_seed(3);
        let logits = Tensor::randn([4, 300], (Kind::Float, Device::Cpu));
        let host = Vec::<f32>::try_from(&logits.flatten(0, -1)).unwrap();
        let batch = Batch::new(host, 4, 300, &[1, 7, 40, 64], &[1.0, 0.9, 0.5, 0.95]);
        assert_eq!(route(batch.k.as_deref(), 300), Route::Subset { window: 64 });
        assert_same_supports(&batch, &[]);
    }

    /// Rows of `vocab` tokens: `tied` tokens at 1.0 from id `first`, 10 distinct values above
    /// them, and -1.0 elsewhere, so the tie group at the k-th value spans ranks 10..10+tied.
    fn spilling_rows(rows: usize, vocab: usize, tied: usize) -> Vec<f32> {
        (0..rows)
            .flat_map(|r| {
                let mut row = vec![-1.0f32; vocab];
                for i in 0..tied {
                    row[(r * 7 + i * 3) % vocab] = 1.0;
                }
                for i in 0..10 {
                    row[(r * 7 + tied * 3 + i) % vocab] = 1.0 + (i + 1) as f32 / 64.0;
                }
                row
            })
            .collect()
    }

    #[test]
    fn a_tie_group_past_the_window_is_kept_whole() {
        // k = 64 = K, 100 tied tokens at ranks 10..110: stock keeps all 110, v1 kept 64.
        let host = spilling_rows(3, 1000, 100);
        let batch = Batch::new(host, 3, 1000, &[64, 64, 20], &[1.0, 0.7, 1.0]);
        assert_same_supports(&batch, &[1]);
        let v1 = filter(&batch, Release::V0_30_0, Some(Flaw::NoTieCompletion));
        assert_eq!(supports(&v1)[0].0.len(), 64, "v1 loses the spilled part of the class");
    }

    #[test]
    fn top_p_inside_the_class_keeps_stocks_member_count() {
        // 8 equal tokens (1/8 each, exact), k = 1: p = 0.5 cuts j = 1..4 (j/8 <= 0.5).
        let mut row = vec![f32::NEG_INFINITY; 300];
        (0..8).for_each(|i| row[i * 11] = 0.0);
        let host = [row.clone(), row].concat();
        let batch = Batch::new(host, 2, 300, &[1, 1], &[0.5, 0.3]);
        let subset = supports(&filter(&batch, Release::V0_30_0, None));
        let stock = supports(&stock::filter(&batch, Release::V0_30_0));
        assert_eq!((subset[0].0.len(), subset[1].0.len()), (4, 3));
        assert_eq!((stock[0].0.len(), stock[1].0.len()), (4, 3));
        assert!(subset[0].1.iter().all(|&p| p == 0.25));
    }

    #[test]
    fn an_all_equal_row_draws_uniformly_over_the_whole_vocabulary() {
        tch::manual_seed(5);
        let vocab = 4096;
        let batch = Batch::new(vec![0.5; vocab], 1, vocab as i64, &[50], &[1.0]);
        let filtered = filter(&batch, Release::V0_30_0, None);
        let probs = Vec::<f32>::try_from(&filtered.probs().flatten(0, -1)).unwrap();
        let ids = Vec::<i64>::try_from(&filtered.token_ids().flatten(0, -1)).unwrap();
        let drawn = filtered.draw_row_counts(&probs, &ids, 0, 20_000);
        // 20 000 uniform draws over 4096 tokens hit ~4066 distinct ones (sd ~5); a window
        // of 64 or one favoured member hits at most 64.
        assert!(drawn.len() > 4000, "{} distinct tokens", drawn.len());
        let most = drawn.iter().map(|&(_, n)| n).max().unwrap();
        assert!(most < 25, "a token drawn {most} times of 20000 (expected ~4.9)");
    }

    #[test]
    fn coupled_noise_gives_stocks_token_on_spilling_ties() {
        tch::manual_seed(9);
        let rows = 64;
        let host = spilling_rows(rows, 1000, 100);
        let batch = Batch::new(host, rows as i64, 1000, &vec![64; rows], &vec![1.0; rows]);
        let noise = crate::reference::race::exponential_like(&batch.logits);
        let stock = stock::filter(&batch, Release::V0_30_0).draw(Noise::Coupled(&noise)).tokens;
        let subset = filter(&batch, Release::V0_30_0, None).draw(Noise::Coupled(&noise)).tokens;
        assert!(stock.equal(&subset), "{stock:?} vs {subset:?}");
        // The ties win often here (100 of 110 tokens): the test is not vacuous.
        let tokens = Vec::<i64>::try_from(&stock).unwrap();
        let tied = tokens.iter().enumerate().filter(|&(r, &t)| batch.row(r)[t as usize] == 1.0).count();
        assert!(tied > rows / 2, "{tied} of {rows} rows drew a tied token");
    }
}
