//! Evaluate fixes against trees and plan the edits, entirely in memory.
//!
//! A fix's state is decided by content: each release variant is tried (pristine hash first,
//! then exact hunk matches) and the first one that is cleanly applied or cleanly not applied
//! wins; the version string is only a hint. Drift is a finding (a [`FixState`]), not an error;
//! only broken input and I/O are errors. Apply and revert simulate every selected fix in order
//! on in-memory copies, so a later fix sees an earlier one's edits and nothing is written unless
//! every fix can be done.
//!
//! The outcome types and [`plan`] live here; judging and choosing a fix's variant in
//! `evaluate.rs`; the in-memory workspace that reads tree files (and the file-safety policy
//! for writing them) in `workspace.rs`.

mod detect;
mod evaluate;
pub mod reason;
mod verdict;
mod workspace;

use anyhow::Result;

use crate::catalog::Fix;
use crate::discover::Trees;
use crate::tree::TreeFilter;

pub use verdict::*;
pub use workspace::check_writable;

use evaluate::{edit_variant, evaluate, shared_file_conflict};
use workspace::Workspace;

/// Evaluate and (for apply/revert) simulate `fixes`, in the order given.
pub fn plan(fixes: &[&Fix], trees: &Trees, only: &TreeFilter, op: Op) -> Result<Plan> {
    let mut ws = Workspace::new();
    let mut reports = Vec::new();
    let ordered: Vec<&Fix> = if op == Op::Revert { fixes.iter().rev().copied().collect() } else { fixes.to_vec() };
    for fix in ordered {
        let (mut report, chosen) = evaluate(fix, trees, only, &mut ws)?;
        if report.state == FixState::Drifted {
            if let Some(conflict) = shared_file_conflict(fix, &report, trees, &mut ws)? {
                report.message = Some(conflict);
            }
        }
        let simulate = match (op, report.state) {
            (Op::Apply | Op::Check, FixState::NotApplied) => Some(true),
            (Op::Revert, FixState::Applied) => Some(false),
            _ => None,
        };
        if let (Some(forward), Some(variant)) = (simulate, chosen) {
            if op != Op::Check {
                report.action = Some(if forward { Action::Apply } else { Action::Revert });
            }
            edit_variant(variant, trees, only, &mut ws, forward, &fix.manifest.name)?;
        }
        reports.push(report);
    }
    if op == Op::Revert {
        reports.reverse();
    }
    let mut edits = Vec::new();
    if matches!(op, Op::Apply | Op::Revert) {
        for loaded in ws.files.values() {
            let new = loaded.text.encode();
            if new != loaded.original {
                let tree_root = trees.get(loaded.tree).expect("loaded files come from found trees").root.clone();
                edits.push(Edit {
                    tree: loaded.tree,
                    tree_root,
                    rel: loaded.rel.clone(),
                    path: loaded.path.clone(),
                    old: loaded.original.clone(),
                    new,
                });
            }
        }
    }
    Ok(Plan { reports, edits })
}
