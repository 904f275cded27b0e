//! One cache shared by runs in different PID namespaces (two containers on one cache volume,
//! both PID 1): their scratch and extraction directories never collide, a directory whose
//! lock is held is never removed, an extraction is installed only once whole, and a cached
//! pristine tree carries a manifest that every later run checks. Before: the second run
//! removed the first's live `<stem>.gaudi-fixes-1` and made its own at the same path, so each
//! tested or deleted the other's tree (a cell "tests error … collected no test"), and an
//! incomplete pristine tree could be installed with exit 0.

use std::process::{Command, Stdio};

use crate::common::{cache_leftovers, fake_python, fixture, Dir, PRISTINE};

/// A wheel as `pip download` leaves it in `<cache>/wheels` (false when there is no python3).
fn cached_wheel(d: &Dir) -> bool {
    std::fs::create_dir_all(d.path().join("cache/wheels")).unwrap();
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\nz.writestr('vllm/__init__.py', '')\n\
             z.writestr('vllm/_version.py', \"__version__ = version = '0.26.0'\\n\")\nz.writestr('vllm/mod.py', sys.argv[2])\n\
             [z.writestr(f'vllm/more/m{i}.py', 'x = %d\\n' % i) for i in range(300)]\nz.close()",
        ])
        .arg(d.path().join("cache/wheels/vllm-0.26.0-py3-none-any.whl"))
        .arg(PRISTINE)
        .status();
    made.is_ok_and(|s| s.success())
}

/// Whether this process may make PID namespaces (root, with util-linux's unshare).
fn can_unshare() -> bool {
    (unsafe { libc::geteuid() }) == 0
        && Command::new("unshare").args(["--pid", "--fork", "true"]).status().is_ok_and(|s| s.success())
}

/// The fixture with a test for fix-a and an interpreter that is python3 for the extraction
/// (a second late, so that two runs overlap) and, as pytest, takes two seconds and passes only
/// when the tree it was given still holds fix-a's edit at the end.
fn with_slow_interpreter() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "tests: [test_a.py]\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write("cat/fixes/fix-a/test_a.py", "def test_a():\n    pass\n");
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ] && [ \"$3\" = pytest ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         if [ \"$1\" = \"-c\" ]; then sleep 1; exec python3 \"$@\"; fi\n\
         sleep 2\n\
         if grep -q 'a \\* 3' \"$GAUDI_FIXES_ROOT/vllm/mod.py\"; then echo '1 passed'; verdict 0 1 0; exit 0; fi\n\
         echo \"no patched tree at $GAUDI_FIXES_ROOT\"; verdict 1 0 1; exit 1\n",
    );
    d
}

fn matrix_in_own_pid_namespace(d: &Dir) -> std::process::Child {
    Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a"])
        .args(["--format", "json"])
        .current_dir(d.path())
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .env("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES", "")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `matrix --no-tests` of fix-a on v0.26.0 with `python`, expecting exit `code`: (stdout, stderr).
fn matrix_no_tests(d: &Dir, python: &str, code: i32) -> (String, String) {
    let args = ["--catalog", "cat", "--python", python, "matrix", "--releases", "v0.26.0", "--fix", "fix-a"];
    d.cmd().args(args).args(["--no-tests"]).env("GAUDI_FIXES_CACHE", d.path().join("cache")).expect(code)
}

#[test]
fn two_matrix_runs_in_two_pid_namespaces_share_a_cache() {
    if !can_unshare() {
        eprintln!("skipped: needs root and unshare --pid");
        return;
    }
    let d = with_slow_interpreter();
    if !cached_wheel(&d) {
        eprintln!("skipped: no python3");
        return;
    }
    let runs: Vec<_> = (0..2).map(|_| matrix_in_own_pid_namespace(&d)).collect();
    for (i, run) in runs.into_iter().enumerate() {
        let out = run.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "run {i}:\n{stdout}{stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        let cell = &v["cells"][0];
        assert_eq!(
            (cell["state"].as_str(), cell["tests"].as_str()),
            (Some("applies"), Some("passed")),
            "run {i}: {stdout}"
        );
    }
    // The cache holds the whole release, and nothing else.
    assert_eq!(cache_leftovers(&d), Vec::<String>::new());
    let manifest = d.read_string("cache/upstream/v0.26.0/.gaudi-fixes-manifest");
    assert_eq!(manifest.lines().count(), 1 + 304, "{manifest}");
    assert_eq!(d.read_string("cache/upstream/v0.26.0/vllm/mod.py"), PRISTINE);
    // A file lost from the cached tree: the next run refuses it instead of trusting it.
    std::fs::remove_file(d.path().join("cache/upstream/v0.26.0/vllm/more/m7.py")).unwrap();
    let (out, _) = matrix_no_tests(&d, "./py", 3);
    assert!(out.contains("not whole") && out.contains("vllm/more/m7.py"), "{out}");
}

/// A directory whose lock is held is never removed, whatever its PID says: here a run in
/// another PID namespace holds `scratch/<…>.gaudi-fixes-<a PID not alive here>`.
#[test]
fn a_locked_directory_is_never_removed() {
    let d = fixture();
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    let held = d.path().join("cache/scratch/v0.26.0-fix-a.gaudi-fixes-999999999-0123456789abcdef");
    std::fs::create_dir_all(held.join("vllm")).unwrap();
    let lock = std::fs::File::open(&held).unwrap();
    // SAFETY: flock(2) on a directory this test opened.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0);
    let (_, err) = matrix_no_tests(&d, "python3", 0);
    assert!(held.join("vllm").is_dir(), "a locked directory was removed: {err}");
    drop(lock);
    let (_, err) = matrix_no_tests(&d, "python3", 0);
    assert!(!held.exists() && err.contains("PID 999999999"), "once free, it goes: {err}");
}
