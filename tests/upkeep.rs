//! Catalogue upkeep commands through the real binary, on the temp fixture: `test` (with a
//! stand-in interpreter, and with the real venv when there is one), `record`, `port` (re-write,
//! three-way merge, conflict), `matrix` (cache trees, JSON, Markdown, `--record`). Nothing
//! here touches the network: `matrix` gets its pristine trees from `GAUDI_FIXES_CACHE`.

use crate::common::{fake_python, fixture, real_python, sha256, with_fixture, Dir, PRISTINE};

fn patched_a() -> String {
    PRISTINE.replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n")
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A stand-in for python: answers the module probe with `$FAKE_MISSING`, and as pytest passes
/// when the tree's mod.py carries fix-a and the test file was written beside it.
const FAKE_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo gaudi-fixes-probe-ok; echo "$FAKE_MISSING"; exit 0; fi
[ -f test_a.py ] || { echo "no test_a.py in $(pwd)"; exit 4; }
if grep -q "a \* 3" "$GAUDI_FIXES_ROOT/vllm/mod.py"; then echo "1 passed in 0.01s"; verdict 0 1 0; exit 0; fi
echo "1 failed in 0.01s"; verdict 1 0 1; exit 1
"#;

/// The fixture, with tests for fix-a and the stand-in interpreter at `py`.
pub(crate) fn with_tests() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "tests: [test_a.py]\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write(
        "cat/fixes/fix-a/test_a.py",
        "import os\n\ndef test_tripled():\n    src = open(os.path.join(os.environ['GAUDI_FIXES_ROOT'], 'vllm/mod.py')).read()\n    assert 'b = a * 3' in src\n",
    );
    fake_python(&d, "py", FAKE_PYTHON);
    d
}

#[test]
fn test_passes_on_the_patched_tree_and_fails_on_the_pristine_one() {
    let d = with_tests();
    let (out, _) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(1);
    assert!(out.contains("FAILED (1 failed"), "{out}");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(0);
    assert!(out.contains("passed (1 passed"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["--python", "./py", "--format", "json", "test", "fix-a"])).expect(0);
    let v = json(&out);
    assert_eq!((v["passed"].clone(), v["state"].clone()), (true.into(), "applied".into()), "{out}");
}

#[test]
fn test_without_pytest_or_torch_is_a_clear_error() {
    let d = with_tests();
    let (_, err) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "test", "fix-a"]))
        .env("FAKE_MISSING", "pytest torch")
        .expect(3);
    assert!(err.contains("has no torch and no pytest") && err.contains("--python"), "{err}");
    // The CPU wheel of the torch the tests are run with, from the CPU index alone: with the
    // package index as an extra index pip takes the CUDA build from there.
    assert!(
        err.contains("-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`")
            && !err.contains("extra-index-url"),
        "{err}"
    );
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./no-such-python", "test", "fix-a"])).expect(3);
    assert!(err.contains("cannot run `") && err.contains("no-such-python`"), "{err}");
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-b"])).expect(3);
    assert!(err.contains("fix-b has no tests"), "{err}");
}

#[test]
fn builtin_tests_and_their_helpers_are_in_the_binary() {
    let d = fixture();
    // The stand-in checks that the built-in fix directory was written out with its helpers.
    fake_python(
        &d,
        "py",
        "if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
         [ -f test_topk_window.py ] && [ -f _topk_support.py ] && [ -f vllm_gaudi_stubs.py ] && { echo '1 passed'; verdict 0 1 0; exit 0; }\n\
         ls; exit 1\n",
    );
    let (out, _) = d.cmd().args(["--root", "root", "--python", "./py", "test", "topk-subset-sampler"]).expect(0);
    assert!(out.contains("passed"), "{out}");
}

#[test]
fn test_with_real_pytest_when_available() {
    let Some(python) = real_python() else {
        eprintln!("skipped: no python with pytest and torch (set GAUDI_FIXES_TEST_PYTHON)");
        return;
    };
    let d = with_tests();
    let py = python.to_str().unwrap();
    d.cmd().args(with_fixture(&["--python", py, "test", "fix-a"])).expect(1);
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["--python", py, "test", "fix-a"])).expect(0);
}

#[test]
fn record_writes_a_variant_that_reproduces_the_edited_bytes() {
    let d = fixture();
    // Two hand edits: fix-a's and one in other().
    let edited = patched_a().replace("    return 2\n", "    # hand edit\n    return 2\n");
    d.write("edited/vllm/mod.py", &edited);
    let before = d.snapshot("cat");
    let (_, err) =
        d.cmd().args(["record", "fix-a", "--release", "v0.27.0", "--pristine", "root", "--edited", "edited"]).expect(3);
    assert!(err.contains("built-in catalogue"), "{err}");
    let (out, _) = d
        .cmd()
        .args([
            "--catalog",
            "cat",
            "record",
            "fix-a",
            "--release",
            "v0.27.0",
            "--pristine",
            "root",
            "--edited",
            "edited",
        ])
        .expect(0);
    assert!(out.contains("v0.27.0/mod.patch"), "{out}");
    assert_ne!(d.snapshot("cat"), before);
    let patch = d.read_string("cat/fixes/fix-a/v0.27.0/mod.patch");
    // Both edits are three lines apart: one hunk, anchored like git's python driver.
    assert!(patch.starts_with("--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -7,9 +7,11 @@ def helper():\n"), "{patch}");
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.contains(&format!("  v0.27.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.27.0/mod.patch\n        pristine_sha256: {}", sha256(PRISTINE.as_bytes()))), "{y}");
    // Applying that variant to a pristine copy gives the edited bytes exactly.
    d.write("copy/vllm/mod.py", PRISTINE);
    d.write("copy/vllm/_version.py", "__version__ = version = '0.27.0'\n");
    d.cmd().args(["--catalog", "cat", "--root", "copy", "apply", "fix-a"]).expect(0);
    assert_eq!(d.read_string("copy/vllm/mod.py"), edited);
    // Nothing edited: nothing to record, nothing written.
    let before = d.snapshot("cat");
    let (_, err) = d
        .cmd()
        .args(["--catalog", "cat", "record", "fix-a", "--release", "v0.28.0", "--pristine", "root", "--edited", "root"])
        .expect(3);
    assert!(err.contains("nothing to record"), "{err}");
    assert_eq!(d.snapshot("cat"), before);
}

fn port(d: &Dir) -> (std::process::Output, String) {
    d.cmd().args(crate::common::port_args("fix-a", "new", "v0.27.0")).output()
}

/// After `port`, the new variant applies exactly to the new tree and lints against it.
fn check_ported(d: &Dir, new: &str) {
    d.write("up/v0.27.0/vllm/mod.py", new);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("fix-a v0.27.0: vllm/mod.py applies to pristine"), "{out}");
    d.write("new/vllm/_version.py", "__version__ = version = '0.27.0'\n");
    let (out, _) =
        d.cmd().args(["--catalog", "cat", "--root", "new", "apply", "--check", "fix-a", "--format", "json"]).expect(1);
    let v = json(&out);
    assert_eq!(v["fixes"][0]["variant"], "v0.27.0", "{out}");
    assert!(v["fixes"][0]["files"][0]["hunks"].as_array().unwrap().iter().all(|h| h["offset"] == 0), "{out}");
}

#[test]
fn port_rewrites_a_patch_that_applies_at_offsets() {
    let d = fixture();
    let new = format!("import sys\n{PRISTINE}");
    d.write("new/vllm/mod.py", &new);
    let (out, shown) = port(&d);
    assert_eq!(out.status.code(), Some(0), "{shown}: {}", String::from_utf8_lossy(&out.stderr));
    check_ported(&d, &new);
}

#[test]
fn port_merges_three_way_when_upstream_changed_the_context() {
    let d = fixture();
    // Upstream adds a line inside the hunk's context: the old patch no longer applies.
    let new = PRISTINE.replace("    return b\n", "    return b\n    # upstream comment\n");
    d.write("new/vllm/mod.py", &new);
    let (out, shown) = port(&d);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("merged three-way"), "{stdout}");
    check_ported(&d, &new);
    d.cmd().args(["--catalog", "cat", "--root", "new", "apply", "fix-a"]).expect(0);
    assert_eq!(
        d.read_string("new/vllm/mod.py"),
        patched_a().replace("    return b\n", "    return b\n    # upstream comment\n")
    );
}

#[test]
fn port_stops_on_a_conflict_and_writes_nothing() {
    let d = fixture();
    d.write("new/vllm/mod.py", PRISTINE.replace("    b = a * 2\n", "    b = a * 4\n"));
    let before = d.snapshot("cat");
    let (out, shown) = port(&d);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{shown}: {stdout}");
    assert!(
        stdout.contains("conflict") && stdout.contains("+    b = a * 4") && stdout.contains("+    b = a * 3"),
        "{stdout}"
    );
    // The record it advises writes into this run's catalogue (it said `--catalog DIR`).
    assert!(stdout.contains("`gaudi-fixes --catalog cat record fix-a --release v0.27.0"), "{stdout}");
    assert_eq!(d.snapshot("cat"), before);
}

/// A cache with pristine v0.26.0 (the fixture's file), v0.27.0 (two lines added on top) and
/// v0.99.0 (a context line changed).
pub(crate) fn cache(d: &Dir) {
    for (rel, text) in [
        ("v0.26.0", PRISTINE.to_string()),
        ("v0.27.0", format!("# 0.27\n# more\n{PRISTINE}")),
        ("v0.99.0", PRISTINE.replace("    a = x + 1\n", "    a = x + 1  # changed\n")),
    ] {
        d.write(&format!("cache/upstream/{rel}/vllm/mod.py"), text);
        d.write(
            &format!("cache/upstream/{rel}/vllm/_version.py"),
            format!("__version__ = version = '{}'\n", rel.trim_start_matches('v')),
        );
    }
}

#[test]
fn matrix_reports_every_release_and_records_verified() {
    let d = with_tests();
    cache(&d);
    let cache_dir = d.path().join("cache");
    let pristine_cache = d.snapshot("cache");
    let args =
        ["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0,0.27.0,v0.99.0", "--fix", "fix-a"];
    let (out, _) = d.cmd().args(args).args(["--format", "json"]).env("GAUDI_FIXES_CACHE", &cache_dir).expect(0);
    let v = json(&out);
    let cells = v["cells"].as_array().unwrap();
    let row = |r: &str| cells.iter().find(|c| c["release"] == r).unwrap_or_else(|| panic!("{r}: {out}"));
    assert_eq!((row("v0.26.0")["state"].as_str(), row("v0.26.0")["tests"].as_str()), (Some("applies"), Some("passed")));
    assert_eq!(row("v0.27.0")["offsets"], true);
    assert_eq!(row("v0.27.0")["tests"], "passed");
    assert_eq!(row("v0.99.0")["state"], "drifted");
    assert_eq!(row("v0.99.0")["reason"], "unsupported-release");
    // The cache's pristine trees are untouched by the patched copies.
    assert_eq!(d.snapshot("cache"), pristine_cache);
    let (md, _) = d.cmd().args(args).args(["--markdown"]).env("GAUDI_FIXES_CACHE", &cache_dir).expect(0);
    assert!(md.contains("| vLLM | state | variant | tests | verified |"), "{md}");
    assert!(md.contains("| 0.27.0 | applies (offsets) | v0.26.0 | pass | no |"), "{md}");
    // --record: both passing releases go into the v0.26.0 variant's verified:.
    d.cmd().args(args).args(["--record"]).env("GAUDI_FIXES_CACHE", &cache_dir).expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.contains("  v0.26.0:\n    verified: [v0.26.0, v0.27.0]\n"), "{y}");
    let (out, _) = d.cmd().args(args).args(["--format", "json"]).env("GAUDI_FIXES_CACHE", &cache_dir).expect(0);
    assert_eq!(json(&out)["cells"][1]["verified"], true, "{out}");
    // Not on the built-in catalogue.
    let (_, err) = d.cmd().args(["matrix", "--record"]).env("GAUDI_FIXES_CACHE", &cache_dir).expect(3);
    assert!(err.contains("built-in catalogue"), "{err}");
}

/// Two variants of one fix recorded in one run each get their `verified:` line: the second edit
/// of the one fix.yaml goes on the text the first made (it was made on the file as read, so the
/// last variant's edit was the only one left).
#[test]
fn matrix_record_writes_every_variant_of_one_fix() {
    let d = with_tests();
    cache(&d);
    let v27 = format!("# 0.27\n# more\n{PRISTINE}");
    let variant = format!(
        "  v0.27.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        \
         pristine_sha256: {}\ntests: [test_a.py]\n",
        sha256(v27.as_bytes())
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("tests: [test_a.py]\n", &variant);
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let args = ["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0,v0.27.0", "--fix", "fix-a"];
    d.cmd().args(args).args(["--record"]).env("GAUDI_FIXES_CACHE", d.path().join("cache")).expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(
        y.contains("  v0.26.0:\n    verified: [v0.26.0]\n") && y.contains("  v0.27.0:\n    verified: [v0.27.0]\n"),
        "{y}"
    );
}

#[test]
fn matrix_without_a_cached_tree_or_pip_reports_an_error_for_that_release() {
    let d = with_tests();
    cache(&d);
    // The stand-in python has no pip: fetching v0.50.0 fails, the other release is still shown.
    let (out, _) = d
        .cmd()
        .args([
            "--catalog",
            "cat",
            "--python",
            "./py",
            "matrix",
            "--releases",
            "v0.26.0,v0.50.0",
            "--fix",
            "fix-a",
            "--no-tests",
        ])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(3);
    assert!(out.contains("v0.50.0: cannot prepare") && out.contains("v0.26.0  fix-a  applies"), "{out}");
}

#[test]
fn matrix_extracts_a_downloaded_wheel_into_the_cache_layout() {
    let python = "python3";
    if !std::process::Command::new(python).args(["-c", "import zipfile"]).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: no python3");
        return;
    }
    let d = with_tests();
    // A wheel as `pip download` leaves it in <cache>/wheels: the package, and dist-info that
    // is not extracted.
    std::fs::create_dir_all(d.path().join("cache/wheels")).unwrap();
    let made = std::process::Command::new(python)
        .args([
            "-c",
            "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\nz.writestr('vllm/__init__.py', '')\n\
             z.writestr('vllm/_version.py', \"__version__ = version = '0.26.0'\\n\")\nz.writestr('vllm/mod.py', sys.argv[2])\n\
             z.writestr('vllm-0.26.0.dist-info/METADATA', 'x')\nz.close()",
        ])
        .arg(d.path().join("cache/wheels/vllm-0.26.0-py3-none-any.whl"))
        .arg(PRISTINE)
        .status()
        .unwrap();
    assert!(made.success());
    let (out, _) = d
        .cmd()
        .args([
            "--catalog",
            "cat",
            "--python",
            python,
            "matrix",
            "--releases",
            "v0.26.0",
            "--fix",
            "fix-a",
            "--no-tests",
        ])
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    assert_eq!(json(&out)["cells"][0]["state"], "applies", "{out}");
    assert_eq!(d.read_string("cache/upstream/v0.26.0/vllm/mod.py"), PRISTINE);
    assert!(d.read_string("cache/upstream/v0.26.0/.gaudi-fixes-upstream").contains("release: v0.26.0"));
    assert!(!d.path().join("cache/upstream/v0.26.0/vllm-0.26.0.dist-info").exists());
}

#[test]
fn port_takes_a_tree_missing_under_to_from_the_cache() {
    let d = fixture();
    let new = format!("import sys\n{PRISTINE}");
    d.write("cache/upstream/v0.27.0/vllm/mod.py", &new);
    d.write("empty/README", "no trees here\n");
    let args = crate::common::port_args("fix-a", "empty", "v0.27.0");
    let (out, _) = d.cmd().args(args).env("GAUDI_FIXES_CACHE", d.path().join("cache")).expect(0);
    assert!(out.contains("vllm: not under --to; using"), "{out}");
    d.write("new/vllm/mod.py", &new);
    check_ported(&d, &new);
    // Neither under --to nor in the cache: an error naming both, nothing written.
    let before = d.snapshot("cat");
    let (_, err) = d.cmd().args(args).env("GAUDI_FIXES_CACHE", d.path().join("nocache")).expect(3);
    assert!(err.contains("no vllm/ tree there or in the cache"), "{err}");
    assert_eq!(d.snapshot("cat"), before);
    // The old release missing from the cache: the fetch it advises names this run's catalogue.
    let args = ["--catalog", "cat", "port", "fix-a", "--from", "v0.26.0", "--to", "new", "--release", "v0.27.0"];
    let (_, err) = d.cmd().args(args).env("GAUDI_FIXES_CACHE", d.path().join("nocache")).expect(3);
    let fetch = "fetch it with `gaudi-fixes --catalog cat matrix --releases v0.26.0 --no-tests`";
    assert!(err.contains("no pristine v0.26.0 vllm tree in the cache") && err.contains(fetch), "{err}");
    assert_eq!(d.snapshot("cat"), before);
}

#[test]
fn matrix_lists_releases_in_the_one_release_order() {
    let asked: Vec<String> = ["v0.26.0", "0.26.0rc1", "v0.9", "v0.26.0.post1", "v0.10.0"].map(String::from).to_vec();
    let releases = gaudi_fixes::upkeep::matrix::releases(&[], &asked).unwrap();
    assert_eq!(releases, ["v0.9.0", "v0.10.0", "v0.26.0rc1", "v0.26.0", "v0.26.0.post1"]);
}

// Every command's `--format github` output is annotations or a notice, on a clean run and on a
// failing one: never human text, never nothing (a green CI step still says what it saw). Before,
// a clean `lint` printed nothing at all.
#[test]
fn every_command_answers_github_with_annotations_or_a_notice() {
    let d = with_tests();
    cache(&d);
    d.write("cat/fixes/fix-a/README.md", "# fix-a\n\nTriple it.\n");
    let github = |args: &[&str], code: i32| {
        let mut all = vec!["--catalog", "cat", "--format", "github"];
        all.extend_from_slice(args);
        let (out, _) = d.cmd().args(&all).env("GAUDI_FIXES_CACHE", d.path().join("cache")).expect(code);
        assert!(
            !out.trim().is_empty() && out.lines().all(|l| l.starts_with("::")),
            "{args:?}: human text or nothing under --format github:\n{out}"
        );
        out
    };
    github(&["list"], 0);
    github(&["--root", "root", "list"], 0);
    github(&["show", "fix-a"], 0);
    github(&["show", "fix-a", "--readme"], 0);
    assert!(github(&["lint"], 0).starts_with("::notice::"));
    for (args, code) in [
        (&["status"][..], 0),
        (&["apply", "--check"], 1),
        (&["apply", "--dry-run"], 0),
        (&["diff", "fix-a"], 0),
        (&["--python", "./py", "test", "fix-a"], 1),
        (&["apply"], 0),
        (&["--python", "./py", "test", "fix-a"], 0),
        (&["revert"], 0),
    ] {
        let mut all = vec!["--root", "root"];
        all.extend_from_slice(args);
        github(&all, code);
    }
    d.write("root/vllm/mod.py", PRISTINE.replace("    a = x + 1\n", "    a = x + 42\n"));
    for args in [&["apply", "--check"][..], &["apply"], &["diff", "fix-a"]] {
        let mut all = vec!["--root", "root"];
        all.extend_from_slice(args);
        github(&all, 2);
    }
    // A revert's drift: fix-a applied by gaudi-fixes, then its line edited (never applied, as
    // above, there is nothing of it to revert: exit 0).
    d.write("root/vllm/mod.py", PRISTINE);
    github(&["--root", "root", "apply", "fix-a"], 0);
    d.write("root/vllm/mod.py", d.read_string("root/vllm/mod.py").replace("b = a * 3", "b = a * 4"));
    github(&["--root", "root", "revert", "fix-a"], 2);
    d.write("root/vllm/mod.py", PRISTINE);
    github(&["--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a"], 0);
    github(&["--python", "./py", "matrix", "--releases", "v0.50.0", "--fix", "fix-a", "--no-tests"], 3);
    let port = ["port", "fix-a", "--from", "v0.26.0", "--from-tree", "root", "--to", "new", "--release", "v0.27.0"];
    d.write("new/vllm/mod.py", PRISTINE.replace("    b = a * 2\n", "    b = a * 4\n"));
    assert!(github(&port, 2).starts_with("::error"));
    d.write("new/vllm/mod.py", format!("import sys\n{PRISTINE}"));
    github(&port, 0);
    d.write("edited/vllm/mod.py", patched_a());
    let out = github(&["record", "fix-a", "--release", "v0.28.0", "--pristine", "root", "--edited", "edited"], 0);
    // What to run next names the catalogue written, `matrix --record` too.
    let next = "next: `gaudi-fixes --catalog cat lint --upstream DIR`, then `gaudi-fixes --catalog cat matrix --releases v0.28.0 --record`";
    assert!(out.contains(next), "{out}");
    d.write("cat/fixes/fix-b/v0.26.0/mod.patch", "not a patch\n");
    assert!(github(&["lint"], 3).starts_with("::error"));
}

// `matrix` checks a fix on the copy with what it `requires:` applied first, as `apply` does —
// not only the fixes it comes `after:` (a fix may require another without an `after:`).
/// A stand-in for python: the module probe answers nothing missing; "pytest" passes when the
/// tree's mod.py carries both fix-a's and fix-b's edits.
const REQUIRES_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo gaudi-fixes-probe-ok; exit 0; fi
if grep -q "a \* 3" "$GAUDI_FIXES_ROOT/vllm/mod.py" && grep -q "fix-b was here" "$GAUDI_FIXES_ROOT/vllm/mod.py"; then
  echo "1 passed in 0.01s"; verdict 0 1 0; exit 0
fi
echo "1 failed in 0.01s"; verdict 1 0 1; exit 1
"#;

#[test]
fn matrix_applies_what_a_fix_requires_before_testing_it() {
    let d = fixture();
    let yaml = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]")
        + "tests: [test_b.py]\n";
    d.write("cat/fixes/fix-b/fix.yaml", yaml);
    d.write("cat/fixes/fix-b/test_b.py", "def test_b():\n    pass\n");
    fake_python(&d, "py", REQUIRES_PYTHON);
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("cache/upstream/v0.26.0/vllm/_version.py", "__version__ = version = '0.26.0'\n");
    let (out, _) = d
        .cmd()
        .args(["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-b"])
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let cell = &v["cells"][0];
    assert_eq!((cell["fix"].as_str(), cell["state"].as_str()), (Some("fix-b"), Some("applies")), "{out}");
    assert_eq!(cell["tests"], "passed", "{out}");
}

/// vllm_gaudi comes from the archives in `GAUDI_FIXES_VLLM_GAUDI_ARCHIVES` (main's newest when the
/// release has none), extracted once into the cache; set to what is not a directory, it is an
/// error naming it. Before, only a `shared/upstream/` above the current directory was searched,
/// so a test run in a temp dir under a machine's `/shared` took that machine's archives.
#[test]
fn matrix_takes_vllm_gaudi_from_the_archives_directory_it_is_given() {
    let d = with_tests();
    cache(&d);
    d.write("src/vllm_gaudi/__init__.py", "");
    std::fs::create_dir_all(d.path().join("arch")).unwrap();
    for name in ["vllm_gaudi-main-2026-01-01.tar.gz", "vllm_gaudi-main-2026-08-21.tar.gz"] {
        let st = std::process::Command::new("tar")
            .args(["-czf", &format!("arch/{name}"), "-C", "src", "vllm_gaudi"])
            .current_dir(d.path())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let args =
        ["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-a", "--no-tests"];
    let (out, _) = d
        .cmd()
        .args(args)
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .env("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES", d.path().join("arch"))
        .expect(0);
    let v = json(&out);
    assert_eq!(v["releases"][0]["vllm_gaudi"]["source"], "vllm_gaudi-main-2026-08-21.tar.gz", "{out}");
    assert!(d.path().join("cache/gaudi/main/vllm_gaudi/__init__.py").is_file(), "{}", d.listing());
    // Set and empty (as the tests' command sets it): no archive, no vllm_gaudi.
    std::fs::remove_dir_all(d.path().join("cache/gaudi")).unwrap();
    let (out, _) =
        d.cmd().args(args).args(["--format", "json"]).env("GAUDI_FIXES_CACHE", d.path().join("cache")).expect(0);
    assert!(json(&out)["releases"][0]["vllm_gaudi"].is_null(), "{out}");
    let (out, err) = d
        .cmd()
        .args(args)
        .env("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES", d.path().join("no-such-dir"))
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(3);
    assert!(out.contains("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES=") && out.contains("not a directory"), "{err}");
}
