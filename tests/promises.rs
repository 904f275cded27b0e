//! Round-3 promises, through the real binary on temp trees: the variant that is applied is the
//! one reported (and two variants' edits in one file are drift), anchors are real definitions,
//! a revert refusal sees dependants in left-out trees, revert gives back the compiled caches,
//! stale probe files are cleaned, and the catalogue writers are safe to run together.

use crate::common::{fixture, sha256, with_fixture, Dir, FIX_A_PATCH, PRISTINE};

/// fix-a with two variants: v0.26.0 edits `sample()` (its context survives in 0.27.0), and
/// v0.27.0 edits `other()`; the tree is a pristine 0.27.0 file with no version hint.
fn two_variant_fixture() -> Dir {
    let d = fixture();
    let newer = PRISTINE.replace("import os\n", "import os\nimport sys\n");
    std::fs::remove_file(d.path().join("root/vllm/_version.py")).unwrap();
    d.write("root/vllm/mod.py", &newer);
    let p26 = sha256(PRISTINE.as_bytes());
    let p27 = sha256(newer.as_bytes());
    d.write(
        "cat/fixes/fix-a/fix.yaml",
        format!(
            "name: fix-a\nsummary: triple it\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {p26}\n  v0.27.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.27.0/mod.patch\n        pristine_sha256: {p27}\n"
        ),
    );
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", FIX_A_PATCH);
    d.write(
        "cat/fixes/fix-a/v0.27.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -14,3 +14,4 @@ def sample(x):\n \n def other():\n+    # fix-a (0.27): other() now\n     return 2\n",
    );
    d
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn the_variant_reported_is_the_one_applied() {
    let d = two_variant_fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let applied = d.read_string("root/vllm/mod.py");
    assert!(applied.contains("fix-a (0.27)") && !applied.contains("triple"), "{applied}");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(0);
    assert_eq!(json(&out)["fixes"][0]["variant"], "v0.27.0", "{out}");
    // A second apply is a no-op, not the other variant written on top.
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), applied, "a second apply wrote another variant on top");
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert!(!d.read_string("root/vllm/mod.py").contains("fix-a"), "revert left the fix in place");
}

#[test]
fn a_file_carrying_two_variants_edits_is_drifted_never_applied() {
    let d = two_variant_fixture();
    let both = d
        .read_string("root/vllm/mod.py")
        .replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n")
        .replace("def other():\n", "def other():\n    # fix-a (0.27): other() now\n");
    d.write("root/vllm/mod.py", &both);
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(2);
    let fix = &json(&out)["fixes"][0];
    assert_eq!(fix["state"], "drifted", "{out}");
    assert!(fix["message"].as_str().unwrap().contains("two variants of this fix"), "{out}");
    let before = d.snapshot("root");
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(2);
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(2);
    assert_eq!(d.snapshot("root"), before);
}

/// A one-fix catalogue `cat/` (fix `x`, release v0.26.0) patching `vllm/<file>` with `patch`,
/// and a tree `root/` holding `tree_text` there.
fn one_fix(file: &str, pristine: &str, patch: &str, tree_text: &str) -> Dir {
    let d = Dir::new();
    d.write("root/vllm/__init__.py", "");
    d.write(&format!("root/vllm/{file}"), tree_text);
    d.write(
        "cat/fixes/x/fix.yaml",
        format!(
            "name: x\nsummary: s\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/{file}\n        patch: v0.26.0/p.patch\n        pristine_sha256: {}\n",
            sha256(pristine.as_bytes())
        ),
    );
    d.write("cat/fixes/x/v0.26.0/p.patch", patch);
    d.write("cat/profiles/default.yaml", "name: default\ndescription: d\nfixes: [x]\n");
    d
}

#[test]
fn a_docstring_line_never_anchors_a_hunk() {
    let method = |name: &str, doc: &str, body: &str| {
        format!(
            "    def {name}(self, logits):\n{doc}        logits = {body}(logits)\n        return sample(logits)\n\n"
        )
    };
    let pristine = format!(
        "class Sampler:\n{}{}    def other(self):\n        pass\n",
        method("forward_native", "", "apply"),
        method("forward_cpu", "", "apply_cpu")
    );
    // Upstream changed forward_native's body; forward_cpu now has the old lines, and its
    // docstring quotes forward_native's signature on a line of its own.
    let doc = "        \"\"\"Same as\n        def forward_native(self, logits):\n        but on the CPU.\"\"\"\n";
    let tree = format!(
        "class Sampler:\n{}{}    def other(self):\n        pass\n",
        method("forward_native", "", "apply_native"),
        method("forward_cpu", doc, "apply")
    );
    let patch = "--- a/vllm/s.py\n+++ b/vllm/s.py\n@@ -3,3 +3,3 @@ def forward_native(self, logits):\n         logits = apply(logits)\n-        return sample(logits)\n+        return fast_sample(logits)\n \n";
    let d = one_fix("s.py", &pristine, patch, &tree);
    let (out, _) = d.cmd().args(["--catalog", "cat", "--root", "root", "apply", "x"]).expect(2);
    assert!(out.contains("drifted"), "{out}");
    assert_eq!(d.read_string("root/vllm/s.py"), tree, "the forward_native hunk was written into forward_cpu");
}

#[test]
fn only_tree_does_not_bypass_the_revert_refusal() {
    // fix-b requires fix-a and patches only vllm_gaudi; reverting fix-a with the vllm_gaudi
    // tree left out must still see that fix-b is applied there.
    let d = fixture();
    let g = "def g():\n    return 1\n";
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/g.py", g);
    d.write(
        "cat/fixes/fix-b/fix.yaml",
        format!(
            "name: fix-b\nsummary: mark g\nkind: performance\nupstream: {{status: not-filed}}\nrequires: [fix-a]\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm_gaudi\n        file: vllm_gaudi/g.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\n",
            sha256(g.as_bytes())
        ),
    );
    d.write(
        "cat/fixes/fix-b/v0.26.0/g.patch",
        "--- a/vllm_gaudi/g.py\n+++ b/vllm_gaudi/g.py\n@@ -1,2 +1,3 @@\n def g():\n+    # fix-b\n     return 1\n",
    );
    d.cmd().args(with_fixture(&["apply", "fix-b"])).expect(0);
    let before = d.snapshot("root");
    let (_, err) = d.cmd().args(with_fixture(&["--only-tree", "vllm", "revert", "fix-a"])).expect(3);
    assert!(err.contains("fix-b is applied and requires fix-a"), "{err}");
    assert_eq!(d.snapshot("root"), before, "a refused revert wrote something");
    // Not applied there: nothing to refuse.
    d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "revert", "fix-b"])).expect(0);
    d.cmd().args(with_fixture(&["--only-tree", "vllm", "revert", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}

fn mtime(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// `python3 -m compileall` on `dir`, as pip does at install time (false when there is no python3).
fn compileall(dir: &std::path::Path) -> bool {
    match std::process::Command::new("python3").args(["-m", "compileall", "-q"]).arg(dir).status() {
        Ok(status) => {
            assert!(status.success(), "compileall failed");
            true
        }
        Err(_) => false,
    }
}

#[test]
fn revert_gives_back_the_bytecode_pip_compiled_valid_for_the_restored_source() {
    let d = fixture();
    // An install from a while ago: sources and their bytecode as pip left them.
    let module = d.path().join("root/vllm/mod.py");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    std::fs::File::options().write(true).open(&module).unwrap().set_modified(old).unwrap();
    if !compileall(&d.path().join("root")) {
        eprintln!("no python3: skipped");
        return;
    }
    let installed = d.snapshot("root");
    assert!(installed.keys().any(|k| k.starts_with("vllm/__pycache__/mod.")), "{installed:?}");
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    assert!(!d.snapshot("root").keys().any(|k| k.starts_with("vllm/__pycache__/mod.")), "stale bytecode kept");
    // Python compiles the patched module when it is imported.
    compileall(&d.path().join("root"));
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    let reverted = d.snapshot("root");
    let differ: Vec<&String> =
        installed.keys().chain(reverted.keys()).filter(|k| installed.get(*k) != reverted.get(*k)).collect();
    assert!(differ.is_empty(), "the reverted tree is not what pip left; differs: {differ:?}");
    // Valid for the restored source: Python checks the source's mtime (and size) recorded in it.
    assert_eq!(mtime(&module), old, "the source's mtime was not restored, so its bytecode is stale");
}

#[test]
fn a_probe_file_left_by_a_killed_apply_is_reported_and_removed() {
    let d = fixture();
    // What a SIGKILL in apply's probe step leaves beside the module: an empty temp file.
    let probe = "root/vllm/.mod.py.gaudi-fixes.tmp";
    for args in [
        vec!["status"],
        vec!["apply", "--check", "fix-a"],
        vec!["diff", "fix-a"],
        vec!["apply", "fix-a"],
        vec!["revert", "fix-a"],
    ] {
        d.write(probe, "");
        let code = if args.contains(&"--check") { 1 } else { 0 };
        let (out, err) = d.cmd().args(with_fixture(&args)).expect(code);
        assert!(
            format!("{out}{err}").contains("a temp file left by a killed run"),
            "{args:?} did not report the stale probe file: {out}{err}"
        );
        assert!(!d.path().join(probe).exists(), "{args:?} left the stale probe file");
    }
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
}

#[test]
fn concurrent_records_keep_every_entry() {
    let d = fixture();
    let edited = PRISTINE.replace("    b = a * 2\n", "    b = a * 5\n");
    d.write("edited/vllm/mod.py", &edited);
    let releases: Vec<String> = (27..35).map(|m| format!("v0.{m}.0")).collect();
    let children: Vec<_> = releases
        .iter()
        .map(|r| {
            std::process::Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
                .current_dir(d.path())
                .env("NO_COLOR", "1")
                .args([
                    "--catalog",
                    "cat",
                    "record",
                    "fix-a",
                    "--release",
                    r,
                    "--pristine",
                    "root",
                    "--edited",
                    "edited",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, child) in releases.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "record {r}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    let lost: Vec<&String> = releases.iter().filter(|r| !y.contains(&format!("  {r}:\n"))).collect();
    assert!(lost.is_empty(), "concurrent records lost {lost:?}:\n{y}");
    d.cmd().args(["--catalog", "cat", "lint"]).expect(0);
}

#[test]
fn matrix_record_writes_only_releases_whose_both_halves_were_applied_and_tested() {
    use std::os::unix::fs::PermissionsExt;
    // fix-a patches vllm and vllm_gaudi; the cached release has no vllm_gaudi tree.
    let d = fixture();
    let g = "def g():\n    return 1\n";
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!(
            "      - tree: vllm_gaudi\n        file: vllm_gaudi/g.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\ntests: [test_a.py]\n",
            sha256(g.as_bytes())
        );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write(
        "cat/fixes/fix-a/v0.26.0/g.patch",
        "--- a/vllm_gaudi/g.py\n+++ b/vllm_gaudi/g.py\n@@ -1,2 +1,3 @@\n def g():\n+    # fix-a\n     return 1\n",
    );
    d.write("cat/fixes/fix-a/test_a.py", "def test_a():\n    pass\n");
    let py = d.write(
        "py",
        "#!/bin/sh\nif [ \"$1\" = \"-c\" ]; then echo \"\"; exit 0; fi\necho \"1 passed in 0.01s\"; exit 0\n",
    );
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("cache/upstream/v0.26.0/vllm/_version.py", "__version__ = version = '0.26.0'\n");
    let before = d.snapshot("cat");
    d.cmd()
        .args(["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a", "--record"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .output();
    assert_eq!(
        d.snapshot("cat"),
        before,
        "matrix --record wrote verified: for a release whose vllm_gaudi half was never applied or tested:\n{}",
        d.read_string("cat/fixes/fix-a/fix.yaml")
    );
}

#[test]
fn a_bytecode_stash_left_half_made_by_a_killed_apply_is_made_again() {
    // A SIGKILL between creating a module's stash directory and writing its record leaves
    // `.gaudi-fixes/bytecode/<key>/` empty. The next apply drops it and makes it anew (dropping
    // it removed `bytecode/` too, which the next step then tried to create inside: exit 3).
    let d = fixture();
    let key = &sha256(b"vllm/mod.py")[..32];
    d.write(&format!("root/.gaudi-fixes/bytecode/{key}/stray.pyc"), "half");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    assert!(!d.path().join("root/.gaudi-fixes").exists(), "the state directory is left behind");
}
