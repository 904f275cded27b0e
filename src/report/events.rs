//! What a transaction says while it runs (waiting for a lock, injected test faults): one line
//! on stderr each, and nothing under `--quiet`, where the exit code tells.

use std::io::Write;

use crate::transaction::Event;

use super::Output;

/// The line for one event, as the user reads it.
pub fn line(event: &Event<'_>) -> String {
    match event {
        Event::LockWait { path, holders, timeout } => {
            let limit = match timeout {
                Some(t) => format!("up to {} s (--lock-timeout)", t.as_secs_f64()),
                None => "until it is released (--lock-timeout SECONDS bounds this)".to_string(),
            };
            format!("gaudi-fixes: waiting for the lock on {}: held by {holders}; waiting {limit}", path.display())
        }
        Event::FaultAbort { step } => format!("gaudi-fixes: GAUDI_FIXES_FAULT={step}: aborting"),
        Event::FaultWriteError => "gaudi-fixes: GAUDI_FIXES_FAULT: injecting an I/O error".to_string(),
    }
}

/// Print `event` on stderr, unless `--quiet`.
pub fn render(output: Output, event: &Event<'_>) {
    if output.quiet {
        return;
    }
    let _ = writeln!(std::io::stderr().lock(), "{}", line(event));
}
