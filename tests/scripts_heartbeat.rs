//! scripts/heartbeat.sh, run by bash: its ticker ends whole with the command it watches, so a
//! pipe the caller reads (`heartbeat … | cat`, README's `$(bash scripts/build-wheel.sh | tail
//! -n 1)`) closes as soon as the command ends. Before, the ticker's orphaned `sleep` held the
//! pipe: `heartbeat 10 x sleep 0.3 | cat` took 10.02 s.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::Dir;

/// Run `script` in bash from the repository root; its stdout and how long it took.
fn timed_bash(script: &str) -> (String, Duration) {
    let start = Instant::now();
    let out = Command::new("bash")
        .args(["-c", script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running bash");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), start.elapsed())
}

#[test]
fn a_pipe_after_heartbeat_closes_when_the_command_ends() {
    let (_, took) = timed_bash(". scripts/heartbeat.sh; heartbeat 10 x sleep 0.3 | cat");
    assert!(took < Duration::from_secs(1), "`heartbeat 10 x sleep 0.3 | cat` took {took:?}");
    let (_, took) = timed_bash(". scripts/heartbeat.sh; heartbeat 10 x sleep 0.3 2>&1 | cat");
    assert!(took < Duration::from_secs(1), "with stderr in the pipe too: {took:?}");
}

#[test]
fn a_script_s_last_line_is_read_as_soon_as_it_ends() {
    let d = Dir::new();
    let script = d.write(
        "build.sh",
        format!(
            ". {}/scripts/heartbeat.sh\nheartbeat 10 'build: compiling' sleep 0.3\necho dist/the.whl\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    let (out, took) = timed_bash(&format!("w=$(bash {} | tail -n 1); echo \"$w\"", script.display()));
    assert_eq!(out, "dist/the.whl\n");
    assert!(took < Duration::from_secs(1), "`$(bash build.sh | tail -n 1)` took {took:?}");
}

#[test]
fn the_ticker_still_ticks_and_the_command_s_status_comes_back() {
    let out = Command::new("bash")
        .args(["-c", ". scripts/heartbeat.sh; heartbeat 1 step sleep 2.4; heartbeat 1 other false || echo failed"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Two ticks at least; which seconds they name depends on the machine's load.
    assert!(err.matches("step: still running (").count() >= 2, "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "failed\n");
}
