//! Commands that only read a tree (`apply --check`, `status`, `diff`, `list`, `show`) never fail
//! a check over a stale temp file they may not remove: they say so and go on, the exit code
//! is the verdict's, and the next writer removes it. Two readers racing to remove one: the one
//! that finds it gone is fine. Before: exit 3 "removing the stale temp file …: Permission
//! denied" for a non-root CI user on a root-owned tree; the loser of two readers exited 3 "No
//! such file or directory" (2–3 of 80 trials).

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use crate::common::{fixture, with_fixture, Dir};

const STALE: &str = "root/vllm/.mod.py.gaudi-fixes.tmp";

/// The real binary as a user who may read the fixture's tree but not write it: `nobody` via
/// setpriv when this runs as root (root bypasses permissions), else this user with the tree's
/// directories made read-only.
fn as_reader(d: &Dir, args: &[&str]) -> (Option<i32>, String, String) {
    let bin = d.path().join("gaudi-fixes");
    if !bin.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_gaudi-fixes"), &bin).unwrap();
    }
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let out = cmd
        .current_dir(d.path())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("GAUDI_FIXES_ROOT")
        .env_remove("GAUDI_FIXES_CATALOG")
        .stdin(Stdio::null())
        .output()
        .expect("running gaudi-fixes as a reader");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Everything readable by all, nothing under root/ writable but by its owner (and, when this
/// is not root, not even by it).
fn read_only(d: &Dir) {
    for entry in walkdir::WalkDir::new(d.path()) {
        let entry = entry.unwrap();
        let dir = entry.file_type().is_dir();
        let under_root = entry.path().starts_with(d.path().join("root"));
        let mode = match (dir, under_root && unsafe { libc::geteuid() } != 0) {
            (true, true) => 0o555,
            (true, false) => 0o755,
            (false, true) => 0o444,
            (false, false) => 0o644 | (entry.metadata().unwrap().permissions().mode() & 0o111),
        };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn readers_of_a_read_only_tree_report_a_stale_temp_file_and_give_the_verdict() {
    let d = fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.write(STALE, "");
    read_only(&d);
    for (args, code) in [
        (vec!["apply", "--check", "fix-a"], 0),
        (vec!["status"], 0),
        (vec!["diff", "fix-a"], 0),
        (vec!["list"], 0),
        (vec!["show", "fix-a"], 0),
        (vec!["--format", "json", "apply", "--check", "fix-a"], 0),
        (vec!["apply", "--check", "--profile", "performance"], 1),
    ] {
        let (got, out, err) = as_reader(&d, &with_fixture(&args));
        assert_eq!(got, Some(code), "{args:?}:\n{out}{err}");
        let said = format!("{out}{err}");
        if ["--check", "status", "diff"].iter().any(|a| args.contains(a)) {
            assert!(said.contains("cannot remove") && said.contains(STALE), "{args:?} did not say: {said}");
        }
    }
    assert!(d.path().join(STALE).exists(), "the reader could remove it: the test proves nothing");
    // A writer (root here, or the owner once the tree is writable again) removes it.
    std::fs::set_permissions(d.path().join("root/vllm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert!(out.contains("removed") && !d.path().join(STALE).exists(), "{out}");
}

/// Readers while the stale file comes and goes under them (as when another reader removes it
/// between a reader's look and its remove): each one finds it, or finds it gone, and passes.
#[test]
fn concurrent_readers_never_fail_over_a_temp_file_another_removed() {
    let d = fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (stop, path) = (stop.clone(), d.path().join(STALE));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::write(&path, "");
                let _ = std::fs::remove_file(&path);
            }
        })
    };
    let mut failed = Vec::new();
    for round in 0..30 {
        let children: Vec<_> = (0..3)
            .map(|i| {
                let args = if i == 0 { vec!["apply", "--check", "fix-a"] } else { vec!["status"] };
                Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
                    .current_dir(d.path())
                    .args(with_fixture(&args))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            if out.status.code() != Some(0) {
                failed.push(format!("round {round}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    assert!(failed.is_empty(), "{} of 90 readers failed: {failed:#?}", failed.len());
}

/// An I/O error that names a file carries it as the error's place: JSON's `error.file`, and
/// GitHub's `::error file=…`. Before: `"file": null` and a bare `::error::`.
#[test]
fn an_unreadable_file_is_an_error_at_that_file() {
    let d = fixture();
    read_only(&d);
    let module = d.path().join("root/vllm/mod.py");
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (code, out, err) = as_reader(&d, &with_fixture(&["--format", "json", "status"]));
    assert_eq!(code, Some(3), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["error"]["file"].as_str(), module.to_str(), "{out}");
    let (code, out, _) = as_reader(&d, &with_fixture(&["--format", "github", "status"]));
    assert_eq!(code, Some(3));
    assert!(out.contains(&format!("::error file={}::", module.display())), "{out}");
}

/// Issue 50 (5): a user who may read an applied tree but not write it ran `apply` (nothing to
/// write): exit 3 "reading …/.gaudi-fixes/bytecode/…/source.json: Permission denied" (the
/// stash is 0600), where `--check` says 0. A run with nothing to write needs no more than a
/// reader may; the clean-up it cannot do is said and left to the next writer that may.
#[test]
fn a_writer_with_nothing_to_write_needs_no_more_than_a_reader() {
    let d = fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let state = d.snapshot("root/.gaudi-fixes");
    assert!(state.keys().any(|k| k.ends_with("source.json")), "no stash kept: the test proves nothing");
    for dir in ["", "root", "root/vllm", "cat"] {
        std::fs::set_permissions(d.path().join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (code, out, err) = as_reader(&d, &with_fixture(&["apply", "--check", "fix-a"]));
    assert_eq!(code, Some(0), "{out}{err}");
    for args in [&["apply", "fix-a"][..], &["apply", "--profile", "default"], &["revert", "fix-b"]] {
        let (code, out, err) = as_reader(&d, &with_fixture(args));
        assert_eq!(code, Some(0), "{args:?}:\n{out}{err}");
    }
    assert_eq!(d.snapshot("root/.gaudi-fixes"), state);
}
