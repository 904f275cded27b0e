//! `gaudi-fixes show FIX [--readme]`: the manifest summary, release variants and README.

use anyhow::{Context, Result};

use crate::catalog::Catalog;
use crate::exit_status::ExitStatus;
use crate::report;
use crate::settings::Settings;

/// Run `show`.
pub fn run(global: &Settings, name: &str, readme: bool) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(name)?;
    if readme {
        let readme_path = fix.dir.join("README.md");
        let text = catalog.files.text(&readme_path).with_context(|| format!("fix `{name}` has no README.md"))?;
        let shown = catalog.files.display(&readme_path);
        report::emit_document(global.output(), &report::show::Readme { fix: name, path: &shown, text })?;
    } else {
        report::emit_document(global.output(), &report::show::Show { catalog: &catalog, fix })?;
    }
    Ok(ExitStatus::Applied)
}
