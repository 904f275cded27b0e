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
    pub mode: super::Mode,
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

/// The first file (and line, when given as `path:LINE`) an error message names, for the
/// `error` object of the JSON document.
pub fn locate(message: &str) -> (Option<String>, Option<u64>) {
    static WITH_LINE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static PATH: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let with_line = WITH_LINE
        .get_or_init(|| regex::Regex::new(r"(?:^|[\s(`])([^\s:`()]*[^\s:`().,;]):(\d+):").expect("valid regex"));
    if let Some(c) = with_line.captures(message) {
        return (Some(c[1].to_string()), c[2].parse().ok());
    }
    let path = PATH.get_or_init(|| {
        regex::Regex::new(r"(?:^|[\s(`])((?:/|<built-in>/)[^\s:`)]*[^\s:`).,;])").expect("valid regex")
    });
    (path.captures(message).map(|c| c[1].to_string()), None)
}

#[cfg(test)]
mod tests {
    use super::locate;

    #[test]
    fn locates_file_and_line() {
        assert_eq!(locate("/c/fixes/a/fix.yaml:7: unknown field"), (Some("/c/fixes/a/fix.yaml".into()), Some(7)));
        assert_eq!(
            locate("reading /t/.gaudi-fixes/journal.json: bad"),
            (Some("/t/.gaudi-fixes/journal.json".into()), None)
        );
        assert_eq!(locate("no path here"), (None, None));
        assert_eq!(locate("cat/fixes/a/fix.yaml:3: dup"), (Some("cat/fixes/a/fix.yaml".into()), Some(3)));
    }
}
