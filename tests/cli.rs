//! The CLI contract, driven through the real binary on temp trees: every state and exit code,
//! idempotent apply, byte-identical revert, `after:` ordering, drift with its diff, partial
//! application, missing trees and bad manifests.

use crate::common::{fixture, with_fixture, Dir, FIX_A_PATCH, PRISTINE};

fn patched_a() -> String {
    PRISTINE.replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n")
}

fn patched_ab() -> String {
    patched_a().replace("def other():\n", "def other():\n    # fix-b was here\n")
}

#[test]
fn check_apply_check_apply_revert_cycle() {
    let d = fixture();
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(1);
    let (out, _) = d.cmd().args(with_fixture(&["apply"])).expect(0);
    assert!(out.contains("wrote 1 file(s)"), "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), patched_a());
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(0);
    // Idempotent: a second apply writes nothing and exits 0.
    let before = d.snapshot("root");
    let (out, _) = d.cmd().args(with_fixture(&["apply"])).expect(0);
    assert!(out.contains("nothing to do"), "{out}");
    assert_eq!(d.snapshot("root"), before);
    d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(1);
}

#[test]
fn dry_run_and_check_write_nothing() {
    let d = fixture();
    let before = d.snapshot("");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--dry-run"])).expect(0);
    assert!(out.contains("1 file(s) would be written"), "{out}");
    d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance"])).expect(1);
    assert_eq!(d.snapshot(""), before);
}

#[test]
fn two_fixes_on_one_file_apply_in_after_order_and_revert_in_reverse() {
    let d = fixture();
    // fix-b is listed first on the command line; `after:` still puts fix-a first.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-b", "fix-a", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["fixes"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fix-a", "fix-b"]);
    assert_eq!(d.read_string("root/vllm/mod.py"), patched_ab());
    d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance"])).expect(0);
    // fix-b's patch is made on top of fix-a's: with fix-a applied its hunk is where it says.
    let offset = |d: &crate::common::Dir| {
        let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-b", "--format", "json"])).expect(0);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["fixes"][0]["files"][0]["hunks"][0]["offset"].clone()
    };
    assert_eq!(offset(&d), 0);
    // Reverting only fix-a leaves fix-b, now one line higher than its header says.
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(
        d.read_string("root/vllm/mod.py"),
        PRISTINE.replace("def other():\n", "def other():\n    # fix-b was here\n")
    );
    assert_eq!(offset(&d), -1);
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}

#[test]
fn one_line_edit_inside_a_hunk_is_drift_with_a_diff_and_apply_refuses() {
    let d = fixture();
    d.write("root/vllm/mod.py", PRISTINE.replace("    a = x + 1\n", "    a = x + 42\n"));
    let before = d.snapshot("");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(2);
    assert!(out.contains("drift:") && out.contains("-    a = x + 1") && out.contains("+    a = x + 42"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply"])).expect(2);
    assert!(out.contains("nothing was written"), "{out}");
    // Never applied (no hunk reads applied, no provenance record): nothing of it to revert,
    // which is no drift to refuse (issue 50: such a fix blocked the revert of the others).
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert!(out.contains("nothing to do: already in the requested state: 1 fix (1 not applied)"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["-v", "revert", "fix-a"])).expect(0);
    assert!(out.contains("there is nothing of it to revert"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-a", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "not-applied", "{out}");
    assert_eq!(v["fixes"][0]["basis"], serde_json::json!({"code": "never-applied"}), "{out}");
    // Plain revert undoes what apply did, which was nothing here.
    let (out, _) = d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert!(out.contains("nothing to revert"), "{out}");
    assert_eq!(d.snapshot(""), before);
    let (out, _) = d.cmd().args(with_fixture(&["diff", "fix-a"])).expect(2);
    assert!(out.contains("nearest lines at 7"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "--format", "github"])).expect(2);
    assert!(out.starts_with("::error file=") && out.contains(",line=7::fix-a: hunk 1"), "{out}");
}

#[test]
fn partially_applied_fix_is_drift() {
    let d = fixture();
    // A fix with two hunks in one file, of which only the first is applied.
    let two =
        format!("{FIX_A_PATCH}@@ -13,3 +14,4 @@ def sample(x):\n \n def other():\n+    # second hunk\n     return 2\n");
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", two);
    d.write("root/vllm/mod.py", patched_a());
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "drifted");
    assert_eq!(v["fixes"][0]["files"][0]["partial"], true);
    assert_eq!(v["fixes"][0]["files"][0]["hunks"][0]["state"], "applied");
    assert_eq!(v["fixes"][0]["files"][0]["hunks"][1]["state"], "not-applied");
    assert_eq!(v["exit_code"], 2);
}

#[test]
fn offsets_are_allowed_and_reported() {
    let d = fixture();
    d.write("root/vllm/mod.py", format!("# local line 1\n# local line 2\n{PRISTINE}"));
    let (out, _) = d.cmd().args(with_fixture(&["apply"])).expect(0);
    assert!(out.contains("offset +2"), "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), format!("# local line 1\n# local line 2\n{}", patched_a()));
}

#[test]
fn variant_is_chosen_by_content_not_version() {
    let d = fixture();
    // The tree claims 0.30.0 but has 0.26.0's content: content wins.
    d.write("root/vllm/_version.py", "__version__ = version = '0.30.0'\n");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "--format", "json"])).expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["variant"], "v0.26.0");
    assert_eq!(v["trees"]["vllm"]["version"], "0.30.0");
}

#[test]
fn upstreamed_release_counts_as_ok() {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "  v0.33.0:\n    upstreamed: true\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write("root/vllm/_version.py", "__version__ = version = '0.33.0'\n");
    d.write(
        "root/vllm/mod.py",
        PRISTINE.replace("def sample(x):\n    a = x + 1\n", "def sample(x):\n    a = x + 1  # upstream rewrote this\n"),
    );
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(0);
    assert!(out.contains("upstreamed"), "{out}");
}

#[test]
fn missing_tree_is_an_error_for_that_fix() {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!(
            "      - tree: vllm_gaudi\n        file: vllm_gaudi/x.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {}\n",
            "0".repeat(64)
        );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    // The patch must name the declared file; give the gaudi entry its own patch.
    d.write(
        "cat/fixes/fix-a/v0.26.0/g.patch",
        "--- a/vllm_gaudi/x.py\n+++ b/vllm_gaudi/x.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n",
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace(
        "file: vllm_gaudi/x.py\n        patch: v0.26.0/mod.patch",
        "file: vllm_gaudi/x.py\n        patch: v0.26.0/g.patch",
    );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let before = d.snapshot("");
    let (out, _) = d.cmd().args(with_fixture(&["apply"])).expect(3);
    assert!(out.contains("needs the vllm_gaudi tree, which was not found"), "{out}");
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(3);
    assert_eq!(d.snapshot(""), before);
    // Leaving the tree out explicitly applies the vllm half only.
    d.cmd().args(with_fixture(&["apply", "--only-tree", "vllm"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), patched_a());
}

#[test]
fn discovery_env_root_and_python_find_spec() {
    let d = fixture();
    d.cmd().args(["--catalog", "cat", "apply", "--check"]).env("GAUDI_FIXES_ROOT", d.path().join("root")).expect(1);
    // With no flag and no env, python's find_spec is asked (PYTHONPATH points it at our tree).
    let (out, _) = d.cmd().args(["--catalog", "cat", "status"]).env("PYTHONPATH", d.path().join("root")).expect(0);
    assert!(out.contains("found by python3") && out.contains("version 0.26.0"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "--vllm", "root/vllm", "apply", "--check"]).expect(1);
    assert!(out.contains("found by --vllm"), "{out}");
    let (_, err) = d.cmd().args(["--catalog", "cat", "--root", "nowhere", "apply", "--check"]).expect(3);
    assert!(err.contains("--root nowhere: no such directory"), "{err}");
}

#[test]
fn usage_errors_exit_3_not_2() {
    let d = Dir::new();
    d.cmd().args(["apply", "--no-such-flag"]).expect(3);
    d.cmd().args(["frobnicate"]).expect(3);
    // revert has no --check (its codes would read backwards): a usage error, exit 3.
    let (_, err) = fixture().cmd().args(with_fixture(&["revert", "--check"])).expect(3);
    assert!(err.contains("unexpected argument '--check'"), "{err}");
    d.cmd().args(["--help"]).expect(0);
}

#[test]
fn unknown_fix_and_profile_are_errors() {
    let d = fixture();
    let (_, err) = d.cmd().args(with_fixture(&["apply", "nope"])).expect(3);
    assert!(err.contains("no fix named `nope`") && err.contains("known: fix-a, fix-b"), "{err}");
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--profile", "nope"])).expect(3);
    assert!(err.contains("no profile named `nope`"), "{err}");
}

#[test]
fn bad_manifests_name_file_and_line_and_touch_nothing() {
    let cases: &[(&str, &str, &str)] = &[("unknown key", "colour: red\n", "fix.yaml:12"), ("wrong type", "", "")];
    for (what, extra, want) in cases.iter().take(1) {
        let d = fixture();
        let y = d.read_string("cat/fixes/fix-a/fix.yaml") + extra;
        d.write("cat/fixes/fix-a/fix.yaml", y);
        let before = d.snapshot("");
        let (_, err) = d.cmd().args(with_fixture(&["apply"])).expect(3);
        assert!(err.contains(want), "{what}: {err}");
        assert_eq!(d.snapshot(""), before, "{what}");
    }
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("kind: correctness", "kind: [1, 2]");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(3);
    assert!(err.contains("fix.yaml:3"), "{err}");
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("file: vllm/mod.py", "file: vllm/../../etc/passwd");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (_, err) = d.cmd().args(with_fixture(&["apply"])).expect(3);
    assert!(err.contains("fix.yaml:9") && err.contains(".."), "{err}");
    let d = fixture();
    d.write("cat/profiles/broken.yaml", "name: broken\ndescription: x\nfixes: [fix-a, ghost]\n");
    let (_, err) = d.cmd().args(with_fixture(&["list"])).expect(3);
    assert!(err.contains("broken.yaml:3") && err.contains("ghost"), "{err}");
}

#[test]
fn lint_checks_cycles_overlaps_and_upstream() {
    let d = fixture();
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("lint: clean") && out.contains("skipped"), "{out}");
    // With a pristine tree per release, every variant is applied and reverted in memory.
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("fix-a v0.26.0: vllm/mod.py applies to pristine"), "{out}");
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE.replace("import os", "import sys"));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(out.contains("is not the recorded pristine_sha256"), "{out}");
    // A cycle in after: is a finding.
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("releases:", "after: [fix-b]\nreleases:");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("form a cycle"), "{out}");
}

#[test]
fn lint_finds_two_fixes_of_a_profile_touching_the_same_lines() {
    let d = fixture();
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        FIX_A_PATCH.replace("# fix-a: triple instead of double", "# fix-b: also here"),
    );
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("touch the same lines of vllm/mod.py"), "{out}");
}

#[test]
fn json_schema_has_the_documented_fields() {
    let d = fixture();
    let (out, _) =
        d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance", "--format", "json"])).expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], 1);
    assert_eq!(v["mode"], "check");
    assert_eq!(v["exit_code"], 1);
    let f = &v["fixes"][0];
    for key in ["name", "state", "variant", "kind", "files"] {
        assert!(f.get(key).is_some(), "fixes[].{key} missing: {out}");
    }
    let file = &f["files"][0];
    for key in ["tree", "path", "state", "tree_root", "hunks"] {
        assert!(file.get(key).is_some(), "files[].{key} missing: {out}");
    }
    let hunk = &file["hunks"][0];
    for key in ["state", "line", "offset"] {
        assert!(hunk.get(key).is_some(), "hunks[].{key} missing: {out}");
    }
}

#[test]
fn status_and_list_show_state_and_provenance() {
    let d = fixture();
    let (out, _) = d.cmd().args(with_fixture(&["list"])).expect(0);
    assert!(
        out.contains("fix-a") && out.contains("not applied") && out.contains("profiles: default, performance"),
        "{out}"
    );
    d.cmd().args(with_fixture(&["apply"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
    assert!(out.contains("fix-a") && out.contains("applied") && !out.contains("no record"), "{out}");
    let prov = d.read_string("root/.gaudi-fixes/provenance.json");
    assert!(prov.contains("\"fix-a\"") && prov.contains("v0.26.0"), "{prov}");
    // Hand-reverting the file: the files win, and status says the record disagrees.
    d.write("root/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
    assert!(out.contains("says fix-a (v0.26.0) is applied, but the files say not applied"), "{out}");
}

#[test]
fn show_and_diff_without_trees() {
    let d = fixture();
    d.write("cat/fixes/fix-a/README.md", "# fix-a\nreadme text\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-a"]).expect(0);
    assert!(out.contains("v0.26.0") && out.contains("vllm/mod.py") && out.contains("README.md"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "show", "fix-a", "--readme"]).expect(0);
    assert_eq!(out, "# fix-a\nreadme text\n");
    let (out, _) = d.cmd().args(["--catalog", "cat", "--root", "root", "diff", "fix-a"]).expect(0);
    assert!(out.contains("+    b = a * 3"), "{out}");
}

#[test]
fn stale_bytecode_is_removed_and_mode_kept() {
    use std::os::unix::fs::PermissionsExt;
    let d = fixture();
    d.write("root/vllm/__pycache__/mod.cpython-311.pyc", "stale");
    d.write("root/vllm/__pycache__/other.cpython-311.pyc", "keep");
    let p = d.path().join("root/vllm/mod.py");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    d.cmd().args(with_fixture(&["apply"])).expect(0);
    assert!(!d.path().join("root/vllm/__pycache__/mod.cpython-311.pyc").exists());
    assert!(d.path().join("root/vllm/__pycache__/other.cpython-311.pyc").exists());
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
}

#[test]
fn builtin_catalogue_loads_and_lints() {
    let d = Dir::new();
    let (out, _) = d.cmd().args(["lint"]).expect(0);
    assert!(out.contains("<built-in>") && out.contains("lint: clean"), "{out}");
    let (out, _) = d.cmd().args(["list"]).expect(0);
    assert!(out.contains("topk-subset-sampler") && out.contains("performance"), "{out}");
}

#[cfg(not(feature = "reference"))]
#[test]
fn equiv_and_bench_without_the_feature_say_how_and_exit_3() {
    let d = Dir::new();
    for cmd in ["equiv", "bench"] {
        let (_, err) = d.cmd().args([cmd]).expect(3);
        assert!(err.contains("--features reference") && err.contains("setup-venv.sh"), "{cmd}: {err}");
    }
}

/// Small things of issue 36 (finding 11): `GAUDI_FIXES_CATALOG=` (set, empty) is unset (the
/// built-in catalogue), not a usage error for every command; a release of more than three
/// numbers is refused; an applied fix's offsets are not blamed on other fixes when none is
/// applied.
#[test]
fn an_empty_catalog_variable_a_five_number_release_and_offsets_without_other_fixes() {
    let d = fixture();
    let (out, err) = d.cmd().args(["list"]).env("GAUDI_FIXES_CATALOG", "").expect(0);
    assert!(out.contains("topk-subset-sampler") && err.is_empty(), "{out}{err}");

    let (_, err) = d.cmd().args(["--catalog", "cat", "matrix", "--plan", "--releases", "v1.2.3.4.5"]).expect(3);
    assert!(err.contains("`v1.2.3.4.5` is not a release like v0.26.0"), "{err}");
    d.cmd().args(["--catalog", "cat", "matrix", "--plan", "--releases", "0.26,v0.26.0rc1"]).expect(0);

    // fix-b's patch is made on top of fix-a (after:), which is not applied: that is why.
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "-v", "fix-b"])).expect(0);
    assert!(!out.contains("other fixes applied"), "no other fix is applied: {out}");
    assert!(out.contains("its patch is made on top of fix-a, which is not applied here"), "{out}");
}
