//! `gaudi-fixes lint [--upstream DIR]`: exit 0 clean, 1 findings, 3 when the catalogue does not
//! even load (the error names the file and line).

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use crate::catalog::{lint, Catalog};
use crate::cli::{Format, GlobalArgs, LintArgs};
use crate::exit_status::ExitStatus;

/// Run `lint`.
pub fn run(global: &GlobalArgs, args: &LintArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let report = lint::lint(&catalog, args.upstream.as_deref())?;
    let status = if report.findings.is_empty() { ExitStatus::Applied } else { ExitStatus::NotApplied };
    if global.quiet {
        return Ok(status);
    }
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    match global.format {
        Format::Json => {
            serde_json::to_writer_pretty(
                &mut out,
                &serde_json::json!({"schema": crate::report::json::SCHEMA, "catalog": catalog.files.origin, "exit_code": status.code(), "lint": report}),
            )?;
            writeln!(out)?;
        }
        Format::Github => {
            for f in &report.findings {
                crate::report::github::error(&mut out, &format!("{}: {}", f.file, f.message))?;
            }
        }
        Format::Human => {
            writeln!(
                out,
                "catalogue: {} ({} fixes, {} profiles)",
                catalog.files.origin,
                catalog.fixes.len(),
                catalog.profiles.len()
            )?;
            for c in &report.checked {
                writeln!(out, "  {} {c}", "ok".green())?;
            }
            for s in &report.skipped {
                writeln!(out, "  {} {s}", "skipped".yellow())?;
            }
            for f in &report.findings {
                writeln!(out, "  {} {}: {}", "finding".red().bold(), f.file, f.message)?;
            }
            writeln!(
                out,
                "{}",
                if report.findings.is_empty() {
                    "lint: clean".green()
                } else {
                    format!("lint: {} finding(s)", report.findings.len()).red()
                }
            )?;
        }
    }
    Ok(status)
}
