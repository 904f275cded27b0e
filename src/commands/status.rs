//! `gaudi-fixes status`: for each tree found, its path and version hint, a pending recovery,
//! every catalogue fix's state and variant, and whether the provenance record agrees with
//! what the files say.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use crate::catalog::{Catalog, Fix};
use crate::cli::{Format, GlobalArgs};
use crate::discover;
use crate::exit_status::ExitStatus;
use crate::plan::{self, FixReport, FixState, Op};
use crate::report;
use crate::transaction;

/// Run `status`. Exits 0 (it reports; `apply --check` is the gate), 3 on error.
pub fn run(global: &GlobalArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let trees = discover::discover(&global.tree_query())?;
    let roots = super::apply::roots(&trees, global);
    let all: Vec<&Fix> = catalog.fixes.iter().collect();
    let mut notes = trees.notes.clone();
    let _locks = transaction::lock(&roots, false)?;
    for root in &roots {
        if let Some(journal) = transaction::pending(root)? {
            notes.push(format!(
                "{}: pending recovery of an interrupted `{}` ({} file(s)); the next `apply` or `revert` finishes it",
                root.display(),
                journal.operation,
                journal.files.len()
            ));
        }
    }
    let plan = if roots.is_empty() { None } else { Some(plan::plan(&all, &trees, &global.tree_filter(), Op::Status)?) };
    if let Some(plan) = &plan {
        notes.extend(provenance_notes(&plan.reports, &roots)?);
    } else {
        notes.push(
            "no vllm or vllm_gaudi tree found; give --root, --vllm/--vllm-gaudi, GAUDI_FIXES_ROOT or --python".into(),
        );
    }
    if global.quiet {
        return Ok(ExitStatus::Applied);
    }
    let reports: &[FixReport] = plan.as_ref().map_or(&[], |p| &p.reports);
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    match global.format {
        Format::Json => report::json::print(
            &mut out,
            &report::json::Document {
                schema: report::json::SCHEMA,
                command: "status",
                mode: "status",
                exit_code: 0,
                trees: &trees,
                fixes: reports,
                written: Vec::new(),
                notes: &notes,
            },
            ExitStatus::Applied,
        )?,
        Format::Github => report::github::print(&mut out, reports, false)?,
        Format::Human => {
            let shown = discover::Trees { notes: Vec::new(), ..trees.clone() };
            report::human::trees(&mut out, &shown)?;
            for note in &notes {
                writeln!(out, "{} {note}", "note:".yellow())?;
            }
            for r in reports {
                let variant = r.variant.as_deref().unwrap_or("-");
                let why =
                    r.reason.as_ref().map_or(String::new(), |x| format!("  ({})", report::human::reason_word(x.code)));
                writeln!(
                    out,
                    "  {:<28} {:<12} {:<9} {}{why}",
                    r.name,
                    report::human::state_word(r.state),
                    variant,
                    r.kind
                )?;
            }
        }
    }
    Ok(ExitStatus::Applied)
}

/// Where the provenance record and the files disagree. The files win; this only says so.
fn provenance_notes(reports: &[FixReport], roots: &[std::path::PathBuf]) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for root in roots.iter().collect::<std::collections::BTreeSet<_>>() {
        let record = transaction::read_provenance(root)?;
        let recorded = record.as_ref().map(|r| &r.fixes);
        for r in reports {
            let touches_root = r.files.iter().any(|f| f.tree_root.as_ref() == Some(root));
            if !touches_root {
                continue;
            }
            match (recorded.and_then(|m| m.get(&r.name)), r.state) {
                (Some(p), FixState::Applied) => {
                    for (path, hash) in &p.files {
                        let now = std::fs::read(root.join(path)).map(|b| plan::sha256_hex(&b)).unwrap_or_default();
                        if &now != hash {
                            notes.push(format!(
                                "{}: changed since gaudi-fixes applied {} (provenance hash differs)",
                                root.join(path).display(),
                                r.name
                            ));
                        }
                    }
                }
                (Some(p), state) => notes.push(format!(
                    "provenance in {} says {} ({}) is applied, but the files say {}",
                    root.display(),
                    r.name,
                    p.variant,
                    serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
                )),
                (None, FixState::Applied) => notes.push(format!(
                    "{} is applied in {} but gaudi-fixes has no record of applying it",
                    r.name,
                    root.display()
                )),
                _ => {}
            }
        }
    }
    Ok(notes)
}
