//! What a user of an installed binary relies on beyond apply/revert, through the real binary:
//! shell completions and the man page, `--version` naming the catalogue (and provenance
//! recording it), `apply --help`'s profiles and examples, hidden `equiv`/`bench` with a complete
//! rebuild hint, GitHub annotations for errors and for a green check, and `test`'s honesty (no
//! pass without a test run, `--only-tree` honoured, "not applied" said, skips named, no advice
//! to install torch over an image's own).

use crate::common::{fake_python, fixture, with_fixture, Dir};

#[test]
fn completions_for_every_shell_and_a_man_page() {
    let d = fixture();
    // Each script registers a function that asks the binary (GAUDI_FIXES_COMPLETE=<shell>);
    // tests/completion.rs drives them in real shells.
    for (shell, marker) in [
        ("bash", "-F _clap_complete_gaudi_fixes gaudi-fixes"),
        ("zsh", "#compdef gaudi-fixes"),
        ("fish", "complete --keep-order --exclusive --command gaudi-fixes"),
        ("elvish", "edit:completion:arg-completer[gaudi-fixes]"),
        ("powershell", "Register-ArgumentCompleter -Native -CommandName gaudi-fixes"),
    ] {
        let (out, _) = d.cmd().args(["completions", shell]).expect(0);
        let asks = out.lines().any(|l| l.contains("GAUDI_FIXES_COMPLETE") && l.contains(shell));
        assert!(out.contains(marker) && asks, "{shell}: {out}");
    }
    let (out, _) = d.cmd().args(["man"]).expect(0);
    assert!(out.contains(".TH GAUDI-FIXES 1") && out.contains("gaudi\\-fixes\\-apply"), "{out}");
    d.cmd().args(["completions", "tcsh"]).expect(3);
}

#[test]
fn version_names_the_catalogue_and_provenance_records_it() {
    let d = fixture();
    let (long, _) = d.cmd().args(["--version"]).expect(0);
    let re =
        regex::Regex::new(r"^gaudi-fixes \d+\.\d+\.\d+ \(catalogue: (\d+) fixes, sha256 ([0-9a-f]{64})\)\n$").unwrap();
    let caps = re.captures(&long).unwrap_or_else(|| panic!("{long:?}"));
    let (list, _) = d.cmd().args(["--format", "json", "list"]).expect(0);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(caps[1].parse::<usize>().unwrap(), list["fixes"].as_array().unwrap().len(), "{long}");
    let (short, _) = d.cmd().args(["-V"]).expect(0);
    assert!(short.contains(&format!("{} fixes, {})", &caps[1], &caps[2][..12])), "{short}");

    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let prov: serde_json::Value = serde_json::from_str(&d.read_string("root/.gaudi-fixes/provenance.json")).unwrap();
    let catalog = &prov["catalog"];
    assert_eq!(catalog["fixes"], 2, "{prov}");
    assert_eq!(catalog["sha256"].as_str().map(str::len), Some(64), "{prov}");
    assert!(catalog["origin"].as_str().is_some_and(|o| o.ends_with("cat")), "{prov}");
}

#[test]
fn apply_help_lists_profiles_and_examples_and_reference_commands_hide_without_the_feature() {
    let d = fixture();
    let (help, _) = d.cmd().args(["apply", "--help"]).expect(0);
    for profile in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles")).unwrap() {
        let name = profile.unwrap().path().file_stem().unwrap().to_string_lossy().to_string();
        assert!(help.contains(&format!("  {name} ")), "profile {name} not in apply --help:\n{help}");
    }
    assert!(help.contains("Examples:") && help.contains("gaudi-fixes apply --check"), "{help}");
    if cfg!(feature = "reference") {
        return;
    }
    let (help, _) = d.cmd().args(["--help"]).expect(0);
    assert!(!help.contains("equiv") && !help.contains("bench"), "{help}");
    let (_, err) = d.cmd().args(["equiv"]).expect(3);
    for part in ["LIBTORCH_USE_PYTORCH=1", "--features reference", "setup-venv.sh"] {
        assert!(err.contains(part), "rebuild hint lacks {part}: {err}");
    }
}

#[test]
fn github_format_annotates_errors_and_says_when_all_is_well() {
    let d = fixture();
    let (out, _) =
        d.cmd().args(["--catalog", "cat", "--root", "nowhere", "--format", "github", "apply", "--check"]).expect(3);
    assert!(out.starts_with("::error") && out.contains("nowhere"), "{out}");
    d.write("bad/fixes/x/fix.yaml", "name: x\nnmae: y\n");
    let (out, _) = d.cmd().args(["--catalog", "bad", "--format", "github", "list"]).expect(3);
    assert!(out.starts_with("::error file=") && out.contains("fix.yaml,line=2::"), "{out}");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let (out, _) = d.cmd().args(with_fixture(&["--format", "github", "apply", "--check", "fix-a"])).expect(0);
    assert!(out.contains("::notice::gaudi-fixes: check passed: fix-a applied"), "{out}");
}

/// An error at a place in a patch or a tree file carries that place to the JSON error object
/// and the GitHub annotation (the line counted here from the file the test wrote).
#[test]
fn errors_in_a_patch_or_a_tree_file_name_their_file_and_line() {
    let d = fixture();
    let patch = d.read_string("cat/fixes/fix-a/v0.26.0/mod.patch");
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", patch.replacen("@@ -", "@@ ?", 1));
    let line = patch.lines().position(|l| l.starts_with("@@")).unwrap() + 1;
    let cases = [("cat/fixes/fix-a/v0.26.0/mod.patch", line, "malformed hunk header")];
    assert_errors_at(&d, &cases);
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", patch);
    let source = d.read_string("root/vllm/mod.py");
    let nul_line = source.lines().count();
    d.write("root/vllm/mod.py", format!("{source}\0\n"));
    assert_errors_at(&d, &[("root/vllm/mod.py", nul_line + 1, "binary file")]);
}

fn assert_errors_at(d: &Dir, cases: &[(&str, usize, &str)]) {
    for (file, line, says) in cases {
        let (stdout, _) = d.cmd().args(with_fixture(&["--format", "json", "apply", "--check", "fix-a"])).expect(3);
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        let error = &doc["error"];
        assert!(error["file"].as_str().is_some_and(|f| f.ends_with(file)), "{file}: {stdout}");
        assert_eq!(error["line"], *line, "{stdout}");
        assert!(error["message"].as_str().unwrap().contains(says), "{stdout}");
        let (out, _) = d.cmd().args(with_fixture(&["--format", "github", "apply", "--check", "fix-a"])).expect(3);
        assert!(out.starts_with("::error file=") && out.contains(&format!("{file},line={line}::")), "{out}");
    }
}

#[test]
fn human_output_glitches_are_gone() {
    let d = fixture();
    let (out, _) = d.cmd().args(with_fixture(&["list"])).expect(0);
    assert!(!out.contains(".:"), "{out}");
    // A second file for fix-a, so the written list has two entries.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert!(out.contains("wrote 1 file(s):\n  "), "{out}");
    // A refused apply shows no "→ applying": fix-a could be applied, fix-b drifted.
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    let text = d.read_string("root/vllm/mod.py").replace("    return 2\n", "    return 2  # edited\n");
    d.write("root/vllm/mod.py", text);
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(2);
    assert!(out.contains("fix-b  drifted") && !out.contains("→ applying"), "{out}");
    let (out, _) = d.cmd().args(["--catalog", "cat", "--vllm-gaudi", "root", "apply", "--check", "fix-a"]).expect(3);
    assert!(!out.contains("nothing was written"), "{out}");
}

/// Issue 37: `apply --check` on a fully applied tree printed every fix's block and a two-line
/// note about offsets per fix; now one line per tree and the verdict, the rest under `-v` and
/// in JSON.
#[test]
fn a_check_that_finds_everything_applied_is_one_line_per_tree_and_the_verdict() {
    let d = fixture();
    for fix in ["fix-a", "fix-b"] {
        let manifest = d.read_string(&format!("cat/fixes/{fix}/fix.yaml"));
        let verified = manifest.replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [v0.26.0]\n");
        d.write(&format!("cat/fixes/{fix}/fix.yaml"), verified);
    }
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    // A line above the fixes' hunks: each is found one line away from its patch's numbers.
    let text = d.read_string("root/vllm/mod.py");
    d.write("root/vllm/mod.py", format!("# a local comment\n{text}"));
    let args = with_fixture(&["apply", "--check", "--profile", "performance"]);
    let (out, _) = d.cmd().args(&args).expect(0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() <= 3, "{out}");
    assert_eq!(lines.last(), Some(&"check: everything applied: 2 fixes (2 applied); -v shows each"), "{out}");
    assert!(lines[0].starts_with("vllm ") && !out.contains("hunk"), "{out}");
    let mut verbose = args.clone();
    verbose.insert(0, "-v");
    let (out, _) = d.cmd().args(&verbose).expect(0);
    assert!(out.contains("fix-a  applied") && out.contains("fix-b  applied"), "{out}");
    assert!(out.contains("hunk 1 found at line 8 (offset +1)"), "{out}");
    let mut json = args.clone();
    json.extend(["--format", "json"]);
    let (out, _) = d.cmd().args(&json).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["files"][0]["hunks"][0]["offset"], 1, "{out}");
    // Anything not applied: every fix is shown, as before.
    d.write("root/vllm/mod.py", text.replace("    # fix-b was here\n", ""));
    let (out, _) = d.cmd().args(&args).expect(1);
    assert!(out.contains("fix-a  applied") && out.contains("fix-b  not applied"), "{out}");
}

/// A stand-in python: passes the probe; as pytest prints what `$FAKE_PYTEST` says, leaves the
/// verdict `verdict $FAKE_VERDICT` writes and exits with `$FAKE_EXIT`; records the trees it was
/// shown in `seen`.
const FAKE_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo gaudi-fixes-probe-ok; echo "$FAKE_MISSING"; exit 0; fi
ls "$GAUDI_FIXES_ROOT" > "$SEEN"
printf '%b\n' "$FAKE_PYTEST"
eval "verdict ${FAKE_EXIT:-0} $FAKE_VERDICT"
exit "${FAKE_EXIT:-0}"
"#;

fn with_tests() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml") + "tests: [test_a.py]\n";
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write("cat/fixes/fix-a/test_a.py", "def test_a():\n    pass\n");
    d.write("root/vllm_gaudi/__init__.py", "");
    fake_python(&d, "py", FAKE_PYTHON);
    d
}

#[test]
fn test_passes_only_when_tests_ran() {
    let d = with_tests();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let seen = d.path().join("seen");
    let (_, err) = d.cmd().args(with_fixture(&["--python", "/bin/true", "test", "fix-a"])).expect(3);
    assert!(err.contains("not a Python interpreter"), "{err}");
    let (_, err) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "test", "fix-a"]))
        .env("SEEN", &seen)
        .env("FAKE_PYTEST", "SKIPPED [1] test_a.py:1: no GPU here\n1 skipped in 0.01s")
        .env("FAKE_VERDICT", "0 0 1 '\"no GPU here\"'")
        .expect(3);
    assert!(err.contains("no test of fix-a ran") && err.contains("no GPU here"), "{err}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "test", "fix-a"]))
        .env("SEEN", &seen)
        .env("FAKE_PYTEST", "SKIPPED [2] test_a.py:9: vectors not set\n1 passed, 2 skipped in 0.01s")
        .env("FAKE_VERDICT", "1 0 2 '\"vectors not set\", \"vectors not set\"'")
        .expect(0);
    assert!(out.contains("passed (1 passed, 2 skipped") && out.contains("skipped: vectors not set (2 tests)"), "{out}");
}

#[test]
fn test_honours_only_tree_and_says_not_applied() {
    let d = with_tests();
    let seen = d.path().join("seen");
    let run = |only: &[&str], code| {
        let mut args = vec!["--python", "./py"];
        args.extend_from_slice(only);
        args.extend(["test", "fix-a"]);
        d.cmd()
            .args(with_fixture(&args))
            .env("SEEN", &seen)
            .env("FAKE_PYTEST", "1 failed in 0.01s")
            .env("FAKE_EXIT", "1")
            .env("FAKE_VERDICT", "0 1")
            .expect(code)
    };
    let (out, err) = run(&[], 1);
    assert!(err.contains("fix-a is not applied on these trees"), "{err}");
    // The apply it advises is this run's: its catalogue, trees and interpreter.
    assert!(err.contains("(`gaudi-fixes --catalog cat --root root --python ./py apply fix-a` first)"), "{err}");
    assert!(out.contains("FAILED (1 failed in 0.01s) — fix-a is not applied"), "{out}");
    assert_eq!(d.read_string("seen"), "vllm\nvllm_gaudi\n");
    run(&["--only-tree", "vllm"], 1);
    assert_eq!(d.read_string("seen"), "vllm\n", "--only-tree vllm must hide vllm_gaudi from the tests");
    // fix-a's files are all in vllm: leaving vllm out leaves nothing to test.
    let (_, err) = run(&["--only-tree", "vllm_gaudi"], 3);
    assert!(err.contains("--only-tree leaves out"), "{err}");
}

#[test]
fn missing_torch_advice_never_installs_over_an_image() {
    let d = with_tests();
    let (_, err) =
        d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).env("FAKE_MISSING", "torch").expect(3);
    assert!(err.contains("image's own interpreter") && err.contains("download.pytorch.org/whl/cpu"), "{err}");
    assert!(!err.contains("pip install pytest torch`"), "unpinned advice: {err}");
    let (_, err) =
        d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).env("FAKE_MISSING", "pytest").expect(3);
    assert!(err.contains("pip install pytest`") && !err.contains("torch=="), "{err}");
}

// The closing line of `--format github` says what the run did, in its own words: only
// `apply` and `revert` write, a dry run would, a check passed, and a reader (`status`,
// `diff`) that sees a fix not applied says so as a warning, never as a pass notice. Before,
// every mode ended `::notice::gaudi-fixes: 0 file(s) written: fix-a not-applied` (diff and
// status, which never write, too), and `apply` said `1 file(s) written: fix-a not-applied`.
fn last_line(d: &Dir, args: &[&str], code: i32) -> String {
    let mut all = vec!["--format", "github"];
    all.extend_from_slice(args);
    let (out, _) = d.cmd().args(with_fixture(&all)).expect(code);
    out.lines().last().unwrap_or_default().to_string()
}

#[test]
fn the_github_summary_says_what_each_mode_did() {
    let d = fixture();
    // The fixture's fixes are on a release their variant was not verified on: a run that passed
    // counts that in its one notice.
    let unverified = " (1 on a release its variant was not verified on: `-v` or the human report says which)";
    for (args, want) in [
        (&["diff", "fix-a"][..], "::warning::gaudi-fixes: diff: fix-a not applied".to_string()),
        (&["status"], "::warning::gaudi-fixes: status: fix-a not applied, fix-b not applied".to_string()),
        (
            &["apply", "--dry-run", "fix-a"],
            format!("::notice::gaudi-fixes: dry run: 1 file(s) would be written: fix-a would be applied{unverified}"),
        ),
        (
            &["apply", "fix-a"],
            format!("::notice::gaudi-fixes: apply: 1 file(s) written: fix-a applied now{unverified}"),
        ),
        (
            &["apply", "fix-a"],
            format!("::notice::gaudi-fixes: apply: 0 file(s) written: fix-a already applied{unverified}"),
        ),
        (&["apply", "--check", "fix-a"], format!("::notice::gaudi-fixes: check passed: fix-a applied{unverified}")),
        (&["diff", "fix-a"], "::notice::gaudi-fixes: diff: fix-a applied".to_string()),
        (
            &["revert", "fix-a"],
            format!("::notice::gaudi-fixes: revert: 1 file(s) written: fix-a reverted now{unverified}"),
        ),
    ] {
        assert_eq!(last_line(&d, args, 0), want, "{args:?}");
    }
    assert!(!last_line(&d, &["diff", "fix-a"], 0).contains("written"));
}

// Every command a GitHub annotation names is written with the run's catalogue and tree flags,
// so it works as printed in the CI log. Before, the per-hunk drift annotation said
// "run `gaudi-fixes diff fix-a`", which in that job looks in the default catalogue and the
// trees python3 finds, not the ones the step checked.
#[test]
fn github_annotations_name_commands_with_the_runs_flags() {
    let d = fixture();
    d.write("root/vllm/mod.py", crate::common::PRISTINE.replace("    a = x + 1\n", "    a = x + 42\n"));
    for (args, code) in [(&["apply", "--check"][..], 2), (&["diff", "fix-a"], 2), (&["status"], 0)] {
        let mut all = vec!["--format", "github"];
        all.extend_from_slice(args);
        let (out, _) = d.cmd().args(with_fixture(&all)).expect(code);
        let commands: Vec<&str> = out.split('`').skip(1).step_by(2).filter(|c| c.starts_with("gaudi-fixes ")).collect();
        assert!(commands.iter().any(|c| c.contains(" diff fix-a")), "{args:?}: no diff named:\n{out}");
        for c in commands {
            // Commands on the trees carry the tree flags too; `matrix` and `port` work on the
            // catalogue and the release trees in the cache.
            let on_trees = [" apply", " revert", " diff ", " test ", " status"].iter().any(|w| c.contains(w));
            let want = if on_trees { "gaudi-fixes --catalog cat --root root " } else { "gaudi-fixes --catalog cat " };
            assert!(c.starts_with(want), "{args:?}: `{c}` lacks the run's flags:\n{out}");
        }
    }
}
