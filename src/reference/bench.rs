//! `gaudi-fixes bench`: wall time of one sampler call (filter + exponential race), stock vs the
//! subset fix, against two floors — `amax` (one pass over the logits, the least any sampler
//! must do) and a bare `topk(K)` (the fix's one big op) — and the cost of capturing sampling
//! masks. All ratios come from one run on one machine (libtorch CPU here: HPU speed is not
//! measured by this command).

use std::time::Instant;

use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::reference::batch::Batch;
use crate::reference::masks::MaskMode;
use crate::reference::race::Noise;
use crate::reference::sampler::Sampler;
use crate::reference::Release;

/// Median milliseconds of each operation at one shape.
#[derive(Debug, Clone, Serialize)]
pub struct Timings {
    /// Stock filter + race.
    pub stock: f64,
    /// Subset filter + race, no masks (v2: exact ties).
    pub subset: f64,
    /// The v1 subset (no tie completion), filter + race.
    pub subset_v1: f64,
    /// The subset with SAMPLER_V2.md's literal member counting (full `[B, V]` cumsum).
    pub subset_full_cumsum: f64,
    /// Subset with masks in `selected` mode.
    pub subset_masks_selected: f64,
    /// Subset with masks in `support` mode.
    pub subset_masks_support: f64,
    /// `amax` over the logits.
    pub floor_amax: f64,
    /// `topk(K)` alone.
    pub topk: f64,
}

/// Ratios at one shape: the median over repeats of the per-repeat ratio (the two operations
/// of a ratio run back to back in every repeat).
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    /// How many times faster the subset is than stock.
    pub stock_over_subset: f64,
    /// Subset time over a bare `topk(K)`.
    pub subset_over_topk: f64,
    /// Subset time over one `amax` pass.
    pub subset_over_amax: f64,
    /// How many times faster v1 (no tie completion) is than stock.
    pub stock_over_subset_v1: f64,
    /// v1 time over a bare `topk(K)`.
    pub subset_v1_over_topk: f64,
    /// v1 time over one `amax` pass.
    pub subset_v1_over_amax: f64,
    /// What the tie completion costs: subset (v2) over v1.
    pub subset_over_subset_v1: f64,
    /// How many times faster than stock with the literal full-cumsum counting.
    pub stock_over_subset_full_cumsum: f64,
    /// The literal full-cumsum counting over v1.
    pub subset_full_cumsum_over_subset_v1: f64,
    /// Subset with `selected` masks over without.
    pub masks_selected_over_off: f64,
    /// Subset with `support` masks over without.
    pub masks_support_over_off: f64,
}

/// One shape's result.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeResult {
    /// B.
    pub batch: i64,
    /// V.
    pub vocab: i64,
    /// Median milliseconds.
    pub median_ms: Timings,
    /// Ratios.
    pub ratios: Ratios,
}

/// A performance target and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is required.
    pub name: &'static str,
    /// Measured value (None when the shape was not run).
    pub value: Option<f64>,
    /// Whether it was met (None when not measured).
    pub met: Option<bool>,
}

/// Everything `bench` measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Stock release timed.
    pub release: &'static str,
    /// libtorch intra-op threads.
    pub torch_threads: i32,
    /// Repeats per measurement (median reported).
    pub repeats: usize,
    /// Largest per-row top_k.
    pub top_k: i64,
    /// top_p of every row.
    pub top_p: f32,
    /// The window K the fix uses.
    pub window: i64,
    /// Per shape.
    pub shapes: Vec<ShapeResult>,
    /// The targets at B=256, V=151936.
    pub targets: Vec<Target>,
}

/// The shape the targets refer to.
const TARGET_SHAPE: (i64, i64) = (256, 151_936);

/// What `bench` times (checked by `commands::bench`).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Stock release timed.
    pub release: Release,
    /// Repeats per measurement (median reported), at least 1.
    pub repeats: usize,
    /// Largest per-row top_k.
    pub top_k: i64,
    /// top_p of every row.
    pub top_p: f32,
    /// The window K the fix uses for `top_k`.
    pub window: i64,
}

/// Time every `(batch, vocab)` shape in turn; `progress` hears each shape as it starts.
pub fn run_bench(
    settings: &Settings,
    shapes: &[(i64, i64)],
    torch_threads: i32,
    progress: &mut dyn FnMut(i64, i64),
) -> BenchReport {
    let shapes: Vec<ShapeResult> = shapes
        .iter()
        .map(|&(batch, vocab)| {
            progress(batch, vocab);
            measure(batch, vocab, settings)
        })
        .collect();
    BenchReport {
        release: settings.release.as_str(),
        torch_threads,
        repeats: settings.repeats,
        top_k: settings.top_k,
        top_p: settings.top_p,
        window: settings.window,
        targets: targets(&shapes),
        shapes,
    }
}

/// A batch of `rows` model-like rows: top_k spread over 1..=top_k (row 0 has the largest,
/// which sets K) and the same top_p everywhere.
fn bench_batch(rows: i64, vocab: i64, top_k: i64, top_p: f32) -> Batch {
    tch::manual_seed(rows ^ vocab);
    let logits = Tensor::randn([rows, vocab], (Kind::Float, Device::Cpu)) * 3.0;
    let host = Vec::<f32>::try_from(&logits.flatten(0, -1)).expect("float32 logits");
    let k: Vec<i64> = (0..rows).map(|r| top_k - (r * 37) % top_k).collect();
    Batch::new(host, rows, vocab, &k, &vec![top_p; rows as usize])
}

/// The operations timed at every shape, in table order.
const OPS: usize = 8;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn measure(rows: i64, vocab: i64, settings: &Settings) -> ShapeResult {
    let Settings { release, repeats, top_k, top_p, window } = *settings;
    let batch = bench_batch(rows, vocab, top_k, top_p);
    let sample = |sampler: Sampler, mask: Option<MaskMode>| {
        let _ = sampler.sample(&batch, release, Noise::Fresh, mask);
    };
    let ops: [&dyn Fn(); OPS] = [
        &|| sample(Sampler::Stock, None),
        &|| sample(Sampler::Subset, None),
        &|| sample(Sampler::Subset, Some(MaskMode::Selected)),
        &|| sample(Sampler::Subset, Some(MaskMode::Support)),
        &|| {
            let _ = batch.logits.amax([-1], false);
        },
        &|| {
            let _ = batch.logits.topk(window, -1, true, true);
        },
        &|| sample(Sampler::SubsetV1, None),
        &|| sample(Sampler::SubsetFullCumsum, None),
    ];
    // Warm-up (first-call allocations, lazy initialisation), then the operations in turn
    // within each repeat, so that a burst of load on the machine hits all of them alike and
    // the per-repeat ratios stay meaningful.
    ops.iter().for_each(|op| op());
    let mut ms: Vec<Vec<f64>> = (0..OPS).map(|_| Vec::with_capacity(repeats)).collect();
    for _ in 0..repeats {
        for (i, (op, times)) in ops.iter().zip(&mut ms).enumerate() {
            // The first call after stock's full-vocabulary sort runs ~30% slower (allocator
            // and cache state left behind), a cost a decode loop without stock never pays:
            // the fast operations get one untimed call first.
            if i > 0 {
                op();
            }
            let start = Instant::now();
            op();
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let ratio = |a: usize, b: usize| median(ms[a].iter().zip(&ms[b]).map(|(x, y)| x / y).collect());
    let ratios = Ratios {
        stock_over_subset: ratio(0, 1),
        subset_over_topk: ratio(1, 5),
        subset_over_amax: ratio(1, 4),
        masks_selected_over_off: ratio(2, 1),
        masks_support_over_off: ratio(3, 1),
        stock_over_subset_v1: ratio(0, 6),
        subset_v1_over_topk: ratio(6, 5),
        subset_v1_over_amax: ratio(6, 4),
        subset_over_subset_v1: ratio(1, 6),
        stock_over_subset_full_cumsum: ratio(0, 7),
        subset_full_cumsum_over_subset_v1: ratio(7, 6),
    };
    let median_ms = Timings {
        stock: median(ms[0].clone()),
        subset: median(ms[1].clone()),
        subset_masks_selected: median(ms[2].clone()),
        subset_masks_support: median(ms[3].clone()),
        floor_amax: median(ms[4].clone()),
        topk: median(ms[5].clone()),
        subset_v1: median(ms[6].clone()),
        subset_full_cumsum: median(ms[7].clone()),
    };
    ShapeResult { batch: rows, vocab, median_ms, ratios }
}

fn targets(shapes: &[ShapeResult]) -> Vec<Target> {
    let at = shapes.iter().find(|s| (s.batch, s.vocab) == TARGET_SHAPE);
    let speedup = at.map(|s| s.ratios.stock_over_subset);
    let overhead = at.map(|s| s.ratios.subset_over_topk);
    vec![
        Target {
            name: "subset (exact ties) >= 20x faster than stock at B=256, V=151936",
            value: speedup,
            met: speedup.map(|x| x >= 20.0),
        },
        Target {
            name: "subset (exact ties) <= 2x a bare topk(K) at B=256, V=151936",
            value: overhead,
            met: overhead.map(|x| x <= 2.0),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_batches_put_the_largest_top_k_first() {
        let batch = bench_batch(5, 2048, 50, 0.9);
        let k = batch.k.unwrap();
        assert_eq!(k[0], 50);
        assert!(k.iter().all(|&k| (1..=50).contains(&k)));
        assert_eq!(
            crate::reference::subset::route(Some(&k), 2048),
            crate::reference::filtered::Route::Subset { window: 64 }
        );
    }

    #[test]
    fn every_shape_is_announced_then_measured_in_the_order_given() {
        let settings = Settings { release: Release::V0_30_0, repeats: 1, top_k: 3, top_p: 1.0, window: 64 };
        let shapes = [(2, 2048), (1, 2048), (1, 4096)];
        let mut heard = Vec::new();
        let report = run_bench(&settings, &shapes, 1, &mut |batch, vocab| heard.push((batch, vocab)));
        assert_eq!(heard, shapes);
        let measured: Vec<(i64, i64)> = report.shapes.iter().map(|s| (s.batch, s.vocab)).collect();
        assert_eq!(measured, shapes);
        assert_eq!((report.repeats, report.top_k, report.window, report.torch_threads), (1, 3, 64, 1));
    }

    #[test]
    fn targets_are_unmeasured_without_the_target_shape() {
        assert!(targets(&[]).iter().all(|t| t.met.is_none()));
    }
}
