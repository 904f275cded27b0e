//! Sampling masks: for each row, the support the sampler drew from (token ids, int32, ascending)
//! and its behaviour logprobs (float32), as flat arrays plus per-row lengths — the layout of
//! the "sampling masks as arrays" design (no per-row Python objects). Two modes:
//! `support` returns a logprob per support token, `selected` only the drawn token's.
//!
//! Capture runs only when a caller passes a [`MaskMode`]; otherwise nothing here executes.

use serde::Serialize;
use tch::{Kind, Tensor};

use crate::reference::filtered::Filtered;
use crate::reference::race::Draw;

/// Which logprobs a mask carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskMode {
    /// One logprob per row: the drawn token's.
    Selected,
    /// One logprob per support token, aligned with the ids.
    Support,
}

/// The masks of one sampler call.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingMasks {
    /// The mode they were captured in.
    pub mode: MaskMode,
    /// Support size per row.
    pub lengths: Vec<i32>,
    /// All rows' support token ids, concatenated; ascending within each row.
    pub ids: Vec<i32>,
    /// `support`: aligned with `ids`; `selected`: one per row.
    pub logprobs: Vec<f32>,
}

/// Per-row supports with one value per support token, flattened (ids ascending per row).
#[derive(Debug, Clone, PartialEq)]
pub struct FlatRows {
    /// Support size per row.
    pub lengths: Vec<i32>,
    /// Token ids, concatenated.
    pub ids: Vec<i32>,
    /// The value gathered at each id, concatenated.
    pub values: Vec<f32>,
}

impl FlatRows {
    /// Row `r`'s ids and values.
    pub fn row(&self, r: usize) -> (&[i32], &[f32]) {
        let start: usize = self.lengths[..r].iter().map(|&n| n as usize).sum();
        let end = start + self.lengths[r] as usize;
        (&self.ids[start..end], &self.values[start..end])
    }
}

/// What [`support_rows`] gathers at each support token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// float32 probabilities.
    Probs,
    /// float32 logprobs.
    Logprobs,
}

/// The support of each row (tokens whose processed logit is finite) with their probability or
/// logprob, ids ascending. A subset tie class is expanded to its kept members (the last
/// `nT_kept` by id: a stable ascending sort, as stock's CPU sort, cuts the first ones), each
/// with the class's mass over `nT_kept`.
pub fn support_rows(filtered: &Filtered, what: Values) -> FlatRows {
    let columns = match what {
        Values::Probs => filtered.probs(),
        Values::Logprobs => filtered.logprobs(),
    };
    let (ids, values, kept) = match (&filtered.ids, &filtered.tie) {
        // Column j is token j: already ascending.
        (None, _) => (filtered.token_ids(), columns, filtered.logits.isfinite()),
        // Scatter the window over the vocabulary, then T's kept members: column j is token j.
        (Some(ids), Some(tie)) => {
            let (rows, vocab) = tie.members.size2().expect("[B, V] members");
            let width = ids.size()[1];
            let (empty, member) = match what {
                Values::Probs => (0.0, columns.select(1, 0) / &tie.kept),
                Values::Logprobs => (f64::NEG_INFINITY, columns.select(1, 0) - tie.kept.log()),
            };
            let window_kept = filtered.logits.narrow(1, 1, width - 1).isfinite();
            let kept = Tensor::zeros([rows, vocab], (Kind::Bool, columns.device())).scatter(
                1,
                &ids.narrow(1, 1, width - 1),
                &window_kept,
            );
            let full = Tensor::full([rows, vocab], empty, (Kind::Float, columns.device())).scatter(
                1,
                &ids.narrow(1, 1, width - 1),
                &columns.narrow(1, 1, width - 1),
            );
            let running = tie.counts.running(&tie.members);
            let last_kept = running.gt_tensor(&(&tie.size - &tie.kept).unsqueeze(1));
            let in_class = tie.members.logical_and(&last_kept);
            let full = member.unsqueeze(1).expand_as(&full).where_self(&in_class, &full);
            let ids = Tensor::arange(vocab, (Kind::Int64, columns.device())).expand([rows, vocab], false);
            (ids, full, kept.logical_or(&in_class))
        }
        // A window is in logit order; masked columns get the largest id so they sort last.
        (Some(ids), None) => {
            let kept = filtered.logits.isfinite();
            let keyed = ids.masked_fill(&kept.logical_not(), i64::MAX);
            let (sorted, order) = keyed.sort(1, false);
            (sorted, columns.gather(1, &order, false), kept.gather(1, &order, false))
        }
    };
    let lengths = kept.sum_dim_intlist(1, false, Kind::Int);
    FlatRows {
        lengths: Vec::<i32>::try_from(&lengths).expect("int32 lengths"),
        ids: Vec::<i32>::try_from(&ids.masked_select(&kept).to_kind(Kind::Int)).expect("int32 ids"),
        values: Vec::<f32>::try_from(&values.masked_select(&kept).to_kind(Kind::Float)).expect("float32 values"),
    }
}

/// Per row: (support ids, probabilities) of a sampler's filter output, for the tests that
/// compare two samplers' supports.
#[cfg(test)]
pub(crate) fn row_supports(filtered: &Filtered) -> Vec<(Vec<i32>, Vec<f32>)> {
    let rows = support_rows(filtered, Values::Probs);
    (0..rows.lengths.len())
        .map(|r| {
            let (ids, probs) = rows.row(r);
            (ids.to_vec(), probs.to_vec())
        })
        .collect()
}

/// Capture the masks of one call from its filter output and draw.
pub fn capture(filtered: &Filtered, draw: &Draw, mode: MaskMode) -> SamplingMasks {
    let rows = support_rows(filtered, Values::Logprobs);
    let logprobs = match mode {
        MaskMode::Support => rows.values,
        MaskMode::Selected => {
            let all = filtered.logprobs();
            let mut selected = all.gather(1, &draw.columns.unsqueeze(1), false).squeeze_dim(1);
            if let Some(tie) = &filtered.tie {
                // A class win: the member's share of the class's mass.
                let member = all.select(1, 0) - tie.kept.log();
                selected = member.where_self(&draw.columns.eq(0), &selected);
            }
            Vec::<f32>::try_from(&selected).expect("float32 logprobs")
        }
    };
    SamplingMasks { mode, lengths: rows.lengths, ids: rows.ids, logprobs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::filtered::Route;
    use crate::reference::race::Noise;

    fn window() -> Filtered {
        // Two rows of a 3-column window over a 10-token vocabulary, in ascending logit order.
        let neg = f32::NEG_INFINITY;
        Filtered {
            logits: Tensor::from_slice(&[neg, 1.0, 2.0, 0.0, 0.0, 5.0]).view([2, 3]),
            ids: Some(Tensor::from_slice(&[4i64, 9, 2, 7, 3, 5]).view([2, 3])),
            route: Route::Subset { window: 3 },
            tie: None,
            nucleus: None,
        }
    }

    #[test]
    fn support_mode_lists_ids_ascending_with_aligned_logprobs() {
        let filtered = window();
        let draw = filtered.draw(Noise::Fresh);
        let masks = capture(&filtered, &draw, MaskMode::Support);
        assert_eq!(masks.lengths, vec![2, 3]);
        assert_eq!(masks.ids, vec![2, 9, 3, 5, 7]);
        // Row 0: token 2 has logit 2.0, token 9 has 1.0.
        let (l2, l9) = (masks.logprobs[0], masks.logprobs[1]);
        assert!((l2 - l9 - 1.0).abs() < 1e-6);
        assert!(((l2.exp() + l9.exp()) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn selected_mode_carries_the_drawn_tokens_logprob() {
        let filtered = window();
        let draw = filtered.draw(Noise::Fresh);
        let masks = capture(&filtered, &draw, MaskMode::Selected);
        assert_eq!(masks.logprobs.len(), 2);
        let support = capture(&filtered, &draw, MaskMode::Support);
        let tokens = Vec::<i64>::try_from(&draw.tokens).unwrap();
        let rows = FlatRows { lengths: support.lengths, ids: support.ids, values: support.logprobs };
        for (r, token) in tokens.iter().enumerate() {
            let (ids, logprobs) = rows.row(r);
            let at = ids.iter().position(|&id| i64::from(id) == *token).expect("drawn token in support");
            assert_eq!(logprobs[at], masks.logprobs[r]);
        }
    }
}
