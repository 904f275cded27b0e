//! The topk-subset-sampler fix: instead of sorting the whole vocabulary, take one `topk(K)`
//! with K the smallest of 64/128/256/512/1024 covering the batch's largest top_k (few graph
//! shapes to compile), and apply each row's top_k and top_p inside that window exactly as
//! stock does over the sorted vocabulary: top_k by value (`<` the row's k-th value), top_p on
//! the ascending window with a float32 cumsum, `<= 1 - p`, keep at least one.
//!
//! A batch where some row has no top_k (k = vocab) or the largest top_k exceeds 1024 keeps the
//! stock path. The largest top_k is read from the host copy of k (vLLM's input batch keeps one),
//! so routing adds no device sync.
//!
//! [`filter`] takes an optional [`Flaw`] so the suite can run deliberately broken variants of
//! this very code (see [`crate::reference::mutants`]); `None` is the fix.

use tch::{Device, Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::mutants::Flaw;
use crate::reference::race::Filtered;
use crate::reference::stock;
use crate::reference::Release;

/// The window sizes the fix compiles for, smallest first.
pub const WINDOWS: [i64; 5] = [64, 128, 256, 512, 1024];

/// The path a batch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "path", rename_all = "snake_case")]
pub enum Route {
    /// The stock sampler itself.
    Stock,
    /// The subset path with a `topk(window)`.
    Subset {
        /// K.
        window: i64,
    },
    /// The subset sampler handing the batch to the stock path.
    Fallback {
        /// Why.
        reason: Fallback,
    },
}

/// Why a batch keeps the stock path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fallback {
    /// No row has top_k (k=None), or some row has none (k = vocab), so no window covers it.
    RowWithoutTopK,
    /// The batch's largest top_k is above the largest window.
    TopKAboveWindows {
        /// The batch's largest top_k.
        max_top_k: i64,
    },
    /// The window would be at least as wide as the vocabulary (nothing to save; the patched
    /// vLLM code takes the stock path there too).
    WindowAboveVocab {
        /// K.
        window: i64,
    },
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Stock => f.write_str("stock"),
            Route::Subset { window } => write!(f, "subset K={window}"),
            Route::Fallback { reason: Fallback::RowWithoutTopK } => f.write_str("fallback: a row without top_k"),
            Route::Fallback { reason: Fallback::TopKAboveWindows { max_top_k } } => {
                write!(f, "fallback: top_k {max_top_k} > 1024")
            }
            Route::Fallback { reason: Fallback::WindowAboveVocab { window } } => {
                write!(f, "fallback: K={window} >= vocab")
            }
        }
    }
}

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
pub fn filter(batch: &Batch, release: Release, flaw: Option<Flaw>) -> Filtered {
    let route = route(batch.k.as_deref(), batch.vocab);
    let Route::Subset { window } = route else {
        return Filtered { route, ..stock::filter(batch, release) };
    };
    let window = if flaw == Some(Flaw::WindowTooSmall) { window / 2 } else { window };
    let k = batch.k_tensor().expect("the subset route implies per-row top_k");
    let k = match flaw {
        Some(Flaw::KOffByOne) => (k + 1).clamp_max(window),
        Some(Flaw::RolledK) => k.roll([1], [0]),
        Some(Flaw::WindowTooSmall) => k.clamp_max(window),
        _ => k,
    };
    let p = batch.p_tensor();

    // topk returns the window descending; flipping gives stock's ascending order, so the
    // cumsum below adds the same values in the same order as stock's sorted cumsum.
    let (values, ids) = batch.logits.topk(window, -1, true, true);
    let mut values = values.flip([1]);
    let ids = ids.flip([1]);

    if flaw == Some(Flaw::TopPBeforeTopK) {
        if let Some(p) = &p {
            mask_top_p(&mut values, p, release, flaw);
        }
        mask_top_k(&mut values, &k, flaw);
    } else {
        mask_top_k(&mut values, &k, flaw);
        if let Some(p) = &p {
            mask_top_p(&mut values, p, release, flaw);
        }
    }
    Filtered { logits: values, ids: Some(ids), route }
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

/// Mask each row's low tail whose cumulative probability is at most 1 − p (`values` ascending).
fn mask_top_p(values: &mut Tensor, p: &Tensor, release: Release, flaw: Option<Flaw>) {
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

    #[test]
    fn the_window_filter_matches_stock_on_a_small_batch() {
        tch::manual_seed(3);
        let logits = Tensor::randn([4, 300], (Kind::Float, Device::Cpu));
        let host = Vec::<f32>::try_from(&logits.flatten(0, -1)).unwrap();
        let batch = Batch::new(host, 4, 300, &[1, 7, 40, 64], &[1.0, 0.9, 0.5, 0.95]);
        let subset = filter(&batch, Release::V0_30_0, None);
        assert_eq!(subset.route, Route::Subset { window: 64 });
        let stock = stock::filter(&batch, Release::V0_30_0);
        // Scatter the window back over the vocabulary and compare the supports.
        let full = Tensor::full([4, 300], f64::NEG_INFINITY, (Kind::Float, Device::Cpu)).scatter(
            1,
            subset.ids.as_ref().unwrap(),
            &subset.logits,
        );
        let same = full.isfinite().eq_tensor(&stock.logits.isfinite()).all();
        assert!(bool::try_from(&same).unwrap());
    }
}
