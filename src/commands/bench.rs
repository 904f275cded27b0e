//! `gaudi-fixes bench`: stock vs subset vs a one-pass floor, timed in one run (feature `reference`).

use anyhow::Result;

use crate::cli::{BenchArgs, GlobalArgs};
use crate::exit_status::ExitStatus;

/// Run the benchmark, or say how to get it when built without the `reference` feature.
pub fn run(global: &GlobalArgs, args: &BenchArgs) -> Result<ExitStatus> {
    #[cfg(feature = "reference")]
    {
        crate::reference::bench::run(global, args)
    }
    #[cfg(not(feature = "reference"))]
    {
        let _ = (global, args);
        Err(crate::commands::reference_missing("bench"))
    }
}
