//! The error that ended a run, printed once: the chain on stderr, and with `--format json` the
//! error document (every run prints exactly one document) or with `--format github` an
//! annotation, both at the place a [`crate::error::Located`] error in the chain names.

use super::{github, json, stdout, Format};
use crate::exit_status::ExitStatus;

/// Print `err`, which ended `command` with exit code `code`. A closed stdout is ignored (the
/// exit code tells).
pub fn print(err: &anyhow::Error, format: Format, command: &str, code: u8) {
    eprintln!("gaudi-fixes: error: {err:#}");
    let stdout = stdout();
    let mut out = stdout.lock();
    let _ = match format {
        Format::Json => json::error(&mut out, command, err, code),
        Format::Github => github::run_error(&mut out, err),
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
