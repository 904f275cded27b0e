//! `gaudi-fixes conform [--schedules N] [--seed S] [--first]`: run the conformance suite
//! (`fixes/_support/conform.py`, built into the binary with the catalogue) on the trees found,
//! with the interpreter given by `--python`, as `test` does.
//!
//! The suite drives the trees' own sampling path (vllm_gaudi's InputBatch, vLLM's logits
//! processors, the runner's functions lifted from `hpu_model_runner.py`) with seeded schedules
//! under sync and async scheduling, and holds what each sampler call gets against every request's
//! own parameters. Exit 0 when no schedule found a difference, 1 when one did (a table per
//! feature, the first difference as a sentence), 3 when it cannot run (no vllm + vllm_gaudi trees,
//! no torch, or a missing module, named with the pip line that installs it).

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::catalog::{Catalog, SUPPORT_DIR};
use crate::discover::{self, Trees};
use crate::exit_status::ExitStatus;
use crate::report::conform::{self as conform_report, Conformance};
use crate::settings::{ConformArgs, Settings};
use crate::upkeep::pytest::{check_python_for, filtered_view, resolve_python, write_folder, Scratch};

/// The suite's script in the test-support folder.
const SUITE: &str = "conform.py";

/// Run `conform`.
pub fn run(global: &Settings, args: &ConformArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let trees: Trees = discover::discover(&global.trees.clone())?;
    let (Some(vllm), Some(gaudi)) = (&trees.vllm, &trees.vllm_gaudi) else {
        let notes = trees.notes.join("; ");
        bail!("conform needs a vllm tree and a vllm_gaudi tree ({notes}); give --root DIR holding both");
    };
    let python = resolve_python(&global.python)?;
    check_python_for(&python, Some(&vllm.root))?;
    let scratch = Scratch::new("conform")?;
    let suite_dir = scratch.0.join("support");
    write_folder(&catalog, Path::new(SUPPORT_DIR), &suite_dir)?;
    if !suite_dir.join(SUITE).is_file() {
        bail!("catalogue {} has no {SUPPORT_DIR}/{SUITE}", catalog.files.origin);
    }
    // The suite reads both packages under one root.
    let root = if vllm.root == gaudi.root {
        vllm.root.clone()
    } else {
        filtered_view(&scratch.0, &[("vllm", &vllm.root), ("vllm_gaudi", &gaudi.root)])?
    };
    let mut cmd = Command::new(&python);
    cmd.current_dir(&suite_dir)
        .arg(SUITE)
        .arg("--root")
        .arg(&root)
        .args(["--schedules", &args.schedules.to_string(), "--seed", &args.seed.to_string()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    if args.first {
        cmd.arg("--first");
    }
    let out = cmd.output().with_context(|| format!("running `{python} {SUITE}`"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("");
    let result: Conformance = serde_json::from_str(last).with_context(|| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
        format!("the conformance suite did not report (exit {:?}):\n{}", out.status.code(), tail.join("\n"))
    })?;
    if let Some(error) = &result.error {
        match &result.pip {
            Some(pip) => bail!("the conformance suite cannot run: {error}; install it with `{pip}`"),
            None => bail!("the conformance suite cannot run: {error}"),
        }
    }
    let status = if result.differences() == 0 { ExitStatus::Applied } else { ExitStatus::NotApplied };
    crate::report::emit(global.quiet, |w| conform_report::emit(w, global.format, &python, &result, status))?;
    Ok(status)
}
