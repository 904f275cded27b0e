//! What `record` and `port` write into a catalogue, through the real binary on the temp
//! fixture: a patch file other variants share is never rewritten for one of them; `port` makes
//! a patch on the fixes it comes after, as `lint --upstream` checks it; the fix.yaml edit keeps
//! line endings, comments and release order (and `lint` checks the order); release names are
//! normalised; re-porting onto a release says what became of its `verified:`; `record` refuses a
//! file `apply` would never read.

use crate::common::{fixture, sha256, with_fixture, Dir, FIX_A_PATCH, FIX_B_PATCH, PRISTINE};

fn patched_a() -> String {
    PRISTINE.replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n")
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `--catalog cat record FIX --release RELEASE --pristine root --edited edited`.
fn record<'d>(d: &'d Dir, fix: &str, release: &str) -> crate::common::TestCommand<'d> {
    d.cmd().args(["--catalog", "cat", "record", fix, "--release", release, "--pristine", "root", "--edited", "edited"])
}

/// `--catalog cat port FIX --from v0.26.0 --from-tree root --to TO --release RELEASE`.
fn port<'d>(d: &'d Dir, fix: &str, to: &str, release: &str) -> crate::common::TestCommand<'d> {
    d.cmd().args(crate::common::port_args(fix, to, release))
}

/// The release keys of `yaml` (the lines `  vX…:` of its releases block), in file order.
fn release_keys(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter(|l| l.starts_with("  v") && !l.starts_with("   ") && l.trim_end().ends_with(':'))
        .map(|l| l.trim().trim_end_matches(':').to_string())
        .collect()
}

/// fix-a's v0.27.0 variant reads v0.26.0's patch file (the pristine file is the same), as
/// topk-subset-sampler's three variants share `v0.26.0/hpu_input_batch.patch`.
const SHARED_V27: &str = "  v0.27.0:\n    verified: [v0.27.0, v0.28.0]\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n";

#[test]
fn record_never_rewrites_a_patch_file_another_variant_reads() {
    let d = fixture();
    let v27 = format!("{SHARED_V27}        pristine_sha256: {}\n", sha256(PRISTINE.as_bytes()));
    let yaml = d.read_string("cat/fixes/fix-a/fix.yaml") + &v27;
    d.write("cat/fixes/fix-a/fix.yaml", &yaml);
    let edited = patched_a().replace("    return 1\n", "    # hand edit\n    return 1\n");
    d.write("edited/vllm/mod.py", &edited);
    let (out, _) = record(&d, "fix-a", "v0.26.0").expect(0);
    assert_eq!(
        d.read_string("cat/fixes/fix-a/v0.26.0/mod.patch"),
        FIX_A_PATCH,
        "record of v0.26.0 rewrote the patch file v0.27.0 reads too"
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.contains(&v27), "v0.27.0's entry (patch, verified:) changed:\n{y}");
    assert!(out.contains("shared with v0.27.0"), "record did not say why it wrote a new file:\n{out}");
    // v0.26.0 now reads a patch file of its own, under its release's directory.
    let v26 = y.split("  v0.27.0:").next().unwrap();
    let own = v26.lines().find_map(|l| l.trim().strip_prefix("patch: ")).unwrap().to_string();
    assert!(own.starts_with("v0.26.0/") && own != "v0.26.0/mod.patch", "{y}");
    assert!(d.read_string(&format!("cat/fixes/fix-a/{own}")).contains("# hand edit"));
    d.cmd().args(["--catalog", "cat", "lint"]).expect(0);
    // Recording v0.27.0 the same way leaves v0.26.0's file alone too.
    let (out, _) = record(&d, "fix-a", "v0.27.0").expect(0);
    assert_eq!(d.read_string("cat/fixes/fix-a/v0.26.0/mod.patch"), FIX_A_PATCH, "{out}");
}

/// The fixture's tree with an import added on top: v0.27.0 of `vllm/mod.py`.
fn new_release(d: &Dir) -> String {
    let new = format!("import sys\n{PRISTINE}");
    d.write("new/vllm/__init__.py", "");
    d.write("new/vllm/mod.py", &new);
    d.write("up/v0.26.0/vllm/__init__.py", "");
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("up/v0.27.0/vllm/__init__.py", "");
    d.write("up/v0.27.0/vllm/mod.py", &new);
    new
}

#[test]
fn port_builds_on_the_fix_it_comes_after() {
    // fix-b is `after: [fix-a]` and both edit vllm/mod.py: fix-b's patch is made on fix-a's.
    let d = fixture();
    new_release(&d);
    port(&d, "fix-a", "new", "v0.27.0").expect(0);
    port(&d, "fix-b", "new", "v0.27.0").expect(0);
    let out = ported_profile_holds(&d);
    assert!(out.contains("fix-b v0.27.0: vllm/mod.py applies to pristine + fix-a"), "{out}");
}

/// After both fixes are ported to v0.27.0: `lint --upstream up` is clean (its output is
/// returned), and the ported profile applies exactly to the new tree and reads applied, as
/// v0.27.0, afterwards.
fn ported_profile_holds(d: &Dir) -> String {
    let (lint, _) = d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    d.write("new/vllm/_version.py", "__version__ = version = '0.27.0'\n");
    let args = ["--catalog", "cat", "--root", "new"];
    d.cmd().args(args).args(["apply", "--profile", "performance"]).expect(0);
    let (out, _) =
        d.cmd().args(args).args(["apply", "--check", "--profile", "performance", "--format", "json"]).expect(0);
    for fix in json(&out)["fixes"].as_array().unwrap() {
        assert_eq!((fix["state"].as_str(), fix["variant"].as_str()), (Some("applied"), Some("v0.27.0")), "{out}");
    }
    lint
}

#[test]
fn port_refuses_to_build_on_a_fix_not_yet_ported() {
    // fix-a (which fix-b comes after) has no v0.27.0 variant yet: fix-b cannot be made on it.
    let d = fixture();
    new_release(&d);
    let before = d.snapshot("cat");
    let (_, err) = port(&d, "fix-b", "new", "v0.27.0").expect(3);
    assert!(err.contains("fix-a") && err.contains("port fix-a to v0.27.0 first"), "{err}");
    // One sentence: before, a broken string continuation left 18 spaces inside it.
    assert!(err.contains("is made on top of it") && !err.contains("  "), "{err}");
    assert_eq!(d.snapshot("cat"), before, "a refused port wrote something");
}

#[test]
fn record_keeps_a_crlf_fix_yaml_crlf() {
    let d = fixture();
    let crlf = d.read_string("cat/fixes/fix-a/fix.yaml").replace('\n', "\r\n");
    d.write("cat/fixes/fix-a/fix.yaml", &crlf);
    d.write("edited/vllm/mod.py", patched_a());
    record(&d, "fix-a", "v0.27.0").expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.starts_with(&crlf), "{y:?}");
    assert!(y.contains("  v0.27.0:\r\n"), "{y:?}");
    assert_eq!(y.matches('\n').count(), y.matches("\r\n").count(), "record turned CRLF lines into LF: {y:?}");
}

#[test]
fn record_keeps_a_comment_after_releases() {
    let d = fixture();
    let yaml = d
        .read_string("cat/fixes/fix-a/fix.yaml")
        .replace("releases:\n", "releases:  # one variant per release\n")
        .replace("  v0.26.0:\n", "  v0.26.0:   # the first\n");
    d.write("cat/fixes/fix-a/fix.yaml", &yaml);
    d.write("edited/vllm/mod.py", patched_a());
    record(&d, "fix-a", "v0.27.0").expect(0);
    // And a release written with a comment on its key is replaced, not added twice.
    record(&d, "fix-a", "v0.26.0").expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.contains("releases:  # one variant per release\n"), "{y}");
    assert_eq!(release_keys(&y.replace("   # the first", "")), ["v0.26.0", "v0.27.0"], "{y}");
}

#[test]
fn record_inserts_a_release_in_release_order() {
    let d = fixture();
    d.write("edited/vllm/mod.py", patched_a());
    for release in ["v0.27.0", "v0.9.0", "v0.26.1", "v0.30.0", "v0.10.0"] {
        record(&d, "fix-a", release).expect(0);
    }
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert_eq!(release_keys(&y), ["v0.9.0", "v0.10.0", "v0.26.0", "v0.26.1", "v0.27.0", "v0.30.0"], "{y}");
    d.cmd().args(["--catalog", "cat", "lint"]).expect(0);
}

#[test]
fn lint_finds_releases_out_of_order() {
    let d = fixture();
    let yaml = d.read_string("cat/fixes/fix-a/fix.yaml");
    let (head, v26) = yaml.split_once("  v0.26.0:\n").unwrap();
    let entry = format!("  v0.26.0:\n{v26}");
    d.write("cat/fixes/fix-a/fix.yaml", format!("{head}{}{entry}", entry.replace("v0.26.0:", "v0.30.0:")));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("fix-a/fix.yaml") && out.contains("v0.26.0 comes after v0.30.0"), "{out}");
    // A key that is not written as vX.Y.Z is found too: it would be a second variant of v0.26.0.
    d.write("cat/fixes/fix-a/fix.yaml", yaml.replace("  v0.26.0:\n", "  v0.26:\n"));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("`v0.26` is not written as v0.26.0"), "{out}");
    // And so is a `verified:` release.
    d.write("cat/fixes/fix-a/fix.yaml", yaml.replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [v00.26]\n"));
    let (out, _) = d.cmd().args(["--catalog", "cat", "lint"]).expect(1);
    assert!(out.contains("verified: `v00.26` is not written as v0.26.0"), "{out}");
}

#[test]
fn release_aliases_are_one_variant() {
    let d = fixture();
    d.write("edited/vllm/mod.py", patched_a());
    for alias in ["0.27", "v0.27", "0.27.0", "v00.027.0"] {
        record(&d, "fix-a", alias).expect(0);
    }
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert_eq!(release_keys(&y), ["v0.26.0", "v0.27.0"], "{y}");
    assert!(d.path().join("cat/fixes/fix-a/v0.27.0/mod.patch").is_file(), "{}", d.listing());
    // matrix takes them as one release too.
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    let (out, _) = d
        .cmd()
        .args(["--catalog", "cat", "--python", "./no-python", "matrix", "--releases", "0.26,v0.26,v00.026.0"])
        .args(["--fix", "fix-a", "--no-tests"])
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    let cells = json(&out)["cells"].as_array().unwrap().clone();
    assert_eq!(cells.len(), 1, "{out}");
    assert_eq!(cells[0]["release"], "v0.26.0", "{out}");
    // Not a version: a clear error, nothing written.
    let before = d.snapshot("cat");
    for bad in ["banana", "v0.x.1", "0..26", "v0.26.0.", "latest"] {
        let (_, err) = record(&d, "fix-a", bad).expect(3);
        assert!(err.contains(&format!("`{bad}` is not a release")), "{err}");
    }
    assert_eq!(d.snapshot("cat"), before);
}

#[test]
fn port_onto_an_existing_release_says_what_became_of_verified() {
    let d = fixture();
    new_release(&d);
    port(&d, "fix-a", "new", "v0.27.0").expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace("  v0.27.0:\n", "  v0.27.0:\n    verified: [v0.27.0]\n");
    d.write("cat/fixes/fix-a/fix.yaml", &y);
    // The same variant made again: it is what was verified, so verified: stays.
    let (out, _) = port(&d, "fix-a", "new", "v0.27.0").expect(0);
    assert!(out.contains("verified: [v0.27.0] kept"), "{out}");
    assert_eq!(d.read_string("cat/fixes/fix-a/fix.yaml"), y, "{out}");
    // A different patch for it: what was verified is not this; dropped, and said so.
    d.write("new2/vllm/mod.py", format!("import re\nimport sys\n{PRISTINE}"));
    let (out, _) = port(&d, "fix-a", "new2", "v0.27.0").expect(0);
    assert!(out.contains("verified: [v0.27.0] dropped"), "{out}");
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(!y.contains("verified: [v0.27.0]"), "{y}");
}

#[test]
fn record_refuses_a_file_larger_than_apply_reads() {
    let d = fixture();
    // 17 MiB of source (apply reads files up to 16 MiB), one line edited.
    let line = format!("# {}\n", "x".repeat(1021));
    let big = format!("{PRISTINE}{}", line.repeat(17 * 1024));
    d.write("root/vllm/mod.py", &big);
    d.write("edited/vllm/mod.py", big.replace("    b = a * 2\n", "    b = a * 3\n"));
    let before = d.snapshot("cat");
    let (_, err) = record(&d, "fix-a", "v0.27.0").expect(3);
    assert!(err.contains("vllm/mod.py") && err.contains("larger than the 16 MiB"), "{err}");
    assert_eq!(d.snapshot("cat"), before, "a refused record wrote something");
    // with_fixture is the tree apply reads: it refuses the file too (the limit is one).
    let (_, err) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(3);
    assert!(err.contains("16 MiB"), "{err}");
}

#[test]
fn record_refreshes_a_release_whatever_its_key_spelling_and_keeps_its_comments() {
    let d = fixture();
    d.write("edited/vllm/mod.py", patched_a());
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace(
        "releases:\n  v0.26.0:\n    patches:\n",
        "releases:\n# a column-0 comment inside releases:\n  v0.26:  # the key's comment\n    # a comment inside the entry\n    patches:\n",
    );
    d.write("cat/fixes/fix-a/fix.yaml", &y);
    record(&d, "fix-a", "0.26").expect(0);
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    let keys: Vec<&str> = y.lines().filter(|l| l.starts_with("  v0.26")).collect();
    assert_eq!(keys, ["  v0.26.0:  # the key's comment"], "not one release under its canonical key: {y}");
    for comment in ["# a column-0 comment inside releases:", "# the key's comment", "# a comment inside the entry"] {
        assert!(y.contains(comment), "lost {comment:?}: {y}");
    }
    // What apply chooses is the refreshed variant.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--format", "json"])).expect(1);
    assert_eq!(json(&out)["fixes"][0]["variant"], "v0.26.0", "{out}");
}

/// fix-a changes one line with no context on purpose; fix-b (after it) adds a line below it,
/// where three lines of context around fix-a's change would be.
const ZERO_A: &str =
    "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -10 +10 @@ def sample(x):\n-    b = a * 2\n+    b = a * 3\n";
const ABOVE_B: &str = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -9,6 +9,7 @@ def sample(x):\n     a = x + 1\n     b = a * 3\n     return b\n+    # fix-b was here\n \n \n def other():\n";

/// The fixture with fix-a's zero-context patch and fix-b's edit next to it; `tail` is added to
/// the end of `vllm/mod.py` in every release (its trees as [`new_release`] writes them).
fn zero_context(d: &Dir, tail: &str) {
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", ZERO_A);
    d.write("cat/fixes/fix-b/v0.26.0/mod.patch", ABOVE_B);
    // Its context holds fix-a's edit: it needs fix-a, not only comes after it.
    let y = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]");
    d.write("cat/fixes/fix-b/fix.yaml", y);
    new_release(d);
    let (old, new) = (format!("{PRISTINE}{tail}"), format!("import sys\n{PRISTINE}{tail}"));
    for fix in ["fix-a", "fix-b"] {
        let y = d.read_string(&format!("cat/fixes/{fix}/fix.yaml"));
        d.write(&format!("cat/fixes/{fix}/fix.yaml"), y.replace(&sha256(PRISTINE.as_bytes()), &sha256(old.as_bytes())));
    }
    for (path, text) in [("root", &old), ("up/v0.26.0", &old), ("new", &new), ("up/v0.27.0", &new)] {
        d.write(&format!("{path}/vllm/mod.py"), text);
    }
}

/// fix-a's line occurs a second time, in another def: inside its header's def it is still found
/// once, as `lint --upstream` reads it, so it needs no context there either.
const AGAIN: &str = "\n\ndef again(a):\n    b = a * 2\n    return b\n";

#[test]
fn port_keeps_a_hunk_without_context_without_context() {
    for tail in ["", AGAIN] {
        let d = fixture();
        zero_context(&d, tail);
        // The v0.26.0 catalogue is clean: with both applied each reads applied.
        d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
        port(&d, "fix-a", "new", "v0.27.0").expect(0);
        let ported = d.read_string("cat/fixes/fix-a/v0.27.0/mod.patch");
        assert_eq!(ported, ZERO_A.replace("@@ -10 +10 @@", "@@ -11 +11 @@"), "the hunk's width changed");
        port(&d, "fix-b", "new", "v0.27.0").expect(0);
        ported_profile_holds(&d);
    }
}

#[test]
fn port_writes_a_variant_on_lines_of_the_fix_it_is_made_on_as_status_reads_it() {
    // fix-b's v0.27.0 is ported onto fix-a's v0.27.0 (written by hand with three lines of
    // context, which hold the line fix-b edits): with both applied, fix-a reads applied under
    // fix-b, as `status` and `revert` judge it (fix-b is made on top of it), so `lint --upstream`
    // has nothing to say and the port is written. (A port lint rejects: the test below.)
    let d = fixture();
    zero_context(&d, "");
    let wide = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -8,7 +8,7 @@ def helper():\n \n def sample(x):\n     a = x + 1\n-    b = a * 2\n+    b = a * 3\n     return b\n \n \n";
    let sha = sha256(d.read("new/vllm/mod.py").as_slice());
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!("  v0.27.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.27.0/mod.patch\n        pristine_sha256: {sha}\n");
    d.write("cat/fixes/fix-a/fix.yaml", &y);
    d.write("cat/fixes/fix-a/v0.27.0/mod.patch", wide);
    d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    port(&d, "fix-b", "new", "v0.27.0").expect(0);
    d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
    // And so it is on a v0.27.0 tree: applied, read applied, reverted to the pristine bytes.
    let new = d.read("new/vllm/mod.py");
    d.write("root/vllm/mod.py", &new);
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    d.cmd().args(with_fixture(&["apply", "--check", "--profile", "performance"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "--profile", "performance"])).expect(0);
    assert_eq!(d.read("root/vllm/mod.py"), new);
}

#[test]
fn record_keeps_verified_of_a_release_whatever_its_key_spelling() {
    // v0.27.0 is spelled `v0.27:`; recording the same variant again keeps what was verified.
    let d = fixture();
    let v27 = format!(
        "  v0.27:\n    verified: [v0.27.0]\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.27.0/mod.patch\n        pristine_sha256: {}\n",
        sha256(PRISTINE.as_bytes())
    );
    d.write("cat/fixes/fix-a/fix.yaml", d.read_string("cat/fixes/fix-a/fix.yaml") + &v27);
    d.write("cat/fixes/fix-a/v0.27.0/mod.patch", FIX_A_PATCH);
    d.write("edited/vllm/mod.py", patched_a());
    let (out, _) = record(&d, "fix-a", "v0.27.0").expect(0);
    assert!(out.contains("verified: [v0.27.0] kept"), "{out}");
    let y = d.read_string("cat/fixes/fix-a/fix.yaml");
    assert!(y.contains("  v0.27.0:\n    verified: [v0.27.0]\n"), "{y}");
}

#[test]
fn port_refuses_a_release_where_the_fix_reads_upstreamed() {
    // v0.27.0 holds upstream's change (fix-a's `detect:` text) and still fix-a's context: the
    // patch would port, but `lint --upstream` says the fix would read upstreamed there.
    let d = fixture();
    let y = d.read_string("cat/fixes/fix-a/fix.yaml").replace(
        "releases:\n",
        "releases:\n  v0.25.0:\n    upstreamed: true\n    detect:\n      - tree: vllm\n        file: vllm/mod.py\n        text: \"def upstream_triple(a):\\n    return a * 3\"\n",
    );
    d.write("cat/fixes/fix-a/fix.yaml", y);
    d.write("new/vllm/__init__.py", "");
    d.write("new/vllm/mod.py", format!("import sys\n{PRISTINE}\n\ndef upstream_triple(a):\n    return a * 3\n"));
    let before = d.snapshot("cat");
    let (_, err) = port(&d, "fix-a", "new", "v0.27.0").expect(3);
    assert!(err.contains("its detect text is in pristine v0.27.0") && err.contains("nothing was written"), "{err}");
    assert_eq!(d.snapshot("cat"), before, "a refused port wrote something");
}

// `record` for a fix whose patch is made on top of another fix it `requires:` (both editing
// one file, as topk-subset-sampler on swap-states-sampling-params): the edited tree carries
// both fixes' edits, and the recorded patch must hold only this fix's, made on the file
// `apply` and `lint --upstream` give it (the pristine file with the required fix applied).
#[test]
fn record_leaves_the_required_fixs_edits_out_of_the_patch() {
    let d = fixture();
    // fix-b requires fix-a (and so comes after it); both edit vllm/mod.py.
    let yaml = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]\nafter: [fix-a]");
    d.write("cat/fixes/fix-b/fix.yaml", yaml);
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: all\nfixes: [fix-b, fix-a]\n");
    // The edited tree: the profile applied, then fix-b's line changed by hand.
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let edited = d.read_string("root/vllm/mod.py").replace("# fix-b was here", "# fix-b was here, recorded");
    assert_ne!(edited, d.read_string("root/vllm/mod.py"));
    d.write("edited/vllm/__init__.py", "");
    d.write("edited/vllm/mod.py", &edited);
    d.write("pristine/vllm/__init__.py", "");
    d.write("pristine/vllm/mod.py", PRISTINE);
    d.cmd()
        .args([
            "--catalog",
            "cat",
            "record",
            "fix-b",
            "--release",
            "v0.26.0",
            "--pristine",
            "pristine",
            "--edited",
            "edited",
        ])
        .expect(0);
    let patch = d.read_string("cat/fixes/fix-b/v0.26.0/mod.patch");
    assert_ne!(patch, FIX_B_PATCH);
    assert!(!patch.contains("fix-a"), "fix-a's edit went into fix-b's patch:\n{patch}");
    assert!(patch.contains("recorded"), "{patch}");
    // The pristine tree, the profile applied: exactly the edited bytes; lint is clean.
    d.write("root/vllm/mod.py", PRISTINE);
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), edited);
    d.write("up/v0.26.0/vllm/__init__.py", "");
    d.write("up/v0.26.0/vllm/mod.py", PRISTINE);
    d.cmd().args(["--catalog", "cat", "lint", "--upstream", "up"]).expect(0);
}
