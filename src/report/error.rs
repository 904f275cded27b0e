//! The error that ended a run, printed once: the chain on stderr, and with `--format json` the
//! error document (every run prints exactly one document) or with `--format github` an
//! annotation, both at the place a [`crate::error::Located`] error in the chain names.

use super::advice::Invocation;
use super::{github, json, stdout, Format};
use crate::exit_status::ExitStatus;

/// Print `err`, which ended `command` with exit code `code`, the commands it suggests written
/// with the run's `invocation`. A closed stdout is ignored (the exit code tells).
pub fn print(err: &anyhow::Error, format: Format, command: &str, code: u8, invocation: &Invocation) {
    let message = super::advice::error_text(err, invocation);
    super::stderr_line(format_args!("gaudi-fixes: error: {message}"));
    let stdout = stdout();
    let mut out = stdout.lock();
    let _ = match format {
        Format::Json => json::error(&mut out, command, err, &message, code),
        Format::Github => github::run_error(&mut out, err, &message),
        Format::Human => Ok(()),
    };
}

/// After clap has printed why it refused the command line (or its help, for `status`
/// [`ExitStatus::Applied`]): the JSON document too when `--format json` was asked for.
pub fn usage(status: ExitStatus, json: bool) {
    if json && status == ExitStatus::Error {
        let stdout = stdout();
        let _ = json::usage_error(&mut stdout.lock(), status.code());
    }
}
