//! The `gaudi-fixes` binary: parse, run, print the error chain once, exit with a typed status.
//! With `--format json` an error is a JSON document on stdout too (`error`, `exit_code` 3),
//! so every run prints exactly one document.

use std::io::Write;
use std::process::ExitCode;

use gaudi_fixes::cli::{Cli, Command, Format};
use gaudi_fixes::exit_status::{ExitStatus, ROLLBACK_FAILED};

fn main() -> ExitCode {
    let json_args = wants_json(std::env::args_os());
    let cli = match Cli::parse_or_usage_error() {
        Ok(cli) => cli,
        Err(status) => {
            if json_args && status == ExitStatus::Error {
                print_error_document(None, "usage error (see stderr)", status.code());
            }
            return status.into();
        }
    };
    let json = cli.global.format == Format::Json;
    let github = cli.global.format == Format::Github;
    let command = command_name(&cli.command);
    match gaudi_fixes::run(cli) {
        Ok(status) => status.into(),
        // Only reached by commands whose result does not depend on their output (list, show).
        Err(err) if gaudi_fixes::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let code = if err.chain().any(|c| c.is::<gaudi_fixes::transaction::RollbackFailed>()) {
                ROLLBACK_FAILED
            } else {
                ExitStatus::Error.code()
            };
            let message = format!("{err:#}");
            eprintln!("gaudi-fixes: error: {message}");
            if json {
                print_error_document(Some(command), &message, code);
            } else if github {
                print_error_annotation(&message);
            }
            ExitCode::from(code)
        }
    }
}

fn command_name(command: &Command) -> &'static str {
    match command {
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
        Command::Matrix(_) => "matrix",
        Command::Port(_) => "port",
        Command::Record(_) => "record",
        Command::Completions { .. } => "completions",
        Command::Man => "man",
    }
}

/// `--format json` / `--format=json` on the command line (for usage errors, before parsing).
fn wants_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    args.windows(2).any(|w| w[0] == "--format" && w[1] == "json") || args.iter().any(|a| a == "--format=json")
}

/// The error as a GitHub annotation on stdout (where `--format github` prints the others), at
/// the file and line it names; a closed stdout is ignored.
fn print_error_annotation(message: &str) {
    let (file, line) = gaudi_fixes::report::json::locate(message);
    let stdout = gaudi_fixes::report::stdout();
    let mut out = stdout.lock();
    let _ = gaudi_fixes::report::github::error_at(&mut out, message, file.as_deref(), line);
}

/// One JSON document for a failed run; a closed stdout is ignored (the exit code tells).
fn print_error_document(command: Option<&str>, message: &str, code: u8) {
    let (file, line) = gaudi_fixes::report::json::locate(message);
    let doc = serde_json::json!({
        "schema": gaudi_fixes::report::json::SCHEMA,
        "command": command,
        "exit_code": code,
        "error": {"message": message, "file": file, "line": line},
    });
    let stdout = gaudi_fixes::report::stdout();
    let mut out = stdout.lock();
    let _ = serde_json::to_writer_pretty(&mut out, &doc);
    let _ = writeln!(out);
}
