//! Fault injection, for tests only: inert unless `GAUDI_FIXES_FAULT` is set.

use std::path::Path;

use std::time::Duration;

use super::{notify, Event};

/// Whether `GAUDI_FIXES_FAULT` (comma-separated steps) names `step`.
pub(super) fn fault_named(step: &str) -> bool {
    std::env::var("GAUDI_FIXES_FAULT").is_ok_and(|v| v.split(',').any(|f| f == step))
}

/// Abort here if `GAUDI_FIXES_FAULT` names this step (crash tests only).
pub(super) fn fault(step: &str) {
    if fault_named(step) {
        notify(&Event::FaultAbort { step });
        std::process::abort();
    }
}

/// Whether `GAUDI_FIXES_FAULT` (comma-separated steps) names `kind:nth`; rollback writes are
/// numbered `rollback` (`write-error:rollback` makes putting files back fail too).
pub(super) fn fault_matches(kind: &str, nth: usize) -> bool {
    fault_named(&if nth == ROLLBACK_WRITE { format!("{kind}:rollback") } else { format!("{kind}:{nth}") })
}

/// The `nth` of a rollback write, for [`fault_matches`].
pub(super) const ROLLBACK_WRITE: usize = usize::MAX;

thread_local! {
    static WRITE_ERROR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn arm_write_error() {
    WRITE_ERROR.with(|c| c.set(true));
}

/// The injected I/O error, once, when armed.
pub(super) fn fault_write_error() -> Option<std::io::Error> {
    if WRITE_ERROR.with(|c| c.replace(false)) {
        notify(&Event::FaultWriteError);
        return Some(std::io::Error::from_raw_os_error(libc::EIO));
    }
    None
}

/// Create `$GAUDI_FIXES_FAULT_PAUSE` and wait until the test removes it.
pub(super) fn pause() {
    let Some(marker) = std::env::var_os("GAUDI_FIXES_FAULT_PAUSE") else { return };
    let _ = std::fs::write(&marker, b"paused\n");
    while Path::new(&marker).exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
}
