//! gaudi-fixes: a catalogue of fixes for vLLM and vllm_gaudi sources, applied to installed trees
//! with exact drift detection, plus (feature `reference`) a tch reference sampler that proves a
//! sampler fix draws from the same distribution as stock.
//!
//! Modules:
//! - [`tree`]: tree names and the `--only-tree` filter; [`exit_status`]: the 0/1/2/3 contract;
//!   [`error`]: errors that carry their file and line.
//! - [`catalog`]: fix manifests, profiles, ordering and lint.
//! - [`discover`]: which trees to act on.
//! - [`patch`]: unified-diff parsing, exact hunk location, per-hunk state.
//! - [`plan`]: per-fix state and variant choice across trees; the edits to make.
//! - [`transaction`]: all-or-nothing, crash-safe writes under a lock; [`provenance`]: the
//!   record of what was applied, and where it disagrees with the files.
//! - [`report`]: human / JSON / GitHub output (the only place with colour).
//! - [`commands`]: one file per subcommand.
//! - [`cli`]: flags, turned into the inputs above once, at the top.
//! - `reference` (feature `reference`): the tch reference sampler, `equiv` and `bench`.

pub mod catalog;
pub mod cli;
pub mod commands;
pub mod discover;
pub mod error;
pub mod exit_status;
pub mod hash;
pub mod patch;
pub mod plan;
pub mod provenance;
#[cfg(feature = "reference")]
pub mod reference;
pub mod report;
pub mod transaction;
pub mod tree;
pub mod upkeep;

pub use exit_status::ExitStatus;

use anyhow::Result;

use cli::{Cli, Command};

/// Run one parsed command line and say how it ended.
pub fn run(cli: Cli) -> Result<ExitStatus> {
    report::init_color(cli.global.color);
    transaction::set_lock_timeout(cli.global.lock_timeout);
    match &cli.command {
        Command::List => commands::list::run(&cli.global),
        Command::Show { fix, readme } => commands::show::run(&cli.global, fix, *readme),
        Command::Apply(args) => commands::apply::run(&cli.global, args),
        Command::Revert(args) => commands::revert::run(&cli.global, args),
        Command::Diff { fix } => commands::diff::run(&cli.global, fix),
        Command::Status => commands::status::run(&cli.global),
        Command::Lint(args) => commands::lint::run(&cli.global, args),
        Command::Equiv(args) => commands::equiv::run(&cli.global, args),
        Command::Bench(args) => commands::bench::run(&cli.global, args),
        Command::Test(args) => commands::test::run(&cli.global, args),
        Command::Matrix(args) => commands::matrix::run(&cli.global, args),
        Command::Port(args) => commands::port::run(&cli.global, args),
        Command::Record(args) => commands::record::run(&cli.global, args),
        Command::Completions { shell } => cli::print_completions(*shell),
        Command::Man => cli::print_man(),
    }
}

/// The exit code of a run that ended in `err`: [`exit_status::ROLLBACK_FAILED`] when a
/// rollback failed (the journal stays), else [`ExitStatus::Error`]'s.
pub fn error_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|c| c.is::<transaction::RollbackFailed>()) {
        exit_status::ROLLBACK_FAILED
    } else {
        ExitStatus::Error.code()
    }
}

/// A closed stdout (`gaudi-fixes list | head`) is not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}
