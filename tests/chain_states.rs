//! One state per fix, judged on the tree as its predecessors leave it, through the real binary:
//! a fix whose patch is made on top of another (its context holds the other's post-image) reads
//! *not applied* on a pristine tree in every command and format, and `revert` of a pristine or
//! already reverted tree is a no-op; partly and fully applied trees read the same in `list`,
//! `status`, `diff` and `apply --check`.

use crate::common::{fixture, sha256, with_fixture, Dir, PRISTINE};

/// fix-c's patch, made on top of fix-a's: its context is fix-a's added line.
pub const FIX_C_PATCH: &str = "\
--- a/vllm/mod.py
+++ b/vllm/mod.py
@@ -10,4 +10,5 @@ def sample(x):
     # fix-a: triple instead of double
     b = a * 3
+    b = b + 0  # fix-c
     return b
 
";

/// The fixture plus fix-c, made on top of fix-a (`relation`: `requires: [fix-a]` or
/// `after: [fix-a]`), in the performance profile.
pub fn on_top_fixture(relation: &str) -> Dir {
    let d = fixture();
    let pristine = sha256(PRISTINE.as_bytes());
    d.write(
        "cat/fixes/fix-c/fix.yaml",
        format!(
            "name: fix-c\nsummary: on top of fix-a\nkind: correctness\nupstream: {{status: not-filed}}\n{relation}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {pristine}\n"
        ),
    );
    d.write("cat/fixes/fix-c/v0.26.0/mod.patch", FIX_C_PATCH);
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: all\nfixes: [fix-b, fix-a, fix-c]\n");
    d
}

/// Each fix's state as `list --format json`, `status --format json`, and `apply --check` and
/// `diff` of that fix alone say it, asserting they agree; (name, state) in catalogue order.
pub fn states(d: &Dir) -> Vec<(String, String)> {
    let (list, _) = d.cmd().args(with_fixture(&["list", "--format", "json"])).expect(0);
    let (status, _) = d.cmd().args(with_fixture(&["status", "--format", "json"])).expect(0);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let mut out = Vec::new();
    for fix in status["fixes"].as_array().unwrap() {
        let name = fix["name"].as_str().unwrap().to_string();
        let state = fix["state"].as_str().unwrap().to_string();
        let listed = list["fixes"].as_array().unwrap().iter().find(|f| f["name"] == name.as_str()).unwrap();
        assert_eq!(listed["state"].as_str(), Some(state.as_str()), "list and status disagree on {name}");
        let code = match state.as_str() {
            "applied" => 0,
            "not-applied" => 1,
            _ => 2,
        };
        let (check, _) = d.cmd().args(with_fixture(&["apply", "--check", &name, "--format", "json"])).expect(code);
        let check: serde_json::Value = serde_json::from_str(&check).unwrap();
        let checked = check["fixes"].as_array().unwrap().iter().find(|f| f["name"] == name.as_str()).unwrap();
        assert_eq!(checked["state"].as_str(), Some(state.as_str()), "apply --check and status disagree on {name}");
        let (diff, _) =
            d.cmd().args(with_fixture(&["diff", &name, "--format", "json"])).expect(if code == 2 { 2 } else { 0 });
        let diff: serde_json::Value = serde_json::from_str(&diff).unwrap();
        assert_eq!(diff["fixes"][0]["state"].as_str(), Some(state.as_str()), "diff and status disagree on {name}");
        out.push((name, state));
    }
    out
}

fn all(state: &str) -> Vec<(String, String)> {
    ["fix-a", "fix-b", "fix-c"].iter().map(|n| (n.to_string(), state.to_string())).collect()
}

#[test]
fn a_fix_made_on_top_of_another_reads_not_applied_on_a_pristine_tree_everywhere() {
    for relation in ["requires: [fix-a]", "after: [fix-a]"] {
        let d = on_top_fixture(relation);
        let before = d.snapshot("root");
        assert_eq!(states(&d), all("not-applied"), "{relation}");
        let (human, _) = d.cmd().args(with_fixture(&["list"])).expect(0);
        assert!(!human.contains("drifted"), "{relation}: {human}");
        let (github, _) = d.cmd().args(with_fixture(&["status", "--format", "github"])).expect(0);
        assert!(!github.contains("::error"), "{relation}: {github}");
        let (diff, _) = d.cmd().args(with_fixture(&["diff", "fix-c"])).expect(0);
        assert!(!diff.contains("drifted") && !diff.contains("locally modified"), "{relation}: {diff}");
        let (github, _) = d.cmd().args(with_fixture(&["diff", "fix-c", "--format", "github"])).expect(0);
        assert!(!github.contains("::error"), "{relation}: {github}");
        // Reverting a pristine tree, or one reverted already, is a no-op.
        d.cmd().args(with_fixture(&["revert", "--dry-run", "fix-c"])).expect(0);
        d.cmd().args(with_fixture(&["revert", "fix-c"])).expect(0);
        d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
        d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
        assert_eq!(d.snapshot("root"), before, "{relation}: a revert of a pristine tree wrote something");
    }
}

#[test]
fn partly_and_fully_applied_trees_read_the_same_in_every_command() {
    let d = on_top_fixture("requires: [fix-a]");
    let pristine = d.snapshot("root");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let want: Vec<(String, String)> = [("fix-a", "applied"), ("fix-b", "not-applied"), ("fix-c", "not-applied")]
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    assert_eq!(states(&d), want);
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    assert_eq!(states(&d), all("applied"));
    d.cmd().args(with_fixture(&["diff", "fix-c"])).expect(0);
    // fix-c alone goes back; fix-a stays applied.
    d.cmd().args(with_fixture(&["revert", "fix-c"])).expect(0);
    let want: Vec<(String, String)> = [("fix-a", "applied"), ("fix-b", "applied"), ("fix-c", "not-applied")]
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    assert_eq!(states(&d), want);
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    assert_eq!(d.snapshot("root"), pristine, "apply then revert is not byte-identical");
}

#[test]
fn a_fix_made_on_top_of_one_neither_applied_nor_selected_is_refused_with_a_command_that_works() {
    let d = on_top_fixture("after: [fix-a]");
    let before = d.snapshot("root");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-c"])).expect(3);
    assert_eq!(d.snapshot("root"), before, "a refused apply wrote something");
    let suggested = out
        .lines()
        .find_map(|l| l.split("apply them together: ").nth(1))
        .unwrap_or_else(|| panic!("no suggested command in: {out}"));
    let words: Vec<&str> = suggested.split_whitespace().collect();
    assert_eq!(words[0], "gaudi-fixes", "{out}");
    // The JSON document carries the advice as data, beside the sentence.
    let (json, _) = d.cmd().args(with_fixture(&["apply", "fix-c", "--format", "json"])).expect(3);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fix_c = v["fixes"].as_array().unwrap().iter().find(|f| f["name"] == "fix-c").unwrap();
    assert_eq!(fix_c["advice"], serde_json::json!([{"do": "apply", "fixes": ["fix-a", "fix-c"]}]), "{json}");
    assert_eq!(fix_c["basis"], serde_json::json!({"code": "predecessors-not-selected", "fixes": ["fix-a"]}), "{json}");
    d.cmd().args(&words[1..]).expect(0);
    assert_eq!(states(&d)[2], ("fix-c".to_string(), "applied".to_string()));
}

#[test]
fn status_names_the_variant_apply_recorded() {
    // Two variants with the same patch; the tree is v0.26.0's file but says vLLM 0.30.0.
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    let v30 = y[y.find("  v0.26.0:").unwrap()..]
        .replace("v0.26.0:", "v0.30.0:")
        .replace(&sha256(PRISTINE.as_bytes()), &"0".repeat(64));
    d.write("cat/fixes/fix-a/fix.yaml", format!("{y}{v30}"));
    d.write("root/vllm/_version.py", "__version__ = version = '0.30.0'\n");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-a", "--format", "json"])).expect(0);
    let applied: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(applied["fixes"][0]["variant"], "v0.26.0", "{out}");
    for command in [&["status", "--format", "json"][..], &["list", "--format", "json"]] {
        let (out, _) = d.cmd().args(with_fixture(command)).expect(0);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let fix = v["fixes"].as_array().unwrap().iter().find(|f| f["name"] == "fix-a").unwrap().clone();
        assert_eq!(fix["state"], "applied", "{command:?}: {out}");
        assert_eq!(fix["variant"], "v0.26.0", "{command:?} names another variant than apply wrote: {out}");
    }
}

#[test]
fn locally_modified_vllm_gaudi_advice_names_its_own_package() {
    let d = gaudi_fix_a();
    d.write("cat/fixes/fix-b/fix.yaml", d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]\n", ""));
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/mod.py", PRISTINE.replace("a * 2", "a * 5"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let next = v["fixes"][0]["reason"]["next_step"].as_str().unwrap_or_default().to_string();
    assert!(!next.contains("vllm=="), "advice for a vllm_gaudi file reinstalls vLLM: {next}");
    assert!(next.contains("vllm_gaudi's source") && next.contains("git checkout"), "{next}");
}

#[test]
fn on_a_vllm_gaudi_only_tree_what_apply_does_revert_undoes() {
    // fix-a patches vllm_gaudi; fix-b requires it and patches vllm, whose tree is absent.
    let d = gaudi_fix_a();
    d.write(
        "cat/fixes/fix-b/fix.yaml",
        d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]"),
    );
    std::fs::remove_dir_all(d.path().join("root/vllm")).unwrap();
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/mod.py", PRISTINE);
    let pristine = d.snapshot("root");
    for revert in [&["revert"][..], &["--only-tree", "vllm_gaudi", "revert"], &["revert", "--profile", "performance"]] {
        d.cmd().args(with_fixture(&["apply"])).expect(0);
        assert_ne!(d.read_string("root/vllm_gaudi/mod.py"), PRISTINE);
        let mut args = with_fixture(&[]);
        args.extend_from_slice(revert);
        let (out, err) = d.cmd().args(&args).output();
        assert_eq!(out.status.code(), Some(0), "{revert:?}: {}", String::from_utf8_lossy(&out.stderr));
        let _ = err;
        let now: std::collections::BTreeMap<_, _> =
            d.snapshot("root").into_iter().filter(|(k, _)| !k.starts_with(".gaudi-fixes")).collect();
        let want: std::collections::BTreeMap<_, _> =
            pristine.clone().into_iter().filter(|(k, _)| !k.starts_with(".gaudi-fixes")).collect();
        crate::common::assert_same(&now, &want, &format!("{revert:?} after apply"));
    }
}

#[test]
fn the_revert_a_refusal_suggests_works_as_printed() {
    let d = on_top_fixture("requires: [fix-a]");
    let pristine = d.snapshot("root/vllm");
    d.cmd().args(with_fixture(&["apply", "fix-c"])).expect(0);
    let (_, err) = d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(3);
    let suggested = err
        .lines()
        .find_map(|l| l.split("Revert them together: ").nth(1))
        .unwrap_or_else(|| panic!("no suggested command in: {err}"));
    let words: Vec<&str> = suggested.split_whitespace().collect();
    assert_eq!(words[0], "gaudi-fixes", "{err}");
    d.cmd().args(&words[1..]).expect(0);
    assert_eq!(d.snapshot("root/vllm"), pristine, "the suggested revert did not restore the tree");
}

/// The fixture with fix-a patching `vllm_gaudi/mod.py` instead (the tree's file not written).
fn gaudi_fix_a() -> Dir {
    let d = fixture();
    let y = d
        .read_string("cat/fixes/fix-a/fix.yaml")
        .replace("tree: vllm\n", "tree: vllm_gaudi\n")
        .replace("file: vllm/mod.py", "file: vllm_gaudi/mod.py");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        crate::common::FIX_A_PATCH.replace("vllm/mod.py", "vllm_gaudi/mod.py"),
    );
    d
}

/// fix-a with one line of context, and fix-c (`requires: [fix-a]`) whose context is fix-a's
/// line but whose own line lies outside fix-a's hunk: with fix-a undone by hand, fix-a reads
/// not applied, and fix-c's edits are in the tree on top of a line that is gone.
fn undone_under_fixture() -> Dir {
    let d = on_top_fixture("requires: [fix-a]");
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -9,3 +9,3 @@ def sample(x):\n     a = x + 1\n-    b = a * 2\n+    b = a * 3\n     return b\n",
    );
    d.write(
        "cat/fixes/fix-c/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -10,4 +10,5 @@ def sample(x):\n     b = a * 3\n     return b\n+    # fix-c was here\n \n \n",
    );
    d.write("cat/profiles/default.yaml", "name: default\ndescription: d\nfixes: [fix-a, fix-c]\n");
    d
}

#[test]
fn a_fix_whose_required_fix_was_undone_by_hand_reads_one_way_and_apply_or_revert_mend_it() {
    let d = undone_under_fixture();
    d.cmd().args(with_fixture(&["apply"])).expect(0);
    let undo = |d: &Dir| {
        let text = d.read_string("root/vllm/mod.py");
        d.write("root/vllm/mod.py", text.replace("    b = a * 3\n", "    b = a * 2\n"));
    };
    undo(&d);
    let undone = d.snapshot("root");
    // Every command says fix-c is applied on top of fix-a, which is not, and what mends it.
    let said = "applied on top of fix-a, which is not applied in the tree (undone since?): `gaudi-fixes --catalog cat --root root apply` applies it under it";
    for command in
        [&["status", "--format", "json"][..], &["list", "--format", "json"], &["apply", "--check", "--format", "json"]]
    {
        let code = if command[0] == "apply" { 1 } else { 0 };
        let (out, _) = d.cmd().args(with_fixture(command)).expect(code);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let state =
            |name: &str| v["fixes"].as_array().unwrap().iter().find(|f| f["name"] == name).map(|f| f["state"].clone());
        assert_eq!(state("fix-a"), Some("not-applied".into()), "{command:?}: {out}");
        assert_eq!(state("fix-c"), Some("applied".into()), "{command:?}: {out}");
        if command[0] != "list" {
            assert!(out.contains(said), "{command:?}: {out}");
            // And as data: how the verdict was reached, naming the fix undone.
            let basis = |name: &str| {
                v["fixes"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["basis"].clone()
            };
            assert_eq!(
                basis("fix-c"),
                serde_json::json!({"code": "on-undone", "fixes": ["fix-a"]}),
                "{command:?}: {out}"
            );
            assert_eq!(basis("fix-a"), serde_json::json!({"code": "on-chain"}), "{command:?}: {out}");
        }
    }
    let (check, _) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(1);
    assert!(check.contains(said) && !check.contains("drifted"), "{check}");
    let (diff, _) = d.cmd().args(with_fixture(&["diff", "fix-c"])).expect(0);
    assert!(diff.contains(said), "{diff}");
    // The advice works: apply alone applies fix-a under it.
    d.cmd().args(with_fixture(&["apply"])).expect(0);
    d.cmd().args(with_fixture(&["apply", "--check"])).expect(0);
    // And revert, as status has it (fix-c applied), undoes fix-c and leaves fix-a not applied.
    d.write("root/vllm/mod.py", &undone["vllm/mod.py"]);
    let (out, _) = d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert!(!out.contains("locally modified") && !out.contains("drifted"), "{out}");
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE, "{out}");
    d.write("root/vllm/mod.py", &undone["vllm/mod.py"]);
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-c", "--format", "json"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = v["fixes"].as_array().unwrap().iter().find(|f| f["name"] == "fix-c").unwrap();
    assert_eq!(c["basis"], serde_json::json!({"code": "reverted-over", "fixes": ["fix-a"]}), "{out}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("applied on top of fix-a, which is not applied in the tree: reverted over it"),
        "{out}"
    );
}
