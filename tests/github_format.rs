//! `--format github`: a check that passed is one notice (the fixes' notes folded into it), a
//! check that failed ends in an error saying what to run.

use crate::common::{fixture, with_fixture};

#[test]
fn a_passed_check_is_one_notice_and_a_failed_one_says_what_to_run() {
    let d = fixture();
    let (out, _) =
        d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance", "--format", "github"])).expect(1);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("::error::") && last.contains("run `gaudi-fixes --catalog cat --root root apply fix-a fix-b`"),
        "a failed check does not end in an error saying what to run:\n{out}"
    );
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (out, _) =
        d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance", "--format", "github"])).expect(0);
    assert_eq!(out.lines().count(), 1, "a passed check is more than one annotation:\n{out}");
    assert!(out.starts_with("::notice::gaudi-fixes: check passed") && out.contains("2 on a release"), "{out}");
}
