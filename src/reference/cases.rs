//! The inputs the suite runs on: generated batches over a grid of logit dtypes and top_k /
//! top_p distributions, and hand-built fixtures for the edges where a subset sampler can go
//! wrong (bf16 ties at the k-th value, k == vocab, p = 1.0, tiny p, all-equal rows, mostly
//! `-inf` rows, a batch of one, top_k above 1024, window-size edges, exact top-p boundaries).
//!
//! Everything is generated in Rust from a seed (SplitMix64, Box–Muller), so a case list is
//! reproducible independent of libtorch's RNG and thread count.

use serde::Serialize;

use crate::reference::batch::Batch;

/// How the logits' values were produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// Full float32 values.
    F32,
    /// Values rounded to bf16 (held as float32, as a bf16 model's logits reach the sampler):
    /// the top of a large vocabulary then has real ties.
    Bf16,
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        })
    }
}

/// One input to every sampler.
#[derive(Debug)]
pub struct Case {
    /// Unique, filesystem-safe name.
    pub name: String,
    /// What the case exercises.
    pub why: &'static str,
    /// How the values were produced.
    pub dtype: Dtype,
    /// The sampler input.
    pub batch: Batch,
    /// Seed for this case's noise.
    pub seed: u64,
}

/// The generated grid: `per_config` batches of `rows` rows for every dtype × k × p
/// distribution, cycling through `vocabs`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Rows per generated batch.
    pub rows: i64,
    /// Vocabulary sizes, used in turn.
    pub vocabs: Vec<i64>,
    /// Batches per configuration.
    pub per_config: usize,
    /// Base seed.
    pub seed: u64,
}

/// Distribution of per-row top_k in generated batches.
#[derive(Debug, Clone, Copy)]
enum KDist {
    /// Uniform in 1..=64 (window 64).
    Small,
    /// Values seen in generation configs: 20, 40, 50, 64, 100.
    Typical,
    /// Log-uniform in 1..=1024 (mostly window 1024).
    Wide,
    /// No row has top_k (k=None): with top_p, the pivot path (issue 47).
    None,
    /// Half the rows without top_k, the others [`KDist::Typical`]: with top_p, the pivot
    /// path for the former and the window path for the latter.
    Mixed,
}

/// Distribution of per-row top_p in generated batches.
#[derive(Debug, Clone, Copy)]
enum PDist {
    /// No row has top_p (p=None).
    Off,
    /// 0.8, 0.9, 0.95 or 1.0.
    Typical,
    /// Uniform in 0.05..1.0, with one row in ten at 1.0.
    Wide,
}

/// SplitMix64: tiny, fast, and good enough to make test inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// One of `items`.
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// `n` distinct indices below `vocab`, in random order (partial Fisher–Yates).
    fn distinct(&mut self, vocab: usize, n: usize) -> Vec<usize> {
        assert!(n <= vocab, "cannot pick {n} distinct ids below {vocab}");
        let mut picked = std::collections::HashSet::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let id = self.below(vocab as u64) as usize;
            if picked.insert(id) {
                out.push(id);
            }
        }
        out
    }
}

/// Round a float32 to the nearest bf16 (ties to even), as `.to(torch.bfloat16)` does.
pub fn round_to_bf16(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000;
    f32::from_bits(rounded)
}

/// A language-model-like row: Gaussian logits with a per-row scale and offset, and in one row
/// in three a few tokens lifted far above the rest (a confident next token).
fn model_row(rng: &mut Rng, vocab: usize, dtype: Dtype) -> Vec<f32> {
    let scale = 1.0 + 3.0 * rng.uniform();
    let offset = -5.0 + 20.0 * rng.uniform();
    let mut row: Vec<f32> = (0..vocab).map(|_| (offset + scale * rng.normal()) as f32).collect();
    if rng.below(3) == 0 {
        let lifted = (1 + rng.below(5) as usize).min(vocab);
        for id in rng.distinct(vocab, lifted) {
            row[id] += (scale * (2.0 + 4.0 * rng.uniform())) as f32;
        }
    }
    if dtype == Dtype::Bf16 {
        row.iter_mut().for_each(|x| *x = round_to_bf16(*x));
    }
    row
}

fn draw_k(rng: &mut Rng, dist: KDist) -> i64 {
    match dist {
        KDist::Small => 1 + rng.below(64) as i64,
        KDist::Typical => rng.pick(&[20, 40, 50, 64, 100]),
        KDist::Wide => (1024f64.powf(rng.uniform()).round() as i64).clamp(1, 1024),
        KDist::None => 0,
        KDist::Mixed if rng.below(2) == 0 => 0,
        KDist::Mixed => draw_k(rng, KDist::Typical),
    }
}

fn draw_p(rng: &mut Rng, dist: PDist) -> f32 {
    match dist {
        PDist::Off => 1.0,
        PDist::Typical => rng.pick(&[0.8, 0.9, 0.95, 1.0]),
        PDist::Wide if rng.below(10) == 0 => 1.0,
        PDist::Wide => (0.05 + 0.95 * rng.uniform()) as f32,
    }
}

/// The generated grid: the top_k distributions × every top_p distribution, then (issue 47,
/// appended so the earlier cases keep their seeds) rows without top_k: all of them with
/// typical and wide top_p (the pivot path), and mixed with top_k rows with each top_p
/// distribution (off: no top_p tensor, so stock).
pub fn generated(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    let top_k = [Dtype::F32, Dtype::Bf16].into_iter().flat_map(|dtype| {
        [(KDist::Small, "small"), (KDist::Typical, "typical"), (KDist::Wide, "wide")].into_iter().flat_map(move |k| {
            [(PDist::Off, "off"), (PDist::Typical, "typical"), (PDist::Wide, "wide")]
                .into_iter()
                .map(move |p| (dtype, k, p))
        })
    });
    let without_top_k = [Dtype::F32, Dtype::Bf16].into_iter().flat_map(|dtype| {
        [
            ((KDist::None, "none"), (PDist::Typical, "typical")),
            ((KDist::None, "none"), (PDist::Wide, "wide")),
            ((KDist::Mixed, "mixed"), (PDist::Off, "off")),
            ((KDist::Mixed, "mixed"), (PDist::Typical, "typical")),
            ((KDist::Mixed, "mixed"), (PDist::Wide, "wide")),
        ]
        .into_iter()
        .map(move |(k, p)| (dtype, k, p))
    });
    for (config, (dtype, (k_dist, k_name), (p_dist, p_name))) in top_k.chain(without_top_k).enumerate() {
        for i in 0..plan.per_config {
            let vocab = plan.vocabs[i % plan.vocabs.len()];
            let seed = plan.seed ^ ((config as u64) << 32) ^ (i as u64).wrapping_mul(0x1000_0001);
            let mut rng = Rng::new(seed);
            let rows = plan.rows as usize;
            let mut host = Vec::with_capacity(rows * vocab as usize);
            let mut k = Vec::with_capacity(rows);
            let mut p = Vec::with_capacity(rows);
            for _ in 0..rows {
                host.extend(model_row(&mut rng, vocab as usize, dtype));
                k.push(draw_k(&mut rng, k_dist));
                p.push(draw_p(&mut rng, p_dist));
            }
            cases.push(Case {
                name: format!("{dtype}-k_{k_name}-p_{p_name}-v{vocab}-{i}"),
                why: "generated",
                dtype,
                batch: Batch::new(host, plan.rows, vocab, &k, &p),
                seed,
            });
        }
    }
    cases
}

/// A row whose `distinct` largest tokens have distinct values above a group of `tied` tokens
/// sharing one value, itself above every other token: the tie group occupies ranks
/// `distinct .. distinct + tied`.
fn tied_row(rng: &mut Rng, vocab: usize, distinct: usize, tied: usize) -> Vec<f32> {
    // Background below 1.0; ties at 2.0; distinct values 2 + n/16 (at most 8 significant
    // bits for n < 128, so exact in bf16: the ties survive a bf16 model's output; wider
    // distinct runs leave bf16 but stay distinct and exact in float32).
    let mut row: Vec<f32> = (0..vocab).map(|_| round_to_bf16((rng.normal() - 3.0).min(1.0) as f32)).collect();
    let ids = rng.distinct(vocab, distinct + tied);
    for (rank, &id) in ids.iter().enumerate() {
        row[id] = if rank < distinct { 2.0 + (distinct - rank) as f32 / 16.0 } else { 2.0 };
    }
    row
}

/// The vocabulary of the bf16 tie-spill batches (Qwen-sized, as in issue 11's measurements).
pub const MODEL_VOCAB: usize = 151_936;

/// bf16 language-model-like batches over a model-sized vocabulary with top_k equal to a window
/// size (64, 128, 1024): the tie group at the k-th value spills past the window in most rows
/// (a bf16 logit has 8 significant bits, so the tail of 151936 values is full of ties).
pub fn model_tie_spills(seed: u64, vocab: usize, rows: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ 0x5B11_7000);
    [64i64, 128, 1024]
        .into_iter()
        .map(|k| {
            let host: Vec<f32> = (0..rows).flat_map(|_| model_row(&mut rng, vocab, Dtype::Bf16)).collect();
            let p: Vec<f32> = (0..rows).map(|r| [1.0, 0.9, 1.0, 0.95][r % 4]).collect();
            Case {
                name: format!("bf16-model-tie-spill-k{k}-v{vocab}"),
                why: "bf16 model rows, top_k == K: k-th ties spill past the window",
                dtype: Dtype::Bf16,
                batch: Batch::new(host, rows as i64, vocab as i64, &vec![k; rows], &p),
                seed: rng.next_u64(),
            }
        })
        .collect()
}

/// A row with `finite` equal logits and `-inf` everywhere else.
fn equal_then_neg_inf(rng: &mut Rng, vocab: usize, finite: usize) -> Vec<f32> {
    let mut row = vec![f32::NEG_INFINITY; vocab];
    for id in rng.distinct(vocab, finite) {
        row[id] = 0.0;
    }
    row
}

/// A row with `finite` model-like logits and `-inf` everywhere else.
fn mostly_neg_inf(rng: &mut Rng, vocab: usize, finite: usize) -> Vec<f32> {
    let values = model_row(rng, finite, Dtype::F32);
    let mut row = vec![f32::NEG_INFINITY; vocab];
    for (id, value) in rng.distinct(vocab, finite).into_iter().zip(values) {
        row[id] = value;
    }
    row
}

/// Builds one fixture from its rows.
struct Fixture {
    name: &'static str,
    why: &'static str,
    dtype: Dtype,
    vocab: usize,
}

impl Fixture {
    fn case(self, seed: u64, rows: Vec<Vec<f32>>, k: &[i64], p: &[f32]) -> Case {
        let n = rows.len() as i64;
        let host: Vec<f32> = rows.into_iter().flatten().collect();
        Case {
            name: format!("{}-v{}", self.name, self.vocab),
            why: self.why,
            dtype: self.dtype,
            batch: Batch::new(host, n, self.vocab as i64, k, p),
            seed,
        }
    }
}

/// The hand-built edge cases. `vocab` sets the size of most (the suite uses a model-sized
/// one; the emitted test vectors a small one to stay a few MB).
pub fn fixtures(seed: u64, vocab: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ 0x0F1C_70E5);
    let mut cases = Vec::new();
    let v = vocab;

    // Ties straddling the k-th value inside the window: two tied tokens inside top_k, two
    // outside. Stock keeps all four (mask by value); a position mask keeps k.
    let k = [2, 5, 13, 20, 33, 50, 61, 62];
    let rows = k.iter().map(|&k| tied_row(&mut rng, v, k as usize - 2, 4)).collect();
    let p = [1.0, 1.0, 0.95, 1.0, 1.0, 0.99, 1.0, 1.0];
    let fixture =
        Fixture { name: "bf16-ties-at-kth", why: "bf16 ties at the k-th value", dtype: Dtype::Bf16, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &k, &p));

    // A tie group at the k-th value that runs past the window's edge: stock keeps the whole
    // group, a window of K cannot see it; v2 completes it over the vocabulary (v1 lost it).
    let shape = [(55, 26, 60), (45, 26, 50), (60, 11, 64), (9, 1, 10)];
    let rows = shape.iter().map(|&(d, t, _)| tied_row(&mut rng, v, d, t)).collect();
    let k: Vec<i64> = shape.iter().map(|s| s.2).collect();
    let fixture = Fixture {
        name: "kth-tie-crosses-window",
        why: "tie group at the k-th value crossing K",
        dtype: Dtype::Bf16,
        vocab: v,
    };
    cases.push(fixture.case(rng.next_u64(), rows, &k, &[1.0, 0.9, 1.0, 1.0]));

    // k == vocab: a row without top_k sends the whole batch down the stock path.
    let rows = (0..4).map(|_| model_row(&mut rng, v, Dtype::F32)).collect();
    let fixture = Fixture { name: "k-equals-vocab", why: "k == vocab (fallback)", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[v as i64, 50, 20, 1], &[0.9, 1.0, 0.8, 1.0]));

    // The window is the whole vocabulary (K == V == 512).
    let rows = (0..4).map(|_| model_row(&mut rng, 512, Dtype::Bf16)).collect();
    let fixture = Fixture { name: "window-equals-vocab", why: "K == vocab", dtype: Dtype::Bf16, vocab: 512 };
    cases.push(fixture.case(rng.next_u64(), rows, &[511, 300, 100, 7], &[1.0, 0.9, 0.5, 1.0]));

    // p = 1.0 rows inside a batch that has top_p (so p is a tensor, not None).
    let rows = (0..4).map(|_| model_row(&mut rng, v, Dtype::F32)).collect();
    let fixture = Fixture { name: "p-one", why: "p = 1.0 rows", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[20, 50, 64, 1], &[1.0, 1.0, 0.9, 1.0]));

    // Tiny p: 1 - p rounds to 1.0 in float32 for 1e-9 and 1e-12, so only keep-at-least-one
    // leaves a token; the equal-logit rows make the total exactly 1.0 so the rule must fire.
    let mut rows: Vec<Vec<f32>> = (0..6).map(|_| model_row(&mut rng, v, Dtype::F32)).collect();
    rows.push(equal_then_neg_inf(&mut rng, v, 4));
    rows.push(equal_then_neg_inf(&mut rng, v, 1));
    let fixture = Fixture { name: "p-tiny", why: "p <= 0.01, keep at least one", dtype: Dtype::F32, vocab: v };
    let p = [0.01, 0.005, 1e-3, 1e-5, 1e-9, 1e-12, 1e-9, 1e-12];
    cases.push(fixture.case(rng.next_u64(), rows, &[50, 50, 64, 20, 50, 64, 64, 8], &p));

    // All-equal rows: every token ties with the k-th value, so stock keeps the whole vocab.
    let rows = [0.0f32, 1.5, 0.0, -2.0].iter().map(|&x| vec![x; v]).collect();
    let fixture = Fixture { name: "all-equal", why: "all-equal rows", dtype: Dtype::Bf16, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[1, 10, 64, 100], &[1.0, 0.5, 1.0, 0.3]));

    // All-equal rows with k = 50 (window 64): uniform over the whole vocabulary, not over 64.
    let rows = [0.0f32, 3.0].iter().map(|&x| vec![x; v]).collect();
    let fixture =
        Fixture { name: "all-equal-k50", why: "all-equal, k=50: uniform over V", dtype: Dtype::Bf16, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[50, 50], &[1.0, 1.0]));

    // A tie group at the k-th value spilling past each window size (top_k == K), with
    // p = 1, a p whose cut falls inside the class (the class holds most of the mass), and
    // typical p.
    for (name, k, shapes) in [
        ("kth-tie-spill-k64", 64i64, [(40usize, 60usize), (63, 2), (10, 200), (60, 30)]),
        ("kth-tie-spill-k128", 128, [(100, 60), (127, 3), (20, 300), (120, 40)]),
        ("kth-tie-spill-k1024", 1024, [(100, 1000), (1000, 100), (1023, 2), (50, 1500)]),
    ] {
        let rows = shapes.iter().map(|&(d, t)| tied_row(&mut rng, v, d, t)).collect();
        let fixture = Fixture { name, why: "k-th tie group spilling past K = top_k", dtype: Dtype::Bf16, vocab: v };
        cases.push(fixture.case(rng.next_u64(), rows, &[k; 4], &[1.0, 0.9, 0.5, 0.95]));
    }

    // Equal logits whose cumsum hits 1 - p exactly (0.25, 0.5, 0.75 are exact in float32):
    // `<=` masks the token at the boundary, `<` keeps it.
    let counts = [4, 8, 4, 16];
    let rows = counts.iter().map(|&n| equal_then_neg_inf(&mut rng, 1024, n)).collect();
    let fixture = Fixture { name: "dyadic-top-p", why: "cumsum exactly 1 - p", dtype: Dtype::F32, vocab: 1024 };
    cases.push(fixture.case(rng.next_u64(), rows, &[64; 4], &[0.75, 0.5, 0.5, 0.25]));

    // Rows that are mostly -inf, with fewer finite tokens than top_k.
    let rows = [1, 2, 5, 40].iter().map(|&n| mostly_neg_inf(&mut rng, v, n)).collect();
    let fixture = Fixture { name: "mostly-neg-inf", why: "mostly -inf rows", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[50, 1, 3, 64], &[0.9, 1.0, 0.5, 0.95]));

    // A batch of one.
    let rows = vec![model_row(&mut rng, v, Dtype::Bf16)];
    let fixture = Fixture { name: "batch-of-one", why: "batch of 1", dtype: Dtype::Bf16, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[50], &[0.9]));

    // top_k above the largest window: the stock path.
    let rows = (0..4).map(|_| model_row(&mut rng, v, Dtype::F32)).collect();
    let fixture = Fixture { name: "top-k-over-1024", why: "max top_k > 1024 (fallback)", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[2000, 50, 20, 1], &[1.0, 0.9, 1.0, 1.0]));

    // Window-size edges: a largest top_k of exactly 64, just above 64, and exactly 1024.
    for (name, k) in [
        ("window-edge-64", [64, 1, 64, 33]),
        ("window-edge-65", [65, 64, 2, 65]),
        ("window-edge-1024", [1024, 1000, 513, 1]),
    ] {
        let rows = (0..4).map(|_| model_row(&mut rng, v, Dtype::Bf16)).collect();
        let fixture = Fixture { name, why: "largest top_k at a window edge", dtype: Dtype::Bf16, vocab: v };
        cases.push(fixture.case(rng.next_u64(), rows, &k, &[1.0, 0.95, 1.0, 0.9]));
    }
    cases
}

/// A row of `vocab` small-integer logits (`round(N(0, 1.5))`): equal-logit classes of
/// thousands of tokens, where the top-p cut falls inside a class (the pivot's tie class).
fn plateau_row(rng: &mut Rng, vocab: usize) -> Vec<f32> {
    (0..vocab).map(|_| (1.5 * rng.normal()).round() as f32).collect()
}

/// Hand-built batches for the top-p pivot path (issue 47): rows without top_k (k = vocab) and
/// a top_p tensor, alone or mixed with top_k rows and with "neither" rows (no top_k, p = 1:
/// what greedy rows look like to the sampler).
pub fn pivot_fixtures(seed: u64, vocab: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ 0x0047_0A7E);
    let mut cases = Vec::new();
    let v = vocab;
    let none = v as i64;

    // bf16 tie classes holding most of the mass, with p cutting inside them (and one class
    // holding the row's largest value, where keep-at-least-one decides).
    // Class sizes are for a vocabulary of 32000 (the suite's); scaled down for smaller ones.
    let scaled = |t: usize| (t * v / 32_000).clamp(8, v / 2);
    let shapes = [(10, 1000), (5, 3000), (50, 500), (0, 200), (3, 2000), (20, 800)];
    let rows = shapes.iter().map(|&(d, t)| tied_row(&mut rng, v, d, scaled(t))).collect();
    let fixture =
        Fixture { name: "pivot-tie-cut", why: "top-p cut inside the pivot's tie class", dtype: Dtype::Bf16, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[none; 6], &[0.5, 0.9, 0.3, 1e-3, 0.95, 0.7]));

    // Integer plateaus: classes of thousands of equal logits, the cut inside one.
    let rows = (0..4).map(|_| plateau_row(&mut rng, v)).collect();
    let fixture =
        Fixture { name: "pivot-plateau", why: "top-p inside classes of thousands", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[none; 4], &[0.9, 0.5, 0.95, 0.8]));

    // p near 1 (the pivot deep in the tail) and tiny p (the pivot at the top; equal rows
    // where keep-at-least-one fires), with neither rows (p = 1).
    let mut rows: Vec<Vec<f32>> = (0..6).map(|_| model_row(&mut rng, v, Dtype::F32)).collect();
    rows.push(equal_then_neg_inf(&mut rng, v, 4));
    rows.push(equal_then_neg_inf(&mut rng, v, 16));
    let fixture =
        Fixture { name: "pivot-p-edges", why: "top-p near 1 and tiny, no top_k", dtype: Dtype::F32, vocab: v };
    let p = [0.999, 0.9999, 1.0, 1e-3, 1e-6, 1e-9, 0.25, 1e-12];
    cases.push(fixture.case(rng.next_u64(), rows, &[none; 8], &p));

    // Few finite tokens: every token carries real mass, so a pivot one step off or a dropped
    // tie class moves the support by far more than rounding.
    let rows = [3usize, 5, 8, 12, 20, 30, 2, 40].iter().map(|&n| mostly_neg_inf(&mut rng, v, n)).collect();
    let fixture =
        Fixture { name: "pivot-few-tokens", why: "top-p over a few finite tokens", dtype: Dtype::F32, vocab: v };
    cases.push(fixture.case(rng.next_u64(), rows, &[none; 8], &[0.5, 0.7, 0.9, 0.6, 0.8, 0.95, 0.4, 0.75]));

    // Mixed batches: top_k rows (window 64, then 1024), rows without top_k with top_p, and
    // neither rows; bf16 and f32.
    for (name, dtype, k, p) in [
        (
            "pivot-mixed-k64",
            Dtype::Bf16,
            [20, none, 50, none, none, 64, none, 1],
            [0.9, 0.9, 1.0, 0.95, 1.0, 0.8, 0.5, 1.0],
        ),
        (
            "pivot-mixed-k1024",
            Dtype::F32,
            [1000, none, 200, none, none, 5, none, none],
            [0.95, 0.8, 0.9, 0.99, 1.0, 0.9, 0.3, 0.9],
        ),
    ] {
        let rows = (0..8).map(|_| model_row(&mut rng, v, dtype)).collect();
        let fixture = Fixture { name, why: "mixed: top_k rows, top_p-only rows, neither rows", dtype, vocab: v };
        cases.push(fixture.case(rng.next_u64(), rows, &k, &p));
    }

    // A mixed batch whose pivot rows are tie-cut rows (the window path beside the tie class).
    let mut rows: Vec<Vec<f32>> =
        [(10usize, 1000usize), (40, 300)].iter().map(|&(d, t)| tied_row(&mut rng, v, d, t)).collect();
    rows.extend((0..2).map(|_| model_row(&mut rng, v, Dtype::Bf16)));
    let fixture = Fixture {
        name: "pivot-mixed-tie-cut",
        why: "mixed, top-p cut inside a tie class",
        dtype: Dtype::Bf16,
        vocab: v,
    };
    cases.push(fixture.case(rng.next_u64(), rows, &[none, none, 50, 128], &[0.5, 0.9, 0.9, 0.95]));
    cases
}

/// bf16 model-like batches over a model-sized vocabulary without top_k (Llama / DeepSeek
/// defaults: top_p 0.9, 0.95), alone and mixed with top_k rows.
pub fn model_nucleus(seed: u64, vocab: usize, rows: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ 0x0047_B16E);
    let none = vocab as i64;
    [("top-p-only", [none; 4]), ("mixed", [none, 20, none, 64])]
        .into_iter()
        .map(|(name, ks)| {
            let host: Vec<f32> = (0..rows).flat_map(|_| model_row(&mut rng, vocab, Dtype::Bf16)).collect();
            let k: Vec<i64> = (0..rows).map(|r| ks[r % 4]).collect();
            let p: Vec<f32> = (0..rows).map(|r| [0.9, 0.95, 0.8, 1.0, 0.6][r % 5]).collect();
            Case {
                name: format!("bf16-model-pivot-{name}-v{vocab}"),
                why: "bf16 model rows without top_k (Llama / DeepSeek top_p)",
                dtype: Dtype::Bf16,
                batch: Batch::new(host, rows as i64, vocab as i64, &k, &p),
                seed: rng.next_u64(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_round_to_nearest_even() {
        assert_eq!(round_to_bf16(1.0), 1.0);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round_to_bf16(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_to_bf16(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_to_bf16(f32::NEG_INFINITY), f32::NEG_INFINITY);
    }

    #[test]
    fn tied_rows_put_the_tie_group_at_the_requested_ranks() {
        let mut rng = Rng::new(1);
        let row = tied_row(&mut rng, 1000, 5, 4);
        let mut sorted = row.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        assert!(sorted[4] > 2.0);
        assert_eq!(&sorted[5..9], &[2.0; 4]);
        assert!(sorted[9] < 2.0);
    }

    #[test]
    fn generation_is_reproducible_and_names_are_unique() {
        let plan = Plan { rows: 2, vocabs: vec![300, 500], per_config: 2, seed: 9 };
        let (a, b) = (generated(&plan), generated(&plan));
        // 2 dtypes × (3 top_k × 3 top_p + 5 without top_k) × 2.
        assert_eq!(a.len(), 2 * (3 * 3 + 5) * 2);
        assert!(a.iter().zip(&b).all(|(x, y)| x.batch.host == y.batch.host && x.batch.k == y.batch.k));
        let mut fixtures = fixtures(9, 4096);
        fixtures.extend(pivot_fixtures(9, 4096));
        let mut names: Vec<&str> = a.iter().chain(&fixtures).map(|c| c.name.as_str()).collect();
        let before = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), before);
    }
}
