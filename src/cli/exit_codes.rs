//! What each command's exit codes mean: the one table that the man pages' EXIT STATUS, each
//! command's `--help` ("Exit status:") and docs/usage.md's per-command table are made from (a
//! test holds the docs to it), so the three cannot disagree with each other; the tests that
//! drive the commands hold the behaviour to it.

/// Usage errors and every other error: the same for each command.
const ERROR: (u8, &str) =
    (3, "Error: bad input or usage (nothing written), a tree or file that cannot be found or locked.");

/// A write that failed, and its rollback too.
const ROLLBACK: (u8, &str) =
    (4, "A write failed and putting the files back failed too: the journal stays, and the next run finishes it.");

/// Stopped by a signal while a Python child ran (test, conform, matrix).
const SIGNALLED: (u8, &str) = (
    143,
    "Stopped by SIGTERM (129: SIGHUP, 130: SIGINT): the Python child got the signal too and was waited for; its scratch directory is removed.",
);

/// The codes `command` exits with and what each means, lowest first (`None`: the main page,
/// which describes `apply`'s, the contract a CI step reads).
pub fn codes(command: Option<&str>) -> Vec<(u8, &'static str)> {
    let mut codes = match command {
        None | Some("apply") => vec![
            (0, "Applied: every selected fix is applied (or upstreamed, or skipped by --only-tree). With --dry-run: planned, whatever would change."),
            (1, "Only with --check: a selected fix is not applied."),
            (2, "Drifted: a file is neither pristine nor patched as the fix leaves it, or the vLLM found lacks the V1 sampling path the fixes plug into; nothing was written."),
            ERROR,
            ROLLBACK,
        ],
        Some("revert") => vec![
            (0, "Reverted: every selected fix is off the tree (without FIX or --profile: every fix apply recorded). With --dry-run: planned, whatever would change."),
            (2, "Drifted: a file is neither pristine nor patched as the fix leaves it; nothing was written."),
            (3, "Error, as for every command; also a revert refused because an applied fix outside the selection requires a fix it would revert."),
            ROLLBACK,
        ],
        Some("diff") => vec![(0, "Shown: the fix is applied, not applied or upstreamed."), (2, "The fix drifted (where is shown)."), ERROR],
        Some("status") => vec![
            (0, "Every tree found was reported, whatever its fixes' states."),
            (3, "Error, as for every command; also no vllm or vllm_gaudi tree found (said on stderr, with -q too)."),
        ],
        Some("list") | Some("show") => vec![(0, "Shown."), ERROR],
        Some("lint") => vec![(0, "The catalogue is consistent."), (1, "Findings (each printed with its file)."), ERROR],
        Some("equiv") => vec![
            (0, "Equivalent, and every mutant rejected."),
            (1, "Not equivalent, or a mutant survived."),
            (3, "Error, as for every command; also a build without the `reference` feature."),
        ],
        Some("bench") => vec![(0, "Measured."), (3, "Error, as for every command; also a build without the `reference` feature.")],
        Some("test") => vec![
            (0, "The fix's tests ran and passed."),
            (1, "A test failed (it says when the fix is not applied)."),
            (3, "The tests cannot run: no tree, a vLLM without the V1 sampling path, --python without pytest or torch, no test ran, or bad input."),
            SIGNALLED,
        ],
        Some("conform") => vec![
            (0, "Every schedule asked for ran and none found a difference (with --setup: the environment is ready)."),
            (1, "Differences: the HPU sampling path does not do what a request asked."),
            (3, "No verdict: the suite cannot run (no trees, a vLLM without the V1 sampling path, a missing module), crashed, or reported no or not every schedule; or bad input."),
            SIGNALLED,
        ],
        Some("matrix") => vec![
            (0, "Every release could be prepared (a cell that drifts or fails its tests is reported, not an error)."),
            (3, "A release could not be prepared, merged results disagree, or bad input."),
            SIGNALLED,
        ],
        Some("port") => vec![
            (0, "The new variant was written."),
            (2, "Hunks conflict with the new release (shown); nothing was written."),
            ERROR,
        ],
        Some("record") => vec![(0, "The variant was written."), ERROR],
        Some("completions") => vec![(0, "The script was printed."), ERROR],
        Some("man") => vec![(0, "The page was printed, or every page written."), ERROR],
        Some(_) => vec![(0, "Done."), ERROR],
    };
    codes.sort_by_key(|(code, _)| *code);
    codes
}

/// `--help`'s "Exit status:" section of `command`.
pub fn help(command: &str) -> String {
    let lines: Vec<String> = codes(Some(command)).iter().map(|(code, what)| format!("  {code}  {what}")).collect();
    format!("Exit status:\n{}", lines.join("\n"))
}

/// The commands in the order docs/usage.md lists them.
pub const COMMANDS: [&str; 16] = [
    "apply",
    "revert",
    "diff",
    "status",
    "list",
    "show",
    "lint",
    "test",
    "conform",
    "matrix",
    "port",
    "record",
    "equiv",
    "bench",
    "completions",
    "man",
];

/// docs/usage.md's per-command exit table, as Markdown (commands with the same codes share a row
/// group).
pub fn markdown() -> String {
    let mut out = String::from("| command | code | meaning |\n|---|---|---|\n");
    for command in COMMANDS {
        for (i, (code, what)) in codes(Some(command)).iter().enumerate() {
            let name = if i == 0 { format!("`{command}`") } else { String::new() };
            out.push_str(&format!("| {name} | {code} | {} |\n", what.replace('|', "\\|")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_runs_exit_0_and_only_a_check_exits_1() {
        // Issue 37: the pages said `--dry-run` exits 1 when something would change; it exits 0.
        for command in ["apply", "revert"] {
            let one = codes(Some(command)).into_iter().find(|(c, _)| *c == 1);
            assert!(one.is_none_or(|(_, what)| !what.contains("dry-run")), "{command}: {one:?}");
        }
        assert!(codes(Some("conform")).iter().any(|(c, _)| *c == 1));
        assert!(codes(Some("port")).iter().any(|(c, _)| *c == 2));
    }
}
