//! `gaudi-fixes list`: the catalogue's fixes (kind, releases, profiles) and profiles, with each
//! fix's state when trees are found.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;
use serde::Serialize;

use crate::catalog::{Catalog, Fix};
use crate::cli::{Format, GlobalArgs};
use super::session::{Access, Session};
use crate::exit_status::ExitStatus;
use crate::plan::{self, FixState, Op};
use crate::report;

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    kind: String,
    summary: &'a str,
    releases: Vec<&'a str>,
    /// Profiles selecting the fix, directly or through `include:`.
    profiles: Vec<&'a str>,
    requires: &'a [String],
    after: &'a [String],
    state: Option<FixState>,
    variant: Option<String>,
}

/// Run `list`.
pub fn run(global: &GlobalArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let session = Session::open(global, Access::Read)?;
    let trees = &session.trees;
    let all: Vec<&Fix> = catalog.fixes.iter().collect();
    let reports = if session.roots.is_empty() {
        None
    } else {
        Some(plan::plan(&all, trees, &session.filter, Op::Status)?.reports)
    };
    // Judged: let writers in while the list is printed.
    let trees = &trees.clone();
    drop(session);
    let rows: Vec<Row> = catalog
        .fixes
        .iter()
        .enumerate()
        .map(|(i, f)| Row {
            name: &f.manifest.name,
            kind: f.manifest.kind.to_string(),
            summary: &f.manifest.summary,
            releases: f.variants.iter().map(|v| v.release.as_str()).collect(),
            profiles: catalog.profiles_selecting(&f.manifest.name),
            requires: &f.manifest.requires,
            after: &f.manifest.after,
            state: reports.as_ref().map(|r| r[i].state),
            variant: reports.as_ref().and_then(|r| r[i].variant.clone()),
        })
        .collect();
    if global.quiet {
        return Ok(ExitStatus::Applied);
    }
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    if global.format == Format::Json {
        let profiles: Vec<_> = catalog
            .profiles
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                v["selects"] = serde_json::json!(catalog.profile_fixes(&p.name).ok());
                v
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({"schema": report::json::SCHEMA, "command": "list", "catalog": catalog.files.origin, "fixes": rows, "profiles": profiles, "trees": trees}),
        )?;
        writeln!(out)?;
        return Ok(ExitStatus::Applied);
    }
    writeln!(out, "catalogue: {}", catalog.files.origin)?;
    report::human::trees(&mut out, trees)?;
    writeln!(out, "\n{}", "fixes".bold())?;
    for row in &rows {
        let state = row.state.map_or("-".normal(), report::human::state_word);
        let variant = row.variant.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default();
        writeln!(out, "  {:<26} {:<12} {state}{variant}", row.name.bold(), row.kind)?;
        writeln!(out, "      {}", row.summary)?;
        writeln!(
            out,
            "      releases: {}; profiles: {}",
            row.releases.join(", "),
            if row.profiles.is_empty() { "-".into() } else { row.profiles.join(", ") }
        )?;
        let relations: Vec<String> = [("requires", row.requires), ("after", row.after)]
            .iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(key, names)| format!("{key}: {}", names.join(", ")))
            .collect();
        if !relations.is_empty() {
            writeln!(out, "      {}", relations.join("; "))?;
        }
    }
    writeln!(out, "\n{}", "profiles".bold())?;
    for p in &catalog.profiles {
        let fixes = if p.fixes.is_empty() { "(no fixes)".to_string() } else { p.fixes.join(", ") };
        writeln!(out, "  {:<26} {}: {fixes}", p.name.bold(), p.description)?;
        if !p.include.is_empty() {
            let selects = catalog.profile_fixes(&p.name).map_or_else(|e| format!("{e:#}"), |f| f.join(", "));
            writeln!(out, "      include: {}; selects: {selects}", p.include.join(", "))?;
        }
    }
    Ok(ExitStatus::Applied)
}
