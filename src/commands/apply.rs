//! `gaudi-fixes apply [FIX…] [--profile NAME] [--check] [--dry-run]` (the steps, shared with
//! `revert`, are in [`super::select`]).

use anyhow::Result;

use super::select::run_select;
use crate::exit_status::ExitStatus;
use crate::plan::Op;
use crate::settings::{SelectArgs, Settings};

/// Run `apply`.
pub fn run(global: &Settings, args: &SelectArgs) -> Result<ExitStatus> {
    let op = if args.check { Op::Check } else { Op::Apply };
    run_select(global, args, op, "apply")
}
