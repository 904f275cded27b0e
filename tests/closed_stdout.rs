//! `gaudi-fixes apply --check | head -0` (or a CI step whose reader went away): the exit code is
//! still the verdict. A closed stdout must neither turn a drift into 0 nor into an error 3.

use std::process::{Command, Stdio};

use crate::common::{fixture, with_fixture, Dir};

/// Run the real binary with a stdout pipe whose reading end is already closed: every write to
/// it fails with EPIPE, deterministically; with `stderr_too` stderr is that pipe as well
/// (`… 2>&1 | head -0`), else piped. Returns the exit code and stderr.
fn on_closed_pipe(d: &Dir, args: &[&str], stderr_too: bool) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"));
    for (k, _) in std::env::vars() {
        if k.starts_with("GAUDI_FIXES_") {
            cmd.env_remove(k);
        }
    }
    let stderr = if stderr_too { Stdio::from(writer.try_clone().unwrap()) } else { Stdio::piped() };
    let out = cmd
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(stderr)
        .output()
        .expect("running gaudi-fixes");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn closed_stdout(d: &Dir, args: &[&str]) -> (Option<i32>, String) {
    on_closed_pipe(d, &with_fixture(args), false)
}

fn assert_code(d: &Dir, args: &[&str], code: i32) {
    // The same command with a working stdout gives the reference verdict.
    d.cmd().args(with_fixture(args)).expect(code);
    let (got, err) = closed_stdout(d, args);
    assert_eq!(got, Some(code), "gaudi-fixes {} with stdout closed\n--- stderr\n{err}", args.join(" "));
    assert!(!err.contains("Broken pipe") && !err.contains("panicked"), "{err}");
}

#[test]
fn a_closed_stdout_keeps_the_verdict_in_every_format() {
    let d = fixture();
    for format in ["human", "json", "github"] {
        assert_code(&d, &["--format", format, "apply", "--check"], 1);
        assert_code(&d, &["--format", format, "list"], 0);
        assert_code(&d, &["--format", format, "lint"], 0);
        assert_code(&d, &["--format", format, "status"], 0);
    }
    // Drift: fix-a's context is gone.
    let drifted = crate::common::PRISTINE.replace("a = x + 1", "a = x + 5");
    d.write("root/vllm/mod.py", &drifted);
    for format in ["human", "json", "github"] {
        assert_code(&d, &["--format", format, "apply", "--check"], 2);
        assert_code(&d, &["--format", format, "apply"], 2);
        assert_code(&d, &["--format", format, "diff", "fix-a"], 2);
    }
    assert_eq!(d.read_string("root/vllm/mod.py"), drifted);
}

#[test]
fn a_closed_stdout_does_not_stop_an_apply() {
    let d = fixture();
    let (got, err) = closed_stdout(&d, &["apply"]);
    assert_eq!(got, Some(0), "{err}");
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(0);
}

/// Issue 50 (9): with `2>&1 | head`, EPIPE on stderr panicked (exit 101): `status` with no
/// tree, `apply --check UNKNOWN`, a note. A closed stderr is handled like a closed stdout: the
/// exit code is the one the run gives with both open.
#[test]
fn a_closed_stderr_keeps_the_exit_code() {
    let d = fixture();
    d.write("empty/.keep", "");
    for (args, code) in [
        (vec!["--root", "empty", "status"], 3),
        (with_fixture(&["apply", "--check", "no-such-fix"]), 3),
        (with_fixture(&["--format", "json", "apply", "--check", "no-such-fix"]), 3),
        (with_fixture(&["apply", "--check", "fix-b"]), 1),
        (with_fixture(&["-q", "apply", "--check", "no-such-fix"]), 3),
        (vec!["--no-such-flag"], 3),
    ] {
        d.cmd().args(&args).expect(code);
        assert_eq!(
            on_closed_pipe(&d, &args, true).0,
            Some(code),
            "gaudi-fixes {} with stdout and stderr closed",
            args.join(" ")
        );
    }
}
