//! `gaudi-fixes matrix [--releases LIST] [--fix NAME…] [--record] [--no-tests] [--markdown]`:
//! every fix × release on pristine upstream trees (fetched into the user cache, see
//! [`crate::upkeep::upstream`]): the state, the variant used, and whether the fix's tests pass
//! on the patched real code (the pristine tree is hard-link copied, the fix — after the fixes
//! it comes `after:` or `requires:` — applied to the copy, and its tests run there). `--record` writes each
//! release whose cell applied exactly and passed its tests into the variant's `verified:`.
//!
//! `--plan` prints the jobs that fan the matrix out over CI runners (one per release, or per fix
//! × release); each job runs `matrix … --format json` into a file, and `--merge FILE…
//! [--record]` makes those files one table and records `verified:` as one local run would.
//!
//! Exit 0 when every release could be prepared, 3 otherwise (or on bad input).

use anyhow::{bail, Result};

use crate::catalog::{Catalog, Fix};
use crate::exit_status::ExitStatus;
use crate::report::progress::Progress;
use crate::report::upkeep as upkeep_report;
use crate::settings::{MatrixArgs, Settings};
use crate::upkeep::{self, matrix, upstream};

/// Run `matrix`: `--plan` and `--merge` run nothing; otherwise every cell here.
pub fn run(global: &Settings, args: &MatrixArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    if args.record {
        upkeep::writable_catalog(global.catalog.as_deref(), "matrix --record")?;
        if args.no_tests {
            bail!("--record writes releases where the fix's tests passed; it cannot be combined with --no-tests");
        }
    }
    if !args.merge.is_empty() {
        return merge(global, args, &catalog);
    }
    let fixes: Vec<&Fix> = if args.fixes.is_empty() {
        catalog.fixes.iter().collect()
    } else {
        args.fixes.iter().map(|n| catalog.fix(n)).collect::<Result<_>>()?
    };
    let releases = matrix::releases(&fixes, &args.releases)?;
    if args.plan {
        let jobs = matrix::plan(&fixes, &releases, args.per_fix, args.fixes.is_empty());
        crate::report::emit(global.quiet, |out| upkeep_report::matrix_plan(out, global.format, &jobs))?;
        return Ok(ExitStatus::Applied);
    }
    let python = global.python.as_str();
    let tests_unavailable = if args.no_tests {
        Some("--no-tests".to_string())
    } else {
        match upkeep::pytest::check_python(python) {
            Ok(()) => None,
            Err(e) if args.record => return Err(e.context("--record needs the fixes' tests to run")),
            Err(e) => Some(format!("{e:#}")),
        }
    };

    // What killed runs left in the cache (patched copies, half-extracted releases) goes first.
    upkeep_report::notes(global.output(), &upstream::remove_stale(&upstream::cache_dir()?));
    let mut progress = Progress::or_lines(global, "matrix");
    progress.set_total((releases.len() * fixes.len()) as u64, "cells");
    let mut prepared = Vec::new();
    let mut cells = Vec::new();
    let mut done = 0;
    for (ri, release) in releases.iter().enumerate() {
        let step = format!("{release} ({}/{})", ri + 1, releases.len());
        let (trees, mut judged) =
            matrix::run_release(&catalog, &fixes, release, python, tests_unavailable.as_deref(), &mut |s| match s {
                matrix::Step::Doing(what) => progress.draw(&format!("{step}: {what}")),
                matrix::Step::CellDone => {
                    done += 1;
                    progress.set_done(done, &step, None);
                }
            });
        prepared.push(trees);
        cells.append(&mut judged);
    }
    progress.clear();
    finish(global, args, &catalog, &fixes, prepared, cells, tests_unavailable.as_deref())
}

/// `--merge FILE…`: the jobs' results as one matrix; `--record` as a local run records.
fn merge(global: &Settings, args: &MatrixArgs, catalog: &Catalog) -> Result<ExitStatus> {
    let merged = matrix::merge(catalog, &args.merge)?;
    if args.record && !merged.tests_not_run.is_empty() {
        bail!(
            "--record writes releases where the fix's tests passed, but some jobs did not run them: {}",
            merged.tests_not_run.join("; ")
        );
    }
    let fixes: Vec<&Fix> =
        catalog.fixes.iter().filter(|f| merged.cells.iter().any(|c| c.fix == f.manifest.name)).collect();
    let no_tests = (!merged.tests_not_run.is_empty()).then(|| merged.tests_not_run.join("; "));
    finish(global, args, catalog, &fixes, merged.releases, merged.cells, no_tests.as_deref())
}

/// Record (with `--record`) and print the matrix; exit 3 when a release could not be prepared.
fn finish(
    global: &Settings,
    args: &MatrixArgs,
    catalog: &Catalog,
    fixes: &[&Fix],
    prepared: Vec<matrix::ReleaseTrees>,
    mut cells: Vec<matrix::Cell>,
    no_tests: Option<&str>,
) -> Result<ExitStatus> {
    if args.record {
        matrix::record(global.catalog.as_deref().expect("checked above"), &mut cells)?;
    }
    let status = if prepared.iter().any(|r| r.error.is_some()) { ExitStatus::Error } else { ExitStatus::Applied };
    let identity = catalog.identity();
    crate::report::emit(global.quiet, |out| {
        let run = upkeep_report::MatrixRun { python: &global.python, catalogue: &identity, no_tests };
        upkeep_report::matrix(out, global.format, args.markdown, status, &run, fixes, &prepared, &cells)
    })?;
    Ok(status)
}
