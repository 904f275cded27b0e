//! `gaudi-fixes apply [FIX…] [--profile NAME] [--check] [--dry-run]`, and the selection /
//! locking / reporting shared with `revert`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use colored::Colorize;

use crate::catalog::{Catalog, Fix};
use crate::cli::{Format, GlobalArgs, SelectArgs};
use crate::discover::{self, Trees};
use crate::exit_status::ExitStatus;
use crate::plan::{self, Action, FixState, Op, Plan};
use crate::report;
use crate::transaction::{self, Provenance, ProvenanceFix};

/// Run `apply`.
pub fn run(global: &GlobalArgs, args: &SelectArgs) -> Result<ExitStatus> {
    let op = if args.check { Op::Check } else { Op::Apply };
    run_select(global, args, op, "apply")
}

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

/// The roots of the trees a run may touch.
pub fn roots(trees: &Trees, global: &GlobalArgs) -> Vec<PathBuf> {
    trees
        .all()
        .filter(|t| global.tree_filter().includes(t.name))
        .map(|t| t.root.clone())
        .collect()
}

/// Shared by `apply` and `revert`: select, discover, lock, recover, plan, write, report.
pub fn run_select(global: &GlobalArgs, args: &SelectArgs, op: Op, command: &str) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let mut names = selection(&catalog, args)?;
    let mut notes = Vec::new();
    if op != Op::Revert {
        // A fix is only sound with what it requires: select that too (applied first).
        let closure = catalog.with_requirements(&names)?;
        for (required, by) in &closure.added {
            notes.push(format!("{required} is selected too: {by} requires it"));
        }
        names = closure.names;
    }
    let fixes: Vec<&Fix> = catalog.order(&names)?;
    let trees = discover::discover(&global.tree_query())?;
    let roots = roots(&trees, global);
    let writes = matches!(op, Op::Apply | Op::Revert) && !args.dry_run && !args.check;

    let _locks = transaction::lock(&roots, writes)?;
    if writes {
        notes.extend(transaction::recover(&roots)?);
    } else {
        for root in &roots {
            if transaction::pending(root)?.is_some() {
                notes.push(format!(
                    "{}: an interrupted gaudi-fixes run left a journal; the next `apply` or `revert` finishes it first",
                    root.display()
                ));
            }
        }
    }
    if op == Op::Revert {
        refuse_reverting_what_applied_fixes_require(&catalog, &names, &trees, global)?;
    }
    let plan = plan::plan(&fixes, &trees, &global.tree_filter(), op)?;
    let status = plan.status(op);
    let mut written = Vec::new();
    if writes && status == ExitStatus::Applied && !plan.edits.is_empty() {
        plan::check_writable(&plan.edits)?;
        let provenance = provenance_after(&plan, &trees, &roots)?;
        let action = if op == Op::Revert { Action::Revert } else { Action::Apply };
        transaction::commit(action, &plan.edits, provenance)?;
        written = plan.edits.iter().map(|e| e.path.clone()).collect();
    }
    let mode = match (op, args.dry_run) {
        (Op::Check, _) => "check",
        (_, true) => "dry-run",
        (Op::Revert, false) => "revert",
        _ => "apply",
    };
    print(global, command, mode, &trees, &plan, status, &written, &notes, names.is_empty())?;
    Ok(status)
}

/// A revert of a fix that an applied fix outside the selection requires is an error (exit 3,
/// nothing written): the dependant would be left applied without what makes it sound.
fn refuse_reverting_what_applied_fixes_require(
    catalog: &Catalog,
    names: &[String],
    trees: &Trees,
    global: &GlobalArgs,
) -> Result<()> {
    let dependants = catalog.dependants(names);
    if dependants.is_empty() {
        return Ok(());
    }
    let fixes: Vec<&Fix> = dependants.iter().map(|(fix, _)| *fix).collect();
    let reports = plan::plan(&fixes, trees, &global.tree_filter(), Op::Status)?.reports;
    let applied: Vec<(&str, &str)> = reports
        .iter()
        .zip(&dependants)
        .filter(|(report, _)| report.state == FixState::Applied)
        .map(|(report, (_, needed))| (report.name.as_str(), needed.as_str()))
        .collect();
    if applied.is_empty() {
        return Ok(());
    }
    let why: Vec<String> =
        applied.iter().map(|(dep, needed)| format!("{dep} is applied and requires {needed}")).collect();
    let mut both: Vec<&str> = applied.iter().map(|(dep, _)| *dep).collect();
    both.extend(names.iter().map(String::as_str));
    both.dedup();
    anyhow::bail!(
        "refusing to revert: {}; nothing was written. Revert them together: gaudi-fixes revert {}",
        why.join("; "),
        both.join(" ")
    )
}

/// Each root's provenance record after this plan is written.
/// Only the roots this run may touch (`--only-tree` leaves the others alone).
fn provenance_after(plan: &Plan, trees: &Trees, roots: &[PathBuf]) -> Result<BTreeMap<PathBuf, Provenance>> {
    let mut records: BTreeMap<PathBuf, Provenance> = BTreeMap::new();
    for tree in trees.all().filter(|t| roots.contains(&t.root)) {
        let mut record = transaction::read_provenance(&tree.root)?.unwrap_or_default();
        record.tool = transaction::tool_version();
        records.entry(tree.root.clone()).or_insert(record);
    }
    let final_bytes: BTreeMap<PathBuf, &[u8]> =
        plan.edits.iter().map(|e| (e.tree_root.join(&e.rel), e.new.as_slice())).collect();
    for report in &plan.reports {
        if report.state == FixState::Skipped {
            continue; // its trees were left out: whatever the record says about it stands
        }
        let keep = report.action == Some(Action::Apply) || (report.action.is_none() && report.state == FixState::Applied);
        for record in records.values_mut() {
            record.fixes.remove(&report.name);
        }
        if !keep {
            continue;
        }
        for file in &report.files {
            let Some(root) = &file.tree_root else { continue };
            let Some(record) = records.get_mut(root) else { continue };
            let path = root.join(&file.path);
            let hash = match final_bytes.get(&path) {
                Some(bytes) => plan::sha256_hex(bytes),
                None => plan::sha256_hex(&std::fs::read(&path).unwrap_or_default()),
            };
            let entry = record.fixes.entry(report.name.clone()).or_insert_with(|| ProvenanceFix {
                variant: report.variant.clone().unwrap_or_default(),
                files: BTreeMap::new(),
            });
            entry.files.insert(file.path.clone(), hash);
        }
    }
    Ok(records)
}

#[allow(clippy::too_many_arguments)]
fn print(
    global: &GlobalArgs,
    command: &str,
    mode: &str,
    trees: &Trees,
    plan: &Plan,
    status: ExitStatus,
    written: &[PathBuf],
    notes: &[String],
    nothing_selected: bool,
) -> Result<()> {
    if global.quiet {
        return Ok(());
    }
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    match global.format {
        Format::Json => report::json::print(
            &mut out,
            &report::json::Document {
                schema: report::json::SCHEMA,
                command,
                mode,
                exit_code: status.code(),
                trees,
                fixes: &plan.reports,
                written: written.to_vec(),
                notes,
            },
            status,
        ),
        Format::Github => report::github::print(&mut out, &plan.reports, mode == "check"),
        Format::Human => {
            report::human::trees(&mut out, trees)?;
            for note in notes {
                writeln!(out, "{} {note}", "note:".yellow())?;
            }
            if nothing_selected {
                writeln!(out, "nothing selected (the profile has no fixes); nothing to do")?;
            }
            for r in &plan.reports {
                report::human::fix(&mut out, r, false)?;
            }
            let summary = match (mode, status) {
                (_, ExitStatus::Drifted) if mode != "check" => {
                    format!("{}: refused because of drift; nothing was written", "error".red().bold())
                }
                (_, ExitStatus::Error) => format!("{}: cannot proceed; nothing was written", "error".red().bold()),
                ("check", s) => format!(
                    "check: {}",
                    match s {
                        ExitStatus::Applied => "everything applied".green(),
                        ExitStatus::NotApplied => "not applied".yellow(),
                        _ => "drifted".red(),
                    }
                ),
                ("dry-run", _) => format!("dry run: {} file(s) would be written", plan.edits.len()),
                _ if written.is_empty() => "nothing to do: already in the requested state".to_string(),
                _ => {
                    let list: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
                    format!("wrote {} file(s): {}", written.len(), list.join(", "))
                }
            };
            writeln!(out, "{summary}")?;
            Ok(())
        }
    }
}
