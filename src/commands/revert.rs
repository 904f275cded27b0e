//! `gaudi-fixes revert [FIX…] [--profile NAME]`: back to byte-identical pristine sources, in
//! reverse `after:` order.

use anyhow::Result;

use crate::cli::{GlobalArgs, SelectArgs};
use crate::exit_status::ExitStatus;
use crate::plan::Op;

/// Run `revert` (`--check` reports like `apply --check` and writes nothing).
pub fn run(global: &GlobalArgs, args: &SelectArgs) -> Result<ExitStatus> {
    let op = if args.check { Op::Check } else { Op::Revert };
    super::apply::run_select(global, args, op, "revert")
}
