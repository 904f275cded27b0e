//! `lint`'s report in each format: what was checked, skipped and found.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use super::{github, json, Format};
use crate::catalog::lint::LintReport;
use crate::exit_status::ExitStatus;

/// What `lint` found in one catalogue.
pub struct LintOutcome<'a> {
    /// Where the catalogue came from (a directory, or built in).
    pub catalog: &'a str,
    pub fixes: usize,
    pub profiles: usize,
    pub status: ExitStatus,
    pub report: LintReport,
}

/// Render `o` in `format`.
pub fn render(out: &mut dyn Write, format: Format, o: &LintOutcome<'_>) -> Result<()> {
    let report = &o.report;
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(
                &mut *out,
                &serde_json::json!({"schema": json::SCHEMA, "command": "lint", "catalog": o.catalog, "exit_code": o.status.code(), "lint": report}),
            )?;
            writeln!(out)?;
        }
        Format::Github => {
            for f in &report.findings {
                github::error(out, &format!("{}: {}", f.file, f.message))?;
            }
        }
        Format::Human => {
            writeln!(out, "catalogue: {} ({} fixes, {} profiles)", o.catalog, o.fixes, o.profiles)?;
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
    Ok(())
}
