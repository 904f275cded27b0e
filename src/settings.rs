//! What a run was asked, resolved once from the command line by `cli.rs` (which alone knows
//! clap): the [`Settings`] every command shares (where the catalogue and the trees are, how to
//! print, which Python, how long to wait for a lock) and each command's own request.

use std::path::PathBuf;

use crate::discover::TreeQuery;
use crate::report::advice::Invocation;
use crate::report::{ColorChoice, Format, Output};
use crate::tree::TreeFilter;

/// The flags every command takes, resolved: no command goes back to the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--catalog DIR` (or `GAUDI_FIXES_CATALOG`); `None`: the built-in catalogue.
    pub catalog: Option<PathBuf>,
    /// Where to look for the trees (`--root`, `--vllm`, `--vllm-gaudi`, `GAUDI_FIXES_ROOT`,
    /// then the Python interpreter), in that order.
    pub trees: TreeQuery,
    /// The trees `--only-tree` leaves in (all of them without it).
    pub filter: TreeFilter,
    /// `--python`: the interpreter asked where the trees are, and that runs a fix's tests.
    pub python: String,
    pub format: Format,
    pub color: ColorChoice,
    /// `--quiet`: print nothing, the exit code tells.
    pub quiet: bool,
    /// `-v`: show every fix even where a short report says it all (`apply --check`).
    pub verbose: bool,
    /// `--lock-timeout SECONDS`.
    pub lock_timeout: Option<f64>,
}

impl Settings {
    /// What the printers need of these settings.
    pub fn output(&self) -> Output {
        Output { format: self.format, quiet: self.quiet }
    }

    /// `gaudi-fixes` with the flags that chose this run's catalogue and trees, so that a command a
    /// message suggests works as printed (run from the same directory).
    pub fn invocation(&self) -> Invocation {
        let flag =
            |name: &str, value: &std::path::Path| vec![name.to_string(), shell_word(&value.display().to_string())];
        let mut invocation = Invocation { catalog: Vec::new(), trees: Vec::new() };
        if let Some(catalog) = &self.catalog {
            invocation.catalog = flag("--catalog", catalog);
        }
        if let Some((root, _)) = &self.trees.root {
            invocation.trees.extend(flag("--root", root));
        }
        if let Some(dir) = &self.trees.vllm {
            invocation.trees.extend(flag("--vllm", dir));
        }
        if let Some(dir) = &self.trees.vllm_gaudi {
            invocation.trees.extend(flag("--vllm-gaudi", dir));
        }
        // The interpreter finds the trees when no flag names them, and runs a fix's tests.
        if self.python != "python3" {
            invocation.trees.extend(["--python".to_string(), shell_word(&self.python)]);
        }
        for tree in crate::tree::TreeName::ALL {
            if self.filter.includes(tree) && crate::tree::TreeName::ALL.iter().any(|t| !self.filter.includes(*t)) {
                invocation.trees.extend(["--only-tree".to_string(), tree.to_string()]);
            }
        }
        invocation
    }
}

impl From<&Settings> for Output {
    fn from(settings: &Settings) -> Output {
        settings.output()
    }
}

/// Which fixes `apply` / `revert` act on.
#[derive(Debug, Clone)]
pub struct SelectArgs {
    /// Fixes by name (applied in `after:` order).
    pub fixes: Vec<String>,
    /// A profile's fixes (combined with any FIX given).
    pub profile: Option<String>,
    /// Only report: exit 0 applied, 1 not applied, 2 drifted, 3 error. Writes nothing.
    pub check: bool,
    /// Plan and report what would change, write nothing.
    pub dry_run: bool,
}

/// `lint` flags.
#[derive(Debug, Clone)]
pub struct LintArgs {
    /// A directory with one pristine tree root per release (`<DIR>/v0.26.0/vllm/...`).
    pub upstream: Option<PathBuf>,
}

/// `equiv` flags.
#[derive(Debug, Clone)]
pub struct EquivArgs {
    /// Generated batches per configuration (2 dtypes × 3 top_k × 3 top_p distributions).
    pub cases: usize,
    /// Rows per generated batch.
    pub batch: i64,
    /// Vocabulary sizes for generated batches, used in turn; fixtures use the first.
    pub vocab: Vec<i64>,
    /// The vLLM release whose stock sampler is the reference (v0.26.0 or v0.30.0).
    pub release: String,
    /// Independent draws per row for the statistical check.
    pub draws: usize,
    /// Family-wise false-alarm level of the statistical gate (Bonferroni over cases).
    pub alpha: f64,
    /// Runs of the statistical gate on stock against itself, to measure its false-alarm rate.
    pub calibration_runs: usize,
    /// Runs of the statistical gate per power-table row (samplers biased by total variation
    /// 0.01, 0.03, 0.1, mass moved from or to the top token).
    pub power_runs: usize,
    /// Largest allowed probability difference on an identical support, in float32 ulps.
    pub ulp_bound: u64,
    /// libtorch intra-op threads. The suite's tensors are small, so one thread is fastest:
    /// more spend their time in OpenMP spin-waits, badly so on a busy machine.
    pub threads: i32,
    /// Base seed for the generated cases and all noise.
    pub seed: u64,
    /// Only write test vectors (.npy + manifest.json) for the Python test into DIR; no suite.
    pub emit_vectors: Option<PathBuf>,
}

/// `bench` flags.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    /// Repeats per measurement (the median is reported).
    pub repeats: usize,
    /// Batch sizes (comma-separated).
    pub batch: Vec<i64>,
    /// Vocabulary sizes (comma-separated).
    pub vocab: Vec<i64>,
    /// Largest per-row top_k; rows get top_k spread over 1..=this (sets the window K).
    pub top_k: i64,
    /// top_p of every row (1.0: no top_p).
    pub top_p: f32,
    /// The vLLM release whose stock sampler is timed.
    pub release: String,
    /// libtorch intra-op threads (default: every core).
    pub threads: Option<i32>,
}

/// `test` flags.
#[derive(Debug, Clone)]
pub struct TestArgs {
    /// The fix whose tests run.
    pub fix: String,
    /// Extra pytest arguments, after `--` (e.g. `-- -k "not mutant" -x`).
    pub pytest_args: Vec<String>,
}

/// `conform` flags.
#[derive(Debug, Clone)]
pub struct ConformArgs {
    /// How many seeded schedules the suite runs (half sync, half async scheduling).
    pub schedules: u32,
    /// The first schedule's seed; schedule n has seed + n.
    pub seed: u64,
    /// Stop at the first schedule that finds a difference (and print it as data).
    pub first: bool,
    /// Run the one schedule saved in this file instead of seeded ones.
    pub replay: Option<PathBuf>,
    /// Shrink the schedule saved in this file to the smallest that still differs.
    pub shrink: Option<PathBuf>,
    /// Only hold requests against their own parameters (vLLM's GPU path not imported).
    pub no_reference: bool,
    /// Worker processes (None: the cores available).
    pub jobs: Option<u32>,
    /// Install the suite's pinned requirements into `--python`'s environment, then exit.
    pub setup: bool,
    /// Print the pinned requirements, then exit.
    pub requirements: bool,
}

/// `matrix` flags.
#[derive(Debug, Clone)]
pub struct MatrixArgs {
    /// Releases to check (comma-separated tags, e.g. v0.26.0,v0.30.0); default: every release
    /// the catalogue names.
    pub releases: Vec<String>,
    /// Only these fixes (default: all).
    pub fixes: Vec<String>,
    /// Write `verified:` into the directory catalogue for every cell that applied exactly and
    /// whose tests passed.
    pub record: bool,
    /// Do not run the fixes' tests (state only).
    pub no_tests: bool,
    /// Print the Markdown tables the fix pages embed instead of the human table.
    pub markdown: bool,
    /// Print the CI job list instead of running (`--plan`); with `per_fix` one job per fix × release.
    pub plan: bool,
    pub per_fix: bool,
    /// Merge these per-job `--format json` results instead of running.
    pub merge: Vec<std::path::PathBuf>,
}

/// `port` flags.
#[derive(Debug, Clone)]
pub struct PortArgs {
    /// The fix to port.
    pub fix: String,
    /// The new release's pristine tree (a directory holding vllm/ and/or vllm_gaudi/).
    pub to: PathBuf,
    /// The new release's tag, e.g. v0.33.0 (the new variant's key).
    pub release: String,
    /// The variant to carry (default: the newest one).
    pub from: Option<String>,
    /// The old release's pristine tree (default: ~/.cache/gaudi-fixes/upstream/<VARIANT>/ and
    /// the vllm_gaudi cache).
    pub from_tree: Option<PathBuf>,
}

/// `record` flags.
#[derive(Debug, Clone)]
pub struct RecordArgs {
    /// The fix to make or refresh a variant of.
    pub fix: String,
    /// The release tag of the variant, e.g. v0.33.0.
    pub release: String,
    /// The pristine tree (a directory holding vllm/ and/or vllm_gaudi/).
    pub pristine: PathBuf,
    /// The same tree edited by hand.
    pub edited: PathBuf,
    /// Files to record (relative to the tree root, e.g. vllm/v1/sample/ops/topk_topp_sampler.py);
    /// default: the files the fix's existing variants patch.
    pub files: Vec<String>,
}

/// `word` as a shell reads it back: as it is when it is plain, else single-quoted.
fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
