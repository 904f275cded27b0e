//! The JSON report: one stable document on stdout (schema in README, "JSON output").

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::discover::Trees;
use crate::error::Located;
use crate::exit_status::ExitStatus;
use crate::plan::FixReport;

/// Schema version; bumped only on incompatible changes (see [`crate::schema`]).
pub const SCHEMA: u32 = crate::schema::JSON;

/// The document `apply`, `revert`, `status` and `diff` print with `--format json`.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    pub schema: u32,
    pub command: &'a str,
    /// `check`, `dry-run`, `apply`, `revert`, `status`, `diff`.
    pub mode: super::Mode,
    pub exit_code: u8,
    pub trees: &'a Trees,
    pub fixes: &'a [FixReport],
    /// Files this run wrote (absolute paths).
    pub written: Vec<PathBuf>,
    /// Sentences about recovery, provenance mismatches and the like.
    pub notes: &'a [String],
    /// Whether the vllm_gaudi found imports on the vLLM found (absent unless both were found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairing: Option<&'a crate::plan::pairing::Pairing>,
    /// Why the run refused before judging a fix (absent when it did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<&'a str>,
}

/// Print `doc` as pretty JSON.
pub fn print(out: &mut dyn Write, doc: &Document<'_>, status: ExitStatus) -> Result<()> {
    debug_assert_eq!(doc.exit_code, status.code());
    serde_json::to_writer_pretty(&mut *out, doc)?;
    writeln!(out)?;
    Ok(())
}

/// The JSON document of a run that ended in `err` (exit code `code`): `message` is the error
/// chain written out, `file` and `line` the place a [`Located`] error in it names, `advice`
/// the next steps it suggests (as data; absent when none).
pub fn error(out: &mut dyn Write, command: &str, err: &anyhow::Error, message: &str, code: u8) -> Result<()> {
    error_document(out, Some(command), message, Located::find(err), &super::advice::error_advice(err), code)
}

/// The JSON document of a command line clap refused (the reason is on stderr).
pub fn usage_error(out: &mut dyn Write, code: u8) -> Result<()> {
    error_document(out, None, "usage error (see stderr)", None, &[], code)
}

fn error_document(
    out: &mut dyn Write,
    command: Option<&str>,
    message: &str,
    place: Option<&Located>,
    advice: &[crate::advice::Advice],
    code: u8,
) -> Result<()> {
    let mut doc = serde_json::json!({
        "schema": SCHEMA,
        "command": command,
        "exit_code": code,
        "error": {
            "message": message,
            "file": place.map(|p| p.file.display().to_string()),
            "line": place.and_then(|p| p.line),
        },
    });
    if !advice.is_empty() {
        doc["error"]["advice"] = serde_json::json!(advice);
    }
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}
