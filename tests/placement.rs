//! Exact placement through the real binary: the examples of issue 8, each of which edited the
//! wrong code (or flipped state between runs) before hunks had one place. Each either works
//! exactly or is refused; none touches the twin.

use crate::common::{sha256, Dir};

/// A function body shared word for word by `f` and `g` (seven lines with the `def`).
fn twin(name: &str, sync: bool, log: bool) -> String {
    format!(
        "def {name}(state):\n    state.check()\n    total = 0\n    for item in state.items:\n        total += item.size\n{}    state.total = total\n{}    return total\n",
        if sync { "    sync()\n" } else { "" },
        if log { "    log(total)\n" } else { "" }
    )
}

fn twins(g_sync: bool) -> String {
    format!("import os\n\n\n{}\n\n{}\n\ndef h():\n    return 3\n", twin("f", true, false), twin("g", g_sync, false))
}

/// Deletes `sync()` from `g`, as `git diff` writes it with the Python driver.
const DROP_SYNC: &str = "--- a/vllm/twins.py\n+++ b/vllm/twins.py\n@@ -16,7 +16,6 @@ def g(state):\n     total = 0\n     for item in state.items:\n         total += item.size\n-    sync()\n     state.total = total\n     return total\n \n";

/// A catalogue of one fix per (name, file, patch, pristine text); profile `all` holds them.
fn catalogue(d: &Dir, fixes: &[(&str, &str, &str, &str, &[&str])]) {
    let mut names = Vec::new();
    for (name, file, patch, pristine, after) in fixes {
        d.write(
            &format!("cat/fixes/{name}/fix.yaml"),
            format!(
                "name: {name}\nsummary: s\nkind: correctness\nupstream: {{status: not-filed}}\nafter: [{}]\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: {file}\n        patch: v0.26.0/p.patch\n        pristine_sha256: {}\n",
                after.join(", "),
                sha256(pristine.as_bytes())
            ),
        );
        d.write(&format!("cat/fixes/{name}/v0.26.0/p.patch"), patch);
        names.push(*name);
    }
    d.write("cat/profiles/default.yaml", format!("name: default\ndescription: all\nfixes: [{}]\n", names.join(", ")));
    d.write("root/vllm/__init__.py", "");
}

fn gf<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--catalog", "cat", "--root", "root"];
    v.extend_from_slice(args);
    v
}

#[test]
fn twin_functions_only_g_is_edited_and_state_never_flips() {
    let d = Dir::new();
    catalogue(&d, &[("drop-sync", "vllm/twins.py", DROP_SYNC, &twins(true), &[])]);
    d.write("root/vllm/twins.py", twins(true));
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/twins.py"), twins(false));
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(0);
    assert!(out.contains("nothing to do"), "{out}");
    // f keeps its sync() through every run.
    assert_eq!(d.read_string("root/vllm/twins.py"), twins(false));
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/twins.py"), twins(true));
}

#[test]
fn twin_functions_without_an_anchor_are_ambiguous_and_refused() {
    let d = Dir::new();
    let unanchored = DROP_SYNC.replace(" @@ def g(state):", " @@");
    catalogue(&d, &[("drop-sync", "vllm/twins.py", &unanchored, &twins(true), &[])]);
    d.write("root/vllm/twins.py", twins(true));
    let (out, _) = d.cmd().args(gf(&["apply", "--check", "--format", "json"])).expect(2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fixes"][0]["files"][0]["hunks"][0]["reason"], "ambiguous: found at lines 6 and 16", "{out}");
    d.cmd().args(gf(&["apply"])).expect(2);
    assert_eq!(d.read_string("root/vllm/twins.py"), twins(true));
}

#[test]
fn a_local_line_above_moves_the_hunk_but_never_into_the_twin() {
    let d = Dir::new();
    catalogue(&d, &[("drop-sync", "vllm/twins.py", DROP_SYNC, &twins(true), &[])]);
    // g already lost its sync() and gained lines above: the only pre-image left is f's.
    let local = format!("# local 1\n# local 2\n{}", twins(false));
    d.write("root/vllm/twins.py", &local);
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/twins.py"), local);
    // And with g's sync() back, the offset is found in g.
    let local = format!("# local 1\n# local 2\n{}", twins(true));
    d.write("root/vllm/twins.py", &local);
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(0);
    assert!(out.contains("offset +2"), "{out}");
    assert_eq!(d.read_string("root/vllm/twins.py"), format!("# local 1\n# local 2\n{}", twins(false)));
}

#[test]
fn an_insertion_already_in_the_twin_is_not_applied_and_revert_leaves_the_twin() {
    let d = Dir::new();
    let file = |g_log: bool| {
        format!("import os\n\n\n{}\n\n{}\n\ndef h():\n    return 3\n", twin("f", true, true), twin("g", true, g_log))
    };
    let (pristine, patched) = (file(false), file(true));
    let patch = "--- a/vllm/ins.py\n+++ b/vllm/ins.py\n@@ -19,6 +19,7 @@ def g(state):\n         total += item.size\n     sync()\n     state.total = total\n+    log(total)\n     return total\n \n \n";
    catalogue(&d, &[("log-g", "vllm/ins.py", patch, &pristine, &[])]);
    d.write("root/vllm/ins.py", &pristine);
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
    let (out, _) = d.cmd().args(gf(&["revert"])).expect(0);
    assert!(out.contains("nothing to do"), "{out}");
    assert_eq!(d.read_string("root/vllm/ins.py"), pristine);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/ins.py"), patched);
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/ins.py"), pristine);
}

#[test]
fn a_zero_context_deletion_is_refused_when_the_catalogue_loads() {
    let d = Dir::new();
    let patch = "--- a/vllm/twins.py\n+++ b/vllm/twins.py\n@@ -19 +18,0 @@ def g(state):\n-    sync()\n";
    catalogue(&d, &[("drop-sync", "vllm/twins.py", patch, &twins(true), &[])]);
    d.write("root/vllm/twins.py", twins(true));
    let (_, err) = d.cmd().args(gf(&["apply"])).expect(3);
    assert!(err.contains("p.patch:3") && err.contains("no context"), "{err}");
    assert_eq!(d.read_string("root/vllm/twins.py"), twins(true));
}

#[test]
fn a_patch_adding_the_final_newline_applies_reads_applied_and_reverts() {
    let d = Dir::new();
    let pristine = "def f():\n    a = 1\n    return a";
    let patch = "--- a/vllm/nl.py\n+++ b/vllm/nl.py\n@@ -1,3 +1,3 @@\n def f():\n     a = 1\n-    return a\n\\ No newline at end of file\n+    return a\n";
    catalogue(&d, &[("newline", "vllm/nl.py", patch, pristine, &[])]);
    d.write("root/vllm/nl.py", pristine);
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/nl.py"), format!("{pristine}\n"));
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(0);
    assert!(out.contains("nothing to do"), "{out}");
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/nl.py"), pristine);
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
}

#[test]
fn mixed_line_endings_round_trip_byte_identically() {
    let d = Dir::new();
    // An LF function, then a CRLF one that the fix edits, then LF again.
    let pristine = "import os\n\n\ndef f():\n    return 1\n\n\ndef g():\r\n    a = 1\r\n    b = 2\r\n    return a + b\r\n\n\ndef h():\n    return 3\n";
    let patch = "--- a/vllm/m.py\n+++ b/vllm/m.py\n@@ -7,7 +7,8 @@ def f():\n \n def g():\n     a = 1\n-    b = 2\n+    b = 3\n+    c = 4\n     return a + b\n \n \n";
    catalogue(&d, &[("eol", "vllm/m.py", patch, pristine, &[])]);
    d.write("root/vllm/m.py", pristine);
    d.cmd().args(gf(&["apply"])).expect(0);
    let patched = d.read_string("root/vllm/m.py");
    // Every untouched line keeps its ending; the new lines take their neighbours' (CRLF).
    assert_eq!(
        patched,
        "import os\n\n\ndef f():\n    return 1\n\n\ndef g():\r\n    a = 1\r\n    b = 3\r\n    c = 4\r\n    return a + b\r\n\n\ndef h():\n    return 3\n"
    );
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read("root/vllm/m.py"), pristine.as_bytes());
}

/// `forward_native` and `forward_cpu` share a docstring and body; the fix targets the first.
fn sampler(doc: &str) -> String {
    format!("class Sampler:\n    def forward_native(\n        self,\n        logits,\n    ):\n        \"\"\"\n        The logits tensor may be {doc} in-place.\n        \"\"\"\n        logits = apply(logits)\n        return sample(logits)\n\n    def forward_cpu(\n        self,\n        logits,\n    ):\n        \"\"\"\n        The logits tensor may be updated in-place.\n        \"\"\"\n        logits = apply(logits)\n        return sample(logits)\n")
}

const FAST_PATH: &str = "--- a/vllm/s.py\n+++ b/vllm/s.py\n@@ -7,4 +7,6 @@ def forward_native(\n         The logits tensor may be updated in-place.\n         \"\"\"\n+        if fast(logits):\n+            return fast_sample(logits)\n         logits = apply(logits)\n         return sample(logits)\n";

#[test]
fn a_reworded_docstring_is_drift_with_the_reason_never_the_twin_method() {
    let d = Dir::new();
    catalogue(&d, &[("fast", "vllm/s.py", FAST_PATH, &sampler("updated"), &[])]);
    let edited = sampler("modified");
    d.write("root/vllm/s.py", &edited);
    let (out, _) = d.cmd().args(gf(&["apply", "--check"])).expect(2);
    assert!(out.contains("found only inside `forward_cpu` (line 17); the fix targets `forward_native`"), "{out}");
    let (out, _) = d.cmd().args(gf(&["apply", "--check", "--format", "json"])).expect(2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let reason = v["fixes"][0]["files"][0]["hunks"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("found only inside `forward_cpu`"), "{out}");
    let (out, _) = d.cmd().args(gf(&["apply", "--check", "--format", "github"])).expect(2);
    assert!(out.contains("the fix targets `forward_native`"), "{out}");
    d.cmd().args(gf(&["apply"])).expect(2);
    assert_eq!(d.read_string("root/vllm/s.py"), edited);
    // The pristine file: applied in forward_native only.
    d.write("root/vllm/s.py", sampler("updated"));
    d.cmd().args(gf(&["apply"])).expect(0);
    let out = d.read_string("root/vllm/s.py");
    assert_eq!(out.matches("fast_sample").count(), 1);
    assert!(out.find("fast_sample").unwrap() < out.find("def forward_cpu").unwrap(), "{out}");
}

#[cfg(unix)]
#[test]
fn one_file_under_two_names_is_one_edit_stream() {
    let d = Dir::new();
    let pristine = "def a():\n    x = 1\n    return x\n\n\ndef b():\n    y = 2\n    return y\n";
    let pa = "--- a/vllm/real.py\n+++ b/vllm/real.py\n@@ -1,4 +1,5 @@\n def a():\n     x = 1\n+    x += 1\n     return x\n \n";
    let pb = "--- a/vllm/alias.py\n+++ b/vllm/alias.py\n@@ -6,3 +6,4 @@ def a():\n def b():\n     y = 2\n+    y += 2\n     return y\n";
    catalogue(
        &d,
        &[("fix-r", "vllm/real.py", pa, pristine, &[]), ("fix-s", "vllm/alias.py", pb, pristine, &["fix-r"])],
    );
    d.write("root/vllm/real.py", pristine);
    std::os::unix::fs::symlink("real.py", d.path().join("root/vllm/alias.py")).unwrap();
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(0);
    assert!(out.contains("wrote 1 file(s)"), "{out}");
    let both = "def a():\n    x = 1\n    x += 1\n    return x\n\n\ndef b():\n    y = 2\n    y += 2\n    return y\n";
    assert_eq!(d.read_string("root/vllm/real.py"), both);
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/real.py"), pristine);

    // Two fixes changing the same lines through the two names: refused, naming both.
    let pc = pa.replace("real.py", "alias.py").replace("x += 1", "x += 100");
    d.write("cat/fixes/fix-s/v0.26.0/p.patch", pc);
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(2);
    assert!(out.contains("conflict: vllm/alias.py is also patched by `fix-r` (as vllm/real.py)"), "{out}");
    let (out, _) = d.cmd().args(gf(&["apply", "--format", "json"])).expect(2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["fixes"][1]["basis"],
        serde_json::json!({"code": "conflict", "file": "vllm/alias.py", "with": [{"fix": "fix-r", "path": "vllm/real.py"}]}),
        "{out}"
    );
    assert_eq!(d.read_string("root/vllm/real.py"), pristine);
}

#[test]
fn lint_upstream_requires_anchors_and_one_place() {
    let d = Dir::new();
    d.write("up/v0.26.0/vllm/twins.py", twins(true));
    d.write("up/v0.26.0/vllm/__init__.py", "");
    catalogue(&d, &[("drop-sync", "vllm/twins.py", DROP_SYNC, &twins(true), &[])]);
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    assert!(out.contains("every hunk anchored and found once"), "{out}");
    // The same hunk without its anchor: inside `def g`, and found twice.
    d.write("cat/fixes/drop-sync/v0.26.0/p.patch", DROP_SYNC.replace(" @@ def g(state):", " @@"));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(out.contains("the header names no anchor, but the hunk lies in `def g(state):`"), "{out}");
    // A wrong anchor puts the hunk into the twin: lint sees it away from its header line.
    d.write("cat/fixes/drop-sync/v0.26.0/p.patch", DROP_SYNC.replace("def g(state):", "def f(state):"));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(1);
    assert!(out.contains("found at line 6 of the file the patch is made on, but its header says line 16"), "{out}");
}

/// Adds `w = 4` after the file's last line, as `git diff` writes it from a file that ends in a
/// newline: the tree's copy may lack that newline (an editor, a hand-made wheel) or use CRLF.
const APPEND_AT_END: &str = "--- a/vllm/end.py\n+++ b/vllm/end.py\n@@ -1,3 +1,4 @@\n x = 1\n y = 2\n z = 3\n+w = 4\n";

/// `apply` on `pristine`, which must give `patched`; then `--check` reads applied, `apply` has
/// nothing to do, `revert` gives back `pristine`'s bytes and `apply` works again.
fn appends_and_round_trips(pristine: &str, patched: &str) {
    let d = Dir::new();
    catalogue(&d, &[("append", "vllm/end.py", APPEND_AT_END, pristine, &[])]);
    d.write("root/vllm/end.py", pristine);
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/end.py"), patched, "the old last line keeps a line ending");
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    let (out, _) = d.cmd().args(gf(&["apply"])).expect(0);
    assert!(out.contains("nothing to do"), "{out}");
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read("root/vllm/end.py"), pristine.as_bytes(), "revert is byte-exact");
    d.cmd().args(gf(&["apply", "--check"])).expect(1);
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/end.py"), patched);
}

#[test]
fn an_addition_after_a_last_line_without_newline_gives_it_its_ending() {
    appends_and_round_trips("x = 1\ny = 2\nz = 3", "x = 1\ny = 2\nz = 3\nw = 4");
}

#[test]
fn an_addition_after_a_crlf_last_line_without_newline_gives_it_crlf() {
    appends_and_round_trips("x = 1\r\ny = 2\r\nz = 3", "x = 1\r\ny = 2\r\nz = 3\r\nw = 4");
}

#[test]
fn an_addition_at_the_end_of_a_crlf_file_is_crlf() {
    appends_and_round_trips("x = 1\r\ny = 2\r\nz = 3\r\n", "x = 1\r\ny = 2\r\nz = 3\r\nw = 4\r\n");
}

#[test]
fn an_addition_after_a_lone_last_line_without_newline_round_trips() {
    let patch = "--- a/vllm/end.py\n+++ b/vllm/end.py\n@@ -1 +1,2 @@\n z = 3\n+w = 4\n";
    let d = Dir::new();
    catalogue(&d, &[("append", "vllm/end.py", patch, "z = 3", &[])]);
    d.write("root/vllm/end.py", "z = 3");
    d.cmd().args(gf(&["apply"])).expect(0);
    assert_eq!(d.read_string("root/vllm/end.py"), "z = 3\nw = 4");
    d.cmd().args(gf(&["apply", "--check"])).expect(0);
    d.cmd().args(gf(&["revert"])).expect(0);
    assert_eq!(d.read_string("root/vllm/end.py"), "z = 3");
}
