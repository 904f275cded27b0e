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

mod chain;
mod detect;
mod evaluate;
pub mod pairing;
pub mod reason;
mod revert;
mod verdict;
mod workspace;

use anyhow::Result;

use crate::catalog::{Catalog, Fix};
use crate::discover::Trees;
use crate::tree::TreeFilter;

pub use verdict::*;
pub use workspace::check_writable;

use evaluate::{edit_variant, shared_file_conflict};
use workspace::Workspace;

/// Judge `fixes` (each on the tree as its predecessors leave it, see `chain.rs`) and, for
/// apply/revert, simulate their edits in the order given (reverse for revert). `recorded` is
/// what the provenance records say was applied (fix → variant): among variants that read
/// applied, that one is named.
///
/// Every verdict comes from the chain's one pass ([`chain::Chain::judge`]); the run then only
/// makes the edits those verdicts call for, on its own in-memory copy, with the variant each
/// verdict chose, and judges nothing again while they go on. Apply and `--check` go forward
/// on the selection alone; a fix whose edits do not go on there (an earlier fix of the run
/// shares its file, a fix it comes after is neither applied nor selected), or that is not to
/// be applied, is judged on the copy, which costs nothing where the copy holds its files as
/// the chain did. Revert goes backward (`revert.rs`), and only a fix whose edits do not come
/// off is looked at again.
pub fn plan(
    catalog: &Catalog,
    fixes: &[&Fix],
    trees: &Trees,
    only: &TreeFilter,
    recorded: &Recorded,
    op: Op,
) -> Result<Plan> {
    let mut ws = Workspace::new();
    let mut chain = chain::Chain::new(catalog, trees, only, recorded);
    let judged = chain.judge(fixes, &mut ws)?;
    let reports = match op {
        Op::Status => return Ok(Plan { reports: judged.into_iter().map(|(r, _)| r).collect(), edits: Vec::new() }),
        Op::Apply | Op::Check => {
            let mut reports = Vec::new();
            for (fix, settled) in fixes.iter().zip(&judged) {
                reports.push(forward_one(catalog, &mut chain, fixes, fix, settled, op, &mut ws)?);
            }
            reports
        }
        Op::Revert => revert::backward(&mut chain, fixes, &judged, recorded, &mut ws)?,
    };
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

/// Apply (or `--check`) `fix`, whose verdict on the chain is `settled` (with the variant it
/// chose), on the run's copy `ws` (the fixes of the selection before it already applied there).
/// A fix not applied is applied with that variant, judged no further, when every fix it comes
/// after is in the selection (the copy then holds its files as the chain did); one with a
/// predecessor outside the selection, one whose edits do not go on, and any other, is judged on
/// the copy (memoised: where the predecessor is applied in the tree, the copy holds what the
/// chain judged and that costs nothing; where it is not, the hunks land where this run puts
/// them, away from the patch's lines, and the report says so), and what the copy holds says why.
fn forward_one<'c>(
    catalog: &Catalog,
    chain: &mut chain::Chain<'c>,
    selection: &[&Fix],
    fix: &'c Fix,
    (settled, chosen): &chain::Judged<'c>,
    op: Op,
    ws: &mut Workspace,
) -> Result<FixReport> {
    let (trees, only) = (chain.trees(), chain.only());
    let outside =
        chain.predecessors(&fix.manifest.name)?.iter().any(|p| !selection.iter().any(|f| &f.manifest.name == p));
    if let (false, FixState::NotApplied, Some(variant)) = (outside, settled.state, chosen) {
        let mut trial = ws.clone();
        match edit_variant(variant, trees, only, &mut trial, true, &fix.manifest.name) {
            Ok(()) => {
                *ws = trial;
                let mut report = settled.clone();
                report.action = (op == Op::Apply).then_some(Action::Apply);
                return Ok(report);
            }
            Err(e) if e.downcast_ref::<crate::catalog::chain::NotTaken>().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    let (mut report, chosen) = chain.evaluate(fix, ws)?;
    if report.state == settled.state {
        // The run agrees with the chain: how the chain reached the verdict (applied on top
        // of fixes undone since, say) holds here too, with what it advises.
        report.basis = settled.basis.clone();
        report.advice = settled.advice.clone();
    }
    if report.state == FixState::Drifted {
        let drifted = report.files.iter().filter(|f| f.state == FileOutcome::Drifted);
        if let Some(conflict) = shared_file_conflict(fix, drifted.map(|f| (f.tree, f.path.as_str())), trees, ws)? {
            report.basis = conflict;
            report.message = None;
        } else if settled.state != FixState::Drifted {
            report = unreachable_in_run(catalog, chain, fix, settled, op)?;
        }
    }
    if let (FixState::NotApplied, Some(variant)) = (report.state, chosen) {
        if op == Op::Apply {
            report.action = Some(Action::Apply);
        }
        edit_variant(variant, trees, only, ws, true, &fix.manifest.name)?;
    }
    Ok(report)
}

/// A fix whose state is settled on its chain (`settled`) but that this run's simulation, over
/// the selection only, finds drifted. For `--check` the settled state stands. Applying: a fix
/// it is made on top of is neither applied nor selected, so its edits cannot be made; say
/// which, and the command that applies them together.
fn unreachable_in_run(
    catalog: &Catalog,
    chain: &mut chain::Chain<'_>,
    fix: &Fix,
    settled: &FixReport,
    op: Op,
) -> Result<FixReport> {
    let mut report = settled.clone();
    if (op, settled.state) == (Op::Apply, FixState::NotApplied) {
        let before = chain.predecessors(&fix.manifest.name)?.to_vec();
        let mut names = before.clone();
        names.push(fix.manifest.name.clone());
        report.state = FixState::Error;
        report.basis = Basis::PredecessorsNotSelected { fixes: before };
        report.message = None;
        let together = catalog.order(&names)?.iter().map(|f| f.manifest.name.clone()).collect();
        report.advice = vec![Advice::Apply { fixes: together }];
    }
    Ok(report)
}
