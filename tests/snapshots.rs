//! Pinned output: every command's human, JSON and GitHub rendering on the temp fixture tree,
//! run through the real binary with a cleared environment (PATH and NO_COLOR only) and temp
//! paths filtered to `[TREE]`. Each snapshot records the command, the exit code, stdout and
//! stderr, so a change in any of them shows up as a reviewable diff. CI runs plain `cargo test`
//! against the committed `tests/snapshots/*.snap` (insta never writes them when `CI` is set).

use std::process::Command;

use crate::common::{fixture, Dir, PRISTINE};

/// Run the real binary in `d` with `--catalog cat` (and `--root root` unless `env` names the
/// trees) plus `args`, the environment cleared but for `env`, and return a snapshot-ready
/// transcript (paths filtered by the caller's settings).
fn transcript(d: &Dir, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"));
    cmd.current_dir(d.path()).env_clear().env("NO_COLOR", "1").envs(env.iter().copied());
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.args(["--catalog", "cat"]);
    if env.is_empty() {
        cmd.args(["--root", "root"]);
    }
    cmd.args(args);
    let out = cmd.output().expect("running gaudi-fixes");
    format!(
        "$ {}gaudi-fixes {}\nexit: {:?}\n--- stdout\n{}--- stderr\n{}",
        env.iter().map(|(k, v)| format!("{k}={v} ")).collect::<String>(),
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Snapshot `transcript(d, args)` under `name`, with `d`'s path (and its canonical form)
/// shown as `[TREE]`.
fn snap(name: &str, d: &Dir, args: &[&str]) {
    snap_env(name, d, &[], args)
}

/// [`snap`] with these environment variables set.
fn snap_env(name: &str, d: &Dir, env: &[(&str, &str)], args: &[&str]) {
    let mut settings = insta::Settings::clone_current();
    let mut paths = vec![d.path().display().to_string()];
    if let Ok(canonical) = d.path().canonicalize() {
        paths.push(canonical.display().to_string());
    }
    // Longest first, so a canonical path that extends the plain one is filtered whole.
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in paths {
        settings.add_filter(&regex_escape(&p), "[TREE]");
    }
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name, transcript(d, env, args)));
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect()
}

fn applied() -> Dir {
    let d = fixture();
    d.cmd().args(crate::common::with_fixture(&["apply"])).expect(0);
    d
}

fn drifted() -> Dir {
    let d = fixture();
    d.write("root/vllm/mod.py", PRISTINE.replace("    a = x + 1\n", "    a = x + 42\n"));
    d
}

#[test]
fn list() {
    let d = fixture();
    snap("list_human", &d, &["list"]);
    snap("list_json", &d, &["list", "--format", "json"]);
    snap("list_github", &d, &["list", "--format", "github"]);
}

#[test]
fn show() {
    let d = fixture();
    snap("show_human", &d, &["show", "fix-b"]);
    snap("show_json", &d, &["show", "fix-b", "--format", "json"]);
    snap("show_github", &d, &["show", "fix-b", "--format", "github"]);
    snap("show_quiet", &d, &["show", "fix-b", "--quiet"]);
}

#[test]
fn check_not_applied() {
    let d = fixture();
    snap("check_not_applied_human", &d, &["apply", "--check"]);
    snap("check_not_applied_json", &d, &["apply", "--check", "--format", "json"]);
    snap("check_not_applied_github", &d, &["apply", "--check", "--format", "github"]);
}

#[test]
fn check_applied() {
    let d = applied();
    snap("check_applied_human", &d, &["apply", "--check"]);
    snap("check_applied_json", &d, &["apply", "--check", "--format", "json"]);
}

#[test]
fn check_drifted() {
    let d = drifted();
    snap("check_drifted_human", &d, &["apply", "--check"]);
    snap("check_drifted_json", &d, &["apply", "--check", "--format", "json"]);
    snap("check_drifted_github", &d, &["apply", "--check", "--format", "github"]);
}

#[test]
fn apply_and_revert() {
    let d = fixture();
    snap("apply_dry_run_human", &d, &["apply", "--dry-run", "--profile", "performance"]);
    snap("apply_human", &d, &["apply", "--profile", "performance"]);
    snap("apply_again_human", &d, &["apply", "--profile", "performance"]);
    snap("revert_human", &d, &["revert", "fix-b"]);
    snap("apply_json", &d, &["apply", "fix-b", "--format", "json"]);
    snap("revert_json", &d, &["revert", "--profile", "performance", "--format", "json"]);
}

#[test]
fn diff() {
    let d = fixture();
    snap("diff_not_applied_human", &d, &["diff", "fix-a"]);
    let d = drifted();
    snap("diff_drifted_human", &d, &["diff", "fix-a"]);
    snap("diff_drifted_json", &d, &["diff", "fix-a", "--format", "json"]);
    snap("diff_drifted_github", &d, &["diff", "fix-a", "--format", "github"]);
}

#[test]
fn status() {
    let d = applied();
    snap("status_human", &d, &["status"]);
    snap("status_json", &d, &["status", "--format", "json"]);
}

#[test]
fn lint() {
    let d = fixture();
    snap("lint_clean_human", &d, &["lint"]);
    snap("lint_clean_json", &d, &["lint", "--format", "json"]);
    snap("lint_clean_github", &d, &["lint", "--format", "github"]);
    d.write("cat/fixes/fix-b/fix.yaml", "name: fix-b\nsummary: [unclosed\n");
    snap("lint_broken_human", &d, &["lint"]);
    snap("lint_broken_json", &d, &["lint", "--format", "json"]);
    snap("lint_broken_github", &d, &["lint", "--format", "github"]);
}

#[test]
fn errors() {
    let d = fixture();
    snap("error_unknown_fix_json", &d, &["apply", "no-such-fix", "--format", "json"]);
    snap("error_unknown_fix_human", &d, &["apply", "no-such-fix"]);
    snap("error_usage_json", &d, &["apply", "--no-such-flag", "--format", "json"]);
    snap("error_no_tree_json", &d, &["status", "--root", "nowhere", "--format", "json"]);
    let d = Dir::new();
    d.write("cat/fixes/x/fix.yaml", "name: x\n");
    snap("error_bad_manifest_json", &d, &["status", "--format", "json"]);
}

#[test]
fn only_tree() {
    let d = fixture();
    snap("check_only_vllm_gaudi_human", &d, &["apply", "--check", "--only-tree", "vllm-gaudi"]);
    snap("check_only_vllm_gaudi_json", &d, &["apply", "--check", "--only-tree", "vllm_gaudi", "--format", "json"]);
    snap("error_bad_only_tree", &d, &["status", "--only-tree", "torch"]);
}

#[test]
fn root_from_the_environment() {
    let d = fixture();
    snap_env("error_env_root_missing", &d, &[("GAUDI_FIXES_ROOT", "nowhere")], &["status"]);
    snap_env("error_env_root_empty", &d, &[("GAUDI_FIXES_ROOT", "cat")], &["status"]);
    snap_env("status_env_root_human", &d, &[("GAUDI_FIXES_ROOT", "root")], &["status"]);
}

#[test]
fn help() {
    let d = fixture();
    snap("help_apply", &d, &["apply", "--help"]);
}
