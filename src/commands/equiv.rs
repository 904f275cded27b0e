//! `gaudi-fixes equiv`: the distribution-equivalence suite (feature `reference`).

use anyhow::Result;

use crate::cli::{EquivArgs, GlobalArgs};
use crate::exit_status::ExitStatus;

/// Run the suite, or say how to get it when built without the `reference` feature.
pub fn run(global: &GlobalArgs, args: &EquivArgs) -> Result<ExitStatus> {
    #[cfg(feature = "reference")]
    {
        crate::reference::suite::run(global, args)
    }
    #[cfg(not(feature = "reference"))]
    {
        let _ = (global, args);
        Err(crate::commands::reference_missing("equiv"))
    }
}
