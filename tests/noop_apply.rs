//! An `apply` run again (a cached image layer) is quiet: at most three lines, and the offsets
//! the catalogue's own earlier fixes cause are no alarm; a change by hand still is.

use crate::common::{fixture, with_fixture};

#[test]
fn apply_run_again_prints_at_most_three_lines() {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (again, _) = d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    assert!(again.lines().count() <= 3, "a no-op apply printed {} lines:\n{again}", again.lines().count());
    assert!(again.contains("nothing to do") && again.contains("2 applied"), "{again}");
}

#[test]
fn offsets_the_catalogues_own_fixes_cause_are_no_alarm() {
    let d = fixture();
    // fix-b's patch made on the pristine file (the fixture's is made on top of fix-a's): fix-a's
    // added line moves its hunk by one.
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -13,3 +13,4 @@ def sample(x):\n \n def other():\n+    # fix-b was here\n     return 2\n",
    );
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (verbose, _) = d.cmd().args(with_fixture(&["-v", "apply", "--check", "--profile", "performance"])).expect(0);
    assert!(verbose.contains("offset +1"), "fix-b's hunk is not offset here:\n{verbose}");
    assert!(!verbose.contains("changes by hand"), "the catalogue's own offsets read as an alarm:\n{verbose}");
    // A line added by hand above is still said.
    let text = d.read_string("root/vllm/mod.py").replacen("import os\n", "import os\nimport sys\n", 1);
    d.write("root/vllm/mod.py", text);
    let (verbose, _) = d.cmd().args(with_fixture(&["-v", "apply", "--check", "--profile", "performance"])).expect(0);
    assert!(verbose.contains("changes by hand"), "a change by hand is no longer said:\n{verbose}");
}

/// Every selected fix skipped by `--only-tree` (fix-a patches vllm; only vllm_gaudi kept): a
/// check on the pristine tree judged nothing, so it must not say "everything applied" (it did:
/// "check: everything applied: 1 fix (1 skipped by --only-tree)"); exit 0 as documented (a
/// skipped fix is no failure). And `revert --format github` with nothing to revert says so in
/// one notice, as the other formats do (it printed nothing).
#[test]
fn nothing_in_scope_is_not_called_applied_and_a_github_no_op_says_so() {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    let (out, _) = d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "apply", "--check"])).expect(0);
    assert!(!out.contains("everything applied") && out.contains("nothing checked"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["-v", "--only-tree", "vllm_gaudi", "apply", "--check"])).expect(0);
    assert!(!out.contains("everything applied") && out.contains("nothing checked"), "{out}");
    let (out, _) =
        d.cmd().args(with_fixture(&["--format", "github", "--only-tree", "vllm_gaudi", "apply", "--check"])).expect(0);
    assert!(!out.contains("check passed") && out.contains("nothing checked"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["--format", "github", "revert"])).expect(0);
    assert!(out.starts_with("::notice::gaudi-fixes: revert: nothing to do"), "{out:?}");
}
