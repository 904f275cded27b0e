//! The pytest runner shared by `test` and `matrix`: check the interpreter (pytest, torch, and
//! that it runs at all), write the fix's directory to a scratch directory, run `PYTHON -m
//! pytest` on its `tests:` against the given trees, and read pytest's summary and skip reasons.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::catalog::{Catalog, Fix};

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
    /// Why tests were skipped, one reason per line pytest gave.
    pub skipped: Vec<String>,
    /// Captured output (empty when it went to the terminal).
    #[serde(skip)]
    pub output: String,
}

/// The modules a fix's tests need, checked before running so a missing one is a clear error.
const REQUIRED_MODULES: [&str; 2] = ["pytest", "torch"];

/// What the probe prints first, so an interpreter that runs nothing (`/bin/true`) is caught.
const PROBE_OK: &str = "gaudi-fixes-probe-ok";

/// Check that `python` runs and has pytest and torch; the error says how to get them without
/// ever replacing an image's own torch build.
pub fn check_python(python: &str) -> Result<()> {
    check_python_for(python, None)
}

/// [`check_python`], with the vLLM tree whose pinned torch version the advice names.
pub fn check_python_for(python: &str, vllm_root: Option<&Path>) -> Result<()> {
    let probe = format!(
        "import importlib.util, sys\n\
         print({PROBE_OK:?})\n\
         missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n\
         print(' '.join(missing))"
    );
    let out = Command::new(python)
        .arg("-c")
        .arg(probe)
        .args(REQUIRED_MODULES)
        .output()
        .with_context(|| format!("cannot run `{python}` for the fix's tests (give --python PATH)"))?;
    if !out.status.success() {
        bail!("`{python}` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    if lines.next().map(str::trim) != Some(PROBE_OK) {
        bail!("`{python}` is not a Python interpreter (it did not run a one-line probe); give --python PATH");
    }
    let missing: Vec<&str> = lines.flat_map(str::split_whitespace).collect();
    if missing.contains(&"torch") {
        let pin = vllm_root.and_then(pinned_torch);
        let version = pin.as_ref().map_or("<the version your vLLM pins>".to_string(), |(v, _)| v.clone());
        let from = pin.as_ref().map_or(String::new(), |(_, vllm)| format!(" (vLLM {vllm} pins torch=={version})"));
        let (pytest, them) = if missing.contains(&"pytest") { (" and no pytest", "them") } else { ("", "it") };
        bail!(
            "`{python}` has no torch{pytest}: the fix's tests need {them}. In a Gaudi image, give --python the \
             image's own interpreter: it has the image's torch build, and installing another torch over it \
             would replace it. On a CPU-only machine without torch: `{python} -m pip install pytest \
             torch=={version} --index-url https://download.pytorch.org/whl/cpu --extra-index-url \
             https://pypi.org/simple`{from}"
        );
    }
    if missing.contains(&"pytest") {
        bail!("`{python}` has no pytest: the fix's tests need it (`{python} -m pip install pytest`; torch is there)");
    }
    Ok(())
}

/// `python` as a command that means the same from another directory (pytest and the
/// conformance suite run elsewhere): a relative path made absolute, a bare name left to PATH.
pub fn resolve_python(python: &str) -> Result<String> {
    if python.contains('/') && Path::new(python).is_relative() {
        let resolved = std::path::absolute(python).with_context(|| format!("resolving {python}"))?;
        return Ok(resolved.to_str().unwrap_or(python).to_string());
    }
    Ok(python.to_string())
}

/// The torch version a pip-installed vLLM pins (`Requires-Dist: torch==X` in the dist-info
/// beside `vllm/`), with vLLM's version; `None` for a tree without dist-info.
fn pinned_torch(vllm_root: &Path) -> Option<(String, String)> {
    let re = regex::Regex::new(r"(?m)^Requires-Dist: torch==([^\s;]+)\s*$").expect("valid regex");
    std::fs::read_dir(vllm_root).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().to_string();
        let version = name.strip_prefix("vllm-")?.strip_suffix(".dist-info")?.to_string();
        let metadata = std::fs::read_to_string(e.path().join("METADATA")).ok()?;
        Some((re.captures(&metadata)?[1].to_string(), version))
    })
}

/// Write the fix's directory (tests and their helpers) under `dir`, the catalogue's test-support
/// folder beside them (a fix's own file of the same name wins); return its path there.
pub fn materialize(catalog: &Catalog, fix: &Fix, dir: &Path) -> Result<PathBuf> {
    let out = dir.join(&fix.manifest.name);
    write_folder(catalog, Path::new(crate::catalog::SUPPORT_DIR), &out)?;
    write_folder(catalog, &fix.dir, &out)?;
    Ok(out)
}

/// Write the catalogue's files under `base` (relative to its root) into `out`.
pub fn write_folder(catalog: &Catalog, base: &Path, out: &Path) -> Result<()> {
    for (rel, bytes) in catalog.files.files.iter().filter_map(|(p, b)| Some((p.strip_prefix(base).ok()?, b))) {
        let dest = out.join(rel);
        std::fs::create_dir_all(dest.parent().expect("has a parent"))
            .with_context(|| format!("creating {}", dest.display()))?;
        std::fs::write(&dest, bytes).with_context(|| format!("writing {}", dest.display()))?;
    }
    Ok(())
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
/// pytest's output is kept in the result; else it streams to stderr as it runs (and is kept
/// too). The run passes only when pytest passed and at least one test ran.
pub fn run_tests(
    catalog: &Catalog,
    fix: &Fix,
    python: &str,
    vllm_root: Option<&Path>,
    gaudi_root: Option<&Path>,
    extra: &[String],
    echo: Option<&mut dyn std::io::Write>,
) -> Result<TestRun> {
    let capture = echo.is_none();
    let name = &fix.manifest.name;
    if fix.manifest.tests.is_empty() {
        bail!("{name} has no tests (its fix.yaml lists no `tests:`)");
    }
    let root = vllm_root.or(gaudi_root).context("no vllm or vllm_gaudi tree to test against")?;
    let python = &resolve_python(python)?;
    check_python_for(python, vllm_root)?;
    let scratch = Scratch::new("test")?;
    let dir = materialize(catalog, fix, &scratch.0)?;
    let mut cmd = Command::new(python);
    // -rs: every skip is listed with its reason in pytest's short summary.
    cmd.current_dir(&dir)
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .args(&fix.manifest.tests)
        .args(extra)
        .env("GAUDI_FIXES_ROOT", root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Piped stdout is block-buffered in Python: without this the progress arrives at the end.
        .env("PYTHONUNBUFFERED", "1");
    if !capture && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        cmd.args(["--color", "no"]);
    }
    for (var, path) in [("GAUDI_FIXES_VLLM_ROOT", vllm_root), ("GAUDI_FIXES_VLLM_GAUDI_ROOT", gaudi_root)] {
        match path {
            Some(p) => cmd.env(var, p),
            None => cmd.env_remove(var),
        };
    }
    let (status, output) = run_pytest(cmd, python, echo)?;
    let code = status.code().unwrap_or(-1);
    let summary = summary_line(&output);
    let counts = Counts::parse(&summary);
    match code {
        0 | 1 => {}
        5 => bail!("pytest collected no test of {name} (exit 5): {summary}"),
        // 2–4: interrupted, internal error, usage error; anything else: not pytest at all.
        _ => bail!("pytest could not run {name}'s tests (exit {code}): {summary}"),
    }
    let skips = skip_reasons(&output);
    if counts.passed == 0 && counts.failed == 0 {
        let why = if skips.is_empty() { String::new() } else { format!("; skipped: {}", skips.join("; ")) };
        bail!("no test of {name} ran (pytest: `{summary}`){why}");
    }
    Ok(TestRun {
        fix: name.clone(),
        python: python.to_string(),
        root: root.to_path_buf(),
        passed: code == 0 && counts.failed == 0 && counts.passed > 0,
        pytest_exit: code,
        summary,
        skipped: skips,
        output: if capture { output } else { String::new() },
    })
}

/// Run the prepared pytest command: its output captured whole, or (with `echo`) streamed there
/// as it comes and kept too. Returns its exit status and output.
fn run_pytest(
    mut cmd: Command,
    python: &str,
    mut echo: Option<&mut dyn std::io::Write>,
) -> Result<(std::process::ExitStatus, String)> {
    let capture = echo.is_none();
    Ok(if capture {
        let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running `{python} -m pytest`"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).to_string();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status, text)
    } else if let Some(echo) = echo.as_mut() {
        // pytest's report goes to `echo` (the caller's stderr) as it comes, so that stdout stays
        // ours (JSON stays parseable) and a long run is never silent.
        use std::io::Read;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("running `{python} -m pytest`"))?;
        let mut pipe = child.stdout.take().expect("stdout is piped");
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading pytest's output"),
            };
            let _ = echo.write_all(&buf[..n]);
            let _ = echo.flush();
            kept.extend_from_slice(&buf[..n]);
        }
        let status = child.wait().context("waiting for pytest")?;
        (status, String::from_utf8_lossy(&kept).to_string())
    } else {
        unreachable!("capture is echo.is_none()")
    })
}

/// pytest's last summary line (`12 passed, 1 skipped in 3.2s`), without its `=` frame.
fn summary_line(output: &str) -> String {
    output.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().trim_matches('=').trim().to_string()
}

/// The counts in a pytest summary line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    passed: usize,
    failed: usize,
}

impl Counts {
    fn parse(summary: &str) -> Counts {
        let re = regex::Regex::new(r"(\d+) (passed|failed|errors?)\b").expect("valid regex");
        let mut counts = Counts::default();
        for c in re.captures_iter(summary) {
            let n: usize = c[1].parse().unwrap_or(0);
            match &c[2] {
                "passed" => counts.passed += n,
                _ => counts.failed += n,
            }
        }
        counts
    }
}

/// The reasons of pytest's `SKIPPED [n] file:line: reason` lines (from `-rs`).
fn skip_reasons(output: &str) -> Vec<String> {
    let re = regex::Regex::new(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$").expect("valid regex");
    output
        .lines()
        .filter_map(|l| re.captures(l.trim_end()))
        .map(|c| if &c[1] == "1" { c[2].to_string() } else { format!("{} ({} tests)", &c[2], &c[1]) })
        .fold(Vec::new(), |mut seen, reason| {
            // The same reason from two places in the file is said once.
            if !seen.contains(&reason) {
                seen.push(reason);
            }
            seen
        })
}

/// The directory the tests see as `GAUDI_FIXES_ROOT` when `--only-tree` leaves a tree out: it
/// holds only the kept trees' packages (as symlinks), so the left-out half's tests skip with
/// their own reason instead of testing a tree the user excluded.
pub fn filtered_view(scratch: &Path, kept: &[(&str, &Path)]) -> Result<PathBuf> {
    let view = scratch.join("trees");
    std::fs::create_dir(&view).with_context(|| format!("creating {}", view.display()))?;
    for (package, root) in kept {
        let target = root.join(package);
        std::os::unix::fs::symlink(&target, view.join(package))
            .with_context(|| format!("linking {} into {}", target.display(), view.display()))?;
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_summary_and_skips_are_named() {
        assert_eq!(Counts::parse("1 failed, 11 passed, 2 skipped in 3.2s"), Counts { passed: 11, failed: 1 });
        assert_eq!(Counts::parse("3 skipped in 0.1s"), Counts::default());
        assert_eq!(Counts::parse(""), Counts::default());
        assert_eq!(Counts::parse("1 error in 0.2s"), Counts { passed: 0, failed: 1 });
        let out = "..s\nSKIPPED [2] test_x.py:10: no vllm_gaudi/ in /t: the vllm_gaudi half is not tested\n\
                   SKIPPED [1] test_x.py:20: GAUDI_FIXES_VECTORS is not set\n2 passed, 3 skipped in 1s\n";
        assert_eq!(
            skip_reasons(out),
            ["no vllm_gaudi/ in /t: the vllm_gaudi half is not tested (2 tests)", "GAUDI_FIXES_VECTORS is not set"]
        );
        assert_eq!(summary_line("x\n===== 2 passed in 1s =====\n\n"), "2 passed in 1s");
    }
}
