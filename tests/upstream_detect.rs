//! `detect:` on an `upstreamed: true` release, through the real binary: a tree that holds
//! upstream's text is reported upstreamed whatever its version (and nothing is written), a tree
//! without it is judged by the variants as before (also when its version is the upstreamed
//! release's), our own applied fix still reads applied, and a misplaced `detect:` is an error
//! naming the file and line.

use crate::common::{fixture, with_fixture, Dir, PRISTINE};

/// Upstream's fix, as the tree would hold it: a function fix-a's patch does not know.
const UPSTREAM_DEF: &str = "\n\ndef upstream_triple(a):\n    return a * 3\n";

fn detecting_fixture() -> Dir {
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace(
        "releases:\n",
        "releases:\n  v0.25.0:\n    upstreamed: true\n    detect:\n      - tree: vllm\n        file: vllm/mod.py\n        text: \"def upstream_triple(a):\\n    return a * 3\"\n",
    );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d
}

/// Upstream's change on top of the pristine file, keeping the context fix-a's patch needs, so
/// that without `detect:` the fix would still apply (a second, duplicate fix).
fn upstream_file() -> String {
    format!("{PRISTINE}{UPSTREAM_DEF}")
}

#[test]
fn a_tree_with_upstreams_text_is_upstreamed_whatever_its_version() {
    // The control: without detect:, fix-a's patch still finds its context and would apply.
    let plain = fixture();
    plain.write("root/vllm/mod.py", upstream_file());
    let (out, _) = plain.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(1);
    assert!(out.contains("not applied"), "{out}");
    let d = detecting_fixture();
    d.write("root/vllm/mod.py", upstream_file());
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
    assert!(out.contains("check: everything applied: 1 fix (1 upstreamed)"), "{out}");
    let (out, _) = d.cmd().args(with_fixture(&["-v", "apply", "--check", "fix-a"])).expect(0);
    assert!(out.contains("upstreamed") && out.contains("the tree carries the upstream fix"), "{out}");
    let before = d.snapshot("root");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-a", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "upstreamed", "{out}");
    assert_eq!(v["fixes"][0]["variant"], "v0.25.0", "{out}");
    assert_eq!(d.snapshot("root"), before, "apply wrote to a tree that carries the upstream fix");
}

#[test]
fn a_tree_without_it_is_judged_by_the_variants_even_at_that_version() {
    let d = detecting_fixture();
    // The version names the upstreamed release, but the content is the old file: not upstreamed.
    d.write("root/vllm/_version.py", "__version__ = version = '0.25.0'\n");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(1);
    assert!(out.contains("not applied") && !out.contains("upstreamed"), "{out}");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    // Our own fix applied reads applied (the detect text is absent anyway), and reverts.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
    assert!(out.contains("applied") && !out.contains("upstreamed"), "{out}");
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE);
    // Locally modified at that version: drifted, not put down to upstream by the version hint.
    d.write("root/vllm/mod.py", PRISTINE.replace("    b = a * 2\n", "    b = a * 2  # local edit\n"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
    assert!(out.contains("drifted") && !out.contains("upstreamed"), "{out}");
}

#[test]
fn our_applied_fix_wins_over_detect_text() {
    let d = detecting_fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let patched = d.read_string("root/vllm/mod.py");
    d.write("root/vllm/mod.py", format!("{patched}{UPSTREAM_DEF}"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "applied", "{out}");
}

#[test]
fn detect_without_upstreamed_is_an_error_naming_file_and_line() {
    let d = fixture();
    let y = d
        .read_string("cat/fixes/fix-a/fix.yaml")
        .replace("    patches:\n", "    detect:\n      - {tree: vllm, file: vllm/mod.py, text: x}\n    patches:\n");
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let before = d.snapshot("root");
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(3);
    assert!(err.contains("fix-a/fix.yaml:") && err.contains("`detect:` needs `upstreamed: true`"), "{err}");
    let y = d
        .read_string("cat/fixes/fix-a/fix.yaml")
        .replace("    detect:\n      - {tree: vllm, file: vllm/mod.py, text: x}\n", "");
    let y = y.replace(
        "releases:\n",
        "releases:\n  v0.25.0:\n    upstreamed: true\n    detect:\n      - {tree: vllm, file: vllm_gaudi/x.py, text: x}\n",
    );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(3);
    assert!(err.contains("fix-a/fix.yaml:") && err.contains("must be inside `vllm/`"), "{err}");
    assert_eq!(d.snapshot("root"), before);
}

#[test]
fn detect_text_in_a_comment_or_a_string_is_not_upstreams_change() {
    let d = detecting_fixture();
    for mention in [
        "\n# upstream: def upstream_triple(a):\n#     return a * 3\n",
        "\n\"\"\"\ndef upstream_triple(a):\n    return a * 3\n\"\"\"\n",
        "\nNOTE = \"def upstream_triple(a):\"\nNOTE2 = '    return a * 3'\n",
    ] {
        d.write("root/vllm/mod.py", format!("{PRISTINE}{mention}"));
        let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["fixes"][0]["state"], "not-applied", "{mention:?} counted as upstream's change: {out}");
    }
    // The same lines as code are upstream's change.
    d.write("root/vllm/mod.py", upstream_file());
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
}

#[test]
fn lint_refuses_a_detect_that_misses_a_file_the_fix_patches_or_has_no_code() {
    let d = detecting_fixture();
    d.cmd().args(["--catalog", "cat", "lint"]).expect(0);
    for (text, want) in [
        (
            "file: vllm/mod.py\n        text: \"def upstream_triple(a):",
            "`detect:` names no text in vllm/mod.py, which fix-a patches",
        ),
        ("text: \"def upstream_triple(a):", "has no line of code"),
    ] {
        let y = d.read_string("cat/fixes/fix-a/fix.yaml");
        let bad = if want.contains("no text in") {
            y.replace(text, "file: vllm/other.py\n        text: \"def upstream_triple(a):")
        } else {
            y.replace("text: \"def upstream_triple(a):\\n    return a * 3\"", "text: \"# def upstream_triple(a):\"")
        };
        let e = detecting_fixture();
        e.write("cat/fixes/fix-a/fix.yaml", bad);
        let (out, _) = e.cmd().args(["--catalog", "cat", "lint"]).expect(1);
        assert!(out.contains(want) && out.contains("fix-a/fix.yaml"), "{out}");
    }
}

#[test]
fn lint_upstream_reports_a_detect_text_found_in_a_pristine_release_the_fix_covers() {
    let d = detecting_fixture();
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(!out.contains("detect text is in pristine"), "{out}");
    // v0.26.0's pristine file already holds the text (as code): the fix would never apply there.
    d.write("up/v0.26.0/vllm/mod.py", upstream_file());
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    let sha = crate::common::sha256(upstream_file().as_bytes());
    d.write("cat/fixes/fix-a/fix.yaml", y.replace(&crate::common::sha256(PRISTINE.as_bytes()), &sha));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(out.contains("release v0.25.0: its detect text is in pristine v0.26.0"), "{out}");
}

#[test]
fn detect_reads_strings_as_pythons_tokenizer_does_and_matches_whole_lines() {
    let d = detecting_fixture();
    for (mention, why) in [
        // A one-quote string continued with backslashes: its later lines are the string's.
        ("\nNOTE = \"see: \\\ndef upstream_triple(a):\\\n    return a * 3\"\n", "a backslash-continued string"),
        // PEP 701: the field's '"""' does not close the f-string; the lines below are its text.
        ("\nNOTE = f\"\"\"{'\"\"\"'}\ndef upstream_triple(a):\n    return a * 3\n\"\"\"\n", "an f-string"),
        // A longer line holding the text is another line.
        ("\n\ndef upstream_triple(a):\n    return a * 3 + 1\n", "a longer line"),
    ] {
        d.write("root/vllm/mod.py", format!("{PRISTINE}{mention}"));
        let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["fixes"][0]["state"], "not-applied", "{why} counted as upstream's change: {out}");
    }
}

#[test]
fn detect_text_with_a_comment_line_is_found_and_lint_refuses_text_that_never_matches() {
    let d = detecting_fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace(
        "text: \"def upstream_triple(a):\\n    return a * 3\"",
        "text: \"def upstream_triple(a):\\n    # triple it\\n    return a * 3\"",
    );
    d.write("cat/fixes/fix-a/fix.yaml", &y);
    d.cmd().args(["--catalog", "cat", "lint"]).expect(0);
    d.write("root/vllm/mod.py", format!("{PRISTINE}\n\ndef upstream_triple(a):\n    # triple it\n    return a * 3\n"));
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["state"], "upstreamed", "{out}");
    // Text that is only a docstring is never found: lint says so rather than calling it clean.
    let doc = y.replace(
        "text: \"def upstream_triple(a):\\n    # triple it\\n    return a * 3\"",
        "text: \"\\\"\\\"\\\"def upstream_triple(a):\\\"\\\"\\\"\"",
    );
    d.write("cat/fixes/fix-a/fix.yaml", doc);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("has no line of code") && out.contains("fix-a/fix.yaml"), "{out}");
}
