//! `gaudi-fixes revert [FIX…] [--profile NAME]`: back to byte-identical pristine sources, in
//! reverse `after:` order.

use anyhow::Result;

use crate::exit_status::ExitStatus;
use crate::plan::Op;
use crate::settings::{SelectArgs, Settings};

/// Run `revert`. It has no `--check` (its exit codes would read backwards: "1 = not applied" is
/// what a revert wants); `apply --check` reports the state.
pub fn run(global: &Settings, args: &SelectArgs) -> Result<ExitStatus> {
    super::select::run_select(global, args, Op::Revert, "revert")
}
