//! The selection, plan and write shared by `apply` and `revert` (a step below the commands,
//! which never call each other): select, discover, lock, recover, plan, write, report.

use anyhow::Result;

use super::session::{Access, Session};
use crate::catalog::{Catalog, Fix};
use crate::exit_status::ExitStatus;
use crate::plan::{self, Action, FixState, Op};
use crate::provenance;
use crate::report::{self, outcome::Mode, outcome::RunOutcome};
use crate::settings::{SelectArgs, Settings};
use crate::transaction;
use crate::tree::TreeFilter;

/// The fix names `args` select: FIX arguments plus `--profile` (with what it includes); neither
/// means `default`. What they require is added by [`run_select`], for apply only.
pub fn selection(catalog: &Catalog, args: &SelectArgs) -> Result<Vec<String>> {
    let mut names = args.fixes.clone();
    let profile = match (&args.profile, names.is_empty()) {
        (Some(p), _) => Some(p.as_str()),
        (None, true) => Some("default"),
        (None, false) => None,
    };
    if let Some(profile) = profile {
        names.extend(catalog.profile_fixes(profile)?);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// Select, discover, lock, recover, plan, write (unless `op` only checks) and report. A plain
/// `revert` (no FIX, no `--profile`) selects what apply did to the trees found, once they are
/// locked: [`what_apply_did`].
pub fn run_select(global: &Settings, args: &SelectArgs, op: Op, command: &'static str) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let undo_apply = op == Op::Revert && args.fixes.is_empty() && args.profile.is_none();
    let mut names = if undo_apply { Vec::new() } else { selection(&catalog, args)? };
    let mut notes = Vec::new();
    if op != Op::Revert {
        // A fix is only sound with what it requires: select that too (applied first).
        let closure = catalog.with_requirements(&names)?;
        for (required, by) in &closure.added {
            notes.push(format!("{required} is selected too: {by} requires it"));
        }
        names = closure.names;
    }
    let writes = matches!(op, Op::Apply | Op::Revert) && !args.dry_run && !args.check;
    let session = Session::open(global, if writes { Access::Write } else { Access::Read })?;
    session.require_a_tree()?;
    notes.extend(before_planning(&session, &catalog, writes)?);
    if undo_apply {
        let (did, said) = what_apply_did(&catalog, &session)?;
        names = did;
        notes.extend(said);
    }
    let pairing = plan::pairing::check(&catalog, &session.trees)?;
    // Undoing is always possible; applying to a vLLM without the path the fixes plug into is
    // not: refuse before judging (exit 2, nothing written).
    let refusal = match (&pairing, &session.trees.vllm) {
        (Some(pairing), Some(vllm)) if op != Op::Revert => pairing.refusal(vllm),
        _ => None,
    };
    if let Some(refusal) = refusal {
        let outcome = RunOutcome {
            command,
            mode: mode(op, args.dry_run),
            status: ExitStatus::Drifted,
            would_write: 0,
            trees: session.trees.clone(),
            reports: Vec::new(),
            written: Vec::new(),
            notes,
            nothing_selected: false,
            verbose: global.verbose,
            invocation: global.invocation(),
            pairing,
            refusal: Some(refusal),
        };
        report::emit(global.quiet, |out| report::outcome::render(out, global.format, &outcome))?;
        return Ok(ExitStatus::Drifted);
    }
    let fixes: Vec<&Fix> = catalog.order(&names)?;
    if op == Op::Revert {
        refuse_reverting_what_applied_fixes_require(&catalog, &names, &session, &global.invocation())?;
    }
    let plan = plan::plan(&catalog, &fixes, &session.trees, &session.filter, &session.recorded()?, op)?;
    let status = plan.status(op);
    let mut written = Vec::new();
    if writes && status == ExitStatus::Applied {
        plan::check_writable(&plan.edits)?;
        notes.extend(session.sweep()?);
    }
    if writes && status == ExitStatus::Applied && !plan.edits.is_empty() {
        let records = provenance::after(&plan, session.provenance()?, &catalog.identity())?;
        let action = if op == Op::Revert { Action::Revert } else { Action::Apply };
        transaction::commit(action, &plan.edits, records)?;
        written = plan.edits.iter().map(|e| e.path.clone()).collect();
    }
    let outcome = RunOutcome {
        command,
        mode: mode(op, args.dry_run),
        status,
        would_write: plan.edits.len(),
        trees: session.trees.clone(),
        reports: plan.reports,
        written,
        notes,
        nothing_selected: names.is_empty() && !undo_apply,
        verbose: global.verbose,
        invocation: global.invocation(),
        pairing,
        refusal: None,
    };
    report::emit(global.quiet, |out| report::outcome::render(out, global.format, &outcome))?;
    if global.quiet {
        report::outcome::quiet_errors(&outcome);
    }
    Ok(status)
}

/// What a run does to the trees before it plans, and says: a writer finishes or undoes what an
/// interrupted run left (a reader only says there is such a journal); stale temp files go.
fn before_planning(session: &Session, catalog: &Catalog, writes: bool) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if writes {
        notes.extend(session.recover()?);
    } else {
        for (root, _) in session.pending()? {
            notes.push(format!(
                "{}: an interrupted gaudi-fixes run left a journal; the next `apply` or `revert` finishes it first",
                root.display()
            ));
        }
    }
    notes.extend(session.remove_stale_temp_files(catalog)?);
    Ok(notes)
}

/// How a run of `op` reports.
fn mode(op: Op, dry_run: bool) -> Mode {
    match (op, dry_run) {
        (Op::Check, _) => Mode::Check,
        (_, true) => Mode::DryRun,
        (Op::Revert, false) => Mode::Revert,
        _ => Mode::Apply,
    }
}

/// What a plain `revert` undoes: every catalogue fix that a tree's provenance record says apply
/// wrote, and any fix that reads applied without a record (the files decide; a note says so).
/// [`plan::plan`] reverts them in reverse dependency order.
fn what_apply_did(catalog: &Catalog, session: &Session) -> Result<(Vec<String>, Vec<String>)> {
    let recorded = session.recorded()?;
    let mut notes = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for name in recorded.keys() {
        if catalog.fix(name).is_ok() {
            names.push(name.clone());
        } else {
            notes
                .push(format!("the provenance record names {name}, which this catalogue does not have: left as it is"));
        }
    }
    let all: Vec<&Fix> = catalog.fixes.iter().collect();
    let reports = plan::plan(catalog, &all, &session.trees, &session.filter, &recorded, Op::Status)?.reports;
    let unrecorded: Vec<String> = reports
        .iter()
        .filter(|r| r.state == FixState::Applied && !names.contains(&r.name))
        .map(|r| r.name.clone())
        .collect();
    for name in unrecorded {
        notes.push(format!(
            "{name} reads applied but no provenance record says gaudi-fixes applied it: reverting it too"
        ));
        names.push(name);
    }
    if names.is_empty() {
        notes.push(
            "no fix is recorded as applied (provenance) or reads applied in the trees found: nothing to revert".into(),
        );
    }
    names.sort();
    Ok((names, notes))
}

/// A revert of a fix that a fix outside the selection requires is an error (exit 3, nothing
/// written) unless that dependant is known not to be applied: it would be left applied without
/// what makes it sound. Dependants are judged on every tree found, a tree left out with
/// `--only-tree` too (read, never written), and any state but not-applied counts: drifted may
/// be partly applied, skipped or error was not seen — except a dependant that is an error only
/// because its other tree is absent while its files in the trees found are not applied (what
/// `apply` could do there, `revert` undoes), and a drifted one never applied here (its release
/// unsupported: [`plan::FixReport::never_applied`]).
fn refuse_reverting_what_applied_fixes_require(
    catalog: &Catalog,
    names: &[String],
    session: &Session,
    invocation: &crate::report::advice::Invocation,
) -> Result<()> {
    let dependants = catalog.dependants(names);
    if dependants.is_empty() {
        return Ok(());
    }
    let fixes: Vec<&Fix> = dependants.iter().map(|(fix, _)| *fix).collect();
    let recorded = session.recorded()?;
    let reports = plan::plan(catalog, &fixes, &session.trees, &TreeFilter::all(), &recorded, Op::Status)?.reports;
    let applied: Vec<(&str, FixState, &str)> = reports
        .iter()
        .zip(&dependants)
        .filter(|(report, _)| {
            report.state != FixState::NotApplied
                && !report.absent_from_found_trees()
                && !report.never_applied(&recorded)
        })
        .map(|(report, (_, needed))| (report.name.as_str(), report.state, needed.as_str()))
        .collect();
    if applied.is_empty() {
        return Ok(());
    }
    let why: Vec<String> = applied
        .iter()
        .map(|(dep, state, needed)| match state {
            FixState::Applied => format!("{dep} is applied and requires {needed}"),
            FixState::Error => {
                format!("{dep}, which requires {needed}, could not be judged (a tree it needs was not found)")
            }
            _ => format!("{dep} is {} (not known to be unapplied) and requires {needed}", state.words()),
        })
        .collect();
    let mut both: Vec<&str> = applied.iter().map(|(dep, _, _)| *dep).collect();
    both.extend(names.iter().map(String::as_str));
    both.dedup();
    anyhow::bail!(
        "refusing to revert: {}; nothing was written. Revert them together: {invocation} revert {}",
        why.join("; "),
        both.join(" ")
    )
}
