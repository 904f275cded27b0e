//! `gaudi-fixes diff FIX`: what the fix changes (its patches, for the variant that matches the
//! tree, or every variant when no tree is found), or, when drifted, why: each hunk's expected
//! lines against the nearest actual lines.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use crate::catalog::Catalog;
use crate::cli::{Format, GlobalArgs};
use crate::discover;
use crate::exit_status::ExitStatus;
use crate::plan::{self, FixState, Op};
use crate::report;
use crate::transaction;

/// Run `diff`: exit 0 when shown, 2 when the fix drifted, 3 on error.
pub fn run(global: &GlobalArgs, name: &str) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(name)?;
    let trees = discover::discover(&global.tree_query())?;
    let roots = super::apply::roots(&trees, global);
    let report = if roots.is_empty() {
        None
    } else {
        let _locks = transaction::lock(&roots, false)?;
        Some(plan::plan(&[fix], &trees, &global.tree_filter(), Op::Status)?.reports.remove(0))
    };
    let status = match report.as_ref().map(|r| r.state) {
        Some(FixState::Drifted) => ExitStatus::Drifted,
        Some(FixState::Error) => ExitStatus::Error,
        _ => ExitStatus::Applied,
    };
    if global.quiet {
        return Ok(status);
    }
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    if global.format == Format::Json {
        let fixes: Vec<_> = report.into_iter().collect();
        let doc = report::json::Document {
            schema: report::json::SCHEMA,
            command: "diff",
            mode: "diff",
            exit_code: status.code(),
            trees: &trees,
            fixes: &fixes,
            written: Vec::new(),
            notes: &[],
        };
        report::json::print(&mut out, &doc, status)?;
        return Ok(status);
    }
    if let Some(r) = &report {
        report::human::trees(&mut out, &trees)?;
        report::human::fix(&mut out, r, true)?;
    }
    // The matched variant, or when drifted the nearest one (the excerpts above are against
    // it); every variant only when no tree was judged.
    let variants: Vec<_> = match report.as_ref().and_then(|r| r.variant.clone()) {
        Some(v) => fix.variants.iter().filter(|x| x.release == v).collect(),
        None => fix.variants.iter().collect(),
    };
    for v in variants {
        for p in v.patches.iter().filter(|p| global.tree_filter().includes(p.tree)) {
            writeln!(out, "{}", format!("# {} {} ({})", v.release, p.file, p.patch_path.display()).bold())?;
            let text = catalog.files.text(&p.patch_path)?;
            for line in text.lines() {
                let shown = if line.starts_with("+++") || line.starts_with("---") {
                    line.bold()
                } else if line.starts_with('+') {
                    line.green()
                } else if line.starts_with('-') {
                    line.red()
                } else if line.starts_with("@@") {
                    line.cyan()
                } else {
                    line.normal()
                };
                writeln!(out, "{shown}")?;
            }
        }
    }
    Ok(status)
}
