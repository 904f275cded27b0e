//! `gaudi-fixes status`: for each tree found, its path and version hint, a pending recovery,
//! every catalogue fix's state and variant, and whether the provenance record agrees with
//! what the files say.

use anyhow::Result;

use super::session::{Access, Session};
use crate::catalog::{Catalog, Fix};
use crate::exit_status::ExitStatus;
use crate::plan::{self, Op};
use crate::provenance;
use crate::report::{self, outcome::Mode, outcome::RunOutcome};
use crate::settings::Settings;

/// Run `status`. Exits 0 (it reports; `apply --check` is the gate), 3 on error (no tree found
/// among them).
pub fn run(global: &Settings) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let session = Session::open(global, Access::Read)?;
    session.require_a_tree()?;
    let all: Vec<&Fix> = catalog.fixes.iter().collect();
    let mut notes = session.trees.notes.clone();
    for (root, journal) in session.pending()? {
        notes.push(format!(
            "{}: pending recovery of an interrupted `{}` ({} file(s)); the next `apply` or `revert` finishes it",
            root.display(),
            journal.operation,
            journal.files.len()
        ));
    }
    let reports = if session.roots.is_empty() {
        notes.push("every tree found is left out by --only-tree".into());
        Vec::new()
    } else {
        let plan = plan::plan(&catalog, &all, &session.trees, &session.filter, &session.recorded()?, Op::Status)?;
        notes.extend(session.remove_stale_temp_files(&catalog)?);
        notes.extend(provenance::disagreements(&plan.reports, &session.provenance()?)?);
        plan.reports
    };
    let pairing = plan::pairing::check(&catalog, &session.trees)?;
    let outcome = RunOutcome {
        command: "status",
        mode: Mode::Status,
        status: ExitStatus::Applied,
        trees: session.trees.clone(),
        reports,
        written: Vec::new(),
        would_write: 0,
        notes,
        nothing_selected: false,
        verbose: global.verbose,
        invocation: global.invocation(),
        pairing,
        refusal: None,
    };
    report::emit(global.quiet, |out| report::outcome::render(out, global.format, &outcome))?;
    Ok(ExitStatus::Applied)
}
