//! Drawing a token: vLLM's `random_sample` — divide the probabilities by Exp(1) noise and take
//! the argmax (an exponential race, which picks token i with probability p_i without the
//! device sync of `torch.multinomial`) — applied to what a sampler's filter step left.

use tch::{Device, Kind, Tensor};

use crate::reference::subset::Route;

/// What a filter step leaves to draw from.
#[derive(Debug)]
pub struct Filtered {
    /// `[B, W]` processed logits, `-inf` where masked.
    pub logits: Tensor,
    /// `[B, W]` int64 token id of each column; `None` when column j is token j (W = V).
    pub ids: Option<Tensor>,
    /// Which path produced it (the stock sampler, the subset window, or a fallback to stock).
    pub route: Route,
}

/// Where the race's Exp(1) noise comes from.
#[derive(Debug, Clone, Copy)]
pub enum Noise<'a> {
    /// Fresh noise over the filtered columns, as each sampler draws on its own.
    Fresh,
    /// `[B, V]` noise over the whole vocabulary, gathered at the filtered columns' token ids:
    /// stock and subset then race with the same noise per token and must pick the same token.
    Coupled(&'a Tensor),
}

/// One draw per row.
#[derive(Debug)]
pub struct Draw {
    /// `[B]` int64 token ids.
    pub tokens: Tensor,
    /// `[B]` int64 column of each token in [`Filtered::logits`] (for the selected logprob).
    pub columns: Tensor,
}

impl Filtered {
    /// `[B, W]` float32 probabilities, as `forward_native` computes them after filtering.
    pub fn probs(&self) -> Tensor {
        self.logits.softmax(-1, Kind::Float)
    }

    /// `[B, W]` int64 token ids of the columns.
    pub fn token_ids(&self) -> Tensor {
        match &self.ids {
            Some(ids) => ids.shallow_clone(),
            None => {
                let (rows, width) = self.logits.size2().expect("filtered logits are [B, W]");
                Tensor::arange(width, (Kind::Int64, self.logits.device())).expand([rows, width], false)
            }
        }
    }

    /// Draw one token per row with the exponential race.
    pub fn draw(&self, noise: Noise<'_>) -> Draw {
        let probs = self.probs();
        let q = match (noise, &self.ids) {
            (Noise::Fresh, _) => exponential_like(&probs),
            (Noise::Coupled(full), Some(ids)) => full.gather(1, ids, false),
            (Noise::Coupled(full), None) => full.shallow_clone(),
        };
        let columns = race(&probs, &q);
        let tokens = match &self.ids {
            Some(ids) => ids.gather(1, &columns.unsqueeze(1), false).squeeze_dim(1),
            None => columns.shallow_clone(),
        };
        Draw { tokens, columns }
    }
}

/// Exp(1) noise shaped like `t` (vLLM: `torch.empty_like(probs).exponential_()`).
pub fn exponential_like(t: &Tensor) -> Tensor {
    let mut q = t.empty_like();
    let _ = q.exponential_(1.0);
    q
}

/// The race itself: `probs.div(q).argmax(dim=-1)` (vLLM's `sample_with_exponential_noise`).
pub fn race(probs: &Tensor, q: &Tensor) -> Tensor {
    probs.divide(q).argmax(-1, false)
}

/// How often each position wins in `draws` independent races over one row's probabilities
/// (only the positive ones: a zero probability scores 0 and can never win, so leaving those
/// columns out draws from exactly the same distribution, for a fraction of the noise).
pub fn race_counts(probs: &[f32], draws: usize) -> Vec<u64> {
    // Bound each chunk's noise tensor to ~4M floats.
    const CHUNK_ELEMENTS: usize = 1 << 22;
    let width = probs.len();
    let mut counts = vec![0u64; width];
    if width == 0 {
        return counts;
    }
    let row = Tensor::from_slice(probs).unsqueeze(0);
    let per_chunk = (CHUNK_ELEMENTS / width).max(1);
    let mut left = draws;
    while left > 0 {
        let n = left.min(per_chunk);
        let mut q = Tensor::empty([n as i64, width as i64], (Kind::Float, Device::Cpu));
        let _ = q.exponential_(1.0);
        let winners = race(&row, &q).bincount::<Tensor>(None, width as i64);
        let winners = Vec::<i64>::try_from(&winners).expect("bincount is int64");
        for (count, won) in counts.iter_mut().zip(winners) {
            *count += won as u64;
        }
        left -= n;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_race_picks_the_largest_ratio() {
        let probs = Tensor::from_slice(&[0.1f32, 0.6, 0.3, 0.2, 0.2, 0.6]).view([2, 3]);
        let q = Tensor::from_slice(&[1.0f32, 10.0, 1.0, 1.0, 0.1, 1.0]).view([2, 3]);
        assert_eq!(Vec::<i64>::try_from(&race(&probs, &q)).unwrap(), vec![2, 1]);
    }

    #[test]
    fn coupled_noise_is_gathered_at_the_window_ids() {
        // A 2-column window over tokens 3 and 1 of a 4-token vocabulary.
        let filtered = Filtered {
            logits: Tensor::from_slice(&[0.0f32, 0.0]).view([1, 2]),
            ids: Some(Tensor::from_slice(&[3i64, 1]).view([1, 2])),
            route: Route::Subset { window: 2 },
        };
        // Token 1 gets tiny noise, so it wins the race.
        let noise = Tensor::from_slice(&[1.0f32, 0.01, 1.0, 1.0]).view([1, 4]);
        let draw = filtered.draw(Noise::Coupled(&noise));
        assert_eq!(Vec::<i64>::try_from(&draw.tokens).unwrap(), vec![1]);
        assert_eq!(Vec::<i64>::try_from(&draw.columns).unwrap(), vec![1]);
    }

    #[test]
    fn race_counts_follow_the_probabilities() {
        tch::manual_seed(7);
        let counts = race_counts(&[0.25, 0.75], 40_000);
        assert_eq!(counts.iter().sum::<u64>(), 40_000);
        // 10 000 expected, sd ≈ 87: 5 sd either way.
        assert!((9_565..=10_435).contains(&counts[0]), "{counts:?}");
    }
}
