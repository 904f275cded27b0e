//! States that say why: unsupported release, locally modified, unverified release; a missing
//! tree does not hide the other tree; `diff` honours `--only-tree`. Driven through the real
//! binary on the temp fixture (fix-a covers v0.26.0 of `vllm/mod.py`).

use crate::common::{fixture, sha256, with_fixture, Dir, PRISTINE};

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A context line of fix-a's hunk changed, as a later release would.
fn future_release(d: &Dir, version: &str) {
    d.write("root/vllm/_version.py", format!("__version__ = version = '{version}'\n"));
    d.write("root/vllm/mod.py", PRISTINE.replace("    a = x + 1\n", "    a = x + 1  # changed upstream\n"));
}

#[test]
fn unknown_release_is_unsupported_with_the_next_step() {
    let d = fixture();
    future_release(&d, "0.99.0");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
    assert!(out.contains("drifted: unsupported release"), "{out}");
    assert!(out.contains("vLLM 0.99.0 is not covered by fix-a (covers 0.26.0)"), "{out}");
    assert!(
        out.contains("next:")
            && out.contains("gaudi-fixes --catalog cat port fix-a --from v0.26.0 --release v0.99.0 --to DIR"),
        "{out}"
    );
    // Where a maintainer reads how (it was "README, 'Maintaining the catalogue'", which is not there).
    assert!(out.contains("(see docs/maintaining.md)"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    let v = json(&out);
    assert_eq!(v["fixes"][0]["state"], "drifted");
    assert_eq!(v["fixes"][0]["reason"]["code"], "unsupported-release", "{out}");
    assert_eq!(v["fixes"][0]["files"][0]["reason"]["code"], "unsupported-release", "{out}");
    assert!(v["fixes"][0]["reason"]["next_step"].as_str().unwrap().contains("port"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "github"])).expect(2);
    assert!(out.contains("::error file=") && out.contains("is not covered by fix-a") && out.contains("Next:"), "{out}");
}

#[test]
fn listed_release_with_other_bytes_is_locally_modified() {
    let d = fixture();
    future_release(&d, "0.26.0");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
    assert!(out.contains("drifted: locally modified"), "{out}");
    assert!(out.contains("pip install --force-reinstall --no-deps vllm==0.26.0"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    assert_eq!(json(&out)["fixes"][0]["reason"]["code"], "locally-modified", "{out}");
}

#[test]
fn exact_match_on_an_unverified_release_is_a_note_not_an_error() {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [v0.26.0]\n");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    // 0.27.0 with 0.26.0's file moved down two lines: the variant applies at an offset.
    d.write("root/vllm/_version.py", "__version__ = version = '0.27.0'\n");
    d.write("root/vllm/mod.py", format!("# new in 0.27\n# another\n{PRISTINE}"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(1);
    assert!(out.contains("note: the v0.26.0 variant of fix-a applies exactly to vLLM 0.27.0"), "{out}");
    assert!(out.contains("a release it was not verified on (verified: 0.26.0)"), "{out}");
    // The offsets are put down to the release, not to "another fix or local change".
    assert!(out.contains("this tree is vLLM 0.27.0, and the v0.26.0 variant was made on 0.26.0"), "{out}");
    assert!(!out.contains("another fix or local change"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(1);
    let v = json(&out);
    assert_eq!(v["fixes"][0]["reason"]["code"], "unverified-release", "{out}");
    assert_eq!(v["fixes"][0]["reason"]["note"], true, "{out}");
    // Once verified on 0.27.0 the note goes away.
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("verified: [v0.26.0]", "verified: [v0.26.0, v0.27.0]");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(1);
    assert!(json(&out)["fixes"][0]["reason"].is_null(), "{out}");
}

#[test]
fn verified_must_name_releases() {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [latest]\n");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(3);
    assert!(err.contains("fix.yaml:7") && err.contains("`latest` is not a release tag"), "{err}");
}

/// fix-a gains a vllm_gaudi file; the fixture has no vllm_gaudi tree.
fn with_gaudi_half(d: &Dir) {
    d.write(
        "cat/fixes/fix-a/v0.26.0/g.patch",
        "--- a/vllm_gaudi/x.py\n+++ b/vllm_gaudi/x.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n",
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!(
            "      - tree: vllm_gaudi\n        file: vllm_gaudi/x.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\n",
            "0".repeat(64)
        );
    d.write("cat/fixes/fix-a/fix.yaml", y);
}

#[test]
fn a_missing_tree_does_not_hide_the_other_trees_result() {
    let d = fixture();
    with_gaudi_half(&d);
    future_release(&d, "0.99.0");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(3);
    assert!(out.contains("needs the vllm_gaudi tree, which was not found"), "{out}");
    assert!(out.contains("the trees found were checked: drifted [v0.26.0]"), "{out}");
    assert!(out.contains("vLLM 0.99.0 is not covered by fix-a"), "{out}");
    assert!(out.contains("vllm_gaudi/x.py: not checked (tree not found)"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(3);
    let v = json(&out);
    assert_eq!(v["fixes"][0]["state"], "error");
    assert_eq!(v["fixes"][0]["files"][0]["state"], "drifted", "{out}");
    assert_eq!(v["fixes"][0]["files"][1]["state"], "no-tree", "{out}");
}

#[test]
fn diff_honours_only_tree() {
    let d = fixture();
    with_gaudi_half(&d);
    let (out, _) = d.cmd().args(with_fixture(&["--only-tree", "vllm", "diff", "fix-a"])).expect(0);
    assert!(out.contains("+    b = a * 3"), "{out}");
    assert!(!out.contains("vllm_gaudi/x.py (") && !out.contains("+x = 2"), "{out}");
}

/// fix-b's patch is made on top of fix-a (it comes `after:` it): on the pristine tree its hunk
/// sits one line above the header's number. The note says so — not "another fix or local
/// change", which a pristine tree has none of.
#[test]
fn offsets_on_a_pristine_tree_are_put_down_to_the_patch_made_on_top() {
    let d = fixture();
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-b"])).expect(1);
    assert!(out.contains("offset -1"), "{out}");
    assert!(
        out.contains("found away from their patch's line numbers: its patch is made on top of fix-a, which adds lines above when applied; each hunk is still placed by its exact context"),
        "{out}"
    );
    assert!(!out.contains("local change"), "{out}");
}

// Reasons on a fix whose vLLM half is left out with `--only-tree vllm_gaudi`: nothing may be
// said about how the fix fits the vLLM release, since its vLLM file was not looked at.
#[test]
fn no_release_note_when_the_vllm_half_is_left_out() {
    let d = fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/g.patch",
        "--- a/vllm_gaudi/x.py\n+++ b/vllm_gaudi/x.py\n@@ -1,3 +1,3 @@\n a = 0\n-x = 1\n+x = 2\n b = 0\n",
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!(
            "      - tree: vllm_gaudi\n        file: vllm_gaudi/x.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\n",
            sha256(b"a = 0\nx = 1\nb = 0\n")
        );
    d.write("cat/fixes/fix-a/fix.yaml", y.replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [v0.26.0]\n"));
    // A release the fix does not cover, whose vLLM file the fix does not fit at all; the
    // vllm_gaudi file sits two lines down.
    d.write("root/vllm/_version.py", "__version__ = version = '0.99.0'\n");
    d.write("root/vllm/mod.py", "def nothing_alike():\n    pass\n");
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/x.py", "# one\n# two\na = 0\nx = 1\nb = 0\n");
    // The whole fix: unsupported release, as it should be.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
    assert!(out.contains("vLLM 0.99.0 is not covered by fix-a"), "{out}");
    // Only vllm_gaudi: not applied, and no claim about vLLM 0.99.0.
    let (out, _) = d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "apply", "--check", "fix-a"])).expect(1);
    assert!(out.contains("offset +2"), "{out}");
    assert!(!out.contains("0.99.0 "), "a claim about the vLLM release whose file was left out:\n{out}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--only-tree", "vllm_gaudi", "--format", "json", "apply", "--check", "fix-a"]))
        .expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["fixes"][0]["reason"].is_null(), "{out}");
    assert!(v["fixes"][0]["files"].as_array().unwrap().iter().all(|f| f["reason"].is_null()), "{out}");
}

#[test]
fn a_half_applied_fix_says_so_with_the_commands_that_restore_it() {
    let d = fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -9,3 +9,3 @@ def sample(x):\n     a = x + 1\n-    b = a * 2\n+    b = a * 3\n     return b\n@@ -14,2 +14,2 @@\n def other():\n-    return 2\n+    return 3\n",
    );
    d.write("root/vllm/mod.py", PRISTINE.replace("    b = a * 2\n", "    b = a * 3\n"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    let reason = &json(&out)["fixes"][0]["reason"];
    assert_eq!(reason["code"], "partially-applied", "{out}");
    let next = reason["next_step"].as_str().unwrap_or_default();
    assert!(
        next.starts_with(
            "`gaudi-fixes --catalog cat --root root diff fix-a` shows which; reinstall vLLM (`pip install --force-reinstall --no-deps vllm==0.26.0`)"
        ),
        "{out}"
    );
    assert_eq!(reason["advice"][0], serde_json::json!({"do": "diff", "fix": "fix-a"}), "{out}");
    assert_eq!(reason["advice"][1]["do"], "reinstall", "{out}");
}
