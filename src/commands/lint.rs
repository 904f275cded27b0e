//! `gaudi-fixes lint [--upstream DIR]`: exit 0 clean, 1 findings, 3 when the catalogue does not
//! even load (the error names the file and line).

use anyhow::Result;

use crate::catalog::{lint, Catalog};
use crate::exit_status::ExitStatus;
use crate::report::{self, lint::LintOutcome};
use crate::settings::{LintArgs, Settings};

/// Run `lint`.
pub fn run(global: &Settings, args: &LintArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let report = lint::lint(&catalog, args.upstream.as_deref())?;
    let status = if report.findings.is_empty() { ExitStatus::Applied } else { ExitStatus::NotApplied };
    let outcome = LintOutcome {
        catalog: &catalog.files.origin,
        fixes: catalog.fixes.len(),
        profiles: catalog.profiles.len(),
        status,
        report,
    };
    report::emit_document(global.output(), &outcome)?;
    Ok(status)
}
