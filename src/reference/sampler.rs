//! The samplers the suite and the benchmark compare, behind one call: stock, the subset fix,
//! and the fix with one deliberate flaw. Drawing and mask capture are shared (see
//! [`crate::reference::race`], [`crate::reference::masks`]), exactly as in vLLM where both
//! filters feed the same `random_sample`.

use tch::Tensor;

use crate::reference::batch::Batch;
use crate::reference::filtered::Filtered;
use crate::reference::masks::{self, MaskMode, SamplingMasks};
use crate::reference::mutants::Flaw;
use crate::reference::race::Noise;
use crate::reference::{stock, subset, Release};

/// Which filter to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    /// vLLM's `apply_top_k_top_p_pytorch`.
    Stock,
    /// The topk-subset-sampler fix.
    Subset,
    /// The fix as it was before v2 (no tie completion), for `bench`'s before/after row.
    SubsetV1,
    /// The fix with SAMPLER_V2.md's literal member counting (full `[B, V]` cumsum), for
    /// `bench`: the same numbers as [`Sampler::Subset`], more vocabulary-wide passes.
    SubsetFullCumsum,
    /// The fix with one deliberate mistake.
    Mutant(Flaw),
}

impl Sampler {
    /// The filter step: processed logits over the vocabulary or the subset's window.
    pub fn filter(self, batch: &Batch, release: Release) -> Filtered {
        match self {
            Sampler::Stock => stock::filter(batch, release),
            Sampler::Subset => subset::filter(batch, release, None),
            Sampler::SubsetV1 => subset::filter(batch, release, Some(Flaw::NoTieCompletion)),
            Sampler::SubsetFullCumsum => subset::filter_with(batch, release, None, true),
            Sampler::Mutant(flaw) => subset::filter(batch, release, Some(flaw)),
        }
    }

    /// A full sampler call: filter, draw, and capture sampling masks only when `mask` asks
    /// (with `None` nothing beyond the draw is computed or allocated).
    pub fn sample(
        self,
        batch: &Batch,
        release: Release,
        noise: Noise<'_>,
        mask: Option<MaskMode>,
    ) -> (Tensor, Option<SamplingMasks>) {
        let filtered = self.filter(batch, release);
        let draw = filtered.draw(noise);
        let masks = mask.map(|mode| masks::capture(&filtered, &draw, mode));
        (draw.tokens, masks)
    }
}
