//! The reference sampler (feature `reference`, tch 0.26.0 = libtorch 2.13.0): vLLM's stock
//! top-k/top-p sampler and the topk-subset-sampler fix, written op for op in Rust on libtorch
//! CPU tensors, so that `gaudi-fixes equiv` can prove the fix draws from the same distribution
//! as stock and `gaudi-fixes bench` can show what it saves.
//!
//! - [`batch`]: one sampler call's input (logits, per-row top_k/top_p) as vLLM passes it.
//! - [`stock`]: `apply_top_k_top_p_pytorch` (the HPU path); [`subset`]: one `topk(K)` window;
//!   [`pivot`]: rows with top_p and no top_k, the radix-select pivot on the value axis.
//! - [`filtered`]: what a filter step leaves to draw from, and the route (stock, subset window,
//!   fallback) that produced it; [`race`]: the exponential race both use to draw (vLLM's
//!   `random_sample`) and the subset's tie class.
//! - [`sampler`]: stock, subset or a mutant, behind one call.
//! - [`masks`]: sampling masks (support ids + logprobs as flat arrays), captured only on request.
//! - [`cases`]: generated and hand-built inputs; [`mutants`]: deliberately broken subsets.
//! - [`exact`]: support comparison and the allowed (explained) differences.
//! - [`statistical`]: the chi-square gate and its calibration; [`stats`]: the formulas.
//! - [`speculative`]: vLLM's rejection sampling (speculative steps), its proof of distribution
//!   and its mutants.
//! - [`suite`]: the `equiv` checks and verdict.
//! - [`vectors`]: `.npy` test vectors for the Python test of the patched vLLM code.
//! - [`bench`]: the timings of `gaudi-fixes bench`.
//!
//! Nothing here prints or reads flags: `commands::equiv` / `commands::bench` check the flags
//! and hand progress callbacks in; `report::equiv` / `report::bench` render the results.

pub mod batch;
pub mod bench;
pub mod cases;
pub mod exact;
pub mod filtered;
pub mod masks;
pub mod mutants;
pub mod pivot;
pub mod race;
pub mod sampler;
pub mod speculative;
pub mod statistical;
pub mod stats;
pub mod stock;
pub mod subset;
pub mod suite;
pub mod vectors;

use anyhow::{bail, Result};
use tch::Kind;

/// Set libtorch's intra-op threads (at least 1) and return what it now uses.
pub fn set_threads(threads: i32) -> i32 {
    tch::set_num_threads(threads);
    tch::get_num_threads()
}

/// `--threads`: libtorch's intra-op threads (`None`: every core); returns what it now uses.
pub fn torch_threads(threads: Option<i32>) -> Result<i32> {
    let threads = match threads {
        Some(n) if n < 1 => anyhow::bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get() as i32),
    };
    Ok(set_threads(threads))
}

/// The vLLM release whose stock sampler is mirrored. Both releases' `apply_top_k_top_p_pytorch`
/// are the same op for op except for the dtype of the top-p softmax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// v0.26.0: `logits_sort.softmax(dim=-1, dtype=torch.float32)` (its comment: a
    /// low-precision cumsum over the whole vocab makes the nucleus undershoot p).
    V0_26_0,
    /// v0.30.0: `logits_sort.softmax(dim=-1)`, i.e. in the logits' own dtype.
    V0_30_0,
}

impl Release {
    /// Parse `v0.26.0` / `0.26.0` (and the same for v0.30.0).
    pub fn parse(text: &str) -> Result<Release> {
        match text.trim_start_matches('v') {
            "0.26.0" => Ok(Release::V0_26_0),
            "0.30.0" => Ok(Release::V0_30_0),
            _ => {
                bail!("unknown release {text:?}; the reference sampler mirrors v0.26.0 and v0.30.0")
            }
        }
    }

    /// The release as written in the catalogue (`v0.26.0`).
    pub fn as_str(self) -> &'static str {
        match self {
            Release::V0_26_0 => "v0.26.0",
            Release::V0_30_0 => "v0.30.0",
        }
    }

    /// The dtype argument of the top-p softmax. vLLM's Sampler hands float32 logits to the
    /// top-k/top-p step, so on the suite's inputs both releases compute the same values; the
    /// difference would only show for logits arriving in bf16.
    pub fn top_p_softmax_kind(self) -> Option<Kind> {
        match self {
            Release::V0_26_0 => Some(Kind::Float),
            Release::V0_30_0 => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_with_or_without_v() {
        assert_eq!(Release::parse("v0.26.0").unwrap(), Release::V0_26_0);
        assert_eq!(Release::parse("0.30.0").unwrap(), Release::V0_30_0);
        assert!(Release::parse("v0.27.0").is_err());
        for release in [Release::V0_26_0, Release::V0_30_0] {
            assert_eq!(Release::parse(release.as_str()).unwrap(), release);
        }
    }

    #[test]
    fn only_v0_26_0_forces_a_float32_top_p_softmax() {
        assert_eq!(Release::V0_26_0.top_p_softmax_kind(), Some(Kind::Float));
        assert_eq!(Release::V0_30_0.top_p_softmax_kind(), None);
    }
}
