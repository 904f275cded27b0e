//! Hangs and leaks in the upkeep commands, through the real binary: `record` and
//! `lint --upstream` never open a FIFO nor follow a symlink out of the directory they were
//! given.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{fixture, Dir, PRISTINE};

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
