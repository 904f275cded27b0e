//! Test vectors for the Python test that runs the real, patched vLLM sampler
//! (`gaudi-fixes equiv --emit-vectors DIR`). Per case, `DIR/<case>/` holds:
//!
//! | file                   | dtype | shape | content                                         |
//! |------------------------|-------|-------|-------------------------------------------------|
//! | `logits.npy`           | `<f4` | [B,V] | the logits                                      |
//! | `k.npy`                | `<i8` | [B]   | top_k per row, V for a row without one          |
//! | `p.npy`                | `<f4` | [B]   | top_p per row, 1.0 for a row without one        |
//! | `noise.npy`            | `<f4` | [B,V] | Exp(1) noise over the whole vocabulary          |
//! | `expected_tokens.npy`  | `<i8` | [B]   | stock's token under that noise                  |
//! | `support_lengths.npy`  | `<i4` | [B]   | stock's support size per row                    |
//! | `support_ids.npy`      | `<i4` | [Σ]   | stock's support, ascending id within each row   |
//! | `support_logprobs.npy` | `<f4` | [Σ]   | stock's logprobs, aligned with `support_ids`    |
//!
//! and `DIR/manifest.json` lists the cases, with `k_is_none` / `p_is_none` (whether vLLM
//! passes `k=None` / `p=None` for the batch: call the sampler that way) and
//! `subset_may_differ`: the rows where a correct subset sampler may keep another support
//! than stock (a tie or rounding at the top-p boundary) and so draw another token; compare
//! only the other rows exactly. Since v2 a tie group at the k-th value crossing the window
//! is no reason: `kth_tie_spill_rows` lists those rows, where a correct sampler must give
//! stock's support and token (added field; format_version 1 readers ignore it). `.npy` is
//! written here (format v1.0, little-endian, C order) so the feature needs no numpy.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::reference::cases::{self, Case, Plan};
use crate::reference::exact::{self, Explanation, RowOutcome};
use crate::reference::filtered::Route;
use crate::reference::masks::{self, MaskMode};
use crate::reference::race::{exponential_like, Noise};
use crate::reference::sampler::Sampler;
use crate::reference::subset;
use crate::reference::Release;

/// Vocabulary of the emitted cases: big enough for every window edge (1024 < 2048), small
/// enough that all cases together stay a few MB.
const VOCAB: i64 = 2048;

/// Why a row with stock's support may still draw another token (never seen so far).
const NEAR_TIED_RACE: &str = "probabilities within ulps flip a near-tied race";

/// A value `.npy` can hold.
pub trait NpyElement: Copy {
    /// The numpy `descr` string.
    const DESCR: &'static str;
    /// Append the little-endian bytes.
    fn extend_le(self, out: &mut Vec<u8>);
}

impl NpyElement for f32 {
    const DESCR: &'static str = "<f4";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl NpyElement for i32 {
    const DESCR: &'static str = "<i4";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl NpyElement for i64 {
    const DESCR: &'static str = "<i8";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// An `.npy` v1.0 file: magic, version, header length, a Python-literal header dict padded
/// with spaces to a 64-byte boundary and ended by a newline (as numpy writes it), then data.
pub fn npy_bytes<T: NpyElement>(shape: &[usize], data: &[T]) -> Vec<u8> {
    assert_eq!(shape.iter().product::<usize>(), data.len(), "shape must match the data");
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}", T::DESCR);
    // magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + std::mem::size_of_val(data));
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for &x in data {
        x.extend_le(&mut out);
    }
    out
}

/// One case in `manifest.json`.
#[derive(Debug, Serialize)]
pub struct ManifestCase {
    /// Directory name under DIR.
    pub name: String,
    /// What the case exercises.
    pub why: &'static str,
    /// How the logits were produced (`f32` or `bf16`-rounded).
    pub dtype: cases::Dtype,
    /// B.
    pub batch: i64,
    /// V.
    pub vocab: i64,
    /// vLLM passes `k=None` for this batch (no row has top_k).
    pub k_is_none: bool,
    /// vLLM passes `p=None` for this batch (no row has top_p).
    pub p_is_none: bool,
    /// The path the fix takes (`subset K=…` or why it falls back to stock).
    pub route: String,
    /// Rows where a correct subset sampler may keep another support than stock (and so draw
    /// another token under the same noise), with the reason; compare support and token only
    /// on the other rows.
    pub subset_may_differ: Vec<MayDiffer>,
    /// Rows whose tie group at the k-th value reaches past the window (stock keeps more than
    /// K tokens): the tie completion must reproduce stock's support there.
    pub kth_tie_spill_rows: Vec<usize>,
}

/// A row where a correct subset sampler may pick another token.
#[derive(Debug, Serialize)]
pub struct MayDiffer {
    /// Row index.
    pub row: usize,
    /// Why.
    pub reason: &'static str,
}

/// `manifest.json`.
#[derive(Debug, Serialize)]
pub struct Manifest {
    /// Bumped if the layout changes.
    pub format_version: u32,
    /// The vLLM release whose stock sampler produced the expectations.
    pub release: &'static str,
    /// Base seed.
    pub seed: u64,
    /// Files in every case directory.
    pub files: [&'static str; 8],
    /// The cases.
    pub cases: Vec<ManifestCase>,
}

/// What `emit` wrote.
#[derive(Debug)]
pub struct Emitted {
    /// The directory.
    pub dir: PathBuf,
    /// Cases written.
    pub cases: usize,
    /// Bytes written in total.
    pub bytes: u64,
}

/// The cases worth emitting: every fixture plus one generated batch per configuration.
fn vector_cases(seed: u64) -> Vec<Case> {
    let plan = Plan { rows: 4, vocabs: vec![VOCAB], per_config: 1, seed };
    let mut all = cases::fixtures(seed, VOCAB as usize);
    all.extend(cases::generated(&plan));
    // The top-p pivot path (issue 47): rows without top_k, alone and mixed with top_k rows.
    all.extend(cases::pivot_fixtures(seed, VOCAB as usize));
    // Two rows of the model-sized bf16 spill at top_k 64 (≈2.4 MB of logits and noise).
    all.extend(cases::model_tie_spills(seed, cases::MODEL_VOCAB, 2).into_iter().take(1));
    all
}

/// Write the test vectors into `dir` (created if missing).
pub fn emit(dir: &Path, release: Release, seed: u64) -> Result<Emitted> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut manifest = Manifest {
        format_version: 1,
        release: release.as_str(),
        seed,
        files: [
            "logits.npy",
            "k.npy",
            "p.npy",
            "noise.npy",
            "expected_tokens.npy",
            "support_lengths.npy",
            "support_ids.npy",
            "support_logprobs.npy",
        ],
        cases: Vec::new(),
    };
    let mut bytes = 0u64;
    for case in vector_cases(seed) {
        let case_dir = dir.join(&case.name);
        std::fs::create_dir_all(&case_dir).with_context(|| format!("creating {}", case_dir.display()))?;
        let batch = &case.batch;
        let (b, v) = (batch.rows as usize, batch.vocab as usize);

        tch::manual_seed(case.seed as i64);
        let noise = exponential_like(&Tensor::empty([batch.rows, batch.vocab], (Kind::Float, Device::Cpu)));
        let stock = Sampler::Stock.filter(batch, release);
        let draw = stock.draw(Noise::Coupled(&noise));
        let support = masks::capture(&stock, &draw, MaskMode::Support);
        let expected = Vec::<i64>::try_from(&draw.tokens).context("reading stock tokens")?;

        let subset = Sampler::Subset.filter(batch, release);
        let subset_tokens =
            Vec::<i64>::try_from(&subset.draw(Noise::Coupled(&noise)).tokens).context("reading subset tokens")?;
        let stock_rows = masks::support_rows(&stock, masks::Values::Probs);
        let subset_rows = masks::support_rows(&subset, masks::Values::Probs);
        let window = match subset::route_batch(batch) {
            Route::Subset { window } | Route::Pivot { window } => Some(window),
            _ => None,
        };
        // Every row whose support is ambiguous for any correct subset sampler is listed; the
        // reference fix itself may pick another token only on those rows.
        let mut subset_may_differ = Vec::new();
        let mut kth_tie_spill_rows = Vec::new();
        for row in 0..b {
            if window
                .is_some_and(|w| exact::kth_facts(batch.row(row), batch.k_of(row)).is_some_and(|f| f.kept as i64 > w))
            {
                kth_tie_spill_rows.push(row);
            }
            let (stock_ids, _) = stock_rows.row(row);
            let mut reason = exact::ambiguity(batch, row, window, stock_ids).map(Explanation::describe);
            if subset_tokens[row] != expected[row] {
                let outcome = exact::compare_row(batch, row, window, stock_rows.row(row), subset_rows.row(row), 16);
                match outcome {
                    RowOutcome::Explained(_) if reason.is_some() => {}
                    // Same support: only a race between near-equal scores can differ.
                    RowOutcome::Identical { .. } => reason = Some(NEAR_TIED_RACE),
                    _ => {
                        let message = format!(
                            "reference subset sampler differs from stock on {} row {row} without explanation; run {{0}}",
                            case.name
                        );
                        return Err(crate::advice::Advised::new(message, vec![crate::advice::Advice::Equiv]).into());
                    }
                }
            }
            if let Some(reason) = reason {
                subset_may_differ.push(MayDiffer { row, reason });
            }
        }

        let noise_host = Vec::<f32>::try_from(&noise.flatten(0, -1)).context("reading noise")?;
        let k: Vec<i64> = (0..b).map(|r| batch.k_of(r)).collect();
        let p: Vec<f32> = (0..b).map(|r| batch.p_of(r)).collect();
        let total = support.ids.len();
        let files: [(&str, Vec<u8>); 8] = [
            ("logits.npy", npy_bytes(&[b, v], &batch.host)),
            ("k.npy", npy_bytes(&[b], &k)),
            ("p.npy", npy_bytes(&[b], &p)),
            ("noise.npy", npy_bytes(&[b, v], &noise_host)),
            ("expected_tokens.npy", npy_bytes(&[b], &expected)),
            ("support_lengths.npy", npy_bytes(&[b], &support.lengths)),
            ("support_ids.npy", npy_bytes(&[total], &support.ids)),
            ("support_logprobs.npy", npy_bytes(&[total], &support.logprobs)),
        ];
        for (name, data) in files {
            let path = case_dir.join(name);
            std::fs::write(&path, &data).with_context(|| format!("writing {}", path.display()))?;
            bytes += data.len() as u64;
        }
        manifest.cases.push(ManifestCase {
            name: case.name.clone(),
            why: case.why,
            dtype: case.dtype,
            batch: batch.rows,
            vocab: batch.vocab,
            k_is_none: batch.k.is_none(),
            p_is_none: batch.p.is_none(),
            route: subset::route_batch(batch).to_string(),
            subset_may_differ,
            kth_tie_spill_rows,
        });
    }
    let path = dir.join("manifest.json");
    let text = serde_json::to_string_pretty(&manifest).context("serialising the manifest")?;
    std::fs::write(&path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    bytes += text.len() as u64;
    Ok(Emitted { dir: dir.to_path_buf(), cases: manifest.cases.len(), bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_matches_what_numpy_writes() {
        let bytes = npy_bytes(&[2, 3], &[0f32; 6]);
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let mut expected = b"\x93NUMPY\x01\x00".to_vec();
        // 10 + 59 + 1 = 70 bytes unpadded -> 128: 58 spaces.
        expected.extend_from_slice(&118u16.to_le_bytes());
        expected.extend_from_slice(dict.as_bytes());
        expected.extend_from_slice(" ".repeat(58).as_bytes());
        expected.push(b'\n');
        assert_eq!(&bytes[..128], &expected[..]);
        assert_eq!(bytes.len(), 128 + 24);
    }

    #[test]
    fn one_dimensional_shapes_have_a_trailing_comma_and_data_is_little_endian() {
        let bytes = npy_bytes(&[2], &[1i64, -2]);
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.starts_with("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"));
        assert!(header.ends_with('\n'));
        assert_eq!((10 + header_len) % 64, 0);
        assert_eq!(&bytes[10 + header_len..], &[1, 0, 0, 0, 0, 0, 0, 0, 254, 255, 255, 255, 255, 255, 255, 255]);
        let empty = npy_bytes::<i32>(&[0], &[]);
        assert!(std::str::from_utf8(&empty[10..]).unwrap().contains("'<i4'"));
        assert_eq!(empty.len() % 64, 0);
    }
}
