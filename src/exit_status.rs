//! The process exit codes, as a type: CI scripts branch on them, so they never change.

use std::process::ExitCode;

/// What a run concluded. `--check` uses all four; plain `apply` uses Applied, Drifted, Error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitStatus {
    /// Everything requested is applied (or upstreamed); for `equiv`, equivalent.
    Applied = 0,
    /// Something requested is not applied; for `equiv`, not equivalent.
    NotApplied = 1,
    /// Some source no longer matches what a fix expects; nothing was written.
    Drifted = 2,
    /// Bad input, bad usage or an I/O failure; nothing was written.
    Error = 3,
}

impl ExitStatus {
    /// The numeric code the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The worse of two outcomes (Error > Drifted > NotApplied > Applied).
    pub fn worst(self, other: ExitStatus) -> ExitStatus {
        self.max(other)
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// Exit code of a run whose write failed *and* whose rollback failed: the tree is half-written,
/// the error names each file's state, and the journal stays so the next `apply` / `revert`
/// finishes the transaction first. Not an [`ExitStatus`] (no plan ever asks for it).
pub const ROLLBACK_FAILED: u8 = 4;

#[cfg(test)]
mod tests {
    use super::ExitStatus::*;

    #[test]
    fn codes_are_the_documented_contract() {
        assert_eq!([Applied.code(), NotApplied.code(), Drifted.code(), Error.code()], [0, 1, 2, 3]);
    }

    #[test]
    fn worst_orders_error_over_drift_over_not_applied() {
        assert_eq!(Applied.worst(NotApplied), NotApplied);
        assert_eq!(Drifted.worst(NotApplied), Drifted);
        assert_eq!(Drifted.worst(Error), Error);
        assert_eq!(Applied.worst(Applied), Applied);
    }
}
