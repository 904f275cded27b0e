//! `gaudi-fixes test FIX [-- PYTEST_ARGS]`: run a fix's tests (built into the binary with the
//! catalogue, so an image where only the binary is installed can check itself) against the
//! trees found, with the interpreter given by `--python`.
//!
//! The fix's directory is written to a temporary directory and `PYTHON -m pytest` runs its
//! `tests:` there, with `GAUDI_FIXES_ROOT` (the directory holding `vllm/`, else `vllm_gaudi/`),
//! `GAUDI_FIXES_VLLM_ROOT` and `GAUDI_FIXES_VLLM_GAUDI_ROOT` set. pytest's progress streams to
//! stderr as it runs, with a line naming the running test whenever pytest printed none for
//! 15 s (a build log is never silent for long); the verdict is pytest's own (exit code and
//! its result plugin's counts), the same in every format. Exit 0 when tests ran and passed, 1 when they fail (and it says when the
//! fix is not applied), 3 when they cannot run (no tree, no pytest or torch, no test ran, every
//! file of the fix left out by `--only-tree`). With `--only-tree` the tests see only the kept
//! trees. Skips are listed with pytest's reasons.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::session::{Access, Session};
use crate::catalog::Catalog;
use crate::exit_status::ExitStatus;
use crate::plan::{self, FixState, Op};
use crate::report::upkeep::{self as upkeep_report, TestAbout};
use crate::settings::{Settings, TestArgs};
use crate::tree::TreeName;
use crate::upkeep::pytest::{filtered_view, run_tests, Scratch, Talk};

/// Run `test`.
pub fn run(global: &Settings, args: &TestArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(&args.fix)?;
    // Shared, as `status` takes it, for the whole run: no `apply` writes the tree under the tests.
    let session = Session::open(global, Access::Read)?;
    session.require_a_tree().with_context(|| format!("cannot test {}", fix.manifest.name))?;
    session.require_the_sampling_path(&catalog).with_context(|| format!("cannot test {}", fix.manifest.name))?;
    let (trees, filter) = (&session.trees, session.filter.clone());
    // Say what the tests will see: the fix's state on these trees.
    let plan = plan::plan(&catalog, &[fix], trees, &filter, &plan::Recorded::new(), Op::Status)?;
    let state = &plan.reports[0];
    if state.state == FixState::Skipped {
        bail!(
            "every file of {} is in a tree --only-tree leaves out: none of its tests would test anything",
            fix.manifest.name
        );
    }
    let kept = |name: TreeName| trees.get(name).filter(|_| filter.includes(name)).map(|t| t.root.clone());
    let (vllm_kept, gaudi_kept) = (kept(TreeName::Vllm), kept(TreeName::VllmGaudi));
    let left_out = [TreeName::Vllm, TreeName::VllmGaudi].iter().any(|&n| trees.get(n).is_some() && !filter.includes(n));
    let view_dir = Scratch::new("view")?;
    let (vllm_root, gaudi_root) = if left_out {
        let mut packages: Vec<(&str, &Path)> = Vec::new();
        if let Some(root) = &vllm_kept {
            packages.push(("vllm", root));
        }
        if let Some(root) = &gaudi_kept {
            packages.push(("vllm_gaudi", root));
        }
        let view = filtered_view(&view_dir.0, &packages)?;
        (vllm_kept.as_ref().map(|_| view.clone()), gaudi_kept.as_ref().map(|_| view.clone()))
    } else {
        (vllm_kept.clone(), gaudi_kept.clone())
    };
    let not_applied = !matches!(state.state, FixState::Applied | FixState::Upstreamed);
    let shown_root = vllm_kept.as_ref().or(gaudi_kept.as_ref()).context("no tree left to test")?;
    let about = TestAbout {
        fix: &fix.manifest.name,
        state: state.state,
        variant: state.variant.as_deref(),
        root: shown_root,
        python: &global.python,
        left_out,
        not_applied,
        invocation: &global.invocation(),
    };
    upkeep_report::test_start(global.output(), &about);
    let mut echo = crate::report::upkeep::pytest_echo(global.output());
    let run = run_tests(
        &catalog,
        fix,
        &global.python,
        vllm_root.as_deref(),
        gaudi_root.as_deref(),
        &args.pytest_args,
        match echo.as_mut() {
            Some(w) => Talk::Echo(w),
            None => Talk::Silent,
        },
    )?;
    let status = if run.passed { ExitStatus::Applied } else { ExitStatus::NotApplied };
    crate::report::emit(global.quiet, |out| upkeep_report::test_run(out, global.format, &about, &run, status))?;
    Ok(status)
}
