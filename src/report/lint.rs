//! `lint`'s report in each format: what was checked, skipped and found.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use super::{github, json, Document};
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

impl Document for LintOutcome<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"schema": json::SCHEMA, "command": "lint", "catalog": self.catalog, "exit_code": self.status.code(), "lint": self.report}),
        )?;
        writeln!(out)?;
        Ok(())
    }

    /// Each finding an error; a clean run one notice saying what was checked (and skipped).
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let report = &self.report;
        for f in &report.findings {
            github::error(out, &format!("{}: {}", f.file, f.message))?;
        }
        if report.findings.is_empty() {
            let skipped = if report.skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {}", report.skipped.join("; "))
            };
            let message = format!(
                "gaudi-fixes lint: catalogue {} ({} fixes, {} profiles): clean; checked: {}{skipped}",
                self.catalog,
                self.fixes,
                self.profiles,
                report.checked.join("; ")
            );
            github::annotation(out, "notice", None, &message)?;
        }
        Ok(())
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        let report = &self.report;
        writeln!(out, "catalogue: {} ({} fixes, {} profiles)", self.catalog, self.fixes, self.profiles)?;
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
        Ok(())
    }
}
