//! Command-line flags (clap derive). Usage errors exit 3, never clap's 2, which would read as
//! "drifted" to a CI script.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::discover::TreeQuery;
use crate::exit_status::ExitStatus;
use crate::settings::{self, Settings};
use crate::tree::{TreeFilter, TreeName};

pub mod complete;
pub mod examples;
pub mod exit_codes;
pub mod man;

/// Apply a catalogue of vLLM / vllm_gaudi fixes to installed trees, with drift detection.
#[derive(Debug, Parser)]
#[command(name = "gaudi-fixes", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalFlags,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Args)]
pub struct GlobalFlags {
    /// Use this catalogue directory (holding fixes/ and profiles/) instead of the built-in one.
    #[arg(long, global = true, env = "GAUDI_FIXES_CATALOG", value_name = "DIR")]
    pub catalog: Option<PathBuf>,
    /// A directory that holds vllm/ and vllm_gaudi/ (also GAUDI_FIXES_ROOT).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The directory that holds the vllm/ package (overrides --root for that tree).
    #[arg(long, global = true, value_name = "DIR")]
    pub vllm: Option<PathBuf>,
    /// The directory that holds the vllm_gaudi/ package (overrides --root for that tree).
    #[arg(long = "vllm-gaudi", global = true, value_name = "DIR")]
    pub vllm_gaudi: Option<PathBuf>,
    /// Python interpreter asked where vllm and vllm_gaudi are installed (never imports them; the
    /// working directory is not searched).
    #[arg(long, global = true, default_value = "python3", value_name = "PYTHON", add = complete::pythons())]
    pub python: String,
    /// Only touch/inspect patches of these trees; the others are reported as skipped.
    #[arg(long = "only-tree", global = true, value_parser = tree_name_parser(), value_name = "TREE")]
    pub only_tree: Vec<TreeName>,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// When to colour human output (NO_COLOR is honoured with `auto`).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Print no report, no progress and no notes; errors still print (on stderr), and the exit
    /// code tells the rest.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Show more: `apply --check` lists every fix and the hunks found away from their line
    /// numbers even when everything is applied (it is one line per tree and the verdict then).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Give up (exit 3) after waiting this long for another run's lock on a tree. Default:
    /// writers wait as long as it takes, readers (`--check`, `status`, …) 30 s.
    #[arg(long = "lock-timeout", global = true, value_name = "SECONDS", value_parser = parse_seconds)]
    pub lock_timeout: Option<f64>,
}

/// `vllm` or `vllm_gaudi` (alias `vllm-gaudi`), listed in `--help` and in clap's errors as
/// a value enum would be; [`TreeName`] itself stays free of clap.
fn tree_name_parser() -> impl clap::builder::TypedValueParser<Value = TreeName> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new([
        PossibleValue::new("vllm").help("vLLM core (the directory holding `vllm/`)"),
        PossibleValue::new("vllm_gaudi")
            .alias("vllm-gaudi")
            .help("The Gaudi plugin (the directory holding `vllm_gaudi/`)"),
    ])
    .map(|s| s.parse::<TreeName>().expect("clap only passes the possible values"))
}

impl GlobalFlags {
    /// The flags resolved once, for every command below.
    pub fn settings(&self) -> Settings {
        Settings {
            catalog: self.catalog.clone(),
            trees: self.tree_query(),
            filter: TreeFilter::only(self.only_tree.clone()),
            python: self.python.clone(),
            format: self.format.into(),
            color: self.color.into(),
            quiet: self.quiet,
            verbose: self.verbose,
            lock_timeout: self.lock_timeout,
        }
    }

    /// Where to look for the trees. First match wins: the flags (`--root`, `--vllm`,
    /// `--vllm-gaudi`), then `GAUDI_FIXES_ROOT`, then the Python interpreter.
    fn tree_query(&self) -> TreeQuery {
        let flags = self.root.is_some() || self.vllm.is_some() || self.vllm_gaudi.is_some();
        let root = match &self.root {
            Some(root) => Some((root.clone(), "--root")),
            None if flags => None,
            None => std::env::var_os("GAUDI_FIXES_ROOT")
                .filter(|v| !v.is_empty())
                .map(|root| (PathBuf::from(root), "GAUDI_FIXES_ROOT")),
        };
        TreeQuery { root, vllm: self.vllm.clone(), vllm_gaudi: self.vllm_gaudi.clone(), python: self.python.clone() }
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people; coloured on a terminal.
    Human,
    /// A stable, documented JSON document on stdout.
    Json,
    /// GitHub Actions `::error file=…,line=…::` annotations.
    Github,
}

impl From<Format> for crate::report::Format {
    fn from(f: Format) -> crate::report::Format {
        match f {
            Format::Human => crate::report::Format::Human,
            Format::Json => crate::report::Format::Json,
            Format::Github => crate::report::Format::Github,
        }
    }
}

/// Colour policy for human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl From<ColorChoice> for crate::report::ColorChoice {
    fn from(c: ColorChoice) -> crate::report::ColorChoice {
        match c {
            ColorChoice::Auto => crate::report::ColorChoice::Auto,
            ColorChoice::Always => crate::report::ColorChoice::Always,
            ColorChoice::Never => crate::report::ColorChoice::Never,
        }
    }
}

impl From<SelectFlags> for settings::SelectArgs {
    fn from(f: SelectFlags) -> settings::SelectArgs {
        settings::SelectArgs { fixes: f.fixes, profile: f.profile, check: f.check, dry_run: f.dry_run }
    }
}

impl From<RevertFlags> for settings::SelectArgs {
    fn from(f: RevertFlags) -> settings::SelectArgs {
        settings::SelectArgs { fixes: f.fixes, profile: f.profile, check: false, dry_run: f.dry_run }
    }
}

impl From<LintFlags> for settings::LintArgs {
    fn from(f: LintFlags) -> settings::LintArgs {
        settings::LintArgs { upstream: f.upstream }
    }
}

impl From<EquivFlags> for settings::EquivArgs {
    fn from(f: EquivFlags) -> settings::EquivArgs {
        settings::EquivArgs {
            cases: f.cases,
            batch: f.batch,
            vocab: f.vocab,
            release: f.release,
            draws: f.draws,
            alpha: f.alpha,
            calibration_runs: f.calibration_runs,
            power_runs: f.power_runs,
            ulp_bound: f.ulp_bound,
            threads: f.threads,
            seed: f.seed,
            emit_vectors: f.emit_vectors,
        }
    }
}

impl From<BenchFlags> for settings::BenchArgs {
    fn from(f: BenchFlags) -> settings::BenchArgs {
        settings::BenchArgs {
            repeats: f.repeats,
            batch: f.batch,
            vocab: f.vocab,
            top_k: f.top_k,
            top_p: f.top_p,
            release: f.release,
            threads: f.threads,
        }
    }
}

impl From<TestFlags> for settings::TestArgs {
    fn from(f: TestFlags) -> settings::TestArgs {
        settings::TestArgs { fix: f.fix, pytest_args: f.pytest_args }
    }
}

impl From<ConformFlags> for settings::ConformArgs {
    fn from(f: ConformFlags) -> settings::ConformArgs {
        settings::ConformArgs {
            schedules: f.schedules,
            seed: f.seed,
            first: f.first,
            replay: f.replay,
            shrink: f.shrink,
            no_reference: f.no_reference,
            jobs: f.jobs,
            setup: f.setup,
            requirements: f.requirements,
        }
    }
}

impl From<MatrixFlags> for settings::MatrixArgs {
    fn from(f: MatrixFlags) -> settings::MatrixArgs {
        settings::MatrixArgs {
            releases: f.releases,
            fixes: f.fixes,
            record: f.record,
            no_tests: f.no_tests,
            markdown: f.markdown,
            plan: f.plan,
            per_fix: f.per_fix,
            merge: f.merge,
        }
    }
}

impl From<PortFlags> for settings::PortArgs {
    fn from(f: PortFlags) -> settings::PortArgs {
        settings::PortArgs { fix: f.fix, to: f.to, release: f.release, from: f.from, from_tree: f.from_tree }
    }
}

impl From<RecordFlags> for settings::RecordArgs {
    fn from(f: RecordFlags) -> settings::RecordArgs {
        settings::RecordArgs { fix: f.fix, release: f.release, pristine: f.pristine, edited: f.edited, files: f.files }
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds (0 or more)")),
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the catalogue's fixes and profiles, with their state when trees are found.
    List,
    /// Show one fix: manifest summary, release variants, README path.
    Show {
        #[arg(add = complete::fixes())]
        fix: String,
        /// Print the fix's README instead of the summary.
        #[arg(long)]
        readme: bool,
    },
    /// Apply fixes (default: the `default` profile); with --check only report.
    Apply(SelectFlags),
    /// Undo fixes, back to the bytes the files had: without FIX or --profile, every fix apply
    /// recorded in the trees found.
    Revert(RevertFlags),
    /// What a fix changes, or why it drifted.
    Diff {
        #[arg(add = complete::fixes())]
        fix: String,
    },
    /// For each tree found: path, version hint and every fix's state.
    Status,
    /// Check the catalogue's consistency (and, with --upstream, against pristine trees).
    Lint(LintFlags),
    /// Run the distribution-equivalence suite of the reference sampler (feature `reference`).
    // Hidden where it cannot run; called anyway, it says how to rebuild with it.
    #[command(hide = !cfg!(feature = "reference"))]
    Equiv(EquivFlags),
    /// Time stock vs subset sampling with the reference sampler (feature `reference`).
    #[command(hide = !cfg!(feature = "reference"))]
    Bench(BenchFlags),
    /// Run a fix's tests (built into the binary) against the trees found: 0 pass, 1 fail, 3 error.
    Test(TestFlags),
    /// Drive the trees' HPU sampling path with seeded schedules and hold it against each
    /// request's parameters: 0 no difference, 1 differences, 3 cannot run (--setup first).
    Conform(ConformFlags),
    /// Every fix × release: state, variant, whether the fix's tests pass; `--record` writes `verified:`.
    Matrix(MatrixFlags),
    /// Carry a fix's variant to a new release's pristine tree (three-way), into a directory catalogue.
    Port(PortFlags),
    /// Make or refresh a variant from a hand-edited tree, into a directory catalogue.
    Record(RecordFlags),
    /// Print a shell's completion script on stdout (e.g. `gaudi-fixes completions bash >
    /// /usr/share/bash-completion/completions/gaudi-fixes`); it asks `gaudi-fixes` on PATH for
    /// each completion.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, or with --dir write one page per subcommand.
    Man(ManFlags),
}

/// `man` flags.
#[derive(Debug, Args)]
pub struct ManFlags {
    /// Write gaudi-fixes.1 and one gaudi-fixes-<command>.1 per subcommand into DIR (e.g.
    /// /usr/local/share/man/man1) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Which fixes `apply` acts on.
#[derive(Debug, Args)]
pub struct SelectFlags {
    /// Fixes by name (applied in `after:` order).
    #[arg(value_name = "FIX", add = complete::fixes())]
    pub fixes: Vec<String>,
    /// A profile's fixes (combined with any FIX given).
    #[arg(long, value_name = "NAME", add = complete::profiles())]
    pub profile: Option<String>,
    /// Only report: exit 0 applied, 1 not applied, 2 drifted, 3 error. Writes nothing.
    #[arg(long)]
    pub check: bool,
    /// Plan and report what would change, write nothing (exit 0 whatever would change).
    #[arg(long = "dry-run")]
    pub dry_run: bool,
}

/// Which fixes `revert` acts on. No `--check`: its exit codes would read backwards for a
/// revert; `apply --check` reports the state.
#[derive(Debug, Args)]
pub struct RevertFlags {
    /// Fixes by name (reverted in reverse `after:` order). Neither FIX nor --profile: every fix
    /// the trees' provenance records as applied (and any that reads applied without a record).
    #[arg(value_name = "FIX", add = complete::fixes())]
    pub fixes: Vec<String>,
    /// A profile's fixes (combined with any FIX given).
    #[arg(long, value_name = "NAME", add = complete::profiles())]
    pub profile: Option<String>,
    /// Plan and report what would change, write nothing (exit 0 whatever would change).
    #[arg(long = "dry-run")]
    pub dry_run: bool,
}

/// `lint` flags.
#[derive(Debug, Args)]
pub struct LintFlags {
    /// A directory with one pristine tree root per release (`<DIR>/v0.26.0/vllm/...`).
    #[arg(long, value_name = "DIR")]
    pub upstream: Option<PathBuf>,
}

/// `equiv` flags.
#[derive(Debug, Args)]
pub struct EquivFlags {
    /// Generated batches per configuration (2 dtypes × 3 top_k × 3 top_p distributions).
    #[arg(long, default_value_t = 2)]
    pub cases: usize,
    /// Rows per generated batch.
    #[arg(long, default_value_t = 8)]
    pub batch: i64,
    /// Vocabulary sizes for generated batches, used in turn; fixtures use the first.
    #[arg(long, value_delimiter = ',', default_values_t = [32000, 151936])]
    pub vocab: Vec<i64>,
    /// The vLLM release whose stock sampler is the reference (v0.26.0 or v0.30.0).
    #[arg(long, default_value = "v0.30.0")]
    pub release: String,
    /// Independent draws per row for the statistical check.
    #[arg(long, default_value_t = 1000)]
    pub draws: usize,
    /// Family-wise false-alarm level of the statistical gate (Bonferroni over cases).
    #[arg(long, default_value_t = 0.001)]
    pub alpha: f64,
    /// Runs of the statistical gate on stock against itself, to measure its false-alarm rate.
    #[arg(long = "calibration-runs", default_value_t = 1000)]
    pub calibration_runs: usize,
    /// Runs of the statistical gate per power-table row (samplers biased by total variation
    /// 0.01, 0.03, 0.1, mass moved from or to the top token).
    #[arg(long = "power-runs", default_value_t = 200)]
    pub power_runs: usize,
    /// Largest allowed probability difference on an identical support, in float32 ulps.
    #[arg(long = "ulp-bound", default_value_t = 16)]
    pub ulp_bound: u64,
    /// libtorch intra-op threads. The suite's tensors are small, so one thread is fastest:
    /// more spend their time in OpenMP spin-waits, badly so on a busy machine.
    #[arg(long, default_value_t = 1)]
    pub threads: i32,
    /// Base seed for the generated cases and all noise.
    #[arg(long, default_value_t = 20261130)]
    pub seed: u64,
    /// Only write test vectors (.npy + manifest.json) for the Python test into DIR; no suite.
    #[arg(long = "emit-vectors", value_name = "DIR")]
    pub emit_vectors: Option<PathBuf>,
}

/// `bench` flags.
#[derive(Debug, Args)]
pub struct BenchFlags {
    /// Repeats per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Batch sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 64, 256])]
    pub batch: Vec<i64>,
    /// Vocabulary sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [32000, 128256, 151936])]
    pub vocab: Vec<i64>,
    /// Largest per-row top_k; rows get top_k spread over 1..=this (sets the window K).
    #[arg(long = "top-k", default_value_t = 50)]
    pub top_k: i64,
    /// top_p of every row (1.0: no top_p).
    #[arg(long = "top-p", default_value_t = 0.9)]
    pub top_p: f32,
    /// The vLLM release whose stock sampler is timed.
    #[arg(long, default_value = "v0.30.0")]
    pub release: String,
    /// libtorch intra-op threads (default: every core).
    #[arg(long)]
    pub threads: Option<i32>,
}

impl Command {
    /// The subcommand's name, as typed (the JSON document's `command`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::List => "list",
            Command::Show { .. } => "show",
            Command::Apply(_) => "apply",
            Command::Revert(_) => "revert",
            Command::Diff { .. } => "diff",
            Command::Status => "status",
            Command::Lint(_) => "lint",
            Command::Equiv(_) => "equiv",
            Command::Bench(_) => "bench",
            Command::Test(_) => "test",
            Command::Conform(_) => "conform",
            Command::Matrix(_) => "matrix",
            Command::Port(_) => "port",
            Command::Record(_) => "record",
            Command::Completions { .. } => "completions",
            Command::Man(_) => "man",
        }
    }
}

/// `--format json` / `--format=json` among `args` (for usage errors, which come before parsing).
pub fn wants_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    args.windows(2).any(|w| w[0] == "--format" && w[1] == "json") || args.iter().any(|a| a == "--format=json")
}

impl Cli {
    /// Parse argv; a usage error prints clap's message and maps to exit 3 (help/version to 0).
    pub fn parse_or_usage_error() -> Result<Cli, ExitStatus> {
        // Set but empty (`GAUDI_FIXES_CATALOG=` in an env file) is unset: the built-in catalogue,
        // as for GAUDI_FIXES_ROOT, not a usage error ("a value is required") for every command.
        // Before any thread is started, so changing the environment is sound.
        if std::env::var_os("GAUDI_FIXES_CATALOG").is_some_and(|v| v.is_empty()) {
            std::env::remove_var("GAUDI_FIXES_CATALOG");
        }
        let parsed =
            command().try_get_matches_from(std::env::args_os()).and_then(|matches| Cli::from_arg_matches(&matches));
        parsed.map_err(|err| {
            let _ = err.print();
            if err.use_stderr() {
                ExitStatus::Error
            } else {
                ExitStatus::Applied
            }
        })
    }
}

/// The whole command line as clap sees it, with what the derive cannot know at compile time:
/// `--version` naming the built-in catalogue, `apply --help`'s examples and profile names.
/// Completions and the man page are made from this too.
pub fn command() -> clap::Command {
    let catalog = crate::catalog::Catalog::load(None).ok();
    let (version, long_version, profiles) = match &catalog {
        Some(catalog) => {
            let id = catalog.identity();
            let version = format!("{} (catalogue: {} fixes, {})", env!("CARGO_PKG_VERSION"), id.fixes, id.short_hash());
            let long = format!("{} (catalogue: {} fixes, sha256 {})", env!("CARGO_PKG_VERSION"), id.fixes, id.sha256);
            let profiles: Vec<String> =
                catalog.profiles.iter().map(|p| format!("  {:<13} {}", p.name, p.description.trim())).collect();
            (version, long, profiles.join("\n"))
        }
        None => (env!("CARGO_PKG_VERSION").to_string(), env!("CARGO_PKG_VERSION").to_string(), String::new()),
    };
    let mut cli = Cli::command().version(version).long_version(long_version);
    let names: Vec<String> = cli.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        let mut after = Vec::new();
        if name == "apply" {
            after.push(format!("Profiles (built-in catalogue; `gaudi-fixes list` shows a --catalog's):\n{profiles}"));
        }
        let examples: String =
            examples::examples(Some(&name)).iter().map(|(cmd, what)| format!("\n  {cmd}\n      {what}")).collect();
        if !examples.is_empty() {
            after.push(format!("Examples:{examples}"));
        }
        after.push(exit_codes::help(&name));
        cli = cli.mut_subcommand(&name, |sub| sub.after_help(after.join("\n\n")));
    }
    cli
}

/// `gaudi-fixes completions SHELL`: the completion script on stdout.
pub fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<ExitStatus> {
    crate::report::emit(false, |out| Ok(complete::registration(shell, out)?))?;
    Ok(ExitStatus::Applied)
}

/// `test` flags.
#[derive(Debug, Args)]
pub struct TestFlags {
    /// The fix whose tests run.
    #[arg(add = complete::fixes())]
    pub fix: String,
    /// Extra pytest arguments, after `--` (e.g. `-- -k "not mutant" -x`).
    #[arg(last = true, value_name = "PYTEST_ARGS")]
    pub pytest_args: Vec<String>,
}

/// The most schedules one `conform` run takes (about 14 hours of them): the suite plans them
/// all before the first, so a count past any real run's (`--schedules 4294967295`) only eats
/// memory; refused as a usage error instead.
pub const MAX_SCHEDULES: u32 = 100_000;

/// `conform` flags.
#[derive(Debug, Args)]
pub struct ConformFlags {
    /// How many seeded schedules to run, 1 to 100000 (half under sync, half under async
    /// scheduling; about 0.5 s each after a start of 15-60 s).
    #[arg(long, default_value_t = 200, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_SCHEDULES as i64))]
    pub schedules: u32,
    /// The first schedule's seed (schedule n uses seed + n; a report's "schedule N" is what
    /// `--seed N --schedules 1` runs): the same seed, the same schedules.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
    /// Stop at the first schedule that finds a difference and print that schedule as data
    /// (the last line of the report; `failing_schedule` in JSON), for --replay.
    #[arg(long)]
    pub first: bool,
    /// Run the one schedule saved in FILE (what --first printed) instead of seeded ones.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["schedules", "seed", "first"])]
    pub replay: Option<PathBuf>,
    /// Shrink the schedule saved in FILE (what --first printed) to the smallest one that still
    /// differs in the same feature, and print it (for --replay, and for an upstream bug report).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["schedules", "seed", "first", "replay", "no_reference"])]
    pub shrink: Option<PathBuf>,
    /// Only hold each request against its own parameters: vLLM's GPU path is not imported.
    #[arg(long = "no-reference")]
    pub no_reference: bool,
    /// Worker processes the schedules are split over (default: the cores available), each
    /// importing vLLM once; the report is the same for every N but for its time and rate.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256),
          conflicts_with_all = ["shrink"])]
    pub jobs: Option<u32>,
    /// Set up or repair --python's environment for the suite, then exit: write the pinned
    /// requirements built into gaudi-fixes to the cache and run `PYTHON -m pip install --no-deps
    /// -r FILE`. torch is never installed (the interpreter's own is used).
    #[arg(long, conflicts_with_all = ["replay", "shrink", "first", "requirements", "schedules", "seed", "no_reference"])]
    pub setup: bool,
    /// Print the pinned requirements built into gaudi-fixes (a file for `pip install --no-deps
    /// -r`), then exit.
    #[arg(long, conflicts_with_all = ["replay", "shrink", "first", "schedules", "seed", "no_reference"])]
    pub requirements: bool,
}

/// `matrix` flags.
#[derive(Debug, Args)]
pub struct MatrixFlags {
    /// Releases to check (comma-separated tags, e.g. v0.26.0,v0.30.0); default: every release
    /// the catalogue names.
    #[arg(long, value_delimiter = ',', value_name = "LIST", add = complete::releases())]
    pub releases: Vec<String>,
    /// Only these fixes (default: all).
    #[arg(long = "fix", value_name = "NAME", add = complete::fixes())]
    pub fixes: Vec<String>,
    /// Write `verified:` into the directory catalogue for every cell that applied exactly and
    /// whose tests passed.
    #[arg(long)]
    pub record: bool,
    /// Do not run the fixes' tests (state only).
    #[arg(long = "no-tests")]
    pub no_tests: bool,
    /// Print the Markdown tables the fix pages embed instead of the human table.
    #[arg(long)]
    pub markdown: bool,
    /// Run nothing: print the jobs to fan this matrix out over CI runners, one per release (with
    /// `--format github`: a `matrix=` line for $GITHUB_OUTPUT and a `strategy.matrix`).
    #[arg(long, conflicts_with_all = ["record", "markdown", "merge", "no_tests"])]
    pub plan: bool,
    /// With --plan: one job per fix × release instead of one per release.
    #[arg(long = "per-fix", requires = "plan")]
    pub per_fix: bool,
    /// Run nothing: merge the jobs' `matrix --format json` results into one table (refused when
    /// made by another gaudi-fixes version or catalogue); with --record, write `verified:` as
    /// one local `matrix --record` over them would.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with_all = ["releases", "fixes", "no_tests"])]
    pub merge: Vec<PathBuf>,
}

/// `port` flags.
#[derive(Debug, Args)]
pub struct PortFlags {
    /// The fix to port.
    #[arg(add = complete::fixes())]
    pub fix: String,
    /// The new release's pristine tree (a directory holding vllm/ and/or vllm_gaudi/).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// The new release's tag, e.g. v0.33.0 (the new variant's key).
    #[arg(long, value_name = "NAME")]
    pub release: String,
    /// The variant to carry (default: the newest one).
    #[arg(long, value_name = "VARIANT")]
    pub from: Option<String>,
    /// The old release's pristine tree (default: ~/.cache/gaudi-fixes/upstream/<VARIANT>/ and
    /// the vllm_gaudi cache).
    #[arg(long = "from-tree", value_name = "DIR")]
    pub from_tree: Option<PathBuf>,
}

/// `record` flags.
#[derive(Debug, Args)]
pub struct RecordFlags {
    /// The fix to make or refresh a variant of.
    #[arg(add = complete::fixes())]
    pub fix: String,
    /// The release tag of the variant, e.g. v0.33.0.
    #[arg(long, value_name = "NAME")]
    pub release: String,
    /// The pristine tree (a directory holding vllm/ and/or vllm_gaudi/).
    #[arg(long, value_name = "DIR")]
    pub pristine: PathBuf,
    /// The same tree edited by hand.
    #[arg(long, value_name = "DIR")]
    pub edited: PathBuf,
    /// Files to record (relative to the tree root, e.g. vllm/v1/sample/ops/topk_topp_sampler.py);
    /// default: the files the fix's existing variants patch.
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<String>,
}
