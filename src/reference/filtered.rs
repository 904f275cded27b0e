//! What a filter step leaves to draw from ([`Filtered`]: the processed logits, their token ids,
//! the subset's tie class) and the path that produced it ([`Route`]: stock, the subset window,
//! or the subset handing the batch to stock), with the draw itself: the exponential race of
//! [`crate::reference::race`] over those columns. Stock ([`crate::reference::stock`]) and the
//! subset ([`crate::reference::subset`]) both return a [`Filtered`]; neither needs the other's
//! file for it.

use tch::{Kind, Tensor};

use crate::reference::pivot::Nucleus;
use crate::reference::race::{exponential_like, race, race_counts, Draw, Noise, TieClass};

/// What a filter step leaves to draw from.
#[derive(Debug)]
pub struct Filtered {
    /// `[B, W]` processed logits, `-inf` where masked.
    pub logits: Tensor,
    /// `[B, W]` int64 token id of each column; `None` when column j is token j (W = V).
    pub ids: Option<Tensor>,
    /// Which path produced it (the stock sampler, the subset window, or a fallback to stock).
    pub route: Route,
    /// The subset's tie class at the k-th value, raced as column 0 (`None`: every column is
    /// one token, as in stock and the v1 subset).
    pub tie: Option<TieClass>,
    /// The pivot path's own weights and draw (issue 47; `None` on every other path).
    pub nucleus: Option<Box<Nucleus>>,
}

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
    /// The top-p pivot path (rows without top_k and a top_p tensor; issue 47), with the
    /// window path for the batch's top_k rows.
    Pivot {
        /// K of the batch's top_k rows (0: none).
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
    /// No row has top_k (k=None), or some row has none (k = vocab), so no window covers it,
    /// and the batch has no top_p tensor for the pivot path either.
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
            Route::Pivot { window: 0 } => f.write_str("pivot"),
            Route::Pivot { window } => write!(f, "pivot + subset K={window}"),
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

impl Filtered {
    /// `[B, W]` float32 probabilities, as `forward_native` computes them after filtering.
    /// On the pivot path the pivot rows' probabilities are the fix's own weights normalised.
    pub fn probs(&self) -> Tensor {
        let probs = self.logits.softmax(-1, Kind::Float);
        match &self.nucleus {
            Some(n) => {
                let own = &n.mass / n.mass.sum_dim_intlist(1, true, Kind::Float);
                own.where_self(&n.rows.unsqueeze(1), &probs)
            }
            None => probs,
        }
    }

    /// `[B, W]` float32 logprobs (the log of [`Filtered::probs`] on the pivot path).
    pub fn logprobs(&self) -> Tensor {
        match &self.nucleus {
            Some(n) => {
                let own = (&n.mass / n.mass.sum_dim_intlist(1, true, Kind::Float)).log();
                own.where_self(&n.rows.unsqueeze(1), &self.logits.log_softmax(-1, Kind::Float))
            }
            None => self.logits.log_softmax(-1, Kind::Float),
        }
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
        if let Some(nucleus) = &self.nucleus {
            return nucleus.draw(self, noise);
        }
        let probs = self.probs();
        let q = match (noise, &self.ids) {
            (Noise::Fresh, _) => exponential_like(&probs),
            (Noise::Coupled(full), Some(ids)) => full.gather(1, ids, false),
            (Noise::Coupled(full), None) => full.shallow_clone(),
        };
        // Column 0 of a tie class: fresh noise already holds an Exp(1) E there; coupled noise
        // puts min_T q · nT there and remembers the member holding the minimum.
        let member = self.tie.as_ref().map(|tie| match noise {
            Noise::Fresh => {
                let u = Tensor::rand([probs.size()[0]], (Kind::Float, probs.device()));
                tie.pick_member(&u)
            }
            Noise::Coupled(full) => {
                let (e, member) = tie.coupled(full);
                q.narrow(1, 0, 1).copy_(&e.unsqueeze(1));
                member
            }
        });
        let columns = race(&probs, &q);
        let mut tokens = match &self.ids {
            Some(ids) => ids.gather(1, &columns.unsqueeze(1), false).squeeze_dim(1),
            None => columns.shallow_clone(),
        };
        if let Some(member) = member {
            tokens = member.where_self(&columns.eq(0), &tokens);
        }
        Draw { tokens, columns }
    }

    /// `draws` independent fresh draws of row `r` through the same race and member pick as
    /// [`Filtered::draw`], as `(token, count)` pairs. Only positive-probability columns race
    /// (a zero scores 0 and never wins, so the distribution is the same, for less noise).
    /// Empty when the row has nothing to draw from.
    /// `probs` and `ids` are row `r` of [`Filtered::probs`] and [`Filtered::token_ids`] on the
    /// host (the caller computes them once per batch).
    /// A pivot row draws by the pivot path's inverse CDF instead ([`Nucleus::draw_row_counts`]).
    pub fn draw_row_counts(&self, probs: &[f32], ids: &[i64], r: usize, draws: usize) -> Vec<(i64, u64)> {
        if let Some(nucleus) = self.nucleus.as_ref().filter(|n| n.pivot_rows[r]) {
            return nucleus.draw_row_counts(r, draws);
        }
        let positive: Vec<usize> = (0..probs.len()).filter(|&c| probs[c] > 0.0 && probs[c].is_finite()).collect();
        if positive.is_empty() {
            return Vec::new();
        }
        let weights: Vec<f32> = positive.iter().map(|&c| probs[c]).collect();
        let counts = race_counts(&weights, draws);
        let mut tally = std::collections::BTreeMap::<i64, u64>::new();
        for (&column, count) in positive.iter().zip(counts).filter(|(_, n)| *n > 0) {
            match &self.tie {
                Some(tie) if column == 0 => {
                    for token in tie.pick_row(r as i64, count as usize) {
                        *tally.entry(token).or_default() += 1;
                    }
                }
                _ => *tally.entry(ids[column]).or_default() += count,
            }
        }
        tally.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coupled_noise_is_gathered_at_the_window_ids() {
        // A 2-column window over tokens 3 and 1 of a 4-token vocabulary.
        let filtered = Filtered {
            logits: Tensor::from_slice(&[0.0f32, 0.0]).view([1, 2]),
            ids: Some(Tensor::from_slice(&[3i64, 1]).view([1, 2])),
            route: Route::Subset { window: 2 },
            tie: None,
            nucleus: None,
        };
        // Token 1 gets tiny noise, so it wins the race.
        let noise = Tensor::from_slice(&[1.0f32, 0.01, 1.0, 1.0]).view([1, 4]);
        let draw = filtered.draw(Noise::Coupled(&noise));
        assert_eq!(Vec::<i64>::try_from(&draw.tokens).unwrap(), vec![1]);
        assert_eq!(Vec::<i64>::try_from(&draw.columns).unwrap(), vec![1]);
    }
}
