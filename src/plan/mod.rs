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
    if op == Op::Status {
        return Ok(Plan { reports: judged.into_iter().map(|(r, _)| r).collect(), edits: Vec::new() });
    }
    let mut reports = Vec::new();
    let mut order: Vec<usize> = (0..fixes.len()).collect();
    if op == Op::Revert {
        order.reverse();
    }
    for i in order {
        let fix = fixes[i];
        let (settled, _) = &judged[i];
        if op == Op::Revert && !matches!(settled.state, FixState::Applied | FixState::Drifted) {
            // Nothing of it to undo: judged again on this run's copy (the fixes made on top of
            // it reverted in memory, those it is made on top of perhaps never applied) it
            // could read drifted, which says nothing about the tree.
            reports.push((i, nothing_to_revert(settled, recorded)));
            continue;
        }
        let (mut report, chosen) = chain.evaluate(fix, &mut ws)?;
        if report.state == settled.state {
            // The run agrees with the chain: how the chain reached the verdict (applied on top
            // of fixes undone since, say) holds here too, with what it advises.
            report.basis = settled.basis.clone();
            report.advice = settled.advice.clone();
        }
        if op == Op::Revert && report.state == FixState::Drifted && settled.state == FixState::Applied {
            if let Some(reverted) = revert_over_missing(&mut chain, fix, trees, only, &mut ws)? {
                reports.push((i, reverted));
                continue;
            }
        }
        if report.state == FixState::Drifted {
            if let Some(conflict) = shared_file_conflict(fix, &report, trees, &mut ws)? {
                report.basis = conflict;
                report.message = None;
            } else if settled.state != FixState::Drifted {
                report = unreachable_in_run(catalog, &mut chain, fix, settled, op)?;
            }
        }
        if op == Op::Revert && report.state == FixState::Drifted && settled.never_applied(recorded) {
            report = nothing_to_revert(settled, recorded);
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
        reports.push((i, report));
    }
    reports.sort_by_key(|(i, _)| *i);
    let reports: Vec<FixReport> = reports.into_iter().map(|(_, r)| r).collect();
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

/// The report of a fix a revert leaves alone (its settled state is not applied): as settled,
/// but a drifted fix never applied here ([`FixReport::never_applied`]) and one absent from the
/// trees found read not applied, saying why, so that neither refuses the revert of the others.
fn nothing_to_revert(settled: &FixReport, recorded: &Recorded) -> FixReport {
    let mut report = settled.clone();
    if report.never_applied(recorded) {
        report.basis = Basis::NeverApplied;
        report.message = None;
    } else if report.absent_from_found_trees() {
        // `message` (which tree is missing) stays: `report/` says the rest after it.
        report.basis = Basis::AbsentFromFoundTrees;
    } else {
        return report;
    }
    report.state = FixState::NotApplied;
    report
}

/// Revert `fix`, applied on top of fixes it comes after that are not applied in the tree
/// (undone by hand since; see `chain.rs`): those are applied under it in memory, it is
/// reverted, and they are reverted again, so the tree ends as it was without `fix` and
/// nothing else changes. `None` (and `ws` untouched) when that does not work out cleanly.
fn revert_over_missing<'c>(
    chain: &mut chain::Chain<'c>,
    fix: &'c Fix,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<Option<FixReport>> {
    let mut trial = ws.clone();
    let mut under = Vec::new();
    let before = chain.predecessors(&fix.manifest.name)?.to_vec();
    for earlier in chain.catalog().order(&before)? {
        let (report, chosen) = chain.evaluate(earlier, &mut trial)?;
        if let (FixState::NotApplied, Some(variant)) = (report.state, chosen) {
            edit_variant(variant, trees, only, &mut trial, true, &earlier.manifest.name)?;
            under.push(earlier);
        }
    }
    let (mut report, chosen) = chain.evaluate(fix, &mut trial)?;
    let (FixState::Applied, Some(variant), false) = (report.state, chosen, under.is_empty()) else { return Ok(None) };
    edit_variant(variant, trees, only, &mut trial, false, &fix.manifest.name)?;
    for earlier in under.iter().rev() {
        let (again, chosen) = chain.evaluate(earlier, &mut trial)?;
        let (FixState::Applied, Some(variant)) = (again.state, chosen) else { return Ok(None) };
        edit_variant(variant, trees, only, &mut trial, false, &earlier.manifest.name)?;
    }
    report.action = Some(Action::Revert);
    report.basis = Basis::RevertedOver { fixes: under.iter().map(|f| f.manifest.name.clone()).collect() };
    report.message = None;
    *ws = trial;
    Ok(Some(report))
}

/// A fix whose state is settled on its chain (`settled`) but that this run's simulation, over
/// the selection only, finds drifted. For `--check` the settled state stands. Applying: a fix
/// it is made on top of is neither applied nor selected, so its edits cannot be made; say
/// which, and the command that applies them together. Reverting: a not-applied fix has
/// nothing to undo; an applied one under a fix outside the selection is refused as drift.
fn unreachable_in_run(
    catalog: &Catalog,
    chain: &mut chain::Chain<'_>,
    fix: &Fix,
    settled: &FixReport,
    op: Op,
) -> Result<FixReport> {
    let mut report = settled.clone();
    match (op, settled.state) {
        (Op::Apply, FixState::NotApplied) => {
            let before = chain.predecessors(&fix.manifest.name)?.to_vec();
            let mut names = before.clone();
            names.push(fix.manifest.name.clone());
            report.state = FixState::Error;
            report.basis = Basis::PredecessorsNotSelected { fixes: before };
            report.message = None;
            let together = catalog.order(&names)?.iter().map(|f| f.manifest.name.clone()).collect();
            report.advice = vec![Advice::Apply { fixes: together }];
        }
        (Op::Revert, FixState::Applied) => {
            report.state = FixState::Drifted;
            report.basis = Basis::UnderUnselected;
            report.message = None;
            report.advice.clear();
        }
        _ => {}
    }
    Ok(report)
}
