//! `gaudi-fixes diff FIX`: what the fix changes (its patches, for the variant that matches the
//! tree, or every variant when no tree is found), or, when drifted, why: each hunk's expected
//! lines against the nearest actual lines.

use anyhow::Result;

use super::session::{Access, Session};
use crate::catalog::Catalog;
use crate::exit_status::ExitStatus;
use crate::plan::{self, FixState, Op};
use crate::report::{self, outcome::Mode, outcome::RunOutcome};
use crate::settings::Settings;

/// Run `diff`: exit 0 when shown, 2 when the fix drifted, 3 on error.
pub fn run(global: &Settings, name: &str) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(name)?;
    let session = Session::open(global, Access::Read)?;
    let notes = session.remove_stale_temp_files(&catalog)?;
    let report = if session.roots.is_empty() {
        None
    } else {
        Some(
            plan::plan(&catalog, &[fix], &session.trees, &session.filter, &session.recorded()?, Op::Status)?
                .reports
                .remove(0),
        )
    };
    let status = match report.as_ref().map(|r| r.state) {
        Some(FixState::Drifted) => ExitStatus::Drifted,
        Some(FixState::Error) => ExitStatus::Error,
        _ => ExitStatus::Applied,
    };
    // The matched variant, or when drifted the nearest one (the excerpts are against it);
    // every variant only when no tree was judged.
    let variants: Vec<_> = match report.as_ref().and_then(|r| r.variant.clone()) {
        Some(v) => fix.variants.iter().filter(|x| x.release == v).collect(),
        None => fix.variants.iter().collect(),
    };
    // Judged: let writers in while the patch is printed.
    let filter = session.filter.clone();
    let trees = session.trees.clone();
    drop(session);
    let outcome = RunOutcome {
        command: "diff",
        mode: Mode::Diff,
        status,
        trees,
        reports: report.into_iter().collect(),
        written: Vec::new(),
        would_write: 0,
        notes,
        nothing_selected: false,
        verbose: global.verbose,
        invocation: global.invocation(),
        pairing: None,
        refusal: None,
    };
    let mut patches = Vec::new();
    for v in variants {
        for p in v.patches.iter().filter(|p| filter.includes(p.tree)) {
            let heading = format!("# {} {} ({})", v.release, p.file, p.patch_path.display());
            patches.push((heading, catalog.files.text(&p.patch_path)?.to_string()));
        }
    }
    report::emit(global.quiet, |out| report::outcome::render_diff(out, global.format, &outcome, &patches))?;
    Ok(status)
}
