//! `gaudi-fixes port FIX --to DIR --release NAME [--from VARIANT] [--from-tree DIR]`: carry a
//! variant to a new release. Per file, three-way: the old release's pristine file (from
//! `--from-tree` or the cache), the old patched file (pristine + the variant's patch), and the
//! new release's pristine file (under `--to`). When the old patch applies exactly to the new
//! file it is re-written for it; otherwise the change is merged line by line, and when it
//! touches lines upstream changed too, the conflicting hunks are shown and nothing is written
//! (exit 2): edit a copy by hand and use `record`. Each new hunk keeps the context width of
//! the hunk it is ported from (a deliberately zero-context hunk stays so). Before anything is
//! written, the catalogue with the new variant is checked in memory as `lint --upstream` checks
//! that release on its pristine trees (`--to`, else the cache); a finding the catalogue did not
//! have before refuses the port (exit 3, nothing written) and is shown.

use anyhow::{bail, Result};

use crate::catalog::Catalog;
use crate::exit_status::ExitStatus;
use crate::report::upkeep as upkeep_report;
use crate::settings::{PortArgs, Settings};
use crate::upkeep::{self, port, upstream};

/// Run `port`.
pub fn run(global: &Settings, args: &PortArgs) -> Result<ExitStatus> {
    let dir = upkeep::writable_catalog(global.catalog.as_deref(), "port")?;
    let _lock = upkeep::lock_catalog(&dir)?;
    let catalog = Catalog::load(Some(&dir))?;
    let fix = catalog.fix(&args.fix)?;
    let release = upstream::release_tag(&args.release)?;
    if !args.to.is_dir() {
        bail!("--to {}: no such directory", args.to.display());
    }
    let from = port::variant_to_port(fix, args.from.as_deref(), &release)?;
    let trees = port::Trees { to: &args.to, from_tree: args.from_tree.as_deref() };
    let mut how: Vec<String> = Vec::new();
    let new_files = match port::port(&catalog, fix, from, &release, &trees, &mut how)? {
        Ok(files) => files,
        Err(conflicts) => {
            let doc = upkeep_report::PortConflicts {
                fix: &fix.manifest.name,
                from: &from.release,
                to: &release,
                conflicts: &conflicts,
                catalog: global.catalog.as_deref(),
            };
            crate::report::emit_document(global.output(), &doc)?;
            return Ok(ExitStatus::Drifted);
        }
    };
    let check = port::lint_check(&catalog, fix, &release, &trees)?;
    let written = upkeep::write_variant_checked(&dir, &catalog, fix, &release, &new_files, &check)?;
    let doc = upkeep_report::WrittenDoc {
        catalog: global.catalog.as_deref(),
        fix: &fix.manifest.name,
        written: &written,
        command: "port",
        how: &how,
    };
    crate::report::emit_document(global.output(), &doc)?;
    Ok(ExitStatus::Applied)
}
