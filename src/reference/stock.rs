//! vLLM's stock top-k/top-p filter, `apply_top_k_top_p_pytorch`, op for op as the HPU path
//! runs it (`forward_native`, `allow_cpu_sync=False`, so no top-k-only shortcut): sort the
//! whole vocabulary ascending, mask below each row's k-th value, then mask the low tail whose
//! cumulative probability is at most 1 − p, keeping at least one token, and scatter back.

use tch::{Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::filtered::{Filtered, Route};
use crate::reference::Release;

/// The stock filter over a batch: processed logits over the whole vocabulary.
pub fn filter(batch: &Batch, release: Release) -> Filtered {
    let logits = apply_top_k_top_p(&batch.logits, batch.k_tensor().as_ref(), batch.p_tensor().as_ref(), release);
    Filtered { logits, ids: None, route: Route::Stock, tie: None, nucleus: None }
}

/// `apply_top_k_top_p_pytorch(logits, k, p)`; returns the processed logits (stock writes them
/// into `logits` in place; here the caller's tensor is left alone).
pub fn apply_top_k_top_p(logits: &Tensor, k: Option<&Tensor>, p: Option<&Tensor>, release: Release) -> Tensor {
    if k.is_none() && p.is_none() {
        return logits.shallow_clone();
    }
    let (mut logits_sort, logits_idx) = logits.sort(-1, false);
    let vocab = logits_sort.size()[1];

    if let Some(k) = k {
        // Index of each row's k-th largest value in ascending order: size(1) - k.
        let kth_index = (k.to_kind(Kind::Int64).neg() + vocab).unsqueeze(1);
        let kth_value = logits_sort.gather(1, &kth_index, false);
        // `<` keeps every token tied with the k-th value: masking is by value, not position.
        let top_k_mask = logits_sort.lt_tensor(&kth_value);
        let _ = logits_sort.masked_fill_(&top_k_mask, f64::NEG_INFINITY);
    }

    if let Some(p) = p {
        let probs_sort = logits_sort.softmax(-1, release.top_p_softmax_kind());
        let probs_sum = probs_sort.cumsum(-1, None::<Kind>);
        let threshold = (1f64 - p).unsqueeze(1);
        let top_p_mask = probs_sum.le_tensor(&threshold);
        // "at least one": the largest token is never masked.
        let _ = top_p_mask.narrow(1, vocab - 1, 1).fill_(0);
        let _ = logits_sort.masked_fill_(&top_p_mask, f64::NEG_INFINITY);
    }

    logits.copy().scatter_(-1, &logits_idx, &logits_sort)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn processed(logits: &[f32], k: Option<&[i64]>, p: Option<&[f32]>) -> Vec<f32> {
        let rows = k.map(|k| k.len()).or(p.map(|p| p.len())).unwrap_or(1) as i64;
        let x = Tensor::from_slice(logits).view([rows, -1]);
        let k = k.map(Tensor::from_slice);
        let p = p.map(Tensor::from_slice);
        let out = apply_top_k_top_p(&x, k.as_ref(), p.as_ref(), Release::V0_30_0);
        Vec::<f32>::try_from(&out.flatten(0, -1)).unwrap()
    }

    const NEG: f32 = f32::NEG_INFINITY;

    #[test]
    fn top_k_keeps_every_token_tied_with_the_kth_value() {
        // k = 2: the 2nd largest value is 2.0, held by three tokens; all three stay.
        let out = processed(&[1.0, 2.0, 3.0, 2.0, 2.0, 0.0], Some(&[2]), None);
        assert_eq!(out, vec![NEG, 2.0, 3.0, 2.0, 2.0, NEG]);
    }

    #[test]
    fn top_p_masks_tails_at_most_one_minus_p_and_keeps_one() {
        // Four equal tokens: cumsum 0.25, 0.5, 0.75, 1.0. p = 0.5 masks cumsum <= 0.5 (two);
        // p = 1e-9 has 1 - p == 1.0 in float32, so only the keep-at-least-one rule keeps a token.
        let out = processed(&[0.0; 8], None, Some(&[0.5, 1e-9]));
        assert_eq!(out[..4].iter().filter(|x| x.is_finite()).count(), 2);
        assert_eq!(out[4..].iter().filter(|x| x.is_finite()).count(), 1);
    }

    #[test]
    fn no_k_and_no_p_leave_the_logits_untouched() {
        assert_eq!(processed(&[0.5, -1.0], None, None), vec![0.5, -1.0]);
    }
}
