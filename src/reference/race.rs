//! Drawing a token: vLLM's `random_sample` — divide the probabilities by Exp(1) noise and take
//! the argmax (an exponential race, which picks token i with probability p_i without the
//! device sync of `torch.multinomial`) — applied to what a sampler's filter step left
//! ([`crate::reference::filtered::Filtered::draw`]).
//!
//! The subset sampler (v2) adds one entry to the race: its column 0 stands for the whole tie
//! class T at the k-th value (every token of the row with that logit, over the whole
//! vocabulary), with the class's total kept mass. When it wins, the token is one member of T:
//! with fresh noise a uniform one (`j = floor(u·nT)`, the (j+1)-th member found by counting
//! the running member count `≤ j`), with coupled noise the member with the smallest Exp(1)
//! noise (`E = min_T q · nT` is Exp(1), so the class races exactly as its best member does
//! under stock). See `/work/handoff/SAMPLER_V2.md` and [`crate::reference::subset`].

use tch::{Device, Kind, Tensor};

/// How a winning tie class picks its member under fresh noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberPick {
    /// Uniformly over the class (the fix).
    Uniform,
    /// Always the class's first member (a deliberately broken variant).
    First,
}

/// How the class's running member count is held.
#[derive(Debug)]
pub enum Counts {
    /// As SAMPLER_V2.md writes it: `[B, V]` int32 `members.cumsum(1)`; the (j+1)-th member is
    /// `(running <= j).sum(1)` (two more vocabulary-wide passes).
    Full(Tensor),
    /// The same numbers, cheaper, as the patched vLLM code counts them: member counts per
    /// whole block of [`BLOCK`] tokens (a float32 sum of the 0/1 indicator), running over the
    /// `[B, V/BLOCK]` whole blocks in float32 (exact: integers far below 2^24; no cast, no
    /// cat); a shorter last block when `BLOCK` does not divide V is only added to nT. The
    /// (j+1)-th member is found by a compare-and-count over the running counts (the block;
    /// past the last whole block: the short one), then a cumsum and a compare-and-count
    /// inside that one block. No binary search, no bool reinterpreted as another dtype: only
    /// ops Gaudi's compile backend lowers (see the fix's `device_ops.txt`).
    Blocked {
        /// Tokens per block ([`BLOCK`]).
        block: i64,
        /// `[B, V/block]` float32 running count of members at each whole block's end.
        running: Tensor,
    },
}

/// The tie class T at each row's k-th value t, over the whole vocabulary.
#[derive(Debug)]
pub struct TieClass {
    /// `[B, V]` bool: logit == t.
    pub members: Tensor,
    /// Running member counts.
    pub counts: Counts,
    /// `[B]` float32 nT, the class size.
    pub size: Tensor,
    /// `[B]` float32 members kept after top-p (nT when top-p does not cut inside T).
    pub kept: Tensor,
    /// Member choice under fresh noise.
    pub pick: MemberPick,
}

/// Tokens per block of the blocked member count: the patched vLLM code's `_TOPK_SUBSET_CHUNK`.
pub const BLOCK: i64 = 64;

/// The number of whole blocks over a vocabulary of `vocab` (a shorter last one, when
/// [`BLOCK`] does not divide it, is not among them).
pub fn blocks(vocab: i64) -> i64 {
    vocab / BLOCK
}

impl Counts {
    /// The counts of `members` (`[B, V]` bool), and nT (`[B]` float32).
    pub fn new(members: &Tensor, full: bool) -> (Counts, Tensor) {
        let (rows, vocab) = members.size2().expect("[B, V] members");
        if full {
            let running = members.cumsum(1, Kind::Int);
            let size = running.narrow(1, vocab - 1, 1).squeeze_dim(1).to_kind(Kind::Float);
            return (Counts::Full(running), size);
        }
        let block = BLOCK;
        // The subset route needs a window (>= 64) below the vocabulary: one whole block at least.
        assert!(vocab >= block, "blocked counts need at least one whole block of {block} tokens");
        let full = blocks(vocab) * block;
        // The indicator as float32 (the patched code writes it over the logits in place).
        let indicator = members.to_kind(Kind::Float);
        let running = indicator
            .narrow(1, 0, full)
            .view([rows, full / block, block])
            .sum_dim_intlist(&[-1i64][..], false, Kind::Float)
            .cumsum(1, Kind::Float);
        // A copy, not a view of the running counts: callers may not alias them.
        let whole = running.select(1, full / block - 1).copy();
        let size = if full < vocab {
            whole + indicator.narrow(1, full, vocab - full).sum_dim_intlist(&[-1i64][..], false, Kind::Float)
        } else {
            whole
        };
        (Counts::Blocked { block, running }, size)
    }

    /// Rows `r .. r+1` expanded to `n` rows (views).
    fn row_expanded(&self, r: i64, n: i64) -> Counts {
        match self {
            Counts::Full(running) => Counts::Full(running.narrow(0, r, 1).expand([n, -1], false)),
            Counts::Blocked { block, running } => {
                Counts::Blocked { block: *block, running: running.narrow(0, r, 1).expand([n, -1], false) }
            }
        }
    }

    /// `[N, V]` int32 running member count (the full cumsum; the blocked form computes it
    /// here, for mask capture only).
    pub fn running(&self, members: &Tensor) -> Tensor {
        match self {
            Counts::Full(running) => running.shallow_clone(),
            Counts::Blocked { .. } => members.cumsum(1, Kind::Int),
        }
    }

    /// `[N]` int64: the (j+1)-th member of each row's class (`members` `[N, V]` bool, `j`
    /// `[N]` int32 < the row's nT).
    pub fn member_token(&self, members: &Tensor, j: &Tensor) -> Tensor {
        match self {
            Counts::Full(running) => member_token(running, j),
            Counts::Blocked { block, running } => {
                let vocab = members.size2().expect("[N, V] members").1;
                let target = (j + 1).to_kind(Kind::Float).unsqueeze(1);
                // The block holding the (j+1)-th member: the running counts are non-decreasing,
                // so the first block reaching the target is the number of whole blocks below it
                // (all of them: the short last block).
                let at = running.lt_tensor(&target).sum_dim_intlist(1, true, Kind::Int);
                // The members before that block (none before the first).
                let before = running.gather(1, &(&at - 1).clamp_min(0), false).masked_fill(&at.eq(0), 0);
                // Its ids. Past the vocabulary (the short last block) they read its last entry
                // again: after every member of the block, so they cannot move the place found.
                let ids = &at * *block + Tensor::arange(*block, (Kind::Int, members.device())).unsqueeze(0);
                let inside =
                    members.gather(1, &ids.clamp_max(vocab - 1), false).to_kind(Kind::Float).cumsum(1, Kind::Float);
                let offset = inside.lt_tensor(&(target - before)).sum_dim_intlist(1, true, Kind::Int);
                (at * *block + offset).squeeze_dim(1).to_kind(Kind::Int64)
            }
        }
    }
}

impl TieClass {
    /// The member token for uniforms `u` (`[B]`, in [0, 1)): `j = min(floor(u·nT), nT−1)`,
    /// token = the (j+1)-th member (`(running <= j).sum(1)`).
    pub fn pick_member(&self, u: &Tensor) -> Tensor {
        self.counts.member_token(&self.members, &self.member_index(&self.size, u))
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
        let vocab = self.members.size()[1];
        let (members, size) = (self.members.narrow(0, r, 1), self.size.narrow(0, r, 1));
        let u = Tensor::rand([n as i64], (Kind::Float, Device::Cpu));
        let j = Vec::<i32>::try_from(&self.member_index(&size.expand([n as i64], false), &u)).expect("int32 j");
        let mut distinct = j.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let per_chunk = ((1usize << 22) / vocab.max(1) as usize).max(1);
        let mut token_of = std::collections::HashMap::with_capacity(distinct.len());
        for chunk in distinct.chunks(per_chunk) {
            let m = chunk.len() as i64;
            let counts = self.counts.row_expanded(r, m);
            let tokens = counts.member_token(&members.expand([m, vocab], false), &Tensor::from_slice(chunk));
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
    /// `[B]` int64 column of each token in [`crate::reference::filtered::Filtered::logits`] (for the selected logprob).
    pub columns: Tensor,
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
    fn whole_blocks_of_the_vocabulary() {
        assert_eq!(blocks(151_936), 2374);
        assert_eq!(blocks(32_000), 500);
        assert_eq!(blocks(4099), 64, "64 whole blocks of 64 (and a short one of 3)");
        assert_eq!(blocks(13), 0);
        assert_eq!(blocks(64), 1);
        assert_eq!(blocks(65), 1);
    }

    #[test]
    fn blocked_counts_find_the_same_member_as_the_full_cumsum() {
        tch::manual_seed(4);
        // V = 600 = 9 blocks of 64 and one of 24; sparse rows, a full row, the last token
        // alone (in the short block), the first.
        let members = Tensor::rand([6, 600], (Kind::Float, Device::Cpu)).lt(0.1);
        let _ = members.get(3).fill_(1);
        let _ = members.get(4).fill_(0);
        let _ = members.get(4).narrow(0, 599, 1).fill_(1);
        let _ = members.get(5).fill_(0);
        let _ = members.get(5).narrow(0, 0, 1).fill_(1);
        let (full, n_full) = Counts::new(&members, true);
        let (blocked, n_blocked) = Counts::new(&members, false);
        assert!(n_full.equal(&n_blocked));
        assert!(matches!(blocked, Counts::Blocked { block: 64, .. }));
        let sizes = Vec::<f32>::try_from(&n_full).unwrap();
        for j in 0..600 {
            let j: Vec<i32> = sizes.iter().map(|&n| j.min(n as i32 - 1).max(0)).collect();
            let j = Tensor::from_slice(&j);
            let (a, b) = (full.member_token(&members, &j), blocked.member_token(&members, &j));
            assert!(a.equal(&b), "j {j:?}: {a:?} vs {b:?}");
        }
        // And it is a member: the (j+1)-th, in id order.
        let last = blocked.member_token(&members, &Tensor::from_slice(&[0i32, 0, 0, 599, 0, 0]));
        assert_eq!(Vec::<i64>::try_from(&last).unwrap()[3..], [599, 599, 0]);
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
