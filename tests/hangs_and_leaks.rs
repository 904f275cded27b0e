//! Hangs and leaks in the upkeep commands, through the real binary: `record` and
//! `lint --upstream` never open a FIFO nor follow a symlink out of the directory they were
//! given; two `matrix` runs preparing one release both succeed and leave nothing behind; a
//! killed `matrix` leaves nothing the next run does not remove; stale probe files are left
//! alone by the commands that only read the catalogue.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{cache_leftovers, fixture, with_fixture, Dir, PRISTINE};

fn mkfifo(path: &Path) {
    let _ = fs::remove_file(path);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// The binary's command line (no ambient GAUDI_FIXES_* env).
fn command(d: &Dir, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"));
    cmd.current_dir(d.path()).env("NO_COLOR", "1").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("GAUDI_FIXES_") {
            cmd.env_remove(k);
        }
    }
    // No vllm_gaudi archives but a test's own (a shared/upstream/ above the temp dir is not).
    cmd.env("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES", "");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// Run to the end, or fail saying it hung (killed after 20 s) instead of hanging the suite.
fn bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what} hung (killed after 20 s); stderr so far: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn record_args<'a>(pristine: &'a str, edited: &'a str) -> Vec<&'a str> {
    vec!["--catalog", "cat", "record", "fix-a", "--release", "v0.27.0", "--pristine", pristine, "--edited", edited]
}

/// The fixture with an edited copy of its tree at `edited/`.
fn with_edited() -> Dir {
    let d = fixture();
    d.write("edited/vllm/mod.py", PRISTINE.replace("    b = a * 2\n", "    b = a * 5\n"));
    d
}

/// `record` with a FIFO where it reads the pristine or the edited file: exit 3 naming it,
/// nothing written (it used to block forever in open(2)).
#[test]
fn record_refuses_a_fifo_in_the_edited_or_pristine_tree() {
    for (side, fifo) in [("--edited", "edited/vllm/mod.py"), ("--pristine", "root/vllm/mod.py")] {
        let d = with_edited();
        mkfifo(&d.path().join(fifo));
        let before = d.snapshot("cat");
        let out = bounded(command(&d, &record_args("root", "edited")), &format!("record with a FIFO as {side}"));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{side}: {err}");
        assert!(err.contains(fifo) && err.contains("not a regular file"), "{side}: {err}");
        assert_eq!(d.snapshot("cat"), before, "{side}: record wrote into the catalogue");
    }
}

/// A symlink in `--edited` / `--pristine` that leads out of it (the file, or a directory on
/// its path): exit 3 naming it, and the outside file's text is nowhere in the catalogue. One
/// that stays inside is followed, as `apply` follows it.
#[test]
fn record_refuses_a_symlink_leading_out_of_its_directory() {
    let secret = PRISTINE.replace("    b = a * 2\n", "    b = read_secret()\n");
    for (side, link, target) in [
        ("--edited", "edited/vllm/mod.py", "../../outside/mod.py"),
        ("--pristine", "root/vllm/mod.py", "../../outside/mod.py"),
        ("--edited dir", "edited/vllm", "../outside"),
    ] {
        let d = with_edited();
        d.write("outside/mod.py", &secret);
        d.write("outside/__init__.py", "");
        let p = d.path().join(link);
        if p.is_dir() {
            fs::remove_dir_all(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
        std::os::unix::fs::symlink(target, &p).unwrap();
        let before = d.snapshot("cat");
        let out = bounded(command(&d, &record_args("root", "edited")), &format!("record, {side} symlinked out"));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{side}: {err}");
        assert!(err.contains("outside") && err.contains("vllm/mod.py"), "{side}: {err}");
        assert_eq!(d.snapshot("cat"), before, "{side}: record wrote into the catalogue");
    }
    // Inside the directory: followed.
    let d = with_edited();
    d.write("edited/vllm/real/mod.py", d.read("edited/vllm/mod.py"));
    fs::remove_file(d.path().join("edited/vllm/mod.py")).unwrap();
    std::os::unix::fs::symlink("real/mod.py", d.path().join("edited/vllm/mod.py")).unwrap();
    let out = bounded(command(&d, &record_args("root", "edited")), "record, symlink inside");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(d.read_string("cat/fixes/fix-a/v0.27.0/mod.patch").contains("+    b = a * 5"));
}

/// `port --to DIR` reads the new release's files the same way: a FIFO or a symlink out of DIR
/// there is exit 3 naming it, nothing written.
#[test]
fn port_refuses_a_fifo_or_an_outside_symlink_in_the_new_tree() {
    for case in ["fifo", "symlink"] {
        let d = fixture();
        d.write("new/vllm/__init__.py", "");
        let target = d.path().join("new/vllm/mod.py");
        if case == "fifo" {
            mkfifo(&target);
        } else {
            d.write("outside/mod.py", format!("import sys\n{PRISTINE}"));
            std::os::unix::fs::symlink("../../outside/mod.py", &target).unwrap();
        }
        let before = d.snapshot("cat");
        let args = crate::common::port_args("fix-a", "new", "v0.27.0");
        let out = bounded(command(&d, &args), &format!("port with a {case} in --to"));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{case}: {err}");
        let why = if case == "fifo" { "not a regular file" } else { "outside" };
        assert!(err.contains("new/vllm/mod.py") && err.contains(why), "{case}: {err}");
        assert_eq!(d.snapshot("cat"), before, "{case}: port wrote into the catalogue");
    }
}

/// An upstream tree for `lint --upstream` holding the fixture's pristine file.
fn with_upstream() -> Dir {
    let d = fixture();
    d.write("up/v0.26.0/vllm/__init__.py", "");
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let out = bounded(command(&d, &["--catalog", "cat", "lint", "--upstream", "up"]), "lint --upstream");
    assert_eq!(out.status.code(), Some(0), "the fixture lints clean: {}", text(&out.stdout));
    d
}

#[test]
fn lint_upstream_refuses_a_fifo_in_the_upstream_tree() {
    let d = with_upstream();
    mkfifo(&d.path().join("up/v0.26.0/vllm/mod.py"));
    let out = bounded(command(&d, &["--catalog", "cat", "lint", "--upstream", "up"]), "lint --upstream with a FIFO");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{}{err}", text(&out.stdout));
    assert!(err.contains("up/v0.26.0/vllm/mod.py") && err.contains("not a regular file"), "{err}");
}

#[test]
fn lint_upstream_refuses_a_symlink_leading_out_of_the_release_tree() {
    let d = with_upstream();
    d.write("outside/mod.py", PRISTINE);
    fs::remove_file(d.path().join("up/v0.26.0/vllm/mod.py")).unwrap();
    std::os::unix::fs::symlink("../../../outside/mod.py", d.path().join("up/v0.26.0/vllm/mod.py")).unwrap();
    let out = bounded(command(&d, &["--catalog", "cat", "lint", "--upstream", "up"]), "lint --upstream");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{}{err}", text(&out.stdout));
    assert!(err.contains("up/v0.26.0/vllm/mod.py") && err.contains("outside"), "{err}");
}

fn have_python3() -> bool {
    Command::new("python3").args(["-c", "import zipfile"]).status().is_ok_and(|s| s.success())
}

/// A wheel as `pip download` leaves it in `<cache>/wheels`, and an interpreter that takes a
/// second before each extraction (so that two runs overlap).
fn wheel_and_slow_python(d: &Dir) {
    fs::create_dir_all(d.path().join("cache/wheels")).unwrap();
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\nz.writestr('vllm/__init__.py', '')\n\
             z.writestr('vllm/_version.py', \"__version__ = version = '0.26.0'\\n\")\nz.writestr('vllm/mod.py', sys.argv[2])\nz.close()",
        ])
        .arg(d.path().join("cache/wheels/vllm-0.26.0-py3-none-any.whl"))
        .arg(PRISTINE)
        .status()
        .unwrap();
    assert!(made.success());
    let py = d.write("slowpy", "#!/bin/sh\nsleep 1\nexec python3 \"$@\"\n");
    fs::set_permissions(&py, fs::Permissions::from_mode(0o755)).unwrap();
}

fn matrix_no_tests(d: &Dir) -> Command {
    let mut cmd = command(
        d,
        &[
            "--catalog",
            "cat",
            "--python",
            "./slowpy",
            "matrix",
            "--releases",
            "v0.26.0",
            "--fix",
            "fix-a",
            "--no-tests",
        ],
    );
    cmd.env("GAUDI_FIXES_CACHE", d.path().join("cache"));
    cmd
}

/// Two `matrix` runs that both find the release missing from the cache and both extract it:
/// both exit 0 with the same tree, and no half-made copy is left (one used to exit 3
/// "Directory not empty" and leave its extraction, ~140 MB for a real wheel, in the cache).
#[test]
fn two_matrix_runs_preparing_one_release_both_succeed_and_leave_nothing() {
    if !have_python3() {
        eprintln!("skipped: no python3");
        return;
    }
    let d = fixture();
    wheel_and_slow_python(&d);
    let children: Vec<_> = (0..2).map(|_| matrix_no_tests(&d).spawn().unwrap()).collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "run {i}: {}{}", text(&out.stdout), text(&out.stderr));
        assert!(text(&out.stdout).contains("v0.26.0  fix-a  applies"), "run {i}: {}", text(&out.stdout));
    }
    assert_eq!(d.read_string("cache/upstream/v0.26.0/vllm/mod.py"), PRISTINE);
    assert_eq!(cache_leftovers(&d), Vec::<String>::new(), "left in the cache");
}

/// A PID no process has now: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// What a killed `matrix` leaves (a patched scratch copy, a half-extracted release) is removed
/// by the next run, which says so; a live run's scratch copy is left alone.
#[test]
fn what_a_killed_matrix_left_is_removed_by_the_next_run() {
    let d = fixture();
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    let dead = dead_pid();
    let live = std::process::id();
    let stale_scratch = format!("cache/scratch/v0.26.0-fix-a.gaudi-fixes-{dead}");
    let stale_upstream = format!("cache/upstream/.v0.27.0.gaudi-fixes-{dead}");
    let stale_gaudi = format!("cache/gaudi/.main.gaudi-fixes-{dead}");
    let live_scratch = format!("cache/scratch/v0.26.0-fix-a.gaudi-fixes-{live}");
    for dir in [&stale_scratch, &stale_upstream, &stale_gaudi, &live_scratch] {
        d.write(&format!("{dir}/vllm/mod.py"), PRISTINE);
    }
    let mut cmd = command(
        &d,
        &["--catalog", "cat", "--python", "python3", "matrix", "--releases", "v0.26.0", "--fix", "fix-a", "--no-tests"],
    );
    cmd.env("GAUDI_FIXES_CACHE", d.path().join("cache"));
    let out = bounded(cmd, "matrix");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}{err}", text(&out.stdout));
    for dir in [&stale_scratch, &stale_upstream, &stale_gaudi] {
        assert!(!d.path().join(dir).exists(), "{dir} is still there; stderr: {err}");
        let name = Path::new(dir).file_name().unwrap().to_string_lossy().into_owned();
        assert!(err.contains(&name) && err.contains(&format!("PID {dead}")), "not reported: {dir}: {err}");
    }
    assert!(d.path().join(&live_scratch).exists(), "a live run's scratch copy was removed: {err}");
}

/// The same, for real: a `matrix` SIGKILLed while a fix's tests run in its scratch copy.
#[test]
fn a_matrix_killed_while_testing_leaves_nothing_after_the_next_run() {
    let d = fixture();
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("cat/fixes/fix-a/test_a.py", "def test_a():\n    pass\n");
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "tests: [test_a.py]\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    // As pytest: say where it runs, then take long enough to be killed.
    let py = d.write(
        "py",
        "#!/bin/sh\nif [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; echo; exit 0; fi\n\
         echo $$ > \"$MARK.tmp\"; mv \"$MARK.tmp\" \"$MARK\"; exec sleep 30\n",
    );
    fs::set_permissions(&py, fs::Permissions::from_mode(0o755)).unwrap();
    let mark = d.path().join("pytest.pid");
    let args = ["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a"];
    let mut cmd = command(&d, &args);
    cmd.env("GAUDI_FIXES_CACHE", d.path().join("cache")).env("MARK", &mark);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !mark.exists() {
        assert!(Instant::now() < deadline, "the tests never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let pytest: i32 = fs::read_to_string(&mark).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) on the stand-in pytest this test started.
    unsafe { libc::kill(pytest, libc::SIGKILL) };
    assert!(!cache_leftovers(&d).is_empty(), "the killed run left nothing to clean (the test proves nothing)");
    let mut cmd = command(&d, &[&args[..], &["--no-tests"]].concat());
    cmd.env("GAUDI_FIXES_CACHE", d.path().join("cache"));
    let out = bounded(cmd, "matrix after a killed one");
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(cache_leftovers(&d), Vec::<String>::new(), "left in the cache; stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("left by a killed"), "{}", text(&out.stderr));
}

/// `list` and `show` only read: a stale probe file beside a patched module is for the commands
/// that judge the files (`apply`, `revert`, `status`, `apply --check`, `diff`) to report and
/// remove; these two leave the tree as it is.
#[test]
fn list_and_show_leave_the_tree_alone_even_with_a_stale_probe_file() {
    let d = fixture();
    let probe = "root/vllm/.mod.py.gaudi-fixes.tmp";
    d.write(probe, "");
    let before = d.snapshot("root");
    for args in [vec!["list"], vec!["show", "fix-a"]] {
        d.cmd().args(with_fixture(&args)).expect(0);
        assert_eq!(d.snapshot("root"), before, "{args:?} changed the tree");
    }
}
