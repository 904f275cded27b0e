//! `gaudi-fixes revert [FIX…] [--profile NAME]`: back to the bytes the files had, in reverse
//! `after:` order. Without FIX or `--profile` it undoes what `apply` did to the trees found
//! (their provenance records, and any fix that reads applied without one).

use anyhow::Result;

use crate::exit_status::ExitStatus;
use crate::plan::Op;
use crate::settings::{SelectArgs, Settings};

/// Run `revert`. It has no `--check` (its exit codes would read backwards: "1 = not applied" is
/// what a revert wants); `apply --check` reports the state.
pub fn run(global: &Settings, args: &SelectArgs) -> Result<ExitStatus> {
    super::select::run_select(global, args, Op::Revert, "revert")
}
