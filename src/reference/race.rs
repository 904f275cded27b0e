//! Drawing a token: vLLM's `random_sample` — divide the probabilities by Exp(1) noise and take
//! the argmax (an exponential race, which picks token i with probability p_i without the
//! device sync of `torch.multinomial`) — applied to what a sampler's filter step left.
//!
//! The subset sampler (v2) adds one entry to the race: its column 0 stands for the whole tie
//! class T at the k-th value (every token of the row with that logit, over the whole
//! vocabulary), with the class's total kept mass. When it wins, the token is one member of T:
//! with fresh noise a uniform one (`j = floor(u·nT)`, the (j+1)-th member found by counting
//! the running member count `≤ j`), with coupled noise the member with the smallest Exp(1)
//! noise (`E = min_T q · nT` is Exp(1), so the class races exactly as its best member does
//! under stock). See `/work/handoff/SAMPLER_V2.md` and [`crate::reference::subset`].

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
    /// The subset's tie class at the k-th value, raced as column 0 (`None`: every column is
    /// one token, as in stock and the v1 subset).
    pub tie: Option<TieClass>,
}

/// How a winning tie class picks its member under fresh noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberPick {
    /// Uniformly over the class (the fix).
    Uniform,
    /// Always the class's first member (a deliberately broken variant).
    First,
}

/// The tie class T at each row's k-th value t, over the whole vocabulary.
#[derive(Debug)]
pub struct TieClass {
    /// `[B, V]` bool: logit == t.
    pub members: Tensor,
    /// `[B, V]` int32 running count of members (`members.cumsum(1)`); its last column is nT.
    pub running: Tensor,
    /// `[B]` float32 nT, the class size.
    pub size: Tensor,
    /// `[B]` float32 members kept after top-p (nT when top-p does not cut inside T).
    pub kept: Tensor,
    /// Member choice under fresh noise.
    pub pick: MemberPick,
}

impl TieClass {
    /// The member token for uniforms `u` (`[N]`, in [0, 1)) given rows' running counts
    /// `running` (`[N, V]`) and sizes `size` (`[N]`): `j = min(floor(u·nT), nT−1)`, token =
    /// `(running <= j).sum(1)`, the index of the (j+1)-th member.
    pub fn pick_member(&self, running: &Tensor, size: &Tensor, u: &Tensor) -> Tensor {
        member_token(running, &self.member_index(size, u))
    }

    /// `[N]` int32 j: which member (0-based, in id order) uniforms `u` pick in classes of
    /// `size` members.
    pub fn member_index(&self, size: &Tensor, u: &Tensor) -> Tensor {
        match self.pick {
            MemberPick::Uniform => (u * size).floor().minimum(&(size - 1.0)),
            MemberPick::First => size.zeros_like(),
        }
        .to_kind(Kind::Int)
    }

    /// Coupled noise: `[B]` Exp(1) variate of the class (`min over T of q · nT`) and the member
    /// holding that minimum.
    pub fn coupled(&self, full: &Tensor) -> (Tensor, Tensor) {
        let (q_min, member) = full.masked_fill(&self.members.logical_not(), f64::INFINITY).min_dim(1, false);
        (q_min * &self.size, member)
    }

    /// `n` fresh member picks of row `r`: [`TieClass::member_index`] for all `n`, then
    /// [`member_token`] once per distinct j (the vocabulary-wide pass is the same for equal
    /// j; chunked so each `[m, V]` compare stays ~4M elements).
    pub fn pick_row(&self, r: i64, n: usize) -> Vec<i64> {
        let vocab = self.running.size()[1];
        let (running, size) = (self.running.narrow(0, r, 1), self.size.narrow(0, r, 1));
        let u = Tensor::rand([n as i64], (Kind::Float, Device::Cpu));
        let j = Vec::<i32>::try_from(&self.member_index(&size.expand([n as i64], false), &u)).expect("int32 j");
        let mut distinct = j.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let per_chunk = ((1usize << 22) / vocab.max(1) as usize).max(1);
        let mut token_of = std::collections::HashMap::with_capacity(distinct.len());
        for chunk in distinct.chunks(per_chunk) {
            let m = chunk.len() as i64;
            let tokens = member_token(&running.expand([m, vocab], false), &Tensor::from_slice(chunk));
            for (&j, token) in chunk.iter().zip(Vec::<i64>::try_from(&tokens).expect("int64 tokens")) {
                token_of.insert(j, token);
            }
        }
        j.iter().map(|j| token_of[j]).collect()
    }
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
        // Column 0 of a tie class: fresh noise already holds an Exp(1) E there; coupled noise
        // puts min_T q · nT there and remembers the member holding the minimum.
        let member = self.tie.as_ref().map(|tie| match noise {
            Noise::Fresh => {
                let u = Tensor::rand([probs.size()[0]], (Kind::Float, probs.device()));
                tie.pick_member(&tie.running, &tie.size, &u)
            }
            Noise::Coupled(full) => {
                let (e, member) = tie.coupled(full);
                let _ = q.narrow(1, 0, 1).copy_(&e.unsqueeze(1));
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
    pub fn draw_row_counts(&self, probs: &[f32], ids: &[i64], r: usize, draws: usize) -> Vec<(i64, u64)> {        let positive: Vec<usize> = (0..probs.len()).filter(|&c| probs[c] > 0.0 && probs[c].is_finite()).collect();
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

/// The (j+1)-th member of each row's class: `(running <= j).sum(1)` (`running` `[N, V]` int32
/// running member counts, `j` `[N]` int32).
pub fn member_token(running: &Tensor, j: &Tensor) -> Tensor {
    running.le_tensor(&j.unsqueeze(1)).sum_dim_intlist(1, false, Kind::Int64)
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
            tie: None,
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
