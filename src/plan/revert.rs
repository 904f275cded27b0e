//! A revert's run: the selection walked backward on one in-memory copy, each applied fix's
//! edits taken off with the variant its verdict on the chain chose. The verdicts are the
//! chain's (`chain.rs`); nothing is judged again, except to look for the fixes under a fix
//! whose edits do not come off (applied on top of fixes undone since: [`revert_over_missing`]).
//! What stops a fix is data, its [`Basis`]: never a sentence.

use anyhow::Result;

use super::chain::{Chain, Judged};
use super::evaluate::{edit_variant, shared_file_conflict};
use super::verdict::{Action, Basis, FileOutcome, FixReport, FixState, Recorded};
use super::workspace::Workspace;
use crate::catalog::chain::NotTaken;
use crate::catalog::Fix;

/// The reports of reverting `fixes` (judged, in the same order, `judged`), latest first, their
/// edits made on `ws`; in the order given.
pub(super) fn backward<'c>(
    chain: &mut Chain<'c>,
    fixes: &[&'c Fix],
    judged: &[Judged<'c>],
    recorded: &Recorded,
    ws: &mut Workspace,
) -> Result<Vec<FixReport>> {
    let mut reports = Vec::with_capacity(fixes.len());
    for (fix, (settled, chosen)) in fixes.iter().zip(judged).rev() {
        reports.push(revert_one(chain, fix, settled, *chosen, recorded, ws)?);
    }
    reports.reverse();
    Ok(reports)
}

/// Revert `fix` (its verdict on the chain `settled`, with the variant it chose) on `ws`, the
/// fixes selected after it already reverted there.
fn revert_one<'c>(
    chain: &mut Chain<'c>,
    fix: &'c Fix,
    settled: &FixReport,
    chosen: Option<&'c crate::catalog::Variant>,
    recorded: &Recorded,
    ws: &mut Workspace,
) -> Result<FixReport> {
    let (trees, only) = (chain.trees(), chain.only());
    let name = &fix.manifest.name;
    let (FixState::Applied, Some(variant)) = (settled.state, chosen) else {
        if settled.state == FixState::Drifted && !settled.never_applied(recorded) {
            // Drifted on a file a fix reverted before it in this run patches too: say so.
            let drifted = settled.files.iter().filter(|f| f.state == FileOutcome::Drifted);
            if let Some(conflict) = shared_file_conflict(fix, drifted.map(|f| (f.tree, f.path.as_str())), trees, ws)? {
                let mut report = settled.clone();
                report.basis = conflict;
                report.message = None;
                return Ok(report);
            }
        }
        // Nothing of it to undo.
        return Ok(nothing_to_revert(settled, recorded));
    };
    let mut trial = ws.clone();
    let not_taken = match edit_variant(variant, trees, only, &mut trial, false, name) {
        Ok(()) => {
            *ws = trial;
            let mut report = settled.clone();
            report.action = Some(Action::Revert);
            return Ok(report);
        }
        // Any other error (I/O) is the run's.
        Err(e) => e.downcast::<NotTaken>()?,
    };
    if let Some(reverted) = revert_over_missing(chain, fix, ws)? {
        return Ok(reverted);
    }
    let mut report = settled.clone();
    report.state = FixState::Drifted;
    report.message = None;
    report.advice.clear();
    let tree = variant.patches.iter().find(|p| p.file == not_taken.file).map(|p| p.tree);
    let file = tree.map(|t| (t, not_taken.file.as_str()));
    report.basis = match shared_file_conflict(fix, file.into_iter(), trees, ws)? {
        Some(conflict) => conflict,
        // Its edits are in the tree, but not as the fixes of this run leave it: a fix outside
        // the selection was applied on top of it.
        None => Basis::UnderUnselected,
    };
    Ok(report)
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
fn revert_over_missing<'c>(chain: &mut Chain<'c>, fix: &'c Fix, ws: &mut Workspace) -> Result<Option<FixReport>> {
    let (trees, only) = (chain.trees(), chain.only());
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
