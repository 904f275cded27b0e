//! A fix's one state: judged on the tree as its predecessors leave it. Fixes are made on top
//! of each other (`after:` / `requires:`): judged alone on a pristine file, a later fix's
//! context (an earlier fix's post-image) is missing and it would read drifted. So each fix is
//! judged after every fix that comes before it has been judged in order on an in-memory copy,
//! and those found not applied applied to the copy (as `apply --check` does); a fix still not
//! clean there is judged on the tree as it is, then under the fixes made on top of it that are
//! applied (reverted in memory, latest first), and only what none of these explains is drift.
//!
//! Every command reads its states from [`judge`]; `apply` and `revert` then only plan the
//! edits (in `super::plan`), with these states as the verdicts.

use anyhow::Result;

use super::evaluate::{edit_variant, evaluate};
use super::verdict::{FixReport, FixState, Recorded};
use super::workspace::Workspace;
use crate::catalog::{Catalog, Fix, Variant};
use crate::discover::Trees;
use crate::tree::TreeFilter;

/// How the message of a fix applied on top of fixes not applied in the tree begins.
const ON_UNDONE: &str = "applied on top of ";

/// Whether `report` is of a fix applied on top of fixes not applied in the tree (undone since).
pub(super) fn on_undone(report: &FixReport) -> bool {
    report.message.as_deref().is_some_and(|m| m.starts_with(ON_UNDONE))
}

/// The state of each of `fixes` (in the order given), each on the tree as its predecessors
/// leave it; with the variant to edit when it is clean.
pub(super) fn judge<'f>(
    catalog: &'f Catalog,
    fixes: &[&'f Fix],
    trees: &Trees,
    only: &TreeFilter,
    recorded: &Recorded,
    base: &mut Workspace,
) -> Result<Vec<(FixReport, Option<&'f Variant>)>> {
    fixes.iter().map(|fix| judge_one(catalog, fix, trees, only, recorded, base)).collect()
}

/// One fix on its chain: the predecessors simulated first, then the fix; the tree as it is
/// when that does not give a clean state; drifted (as the chain sees it) when neither does.
fn judge_one<'f>(
    catalog: &'f Catalog,
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    recorded: &Recorded,
    base: &mut Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let before = catalog.predecessors(&fix.manifest.name)?;
    // The tree as it is: the same verdict as on the chain whenever nothing comes before.
    let alone = evaluate(fix, trees, only, recorded, base)?;
    let mut missing = Vec::new();
    let on_chain = if before.is_empty() {
        None
    } else {
        let mut ws = base.clone();
        for earlier in catalog.order(&before)? {
            let (report, chosen) = evaluate(earlier, trees, only, recorded, &mut ws)?;
            if let (FixState::NotApplied, Some(variant)) = (report.state, chosen) {
                edit_variant(variant, trees, only, &mut ws, true, &earlier.manifest.name)?;
                missing.push(earlier.manifest.name.as_str());
            }
        }
        Some(evaluate(fix, trees, only, recorded, &mut ws)?)
    };
    if let Some(on_chain) = on_chain.as_ref().filter(|(r, _)| r.state != FixState::Drifted) {
        let mut on_chain = on_chain.clone();
        // Its edits are in the tree, but made on top of fixes that are not (undone since): say
        // so, and what mends it (`revert` undoes it over them, in memory; see `super::plan`).
        if on_chain.0.state == FixState::Applied && alone.0.state != FixState::Applied && !missing.is_empty() {
            on_chain.0.message = Some(format!(
                "{ON_UNDONE}{}, which {} not applied in the tree (undone since?): `gaudi-fixes apply` applies {} under it",
                missing.join(", "),
                if missing.len() == 1 { "is" } else { "are" },
                if missing.len() == 1 { "it" } else { "them" },
            ));
        }
        return Ok(on_chain);
    }
    if alone.0.state != FixState::Drifted {
        return Ok(alone);
    }
    let on_chain = on_chain.unwrap_or(alone);
    let under = under_applied_successors(catalog, fix, trees, only, recorded, base)?;
    Ok(if under.0.state != FixState::Drifted { under } else { on_chain })
}

/// The fix judged once the fixes made on top of it (those it comes before) that are applied
/// are reverted in memory, latest first: a later fix may edit lines of this one's post-image
/// (its context), and then this one reads applied only underneath it, as `revert` finds it.
fn under_applied_successors<'f>(
    catalog: &'f Catalog,
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    recorded: &Recorded,
    base: &Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let name = &fix.manifest.name;
    let mut later = Vec::new();
    for other in catalog.fixes.iter().filter(|f| f.manifest.name != *name) {
        if catalog.predecessors(&other.manifest.name)?.contains(name) {
            later.push(other.manifest.name.clone());
        }
    }
    let mut ws = base.clone();
    for successor in catalog.order(&later)?.into_iter().rev() {
        let (report, chosen) = evaluate(successor, trees, only, recorded, &mut ws)?;
        if let (FixState::Applied, Some(variant)) = (report.state, chosen) {
            edit_variant(variant, trees, only, &mut ws, false, &successor.manifest.name)?;
        }
    }
    evaluate(fix, trees, only, recorded, &mut ws)
}
