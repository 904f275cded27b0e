//! `gaudi-fixes test FIX [-- PYTEST_ARGS]`: run a fix's tests (built into the binary with the
//! catalogue, so an image where only the binary is installed can check itself) against the
//! trees found, with the interpreter given by `--python`.
//!
//! The fix's directory is written to a temporary directory and `PYTHON -m pytest` runs its
//! `tests:` there, with `GAUDI_FIXES_ROOT` (the directory holding `vllm/`, else `vllm_gaudi/`),
//! `GAUDI_FIXES_VLLM_ROOT` and `GAUDI_FIXES_VLLM_GAUDI_ROOT` set. Exit 0 when the tests pass,
//! 1 when they fail, 3 when they cannot run (no tree, no pytest or torch, no tests).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::catalog::{Catalog, Fix};
use crate::cli::{Format, GlobalArgs, TestArgs};
use crate::discover::{self, Trees};
use crate::exit_status::ExitStatus;
use crate::plan::{self, Op};

/// The outcome of one run of a fix's tests.
#[derive(Debug, Clone, Serialize)]
pub struct TestRun {
    pub fix: String,
    pub python: String,
    /// `GAUDI_FIXES_ROOT` the tests saw.
    pub root: PathBuf,
    pub passed: bool,
    /// pytest's exit code.
    pub pytest_exit: i32,
    /// pytest's last summary line (`12 passed, 1 skipped in 3.2s`).
    pub summary: String,
    /// Captured output (empty when it went to the terminal).
    #[serde(skip)]
    pub output: String,
}

/// The modules a fix's tests need, checked before running so a missing one is a clear error.
const REQUIRED_MODULES: [&str; 2] = ["pytest", "torch"];

/// Check that `python` runs and has pytest and torch; the error says how to get them.
pub fn check_python(python: &str) -> Result<()> {
    let probe = "import importlib.util, sys\n\
                 missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n\
                 print(' '.join(missing))";
    let out = Command::new(python)
        .arg("-c")
        .arg(probe)
        .args(REQUIRED_MODULES)
        .output()
        .with_context(|| format!("cannot run `{python}` for the fix's tests (give --python PATH)"))?;
    if !out.status.success() {
        bail!("`{python}` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let missing = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" or ");
    if !missing.is_empty() {
        bail!(
            "`{python}` has no {missing}: the fix's tests need pytest and torch \
             (`{python} -m pip install pytest torch`, or give --python PATH of an interpreter that has them)"
        );
    }
    Ok(())
}

/// Write the fix's directory (tests and their helpers) under `dir`; return its path there.
pub fn materialize(catalog: &Catalog, fix: &Fix, dir: &Path) -> Result<PathBuf> {
    let out = dir.join(&fix.manifest.name);
    for (rel, bytes) in catalog.files.files.iter().filter(|(p, _)| p.starts_with(&fix.dir)) {
        let dest = out.join(rel.strip_prefix(&fix.dir).expect("filtered by prefix"));
        std::fs::create_dir_all(dest.parent().expect("has a parent"))
            .with_context(|| format!("creating {}", dest.display()))?;
        std::fs::write(&dest, bytes).with_context(|| format!("writing {}", dest.display()))?;
    }
    Ok(out)
}

/// A fresh scratch directory under the system temp dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Result<Scratch> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "gaudi-fixes-{what}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `fix`'s tests against the trees rooted at `vllm_root` / `gaudi_root`. With `capture`,
/// pytest's output is kept in the result; else it goes to stderr as it runs.
pub fn run_tests(
    catalog: &Catalog,
    fix: &Fix,
    python: &str,
    vllm_root: Option<&Path>,
    gaudi_root: Option<&Path>,
    extra: &[String],
    capture: bool,
) -> Result<TestRun> {
    let name = &fix.manifest.name;
    if fix.manifest.tests.is_empty() {
        bail!("{name} has no tests (its fix.yaml lists no `tests:`)");
    }
    let root = vllm_root.or(gaudi_root).context("no vllm or vllm_gaudi tree to test against")?;
    // pytest runs in another directory: a relative interpreter path must not change meaning.
    let resolved;
    let python = if python.contains('/') && Path::new(python).is_relative() {
        resolved = std::path::absolute(python).with_context(|| format!("resolving {python}"))?;
        resolved.to_str().unwrap_or(python)
    } else {
        python
    };
    check_python(python)?;
    let scratch = Scratch::new("test")?;
    let dir = materialize(catalog, fix, &scratch.0)?;
    let mut cmd = Command::new(python);
    cmd.current_dir(&dir)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(&fix.manifest.tests)
        .args(extra)
        .env("GAUDI_FIXES_ROOT", root)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for (var, path) in [("GAUDI_FIXES_VLLM_ROOT", vllm_root), ("GAUDI_FIXES_VLLM_GAUDI_ROOT", gaudi_root)] {
        match path {
            Some(p) => cmd.env(var, p),
            None => cmd.env_remove(var),
        };
    }
    let (status, output) = if capture {
        let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running `{python} -m pytest`"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).to_string();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status, text)
    } else {
        // pytest's report goes to stderr so that stdout stays ours (JSON stays parseable).
        let out = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("running `{python} -m pytest`"))?;
        let out = out.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        eprint!("{text}");
        (out.status, text)
    };
    let code = status.code().unwrap_or(-1);
    let summary = output.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().trim_matches('=').trim();
    match code {
        0 | 1 => {}
        // 5: nothing collected; 2–4: interrupted, internal error, usage error.
        _ => bail!("pytest could not run {name}'s tests (exit {code}): {summary}"),
    }
    Ok(TestRun {
        fix: name.clone(),
        python: python.to_string(),
        root: root.to_path_buf(),
        passed: code == 0,
        pytest_exit: code,
        summary: summary.to_string(),
        output: if capture { output } else { String::new() },
    })
}

/// Run `test`.
pub fn run(global: &GlobalArgs, args: &TestArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(&args.fix)?;
    let trees: Trees = discover::discover(&global.tree_query())?;
    if trees.vllm.is_none() && trees.vllm_gaudi.is_none() {
        let notes = trees.notes.join("; ");
        bail!("no vllm or vllm_gaudi tree found to test {} against ({notes}); give --root DIR", fix.manifest.name);
    }
    // Say what the tests will see: the fix's state on these trees.
    let plan = plan::plan(&[fix], &trees, &global.tree_filter(), Op::Status)?;
    let state = &plan.reports[0];
    let vllm_root = trees.vllm.as_ref().map(|t| t.root.clone());
    let gaudi_root = trees.vllm_gaudi.as_ref().map(|t| t.root.clone());
    if !global.quiet && global.format == Format::Human {
        let word = serde_json::to_value(state.state).ok().and_then(|v| v.as_str().map(str::to_string));
        eprintln!(
            "gaudi-fixes test: {} ({} [{}]) on {} with {}",
            fix.manifest.name,
            word.unwrap_or_default(),
            state.variant.as_deref().unwrap_or("-"),
            vllm_root.as_ref().or(gaudi_root.as_ref()).expect("one tree").display(),
            global.python
        );
    }
    let run = run_tests(
        &catalog,
        fix,
        &global.python,
        vllm_root.as_deref(),
        gaudi_root.as_deref(),
        &args.pytest_args,
        global.quiet || global.format == Format::Json,
    )?;
    let status = if run.passed { ExitStatus::Applied } else { ExitStatus::NotApplied };
    if !global.quiet {
        let mut out = crate::report::stdout().lock();
        match global.format {
            Format::Json => {
                let doc = serde_json::json!({
                    "schema": 1,
                    "command": "test",
                    "exit_code": status.code(),
                    "fix": run.fix,
                    "state": state.state,
                    "variant": state.variant,
                    "python": run.python,
                    "root": run.root,
                    "passed": run.passed,
                    "pytest_exit": run.pytest_exit,
                    "summary": run.summary,
                });
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            }
            Format::Github if !run.passed => {
                writeln!(out, "::error::{}: tests failed: {}", run.fix, run.summary)?;
            }
            _ => writeln!(out, "test {}: {} ({})", run.fix, if run.passed { "passed" } else { "FAILED" }, run.summary)?,
        }
    }
    Ok(status)
}
