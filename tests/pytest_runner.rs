//! The pytest runner behind `test` and `matrix`, through the real binary: the verdict is
//! pytest's own (its exit code and its result plugin's counts), so a line an interpreter writes
//! to stderr at exit changes nothing in any format or in `matrix`; and a long run talks — a
//! line naming the running test (and how many of the tests are done) whenever pytest printed
//! none for 8 s.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fake_python, fixture, real_python, with_fixture, Dir, PRISTINE};

/// What an interpreter's atexit handler writes after pytest's summary (the finding's line).
const AT_EXIT: &str = "[W shutdown] leaked 1 semaphore object at exit";

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The fixture with fix-a applied, four tests for it, and a cached pristine v0.26.0 for `matrix`.
fn with_four_tests() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "tests: [test_a.py]\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let one = "def test_{n}():\n    src = open(os.path.join(os.environ['GAUDI_FIXES_ROOT'], 'vllm/mod.py')).read()\n    assert 'b = a * 3' in src\n\n";
    let tests: String = (1..=4).map(|n| one.replace("{n}", &n.to_string())).collect();
    d.write("cat/fixes/fix-a/test_a.py", format!("import os\n\n\n{tests}"));
    // As a torch build does at shutdown: a line on stderr after pytest's summary.
    d.write(
        "cat/fixes/fix-a/conftest.py",
        format!("import atexit, sys\n\natexit.register(lambda: print({AT_EXIT:?}, file=sys.stderr))\n"),
    );
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("cache/upstream/v0.26.0/vllm/_version.py", "__version__ = version = '0.26.0'\n");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d
}

/// `test` in human mode, with `-q` and with `--format json`, and `matrix --record`: one verdict.
fn same_verdict_everywhere(d: &Dir, py: &str) {
    let (out, err) = d.cmd().args(with_fixture(&["--python", py, "test", "fix-a"])).expect(0);
    assert!(out.contains("passed (4 passed"), "{out}");
    assert!(err.contains(AT_EXIT), "the interpreter's line at exit did not come (the test proves nothing): {err}");
    d.cmd().args(with_fixture(&["--python", py, "-q", "test", "fix-a"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["--python", py, "--format", "json", "test", "fix-a"])).expect(0);
    let v = json(&out);
    assert_eq!((v["passed"].as_bool(), v["pytest_exit"].as_i64()), (Some(true), Some(0)), "{out}");
    assert!(v["summary"].as_str().unwrap().starts_with("4 passed"), "{out}");
    let args = ["--catalog", "cat", "--python", py, "matrix", "--releases", "v0.26.0", "--fix", "fix-a"];
    let (out, _) = d
        .cmd()
        .args(args)
        .args(["--format", "json", "--record"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    let cell = &json(&out)["cells"][0];
    assert_eq!((cell["tests"].as_str(), cell["recorded"].as_bool()), (Some("passed"), Some(true)), "{out}");
}

/// Before: human mode exit 0, `--format json` and `-q` exit 3 "no test of fix-a ran (pytest:
/// `[W shutdown] leaked 1 semaphore object at exit`)", the matrix cell "tests error".
#[test]
fn a_line_at_interpreter_exit_changes_no_verdict_with_real_pytest() {
    let Some(python) = real_python() else {
        eprintln!("skipped: no python with pytest and torch (set GAUDI_FIXES_TEST_PYTHON)");
        return;
    };
    let d = with_four_tests();
    same_verdict_everywhere(&d, python.to_str().unwrap());
}

/// The same without a venv: a stand-in pytest leaves its verdict, then prints the line at exit.
#[test]
fn a_line_at_interpreter_exit_changes_no_verdict() {
    let d = with_four_tests();
    fake_python(
        &d,
        "py",
        &format!(
            "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
             grep -q 'a \\* 3' \"$GAUDI_FIXES_ROOT/vllm/mod.py\" || {{ echo '1 failed'; verdict 1 3 1; exit 1; }}\n\
             echo '....'; echo '4 passed in 0.01s'; verdict 0 4 0\n\
             echo '{AT_EXIT}' >&2\n"
        ),
    );
    same_verdict_everywhere(&d, "./py");
    // An interpreter that dies after the session (the verdict says 0, the process 139) failed.
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\necho '4 passed'; verdict 0 4 0; exit 139\n",
    );
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(3);
    assert!(err.contains("interpreter exited 139"), "{err}");
    // And one that writes a passing summary but no verdict never passes.
    fake_python(&d, "py", "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\necho '4 passed'\n");
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(3);
    assert!(err.contains("wrote no verdict"), "{err}");
}

/// A stand-in pytest whose one test runs 17 s without printing a line (a dot, no newline).
fn with_slow_test() -> Dir {
    let d = with_four_tests();
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         printf 'test_a.py::test_slow\\n1 2\\n' > \"$GAUDI_FIXES_PYTEST_RUNNING\"\n\
         printf '.'; sleep 17; echo '.   [100%]'; echo '2 passed in 17s'; verdict 0 2 0\n",
    );
    d
}

/// Run `args` and return its exit code, its stderr's lines, and the longest time between two
/// lines of stderr (from the start to the end).
fn stderr_lines_timed(d: &Dir, args: &[&str]) -> (Option<i32>, Vec<String>, Duration) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .current_dir(d.path())
        .args(args)
        .env("NO_COLOR", "1")
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut last = start;
    let mut gap = Duration::ZERO;
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        gap = gap.max(last.elapsed());
        last = Instant::now();
        lines.push(line.unwrap());
    }
    let code = child.wait().unwrap().code();
    (code, lines, gap.max(last.elapsed()))
}

/// Before: `test` printed one `.` and nothing else for 17 s (no line at all); `matrix`'s
/// progress said "running its tests" once.
#[test]
fn a_long_test_names_the_running_test_at_least_every_10_s() {
    let d = with_slow_test();
    let (code, lines, gap) = stderr_lines_timed(&d, &with_fixture(&["--python", "./py", "test", "fix-a"]));
    assert_eq!(code, Some(0), "{lines:#?}");
    let beat = "[gaudi-fixes] 8 s: 1 of 2 tests done, running test_a.py::test_slow, about ";
    assert!(lines.iter().any(|l| l.starts_with(beat) && l.ends_with(" s left")), "{lines:#?}");
    assert!(lines.iter().any(|l| l == "."), "the heartbeat did not begin a line of its own: {lines:#?}");
    assert!(gap < Duration::from_secs(10), "{gap:?} without a line: {lines:#?}");
}

#[test]
fn a_long_matrix_cell_names_the_running_test_at_least_every_10_s() {
    let d = with_slow_test();
    let args = ["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a"];
    let (code, lines, gap) = stderr_lines_timed(&d, &args);
    assert_eq!(code, Some(0), "{lines:#?}");
    let beat = "matrix: 0/1 cells; v0.26.0 (1/1): fix-a: running its tests: 8 s: 1 of 2 tests done, running \
                test_a.py::test_slow, about ";
    assert!(lines.iter().any(|l| l.starts_with(beat)), "{lines:#?}");
    assert!(gap < Duration::from_secs(10), "{gap:?} without a line: {lines:#?}");
}

/// Issue 50 (6): on a tree whose harness cannot load (vLLM 0.34.0), every test errored in its
/// setup and `test` said "FAILED (5 errors)", exit 1, where no test ran (the README: 3). Errors
/// alone, no test passed or failed, is no verdict on the fix.
#[test]
fn tests_that_all_error_before_running_are_no_verdict() {
    let d = with_four_tests();
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         echo 'EEEE'; echo '4 errors in 0.01s'\n\
         printf '{\"exitstatus\": 1, \"passed\": 0, \"failed\": 0, \"errors\": 4, \"skipped\": 0, \"skips\": [], \"duration\": 0.01}\\n' > \"$GAUDI_FIXES_PYTEST_REPORT\"\n\
         exit 1\n",
    );
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(3);
    assert!(err.contains("no test of fix-a ran") && err.contains("4 errors"), "{err}");
    // One test that ran and failed beside errors is a verdict: exit 1.
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         printf '{\"exitstatus\": 1, \"passed\": 0, \"failed\": 1, \"errors\": 3, \"skipped\": 0, \"skips\": [], \"duration\": 0.01}\\n' > \"$GAUDI_FIXES_PYTEST_REPORT\"\n\
         exit 1\n",
    );
    d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(1);
    // Stopped at its first error (`-x`) with three of four tests never run: the error is the
    // verdict (a setup that raised in the tree), exit 1 — every-hunk-needed runs `test FIX -- -x`.
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         printf '{\"exitstatus\": 1, \"passed\": 0, \"failed\": 0, \"errors\": 1, \"collected\": 4, \"skipped\": 0, \"skips\": [], \"duration\": 0.01}\\n' > \"$GAUDI_FIXES_PYTEST_REPORT\"\n\
         exit 1\n",
    );
    d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(1);
}

/// SIGTERM to `test` while pytest runs reaches pytest (its own process group, the signal
/// forwarded), which is waited for; the scratch directory goes and the exit code is 143 (128 +
/// SIGTERM). Before: gaudi-fixes died at once, pytest ran on and the scratch stayed.
#[test]
fn sigterm_reaches_pytest_and_removes_the_scratch() {
    let d = with_four_tests();
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let pid_file = d.path().join("pytest.pid");
    fake_python(
        &d,
        "py",
        &format!(
            "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
             echo $$ > '{}'\nsleep 120 &\nwait\nverdict 0 4 0\n",
            pid_file.display()
        ),
    );
    let mut run = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .current_dir(d.path())
        .args(with_fixture(&["--python", "./py", "test", "fix-a"]))
        .env("TMPDIR", &tmp)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| s.trim().is_empty()) {
        assert!(started.elapsed() < Duration::from_secs(60), "the stand-in pytest never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let child: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(std::fs::read_dir(&tmp).unwrap().count() > 0, "pytest runs from a scratch directory under TMPDIR");
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "exit 128 + SIGTERM ({status:?}); stderr: {err}");
    assert!(started.elapsed() < Duration::from_secs(60), "pytest was stopped, not waited out");
    let alive = unsafe { libc::kill(child, 0) } == 0;
    assert!(!alive, "pytest (pid {child}) still runs after gaudi-fixes exited");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}

/// A `.pth` file or `sitecustomize` that prints before the probe's answer is passed over: the
/// interpreter still runs the tests (it was "not a Python interpreter", exit 3).
#[test]
fn stray_output_before_the_probe_is_no_failure() {
    let d = with_four_tests();
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo 'hello from a .pth file'; echo gaudi-fixes-probe-ok; exit 0; fi\n\
         echo 'hello from a .pth file'; echo '4 passed in 0.01s'; verdict 0 4 0\n",
    );
    d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(0);
}
