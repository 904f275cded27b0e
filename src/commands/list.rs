//! `gaudi-fixes list`: the catalogue's fixes (kind, releases, profiles) and profiles, with each
//! fix's state when trees are found.

use anyhow::Result;

use super::session::{Access, Session};
use crate::catalog::{Catalog, Fix};
use crate::exit_status::ExitStatus;
use crate::plan::{self, Op};
use crate::report::{self, list::Row};
use crate::settings::Settings;

/// Run `list`.
pub fn run(global: &Settings) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let session = Session::open(global, Access::Read)?;
    let trees = &session.trees;
    let all: Vec<&Fix> = catalog.fixes.iter().collect();
    let reports = if session.roots.is_empty() {
        None
    } else {
        Some(plan::plan(&catalog, &all, trees, &session.filter, &session.recorded()?, Op::Status)?.reports)
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
    report::emit_document(global.output(), &report::list::List { catalog: &catalog, trees, rows: &rows })?;
    Ok(ExitStatus::Applied)
}
