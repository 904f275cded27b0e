//! One sampler call's input, in the form vLLM's `TopKTopPSampler` receives it: float32 logits
//! `[B, V]`, and per-row `k` / `p` tensors that are `None` when no row of the batch uses them.

use tch::{Kind, Tensor};

/// Logits plus per-row top_k / top_p for one sampler call.
#[derive(Debug)]
pub struct Batch {
    /// `[B, V]` float32 logits (vLLM's Sampler casts to float32 before top-k/top-p).
    pub logits: Tensor,
    /// The same logits on the host, row-major, for the suite's own arithmetic.
    pub host: Vec<f32>,
    /// Rows.
    pub rows: i64,
    /// Vocabulary size.
    pub vocab: i64,
    /// Per-row top_k, `vocab` for a row without one; `None` when no row has one, as vLLM's
    /// input batch passes `k=None` then.
    pub k: Option<Vec<i64>>,
    /// Per-row top_p, 1.0 for a row without one; `None` when no row has one.
    pub p: Option<Vec<f32>>,
}

impl Batch {
    /// Build a batch from row-major logits and per-row `k` (≥ vocab or ≤ 0 = no top_k) and
    /// `p` (≥ 1.0 = no top_p), normalising both the way vLLM's input batch does.
    pub fn new(host: Vec<f32>, rows: i64, vocab: i64, k: &[i64], p: &[f32]) -> Batch {
        assert_eq!(host.len() as i64, rows * vocab, "logits must be rows × vocab");
        assert_eq!(k.len() as i64, rows, "one top_k per row");
        assert_eq!(p.len() as i64, rows, "one top_p per row");
        let k: Vec<i64> = k.iter().map(|&k| if k <= 0 || k >= vocab { vocab } else { k }).collect();
        let p: Vec<f32> = p.iter().map(|&p| p.min(1.0)).collect();
        let logits = Tensor::from_slice(&host).view([rows, vocab]);
        Batch {
            logits,
            host,
            rows,
            vocab,
            k: k.iter().any(|&k| k < vocab).then_some(k),
            p: p.iter().any(|&p| p < 1.0).then_some(p),
        }
    }

    /// Row `r`'s logits.
    pub fn row(&self, r: usize) -> &[f32] {
        let v = self.vocab as usize;
        &self.host[r * v..(r + 1) * v]
    }

    /// Row `r`'s top_k (`vocab` when it has none).
    pub fn k_of(&self, r: usize) -> i64 {
        self.k.as_ref().map_or(self.vocab, |k| k[r])
    }

    /// Row `r`'s top_p (1.0 when it has none).
    pub fn p_of(&self, r: usize) -> f32 {
        self.p.as_ref().map_or(1.0, |p| p[r])
    }

    /// `k` as the int64 tensor `[B]` the sampler indexes with.
    pub fn k_tensor(&self) -> Option<Tensor> {
        self.k.as_ref().map(|k| Tensor::from_slice(k).to_kind(Kind::Int64))
    }

    /// `p` as the float32 tensor `[B]`.
    pub fn p_tensor(&self) -> Option<Tensor> {
        self.p.as_ref().map(|p| Tensor::from_slice(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_without_top_k_or_top_p_normalise_like_vllm() {
        let batch = Batch::new(vec![0.0; 8], 2, 4, &[4, 0], &[1.0, 1.5]);
        assert!(batch.k.is_none(), "no row has top_k: k=None");
        assert!(batch.p.is_none(), "no row has top_p: p=None");
        let batch = Batch::new(vec![0.0; 8], 2, 4, &[2, -1], &[0.5, 1.0]);
        assert_eq!(batch.k, Some(vec![2, 4]));
        assert_eq!(batch.p, Some(vec![0.5, 1.0]));
        assert_eq!((batch.k_of(1), batch.p_of(1)), (4, 1.0));
    }
}
