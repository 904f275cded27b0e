//! The closing line of `--format github` says what the run did, in its own words: only
//! `apply` and `revert` write, a dry run would, a check passed, and a reader (`status`,
//! `diff`) that sees a fix not applied says so as a warning, never as a pass notice. Before,
//! every mode ended `::notice::gaudi-fixes: 0 file(s) written: fix-a not-applied` (diff and
//! status, which never write, too), and `apply` said `1 file(s) written: fix-a not-applied`.

use crate::common::{fixture, with_fixture, Dir};

fn last_line(d: &Dir, args: &[&str], code: i32) -> String {
    let mut all = vec!["--format", "github"];
    all.extend_from_slice(args);
    let (out, _) = d.cmd().args(with_fixture(&all)).expect(code);
    out.lines().last().unwrap_or_default().to_string()
}

#[test]
fn the_github_summary_says_what_each_mode_did() {
    let d = fixture();
    for (args, want) in [
        (&["diff", "fix-a"][..], "::warning::gaudi-fixes: diff: fix-a not applied"),
        (&["status"], "::warning::gaudi-fixes: status: fix-a not applied, fix-b not applied"),
        (
            &["apply", "--dry-run", "fix-a"],
            "::notice::gaudi-fixes: dry run: 1 file(s) would be written: fix-a would be applied",
        ),
        (&["apply", "fix-a"], "::notice::gaudi-fixes: apply: 1 file(s) written: fix-a applied now"),
        (&["apply", "fix-a"], "::notice::gaudi-fixes: apply: 0 file(s) written: fix-a already applied"),
        (&["apply", "--check", "fix-a"], "::notice::gaudi-fixes: check passed: fix-a applied"),
        (&["diff", "fix-a"], "::notice::gaudi-fixes: diff: fix-a applied"),
        (&["revert", "fix-a"], "::notice::gaudi-fixes: revert: 1 file(s) written: fix-a reverted now"),
    ] {
        assert_eq!(last_line(&d, args, 0), want, "{args:?}");
    }
    assert!(!last_line(&d, &["diff", "fix-a"], 0).contains("written"));
}
