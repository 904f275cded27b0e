//! The JSON report: one stable document on stdout (schema in README, "JSON output").

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::discover::Trees;
use crate::exit_status::ExitStatus;
use crate::plan::FixReport;

/// Schema version; bumped only on incompatible changes.
pub const SCHEMA: u32 = 1;

/// The document `apply`, `revert`, `status` and `diff` print with `--format json`.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    pub schema: u32,
    pub command: &'a str,
    /// `check`, `dry-run`, `apply`, `revert`, `status`, `diff`.
    pub mode: &'a str,
    pub exit_code: u8,
    pub trees: &'a Trees,
    pub fixes: &'a [FixReport],
    /// Files this run wrote (absolute paths).
    pub written: Vec<PathBuf>,
    /// Sentences about recovery, provenance mismatches and the like.
    pub notes: &'a [String],
}

/// Print `doc` as pretty JSON.
pub fn print(out: &mut dyn Write, doc: &Document<'_>, status: ExitStatus) -> Result<()> {
    debug_assert_eq!(doc.exit_code, status.code());
    serde_json::to_writer_pretty(&mut *out, doc)?;
    writeln!(out)?;
    Ok(())
}
