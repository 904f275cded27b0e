//! The pytest runner shared by `test` and `matrix`: check the interpreter (pytest, torch, and
//! that it runs at all), write the fix's directory to a scratch directory, run `PYTHON -m
//! pytest` on its `tests:` against the given trees with gaudi-fixes' result plugin
//! (`gaudi_fixes_pytest.py`), and take the verdict from pytest itself: its exit code and the
//! counts and skip reasons the plugin wrote — never from a line of output, where an
//! interpreter's line at exit could pose as the summary. A run that prints no line for 15 s
//! says which test is running.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::FileContext;
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
    let out = crate::discover::interpreter_command(python)
        .arg("-c")
        .arg(probe)
        .args(REQUIRED_MODULES)
        .output()
        .with_context(|| format!("cannot run `{python}` for the fix's tests (give --python PATH)"))?;
    if !out.status.success() {
        bail!("`{python}` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Anything a `.pth` file or `sitecustomize` printed first is passed over.
    let mut lines = stdout.lines().skip_while(|l| l.trim() != PROBE_OK);
    if lines.next().is_none() {
        bail!("`{python}` is not a Python interpreter (it did not run a one-line probe); give --python PATH");
    }
    let missing: Vec<&str> = lines.flat_map(str::split_whitespace).collect();
    if missing.contains(&"torch") {
        let also = if missing.contains(&"pytest") {
            format!(", then `{python} -m pip install pytest`")
        } else {
            String::new()
        };
        let (pytest, them) = if missing.contains(&"pytest") { (" and no pytest", "them") } else { ("", "it") };
        bail!(
            "`{python}` has no torch{pytest}: the fix's tests need {them}. In a Gaudi image, give --python the \
             image's own interpreter: it has the image's torch build, and installing another torch over it \
             would replace it. On a CPU-only machine without torch: {}{also}{}",
            cpu_torch_install(python),
            vllm_pin_note(vllm_root)
        );
    }
    if missing.contains(&"pytest") {
        bail!("`{python}` has no pytest: the fix's tests need it (`{python} -m pip install pytest`; torch is there)");
    }
    Ok(())
}

/// `python` as a command that means the same from another directory (pytest and the
/// conformance suite run elsewhere): resolved as discovery resolves it
/// ([`crate::discover::resolve_interpreter`]: a relative path made absolute, a bare name looked up
/// on `PATH` from the working directory), so one run uses one interpreter.
pub fn resolve_python(python: &str) -> Result<String> {
    Ok(crate::discover::resolve_interpreter(python))
}

/// The torch the fixes' tests and the conformance suite are run with here (`scripts/setup-venv.sh`,
/// the `reference` feature's libtorch): what the advice for a machine without torch installs.
pub const TESTED_TORCH: &str = "2.13.0";

/// The command that installs [`TESTED_TORCH`]'s CPU build into `python`: the CPU index alone
/// (with the package index as an extra index, pip takes the same version from there when it
/// is newer by its rules: the CUDA build with GBs of NVIDIA wheels).
pub fn cpu_torch_install(python: &str) -> String {
    format!("`{python} -m pip install torch=={TESTED_TORCH} --index-url https://download.pytorch.org/whl/cpu`")
}

/// What the vLLM found pins, when it is not the torch the advice installs: ` (vLLM X pins torch==Y)`.
pub fn vllm_pin_note(vllm_root: Option<&Path>) -> String {
    match vllm_root.and_then(pinned_torch) {
        Some((torch, vllm)) if torch != TESTED_TORCH => {
            format!(" (vLLM {vllm} pins torch=={torch}; the tests here are run with {TESTED_TORCH})")
        }
        _ => String::new(),
    }
}

/// The torch version a pip-installed vLLM pins (`Requires-Dist: torch==X` in the dist-info
/// beside `vllm/`), with vLLM's version; `None` for a tree without dist-info.
pub fn pinned_torch(vllm_root: &Path) -> Option<(String, String)> {
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
            .file_context(&dest, || format!("creating {}", dest.display()))?;
        std::fs::write(&dest, bytes).file_context(&dest, || format!("writing {}", dest.display()))?;
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
        std::fs::create_dir(&dir).file_context(&dir, || format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a run's progress goes: pytest's own output streamed to a writer (the caller's
/// stderr), a step callback (`matrix`'s progress line; pytest's output is kept, not shown), or
/// nowhere. Either way a run that prints no line for [`HEARTBEAT`] says which test is running.
pub enum Talk<'a> {
    Echo(&'a mut dyn std::io::Write),
    Steps(&'a mut dyn FnMut(&str)),
    Silent,
}

/// The longest a run may go without a line before it says which test is running and how far
/// along it is: a log is never silent for 10 s, with room for one slow write.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(8);

/// The result plugin loaded into pytest (`-p gaudi_fixes_pytest`): it writes pytest's verdict
/// as JSON and the test now running to files this run names.
const PLUGIN: &str = include_str!("gaudi_fixes_pytest.py");

/// What the plugin writes when the session ends: pytest's exit status and its counts.
#[derive(Debug, Default, serde::Deserialize)]
struct Verdict {
    exitstatus: i32,
    passed: usize,
    failed: usize,
    errors: usize,
    skipped: usize,
    #[serde(default)]
    xfailed: usize,
    #[serde(default)]
    xpassed: usize,
    /// Tests collected (absent from a plugin before it was written).
    #[serde(default)]
    collected: Option<usize>,
    #[serde(default)]
    skips: Vec<String>,
    #[serde(default)]
    duration: f64,
}

impl Verdict {
    /// pytest's summary line, from the counts (`1 failed, 11 passed, 2 skipped in 3.20s`).
    fn summary(&self) -> String {
        let parts: Vec<String> = [
            (self.failed, "failed"),
            (self.passed, "passed"),
            (self.skipped, "skipped"),
            (self.xfailed, "xfailed"),
            (self.xpassed, "xpassed"),
            (self.errors, if self.errors == 1 { "error" } else { "errors" }),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let counts = if parts.is_empty() { "no tests ran".to_string() } else { parts.join(", ") };
        format!("{counts} in {:.2}s", self.duration)
    }

    /// The skip reasons, each once, with how many tests gave it.
    fn skip_reasons(&self) -> Vec<String> {
        let mut seen: Vec<(String, usize)> = Vec::new();
        for reason in &self.skips {
            match seen.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => seen.push((reason.clone(), 1)),
            }
        }
        seen.into_iter().map(|(r, n)| if n == 1 { r } else { format!("{r} ({n} tests)") }).collect()
    }
}

/// Run `fix`'s tests against the trees rooted at `vllm_root` / `gaudi_root`. pytest's output
/// is kept in the result when it is not echoed (`talk`). The verdict is pytest's own: its exit
/// code and the counts its result plugin wrote, never a line of output. The run passes only
/// when pytest passed and at least one test ran.
pub fn run_tests(
    catalog: &Catalog,
    fix: &Fix,
    python: &str,
    vllm_root: Option<&Path>,
    gaudi_root: Option<&Path>,
    extra: &[String],
    talk: Talk<'_>,
) -> Result<TestRun> {
    let capture = !matches!(talk, Talk::Echo(_));
    let name = &fix.manifest.name;
    if fix.manifest.tests.is_empty() {
        bail!("{name} has no tests (its fix.yaml lists no `tests:`)");
    }
    let root = vllm_root.or(gaudi_root).context("no vllm or vllm_gaudi tree to test against")?;
    let python = &resolve_python(python)?;
    check_python_for(python, vllm_root)?;
    let scratch = Scratch::new("test")?;
    let dir = materialize(catalog, fix, &scratch.0)?;
    let plugin_dir = scratch.0.join(".plugin");
    std::fs::create_dir(&plugin_dir).file_context(&plugin_dir, || format!("creating {}", plugin_dir.display()))?;
    let plugin = plugin_dir.join("gaudi_fixes_pytest.py");
    std::fs::write(&plugin, PLUGIN).file_context(&plugin, || format!("writing {}", plugin.display()))?;
    let files = RunFiles { report: scratch.0.join(".verdict.json"), running: scratch.0.join(".running") };
    let mut python_path = std::ffi::OsString::from(&plugin_dir);
    // PYTHONPATH as it is read in the working directory (pytest runs in the scratch directory).
    if let Some(old) = crate::discover::python_path().filter(|p| !p.is_empty()) {
        python_path.push(":");
        python_path.push(old);
    }
    let mut cmd = crate::discover::interpreter_command(python);
    // -rs: every skip is listed with its reason in pytest's short summary (for people; the
    // result takes the reasons from the plugin).
    cmd.current_dir(&dir)
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "gaudi_fixes_pytest"])
        .args(&fix.manifest.tests)
        .args(extra)
        .env("GAUDI_FIXES_ROOT", root)
        .env("GAUDI_FIXES_PYTEST_REPORT", &files.report)
        .env("GAUDI_FIXES_PYTEST_RUNNING", &files.running)
        .env("PYTHONPATH", python_path)
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
    let (status, output) = run_pytest(cmd, python, talk, &files)?;
    let code = status.code().unwrap_or(-1);
    let verdict = read_verdict(&files.report, code, name)?;
    let summary = verdict.summary();
    match code {
        0 | 1 => {}
        5 => bail!("pytest collected no test of {name} (exit 5): {summary}"),
        // 2–4: interrupted, internal error, usage error; anything else: not pytest at all.
        _ => bail!("pytest could not run {name}'s tests (exit {code}): {summary}"),
    }
    let skips = verdict.skip_reasons();
    // Errors alone on every test collected (every setup failed: a harness that cannot load on this
    // tree) are no verdict on the fix either: no test ran. A run stopped at its first error (`-x`, as
    // every-hunk-needed runs it) with tests left is a failure: that test's setup raised in the tree.
    let every_one_errored = verdict.collected.is_none_or(|n| verdict.errors >= n);
    if verdict.passed == 0 && verdict.failed == 0 && every_one_errored {
        let why = if skips.is_empty() { String::new() } else { format!("; skipped: {}", skips.join("; ")) };
        let errored = if verdict.errors == 0 { "" } else { ": each one errored before it could run" };
        bail!("no test of {name} ran{errored} (pytest: `{summary}`){why}");
    }
    Ok(TestRun {
        fix: name.clone(),
        python: python.to_string(),
        root: root.to_path_buf(),
        passed: code == 0 && verdict.failed == 0 && verdict.errors == 0 && verdict.passed > 0,
        pytest_exit: code,
        summary,
        skipped: skips,
        output: if capture { output } else { String::new() },
    })
}

/// The files the result plugin writes: the verdict, and the test now running.
struct RunFiles {
    report: PathBuf,
    running: PathBuf,
}

/// pytest's verdict as its plugin wrote it. pytest exits 0–5 after writing it (4, a usage
/// error, and 2, an interruption during collection, may come before any session, so they need
/// none); an interpreter that exits otherwise, or disagrees with the report, did not finish
/// the run pytest reported.
fn read_verdict(path: &Path, code: i32, name: &str) -> Result<Verdict> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if matches!(code, 2 | 4) {
                return Ok(Verdict { exitstatus: code, ..Verdict::default() });
            }
            bail!(
                "pytest exited {code} without its result for {name} (the gaudi_fixes_pytest plugin wrote no \
                 verdict): the interpreter did not run the session to its end"
            );
        }
        Err(e) => return Err(e).file_context(path, || format!("reading pytest's verdict {}", path.display())),
    };
    let verdict: Verdict = serde_json::from_str(&text)
        .file_context(path, || format!("pytest's verdict {} is not JSON", path.display()))?;
    if verdict.exitstatus != code {
        bail!(
            "pytest decided exit {} for {name} ({}), but the interpreter exited {code}: it failed after the tests",
            verdict.exitstatus,
            verdict.summary()
        );
    }
    Ok(verdict)
}

/// Run the prepared pytest command, its output kept (and, with [`Talk::Echo`], streamed there
/// as it comes). When no line came for [`HEARTBEAT`], a line names the test now running.
/// Returns its exit status and output.
fn run_pytest(
    mut cmd: Command,
    python: &str,
    mut talk: Talk<'_>,
    files: &RunFiles,
) -> Result<(std::process::ExitStatus, String)> {
    use std::sync::mpsc;
    let echo = matches!(talk, Talk::Echo(_));
    // pytest's report goes to the caller's stderr as it comes, so that stdout stays ours (JSON
    // stays parseable) and a long run is never silent.
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(if echo { Stdio::inherit() } else { Stdio::piped() });
    let (mut child, watch) =
        super::child::Watch::spawn(&mut cmd).with_context(|| format!("running `{python} -m pytest`"))?;
    let (tx, rx) = mpsc::channel::<std::io::Result<Vec<u8>>>();
    let readers: Vec<_> = [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        std::thread::spawn(move || pump(pipe, &tx))
    })
    .collect();
    drop(tx);
    let started = std::time::Instant::now();
    let mut pace = Pace::default();
    let mut last_line = started;
    let mut at_line_start = true;
    let mut kept = Vec::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(500)) {
            Ok(Ok(chunk)) => {
                if let Talk::Echo(out) = &mut talk {
                    let _ = out.write_all(&chunk);
                    let _ = out.flush();
                }
                if chunk.contains(&b'\n') {
                    last_line = std::time::Instant::now();
                }
                at_line_start = chunk.last() == Some(&b'\n');
                kept.extend_from_slice(&chunk);
            }
            Ok(Err(e)) => return Err(e).context("reading pytest's output"),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if last_line.elapsed() >= HEARTBEAT {
            let running = std::fs::read_to_string(&files.running).unwrap_or_default();
            let line = heartbeat(&running, started.elapsed(), &mut pace);
            match &mut talk {
                Talk::Echo(out) => {
                    let _ = writeln!(out, "{}[gaudi-fixes] {line}", if at_line_start { "" } else { "\n" });
                    let _ = out.flush();
                    at_line_start = true;
                }
                Talk::Steps(step) => step(&line),
                Talk::Silent => {}
            }
            last_line = std::time::Instant::now();
        }
    }
    for reader in readers {
        let _ = reader.join();
    }
    let status = child.wait().context("waiting for pytest")?;
    watch.finish()?;
    Ok((status, String::from_utf8_lossy(&kept).to_string()))
}

/// When the heartbeat first saw each count of tests done: the time per test is taken at that
/// moment, so the time left counts down while a test runs (measured from the run's start, it
/// grew: 32, 40, 48 s left while one slow test ran).
#[derive(Debug, Default)]
struct Pace {
    /// (tests done, the time it was first seen).
    seen: Option<(u64, std::time::Duration)>,
}

impl Pace {
    /// About how long is left when `done` of `total` are done at `elapsed`; `None` before the
    /// first test is done, and once the running test outlasts the estimate.
    fn left(&mut self, done: u64, total: u64, elapsed: std::time::Duration) -> Option<f64> {
        if done == 0 || total < done {
            return None;
        }
        let at = match self.seen {
            Some((count, at)) if count == done => at,
            _ => {
                self.seen = Some((done, elapsed));
                elapsed
            }
        };
        let per = at.as_secs_f64() / done as f64;
        let left = per * (total - done) as f64 - (elapsed - at).as_secs_f64();
        (left >= 1.0).then_some(left)
    }
}

/// The heartbeat line from what the plugin wrote (the node id running, then "DONE TOTAL"):
/// `40 s: 12 of 57 tests done, running test_a.py::test_x, about 2 min 30 s left`.
fn heartbeat(running: &str, elapsed: std::time::Duration, pace: &mut Pace) -> String {
    let mut lines = running.lines();
    let test = lines.next().map(str::trim).filter(|t| !t.is_empty());
    let counts: Option<(u64, u64)> = lines.next().and_then(|l| {
        let (done, total) = l.trim().split_once(' ')?;
        Some((done.parse().ok()?, total.parse().ok()?))
    });
    let mut parts = vec![format!("{} s", elapsed.as_secs())];
    let now = test.map_or("collecting the tests".to_string(), |t| format!("running {t}"));
    match counts {
        // pytest has printed its summary; the interpreter may take a while to exit (measured:
        // 27 s after bad-words-rows' summary, on a loaded machine).
        Some((done, total)) if total > 0 && done >= total => {
            parts.push(format!("all {total} tests done, waiting for the interpreter to exit"))
        }
        Some((done, total)) if total > 0 => {
            let left =
                pace.left(done, total, elapsed).map(|left| format!(", about {} left", crate::duration::words(left)));
            parts.push(format!("{done} of {total} tests done, {now}{}", left.unwrap_or_default()));
        }
        _ => parts.push(now),
    }
    parts.join(": ")
}

/// Send what `pipe` gives, chunk by chunk, until it closes.
fn pump(mut pipe: Box<dyn std::io::Read + Send>, tx: &std::sync::mpsc::Sender<std::io::Result<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.send(Ok(buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
}

/// The directory the tests see as `GAUDI_FIXES_ROOT` when `--only-tree` leaves a tree out: it
/// holds only the kept trees' packages (as symlinks), so the left-out half's tests skip with
/// their own reason instead of testing a tree the user excluded.
pub fn filtered_view(scratch: &Path, kept: &[(&str, &Path)]) -> Result<PathBuf> {
    let view = scratch.join("trees");
    std::fs::create_dir(&view).file_context(&view, || format!("creating {}", view.display()))?;
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
    fn the_summary_and_skips_come_from_the_verdict() {
        let v = Verdict {
            passed: 11,
            failed: 1,
            skipped: 3,
            duration: 3.2,
            skips: vec!["no vllm_gaudi/ in /t".into(), "vectors not set".into(), "no vllm_gaudi/ in /t".into()],
            ..Verdict::default()
        };
        assert_eq!(v.summary(), "1 failed, 11 passed, 3 skipped in 3.20s");
        assert_eq!(v.skip_reasons(), ["no vllm_gaudi/ in /t (2 tests)", "vectors not set"]);
        assert_eq!(Verdict { errors: 1, ..Verdict::default() }.summary(), "1 error in 0.00s");
        assert_eq!(Verdict::default().summary(), "no tests ran in 0.00s");
    }

    #[test]
    fn the_heartbeat_says_how_far_along_the_tests_are() {
        let at = std::time::Duration::from_secs(40);
        let beat = |running: &str| heartbeat(running, at, &mut Pace::default());
        assert_eq!(beat("t.py::test_x\n10 of 50\n"), "40 s: running t.py::test_x");
        assert_eq!(
            beat("t.py::test_x\n10 50\n"),
            "40 s: 10 of 50 tests done, running t.py::test_x, about 2 min 40 s left"
        );
        assert_eq!(beat("t.py::test_x\n0 50\n"), "40 s: 0 of 50 tests done, running t.py::test_x");
        assert_eq!(beat("t.py::test_x\n50 50\n"), "40 s: all 50 tests done, waiting for the interpreter to exit");
        assert_eq!(beat(""), "40 s: collecting the tests");
    }

    /// Issue 48: while one test runs, the time left counts down (it grew, 32 → 40 → 48 s), and
    /// is left out once the test outlasts it.
    #[test]
    fn the_time_left_does_not_grow_while_a_test_runs() {
        let mut pace = Pace::default();
        let s = std::time::Duration::from_secs;
        let lefts: Vec<Option<f64>> = [20, 30, 40].iter().map(|&t| pace.left(5, 10, s(t))).collect();
        assert_eq!(lefts, [Some(20.0), Some(10.0), None]);
        assert_eq!(pace.left(6, 10, s(45)), Some(30.0), "a new count sets the pace again");
    }
}
