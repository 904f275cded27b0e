//! `gaudi-fixes matrix [--releases LIST] [--fix NAME…] [--record] [--no-tests] [--markdown]`:
//! every fix × release on pristine upstream trees (fetched into the user cache, see
//! [`crate::upkeep::upstream`]): the state, the variant used, and whether the fix's tests pass
//! on the patched real code (the pristine tree is hard-link copied, the fix — after the fixes
//! it comes `after:` or `requires:` — applied to the copy, and its tests run there). `--record` writes each
//! release whose cell applied exactly and passed its tests into the variant's `verified:`.
//!
//! Exit 0 when every release could be prepared, 3 otherwise (or on bad input).

use anyhow::{bail, Result};

use crate::catalog::{Catalog, Fix};
use crate::exit_status::ExitStatus;
use crate::report::progress::Progress;
use crate::report::upkeep as upkeep_report;
use crate::settings::{MatrixArgs, Settings};
use crate::upkeep::{self, matrix, upstream};

/// Run `matrix`.
pub fn run(global: &Settings, args: &MatrixArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    if args.record {
        upkeep::writable_catalog(global.catalog.as_deref(), "matrix --record")?;
        if args.no_tests {
            bail!("--record writes releases where the fix's tests passed; it cannot be combined with --no-tests");
        }
    }
    let fixes: Vec<&Fix> = if args.fixes.is_empty() {
        catalog.fixes.iter().collect()
    } else {
        args.fixes.iter().map(|n| catalog.fix(n)).collect::<Result<_>>()?
    };
    let mut releases: Vec<String> = if args.releases.is_empty() {
        fixes
            .iter()
            .flat_map(|f| f.variants.iter().flat_map(|v| std::iter::once(v.release.clone()).chain(v.verified.clone())))
            .collect()
    } else {
        args.releases.iter().map(|r| upstream::release_tag(r.trim())).collect::<Result<_>>()?
    };
    releases.sort_by_key(|r| matrix::version_key(r));
    releases.dedup();
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
    let mut progress = Progress::or_lines(global);
    let mut prepared = Vec::new();
    let mut cells = Vec::new();
    for (ri, release) in releases.iter().enumerate() {
        let step = format!("matrix: {release} ({}/{})", ri + 1, releases.len());
        let (trees, mut judged) =
            matrix::run_release(&catalog, &fixes, release, python, tests_unavailable.as_deref(), &mut |what| {
                progress.draw(&format!("{step}: {what}"))
            });
        prepared.push(trees);
        cells.append(&mut judged);
    }
    progress.clear();
    if args.record {
        matrix::record(global.catalog.as_deref().expect("checked above"), &mut cells)?;
    }
    let status = if prepared.iter().any(|r| r.error.is_some()) { ExitStatus::Error } else { ExitStatus::Applied };
    crate::report::emit(global.quiet, |out| {
        let no_tests = tests_unavailable.as_deref();
        upkeep_report::matrix(out, global.format, args.markdown, status, python, &fixes, &prepared, &cells, no_tests)
    })?;
    Ok(status)
}
