//! `requires:` and profile `include:`, through the real binary on temp trees: selecting a fix
//! selects what it requires (applied first), a required fix is not reverted while its dependant
//! is applied, profiles include profiles, lint checks both graphs, list/show display them, and
//! a fix whose every file is in a left-out tree is skipped.

use crate::common::{fixture, with_fixture, Dir, FIX_B_PATCH, PRISTINE};

/// fix-b `requires: [fix-a]` instead of `after: [fix-a]` (requires orders too).
fn requiring_fixture() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]");
    d.write("cat/fixes/fix-b/fix.yaml", y);
    d
}

fn names(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["fixes"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn selecting_a_fix_selects_what_it_requires_first() {
    let d = requiring_fixture();
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-b", "--format", "json"])).expect(1);
    assert_eq!(names(&out), ["fix-a", "fix-b"], "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-b", "--format", "json"])).expect(0);
    assert_eq!(names(&out), ["fix-a", "fix-b"], "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["notes"].to_string().contains("fix-a is selected too: fix-b requires it"), "{out}");
    assert!(
        d.read_string("root/vllm/mod.py").contains("# fix-a: triple")
            && d.read_string("root/vllm/mod.py").contains("# fix-b was here")
    );
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "fix-b"])).expect(0);
}

#[test]
fn a_required_fix_is_not_reverted_while_its_dependant_is_applied() {
    let d = requiring_fixture();
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    let before = d.snapshot("root");
    let (_, err) = d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(3);
    assert!(
        err.contains("fix-b is applied and requires fix-a")
            && err.contains("gaudi-fixes --catalog cat --root root revert fix-b fix-a"),
        "{err}"
    );
    assert_eq!(d.snapshot("root"), before, "a refused revert wrote something");
    // The default profile holds fix-a only: refused the same way; --dry-run too.
    d.cmd().args(with_fixture(&["revert", "--profile", "default"])).expect(3);
    d.cmd().args(with_fixture(&["revert", "--dry-run", "fix-a"])).expect(3);
    assert_eq!(d.snapshot("root"), before);
    // Reverting the dependant alone keeps what it required; then the required one goes.
    d.cmd().args(with_fixture(&["revert", "fix-b"])).expect(0);
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    // Both together, in reverse order.
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-a", "fix-b", "--format", "json"])).expect(0);
    assert_eq!(names(&out), ["fix-a", "fix-b"], "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}

/// Issue 37: after `apply --profile performance`, plain `revert` exited 3 with a command to type
/// (it reverted `default`, whose fix the performance fix requires); it undoes what apply did.
#[test]
fn plain_revert_undoes_what_apply_recorded_in_dependency_order() {
    let d = requiring_fixture();
    let pristine = d.snapshot("root");
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["revert", "--dry-run", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let actions: Vec<&str> =
        v["fixes"].as_array().unwrap().iter().map(|f| f["action"].as_str().unwrap_or("-")).collect();
    assert_eq!((names(&out), actions), (vec!["fix-a".to_string(), "fix-b".to_string()], vec!["revert", "revert"]));
    let (out, _) = d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert!(out.contains("wrote 1 file(s)"), "{out}");
    let mut now = d.snapshot("root");
    now.retain(|k, _| !k.starts_with(".gaudi-fixes"));
    crate::common::assert_same(&now, &pristine, "after apply --profile performance and revert");
    // Nothing left to undo: a no-op.
    let (out, _) = d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert!(out.contains("nothing to revert"), "{out}");
    // A fix applied without a record (by hand, or by an older gaudi-fixes) is undone too, said so.
    d.write(
        "root/vllm/mod.py",
        d.read_string("root/vllm/mod.py")
            .replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n"),
    );
    let (out, _) = d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert!(out.contains("fix-a reads applied but no provenance record says gaudi-fixes applied it"), "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}

#[test]
fn a_profile_selects_the_fixes_of_the_profiles_it_includes() {
    let d = fixture();
    d.write(
        "cat/profiles/performance.yaml",
        "name: performance\ndescription: more\ninclude: [default]\nfixes: [fix-b]\n",
    );
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--profile", "performance", "--format", "json"])).expect(0);
    assert_eq!(names(&out), ["fix-a", "fix-b"], "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["list"])).expect(0);
    assert!(out.contains("include: default; selects: fix-b, fix-a"), "{out}");
    // fix-a is in performance through default.
    assert!(out.contains("profiles: default, performance"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "list", "--format", "json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let perf = v["profiles"].as_array().unwrap().iter().find(|p| p["name"] == "performance").unwrap();
    assert_eq!(perf["include"], serde_json::json!(["default"]));
    assert_eq!(perf["selects"], serde_json::json!(["fix-b", "fix-a"]));
}

#[test]
fn list_and_show_display_requires_and_required_by() {
    let d = requiring_fixture();
    let (out, _) = d.cmd().args(["--catalog", "cat", "list"]).expect(0);
    assert!(out.contains("requires: fix-a"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-b"]).expect(0);
    assert!(out.contains("requires: fix-a"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-a"]).expect(0);
    assert!(out.contains("required by: fix-b"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-a", "--format", "json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["required_by"], serde_json::json!(["fix-b"]), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-b", "--format", "json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["manifest"]["requires"], serde_json::json!(["fix-a"]), "{out}");
}

#[test]
fn unknown_names_are_load_errors_with_file_and_line() {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "after: [fix-a]\nrequires: [ghost]");
    d.write("cat/fixes/fix-b/fix.yaml", y);
    let (_, err) = d.cmd().args(["--catalog", "cat", "lint"]).expect(3);
    assert!(err.contains("fix-b/fix.yaml:6") && err.contains("`ghost` is not a fix"), "{err}");

    let d = fixture();
    d.write(
        "cat/profiles/performance.yaml",
        "name: performance\ndescription: the default and more\ninclude:\n  - defualt\nfixes: [fix-b]\n",
    );
    let (_, err) = d.cmd().args(["--catalog", "cat", "lint"]).expect(3);
    assert!(err.contains("performance.yaml:4") && err.contains("`defualt` is not another profile"), "{err}");
}

#[test]
fn lint_finds_cycles_in_both_graphs() {
    let d = requiring_fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("releases:", "requires: [fix-b]\nreleases:");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("`requires:` cycle: fix-a → fix-b → fix-a"), "{out}");

    let d = fixture();
    d.write("cat/profiles/default.yaml", "name: default\ndescription: c\ninclude: [performance]\nfixes: [fix-a]\n");
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: p\ninclude: [default]\nfixes: [fix-b]\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("`include:` cycle: default → performance → default"), "{out}");
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(3);
    assert!(err.contains("profiles include each other in a cycle"), "{err}");
}

#[test]
fn lint_finds_profiles_without_what_their_fixes_require() {
    let d = requiring_fixture();
    // performance selects fix-b alone, without fix-a that it requires.
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: p\nfixes: [fix-b]\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("profile `performance` selects fix-b, which needs fix-a"), "{out}");
    // default holds correctness fixes only; fix-b is a performance fix.
    d.write("cat/profiles/default.yaml", "name: default\ndescription: c\nfixes: [fix-a, fix-b]\n");
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: p\ninclude: [default]\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("profile `default` holds correctness fixes only; fix-b is a performance fix"), "{out}");
}

#[test]
fn lint_upstream_checks_a_patch_on_top_of_what_its_fix_requires() {
    // fix-b's context holds fix-a's line: it applies only after fix-a, as `requires:` ensures.
    // fix-a's hunk has no context, so fix-b's edit beside its line leaves it readable as applied
    // (with context, fix-b would sit inside fix-a's image and drift it: see the next test).
    let d = requiring_fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -10,1 +10,1 @@ def sample(x):\n-    b = a * 2\n+    b = a * 3\n",
    );
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -10,2 +10,3 @@ def sample(x):\n     b = a * 3\n+    # fix-b: after fix-a\n     return b\n",
    );
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("fix-b v0.26.0: vllm/mod.py applies to pristine + fix-a"), "{out}");
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    assert!(d.read_string("root/vllm/mod.py").contains("    b = a * 3\n    # fix-b: after fix-a\n"));
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "fix-b"])).expect(0);
    // Ordered after fix-a only, the patch is still checked on top of fix-a, but selected alone
    // it would meet the pristine file and drift: lint says it needs `requires:`.
    let y = d.read_string("cat/fixes/fix-b/fix.yaml").replace("requires: [fix-a]", "after: [fix-a]");
    d.write("cat/fixes/fix-b/fix.yaml", y);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(
        out.contains("applies only on top of fix-a, which fix-b is ordered after but does not require")
            && out.contains("make it `requires:` fix-a"),
        "{out}"
    );
}

#[test]
fn lint_upstream_checks_an_after_patch_on_top_of_the_fix_it_comes_after() {
    // fix-b is only ordered after fix-a, its hunk away from fix-a's: its header line is the one
    // in fix-a's post-image (the file it is made on), and selected alone it applies at an offset.
    let d = fixture();
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("fix-b v0.26.0: vllm/mod.py applies to pristine + fix-a"), "{out}");
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    assert!(d.read_string("root/vllm/mod.py").contains("def other():\n    # fix-b was here\n"));
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(1);
}

#[test]
fn a_fix_whose_every_file_is_in_a_left_out_tree_is_skipped() {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    let (out, _) =
        d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "apply", "--check", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "skipped", "{out}");
    let before = d.snapshot("root");
    d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "apply"])).expect(0);
    assert_eq!(d.snapshot("root"), before);
}

#[test]
fn overlap_lint_reads_a_later_fix_in_the_earlier_ones_post_image() {
    // fix-a turns one line into three; fix-b (requires fix-a, so patched on top of it) rewrites
    // the last of them. Read against the pristine file, fix-b's line 12 lies past fix-a's
    // change (line 10); in fix-a's post-image (lines 10-12) it is one of fix-a's own lines.
    let d = requiring_fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -9,3 +9,5 @@ def sample(x):\n     a = x + 1\n-    b = a * 2\n+    # fix-a: one\n+    # fix-a: two\n+    b = a * 3\n     return b\n",
    );
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -11,3 +11,3 @@ def sample(x):\n     # fix-a: two\n-    b = a * 3\n+    b = a * 4\n     return b\n",
    );
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("touch the same lines of vllm/mod.py"), "{out}");
    // Applied in order, fix-b's edit indeed lands on fix-a's line.
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    assert!(d.read_string("root/vllm/mod.py").contains("    # fix-a: two\n    b = a * 4\n"));
}

#[test]
fn overlap_lint_moves_an_earlier_fix_through_the_fixes_between() {
    // Chain fix-a → fix-b → fix-c. fix-b adds three lines above fix-a's change, so in the file
    // fix-c is made on, fix-a's lines are 13-14; fix-c rewrites line 13, fix-a's own comment.
    // Read pairwise (fix-a's post-image alone: lines 10-11) the overlap went unseen.
    let d = fixture();
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -4,2 +4,5 @@\n def helper():\n+    # fix-b: one\n+    # fix-b: two\n+    # fix-b: three\n     return 1\n",
    );
    let y = d
        .read_string("cat/fixes/fix-b/fix.yaml")
        .replace("name: fix-b", "name: fix-c")
        .replace("after: [fix-a]", "after: [fix-a, fix-b]");
    d.write("cat/fixes/fix-c/fix.yaml", y);
    d.write(
        "cat/fixes/fix-c/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -12,3 +12,3 @@ def sample(x):\n     a = x + 1\n-    # fix-a: triple instead of double\n+    # fix-c: edited\n     b = a * 3\n",
    );
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: all\nfixes: [fix-a, fix-b, fix-c]\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(
        out.contains("fix-c and fix-a touch the same lines of vllm/mod.py in v0.26.0 (lines 13-14 and 13-14)"),
        "{out}"
    );
    assert!(!out.contains("fix-c and fix-b touch"), "{out}");
    // And indeed, applied in order, fix-c's edit lands on fix-a's line.
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    assert!(d.read_string("root/vllm/mod.py").contains("    a = x + 1\n    # fix-c: edited\n    b = a * 3\n"));
}

#[test]
fn lint_upstream_finds_a_later_fix_on_an_earlier_ones_lines_only_where_status_calls_it_drifted() {
    // fix-b (requires fix-a) rewrites `return b`, the last context line of fix-a's hunk: both
    // apply in order, and fix-a then reads as applied only under fix-b, which is how `status`
    // judges it (fix-b reverted in memory, as `revert` meets it): nothing for lint to say.
    let d = fixture();
    d.write("cat/fixes/fix-b/fix.yaml", d.read_string("cat/fixes/fix-b/fix.yaml").replace("after:", "requires:"));
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -11,3 +11,3 @@ def sample(x):\n     b = a * 3\n-    return b\n+    return b + 0\n \n",
    );
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(!out.contains("fix-a's patch to vllm/mod.py"), "{out}");
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    // Not ordered after fix-a, fix-b is not reverted under it: fix-a does read drifted right
    // after `apply`, and lint says so, and why.
    d.write("cat/fixes/fix-b/fix.yaml", d.read_string("cat/fixes/fix-b/fix.yaml").replace("requires: [fix-a]\n", ""));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(
        out.contains("with all its fixes applied, fix-a's patch to vllm/mod.py no longer reads applied")
            && out.contains("fix-b (applied after it, not ordered after it) edits its lines; order it after fix-a"),
        "{out}"
    );
    assert!(!out.contains("Drifted"), "a Rust Debug word in a finding: {out}");
    let (json, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up", "--format", "json"]).expect(1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let codes: Vec<&str> =
        v["lint"]["findings"].as_array().unwrap().iter().filter_map(|f| f["code"].as_str()).collect();
    assert!(codes.contains(&"edits-earlier-fix"), "{json}");
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["status", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["name"], "fix-a", "{out}");
    assert_eq!(v["fixes"][0]["state"], "drifted", "lint's finding is not what status says: {out}");
}

/// Issue 50 (1): on vLLM 0.34.0, `apply --profile default` exits 0, then every revert refused
/// because topk-subset-sampler (performance, its release unsupported: never applied) "is
/// drifted (not known to be unapplied) and requires swap-states-sampling-params". A fix whose
/// nothing reads applied and that no provenance record names does not block, nor is reverted.
#[test]
fn a_drifted_dependant_that_was_never_applied_does_not_block_a_revert() {
    let d = requiring_fixture();
    // fix-b covers only v0.25.0, whose file this tree is not: drifted, unsupported release.
    let y = d.read_string("cat/fixes/fix-b/fix.yaml").replace("v0.26.0:", "v0.25.0:").replace("v0.26.0/", "v0.25.0/");
    d.write("cat/fixes/fix-b/fix.yaml", y.replace(&crate::common::sha256(PRISTINE.as_bytes()), &"0".repeat(64)));
    d.write("cat/fixes/fix-b/v0.25.0/mod.patch", FIX_B_PATCH.replace("return 2", "return 3"));
    d.cmd().args(with_fixture(&["apply", "--profile", "default"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["status", "--format", "json"])).expect(0);
    assert!(out.contains("unsupported-release"), "{out}");
    for revert in [&["revert"][..], &["revert", "--profile", "default"], &["revert", "--profile", "performance"]] {
        let (out, err) = d.cmd().args(with_fixture(&[revert, &["--dry-run"]].concat())).expect(0);
        assert!(!err.contains("refusing"), "{revert:?}: {err}");
        assert!(out.contains("1 file(s) would be written"), "{revert:?}: {out}");
    }
    d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    // Applied by gaudi-fixes and edited since, a dependant still blocks: that drift is its own.
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let edited = d.read_string("root/vllm/mod.py").replace("b = a * 3", "b = a * 4");
    d.write("root/vllm/mod.py", &edited);
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(2);
    assert_eq!(d.read_string("root/vllm/mod.py"), edited);
}

/// Issue 50 (4): pristine tree, `apply` of one late fix, then `revert --profile performance`
/// exited 2: a fix never applied (made on top of a fix that is not applied either) was judged
/// in the revert's simulation, after the late fix was reverted in memory, and read drifted.
/// A fix with nothing applied has nothing to revert, whatever the simulation reads.
#[test]
fn revert_does_not_judge_a_never_applied_fix_on_its_own_simulation() {
    let d = fixture();
    // fix-c edits fix-a's post-image (not required: it only comes after it); fix-b after fix-c.
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("name: fix-a", "name: fix-c");
    d.write("cat/fixes/fix-c/fix.yaml", y.replace("releases:", "after: [fix-a]\nreleases:"));
    d.write(
        "cat/fixes/fix-c/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -9,6 +9,7 @@ def sample(x):\n     a = x + 1\n     # fix-a: triple instead of double\n     b = a * 3\n+    b = b + 0  # fix-c\n     return b\n \n \n",
    );
    d.write("cat/fixes/fix-b/fix.yaml", d.read_string("cat/fixes/fix-b/fix.yaml").replace("[fix-a]", "[fix-c]"));
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: all\nfixes: [fix-a, fix-b, fix-c]\n");
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["status", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let states: Vec<&str> = v["fixes"].as_array().unwrap().iter().map(|f| f["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["not-applied", "applied", "not-applied"], "fix-a, fix-b, fix-c: {out}");
    let (out, _) = d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    assert!(!out.contains("drifted"), "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}
