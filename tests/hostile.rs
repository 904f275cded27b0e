//! Hostile and broken input, through the real binary. What must be refused exits 3 with an
//! error naming the file (and line, where there is one), and leaves the tree's bytes exactly as
//! they were, without even creating `.gaudi-fixes/`. What must be handled (CRLF, a missing
//! final newline) round-trips byte for byte.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::{assert_same, fixture, sha256, with_fixture, Dir, FIX_A_PATCH, FIX_B_PATCH, PRISTINE};

const FIX_A_YAML: &str = "cat/fixes/fix-a/fix.yaml";
const FIX_A_DIFF: &str = "cat/fixes/fix-a/v0.26.0/mod.patch";

/// fix-a's manifest with `edit` applied to its text.
fn rewrite_manifest(d: &Dir, edit: impl Fn(&str) -> String) {
    let text = d.read_string(FIX_A_YAML);
    let new = edit(&text);
    assert_ne!(new, text, "the edit changed nothing");
    d.write(FIX_A_YAML, new);
}

/// Run `apply fix-a` (the args given), expect exit 3 with every `needles` in stderr, and the
/// tree untouched: same bytes, no `.gaudi-fixes/`.
fn refused(d: &Dir, args: &[&str], needles: &[&str]) -> String {
    let before = d.snapshot("root");
    let (_, stderr) = d.cmd().args(with_fixture(args)).expect(3);
    for needle in needles {
        assert!(stderr.contains(needle), "stderr does not mention `{needle}`:\n{stderr}");
    }
    assert!(stderr.lines().count() <= 3, "one clear error, not a wall of text:\n{stderr}");
    assert_same(&d.snapshot("root"), &before, "the tree changed");
    assert!(!d.path().join("root/.gaudi-fixes").exists(), "a refused run created .gaudi-fixes/");
    stderr
}

fn refuse_apply(d: &Dir, needles: &[&str]) -> String {
    refused(d, &["apply", "fix-a"], needles)
}

// ---- manifest paths ----

#[test]
fn manifest_file_with_dotdot_is_refused() {
    let d = fixture();
    rewrite_manifest(&d, |t| t.replace("file: vllm/mod.py", "file: vllm/../../outside.py"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:9:", "..", "file"]);
}

#[test]
fn manifest_absolute_file_is_refused() {
    let d = fixture();
    rewrite_manifest(&d, |t| t.replace("file: vllm/mod.py", "file: /etc/passwd"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:9:", "/etc/passwd"]);
}

#[test]
fn manifest_patch_with_dotdot_is_refused() {
    let d = fixture();
    rewrite_manifest(&d, |t| t.replace("patch: v0.26.0/mod.patch", "patch: ../fix-b/v0.26.0/mod.patch"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:10:", "patch", ".."]);
}

#[test]
fn manifest_absolute_patch_is_refused() {
    let d = fixture();
    let outside = d.write("outside.patch", FIX_A_PATCH);
    let abs = outside.display().to_string();
    rewrite_manifest(&d, |t| t.replace("patch: v0.26.0/mod.patch", &format!("patch: {abs}")));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:10:", &abs]);
}

#[test]
fn file_outside_its_tree_package_is_refused() {
    let d = fixture();
    d.write("root/vllm_gaudi/mod.py", PRISTINE);
    rewrite_manifest(&d, |t| t.replace("file: vllm/mod.py", "file: vllm_gaudi/mod.py"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:9:", "vllm_gaudi/mod.py"]);
}

// ---- the target file ----

#[test]
fn target_symlink_pointing_outside_the_tree_is_refused() {
    let d = fixture();
    d.write("outside/mod.py", PRISTINE);
    fs::remove_file(d.path().join("root/vllm/mod.py")).unwrap();
    std::os::unix::fs::symlink("../../outside/mod.py", d.path().join("root/vllm/mod.py")).unwrap();
    refuse_apply(&d, &["vllm/mod.py", "outside the tree"]);
    assert_eq!(d.read("outside/mod.py"), PRISTINE.as_bytes(), "the file outside the tree changed");
}

#[test]
fn target_under_a_symlinked_directory_pointing_outside_is_refused() {
    let d = fixture();
    d.write("outside/pkg/mod.py", PRISTINE);
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", FIX_A_PATCH.replace("vllm/mod.py", "vllm/sub/mod.py"));
    rewrite_manifest(&d, |t| t.replace("file: vllm/mod.py", "file: vllm/sub/mod.py"));
    std::os::unix::fs::symlink("../../outside/pkg", d.path().join("root/vllm/sub")).unwrap();
    refuse_apply(&d, &["vllm/sub/mod.py", "outside the tree"]);
    assert_eq!(d.read("outside/pkg/mod.py"), PRISTINE.as_bytes(), "the file outside the tree changed");
}

#[test]
fn symlink_inside_the_tree_is_followed() {
    let d = fixture();
    d.write("root/vllm/real/mod.py", PRISTINE);
    fs::remove_file(d.path().join("root/vllm/mod.py")).unwrap();
    std::os::unix::fs::symlink("real/mod.py", d.path().join("root/vllm/mod.py")).unwrap();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert!(
        fs::symlink_metadata(d.path().join("root/vllm/mod.py")).unwrap().file_type().is_symlink(),
        "the symlink was replaced"
    );
    assert!(d.read_string("root/vllm/real/mod.py").contains("fix-a"));
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(d.read("root/vllm/real/mod.py"), PRISTINE.as_bytes());
}

#[test]
fn target_that_is_a_directory_is_refused() {
    let d = fixture();
    fs::remove_file(d.path().join("root/vllm/mod.py")).unwrap();
    d.write("root/vllm/mod.py/inner.py", "x = 1\n");
    refuse_apply(&d, &["vllm/mod.py", "not a regular file"]);
}

#[test]
fn read_only_target_is_refused_even_as_root() {
    let d = fixture();
    let path = d.path().join("root/vllm/mod.py");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    refuse_apply(&d, &["vllm/mod.py", "read-only"]);
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o444, "mode changed");
}

#[test]
fn read_only_file_in_a_two_file_transaction_stops_before_any_write() {
    let d = fixture();
    // fix-a writes mod.py, fix-z writes zz.py (after mod.py in write order); zz.py is read-only.
    d.write("root/vllm/zz.py", "z = 1\n");
    d.write("cat/fixes/fix-z/v0.26.0/zz.patch", "--- a/vllm/zz.py\n+++ b/vllm/zz.py\n@@ -1 +1 @@\n-z = 1\n+z = 2\n");
    d.write(
        "cat/fixes/fix-z/fix.yaml",
        format!(
            "name: fix-z\nsummary: z\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/zz.py\n        patch: v0.26.0/zz.patch\n        pristine_sha256: {}\n",
            sha256(b"z = 1\n")
        ),
    );
    fs::set_permissions(d.path().join("root/vllm/zz.py"), fs::Permissions::from_mode(0o444)).unwrap();
    refused(&d, &["apply", "fix-a", "fix-z"], &["vllm/zz.py", "read-only"]);
}

#[test]
fn non_utf8_target_is_refused_with_its_line() {
    let d = fixture();
    let mut bytes = PRISTINE.as_bytes().to_vec();
    // Line 5 is `    return 1`; put a Latin-1 byte in it.
    let at = PRISTINE.find("return 1").unwrap();
    bytes[at] = 0xe9;
    d.write("root/vllm/mod.py", &bytes);
    refuse_apply(&d, &["vllm/mod.py:5:", "UTF-8"]);
}

#[test]
fn binary_target_is_refused_with_its_line() {
    let d = fixture();
    let mut bytes = PRISTINE.as_bytes().to_vec();
    bytes.extend_from_slice(b"\0\x01\x02");
    d.write("root/vllm/mod.py", &bytes);
    let line = format!("vllm/mod.py:{}:", PRISTINE.lines().count() + 1);
    refuse_apply(&d, &[&line, "binary"]);
}

/// Peak RSS of a command, in KiB, from GNU time's `-v` report (None if there is no GNU time).
fn peak_rss_kib(d: &Dir, args: &[&str]) -> Option<(u64, i32, String)> {
    let time = std::path::Path::new("/usr/bin/time");
    if !time.exists() {
        return None;
    }
    let out = std::process::Command::new(time)
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(with_fixture(args))
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let rss = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes): "))
        .and_then(|v| v.trim().parse().ok())?;
    Some((rss, out.status.code().unwrap_or(-1), stderr))
}

#[test]
fn huge_target_is_refused_fast_with_bounded_memory() {
    let d = fixture();
    let path = d.path().join("root/vllm/mod.py");
    // 100 MB of real text (not a sparse file), starting with the pristine module.
    let line = format!("# {}\n", "x".repeat(97));
    let content = format!("{PRISTINE}{}", line.repeat(100_000_000 / line.len()));
    fs::write(&path, &content).unwrap();
    assert!(fs::metadata(&path).unwrap().len() >= 100_000_000);
    let start = Instant::now();
    let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(3);
    let took = start.elapsed();
    assert!(stderr.contains("vllm/mod.py") && stderr.contains("larger than"), "{stderr}");
    assert!(took < Duration::from_secs(5), "refusing took {took:?}");
    assert!(fs::read(&path).unwrap() == content.as_bytes(), "the file changed");
    assert!(!d.path().join("root/.gaudi-fixes").exists());
    // Measured against the same binary doing nothing (`--version`), so the bound holds whether or
    // not the build links libtorch (~110 MB resident on its own).
    match (peak_rss_kib(&d, &["apply", "fix-a"]), peak_rss_kib(&d, &["--version"])) {
        (Some((rss, code, report)), Some((base, _, _))) => {
            eprintln!("100 MB target: refused in {took:?}, peak RSS {rss} KiB (idle binary {base} KiB)");
            assert_eq!(code, 3, "{report}");
            assert!(
                rss < base + 32 * 1024,
                "peak RSS {rss} KiB against {base} KiB idle: the file was read into memory?\n{report}"
            );
        }
        _ => eprintln!("100 MB target: refused in {took:?} (no GNU time here; RSS not measured)"),
    }
}

// ---- the patch ----

/// fix-a's patch with its hunk header's line counts changed by `delta` (both sides).
fn with_counts(delta: isize) -> String {
    let header = FIX_A_PATCH.lines().find(|l| l.starts_with("@@ ")).unwrap();
    let re = regex::Regex::new(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@").unwrap();
    let c = re.captures(header).unwrap();
    let n = |i: usize| c[i].parse::<isize>().unwrap();
    let new = format!("@@ -{},{} +{},{} @@", n(1), n(2) + delta, n(3), n(4) + delta);
    FIX_A_PATCH.replacen(&c[0], &new, 1)
}

#[test]
fn patch_touching_an_undeclared_file_is_refused() {
    let d = fixture();
    d.write(FIX_A_DIFF, FIX_A_PATCH.replace("vllm/mod.py", "vllm/other.py"));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:1:", "vllm/other.py", "declares `vllm/mod.py`"]);
}

#[test]
fn patch_touching_two_files_is_refused() {
    let d = fixture();
    d.write(FIX_A_DIFF, format!("{FIX_A_PATCH}{}", FIX_B_PATCH.replace("vllm/mod.py", "vllm/_version.py")));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch", "exactly one file"]);
}

#[test]
fn patch_creating_a_file_is_refused() {
    let d = fixture();
    d.write(FIX_A_DIFF, "--- /dev/null\n+++ b/vllm/mod.py\n@@ -0,0 +1 @@\n+x = 1\n");
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:1:", "create or delete"]);
}

#[test]
fn truncated_hunk_is_refused_with_its_line() {
    let d = fixture();
    let lines: Vec<&str> = FIX_A_PATCH.lines().collect();
    d.write(FIX_A_DIFF, lines[..lines.len() - 3].join("\n") + "\n");
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:3:", "truncated"]);
}

#[test]
fn hunk_count_too_small_is_refused_with_its_line() {
    let d = fixture();
    d.write(FIX_A_DIFF, with_counts(-2));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:11:", "outside any hunk"]);
}

#[test]
fn hunk_count_too_large_is_refused_with_its_line() {
    let d = fixture();
    d.write(FIX_A_DIFF, with_counts(2));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:3:", "truncated"]);
}

#[test]
fn malformed_hunk_header_is_refused_with_its_line() {
    let d = fixture();
    d.write(FIX_A_DIFF, FIX_A_PATCH.replacen("@@ -", "@@ -x", 1));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:3:", "malformed hunk header"]);
}

#[test]
fn absurd_hunk_line_numbers_are_refused_with_their_line() {
    // Beyond isize::MAX, and u64::MAX: offsets computed from these must not overflow.
    let re = regex::Regex::new(r"@@ -\d+").unwrap();
    for big in ["9223372036854775809", "18446744073709551615"] {
        let d = fixture();
        d.write(FIX_A_DIFF, re.replace(FIX_A_PATCH, format!("@@ -{big}").as_str()).to_string());
        refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:3:", "out of range"]);
    }
}

#[test]
fn non_utf8_patch_is_refused_with_its_line() {
    let d = fixture();
    let mut bytes = FIX_A_PATCH.as_bytes().to_vec();
    let at = FIX_A_PATCH.find("triple").unwrap();
    bytes[at] = 0xff;
    d.write(FIX_A_DIFF, bytes);
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:8:", "UTF-8"]);
}

#[test]
fn not_a_diff_is_refused() {
    let d = fixture();
    d.write(FIX_A_DIFF, "this is not a diff\n");
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch", "not a unified diff"]);
}

/// A hunk that deletes a file's first line has no leading context; once that line is changed
/// by hand, its post-image (the following lines) would be found one line down and read as
/// *applied*. Like GNU patch, such a hunk is anchored to the start of the file.
#[test]
fn changed_first_line_under_a_contextless_deletion_is_drift() {
    let d = fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -1,4 +1,3 @@\n-import os\n \n \n def helper():\n",
    );
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(1);
    d.write("root/vllm/mod.py", PRISTINE.replacen("import os", "import sys", 1));
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
}

// ---- the manifest's YAML ----

#[test]
fn malformed_yaml_is_refused_with_its_line() {
    let end = fixture().read_string(FIX_A_YAML).lines().count() + 1;
    for (from, to, at) in [
        // An unclosed quote: found at the end of the file; the message also says where the
        // quoted scalar starts.
        ("summary: triple it\n", "summary: \"triple it\n", format!("fix.yaml:{end}:1: found unexpected end of stream")),
        // A tab in the indentation.
        ("upstream:", "\tupstream:", "fix.yaml:4:1: found a tab character".to_string()),
        // An unclosed flow sequence.
        ("releases:\n", "releases: [\n", "fix.yaml:5:".to_string()),
    ] {
        let d = fixture();
        rewrite_manifest(&d, |t| t.replacen(from, to, 1));
        let stderr = refuse_apply(&d, &["cat/fixes/fix-a/", &at]);
        if from.starts_with("summary") {
            assert!(stderr.contains("quoted scalar at line 2"), "{stderr}");
        }
    }
}

#[test]
fn unknown_top_level_key_is_refused_with_its_line() {
    let d = fixture();
    rewrite_manifest(&d, |t| t.replace("kind: correctness\n", "kind: correctness\ncolour: red\n"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:4:", "colour"]);
}

#[test]
fn unknown_key_in_a_patch_entry_is_refused_with_its_line() {
    let d = fixture();
    rewrite_manifest(&d, |t| {
        t.replace("        patch: v0.26.0/mod.patch\n", "        patch: v0.26.0/mod.patch\n        mode: 644\n")
    });
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:11:", "mode"]);
}

#[test]
fn wrong_types_are_refused_with_their_line() {
    for (from, to, line) in [
        ("kind: correctness\n", "kind: [correctness]\n", 3),
        ("kind: correctness\n", "kind: urgent\n", 3),
        ("upstream: {status: not-filed}\n", "upstream: not-filed\n", 4),
        ("releases:\n", "after: 5\nreleases:\n", 5),
        ("    patches:\n", "    patches: yes\n", 7),
    ] {
        let d = fixture();
        rewrite_manifest(&d, |t| t.replace(from, to));
        refuse_apply(&d, &[&format!("fixes/fix-a/fix.yaml:{line}:")]);
    }
}

#[test]
fn bad_pristine_hash_is_refused_with_its_line() {
    let d = fixture();
    rewrite_manifest(&d, |t| {
        let at = t.find("pristine_sha256: ").unwrap() + "pristine_sha256: ".len();
        format!("{}DEADBEEF\n", &t[..at])
    });
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:11:", "pristine_sha256"]);
}

#[test]
fn non_utf8_manifest_is_refused_with_its_line() {
    let d = fixture();
    let mut bytes = d.read(FIX_A_YAML);
    let at = bytes.windows(6).position(|w| w == b"triple").unwrap();
    bytes[at] = 0xfe;
    d.write(FIX_A_YAML, bytes);
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:2:", "UTF-8"]);
}

// ---- handled, not refused ----

fn lf_patched() -> Vec<u8> {
    let d = fixture();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.read("root/vllm/mod.py")
}

/// apply → check says applied → revert gives back `original` byte for byte; returns the
/// patched bytes.
fn round_trip(d: &Dir, fixes: &[&str], original: &[u8]) -> Vec<u8> {
    fn with<'a>(cmd: &[&'a str], fixes: &[&'a str]) -> Vec<&'a str> {
        cmd.iter().chain(fixes).copied().collect()
    }
    let args = |cmd: &[&'static str]| with(cmd, fixes);
    d.cmd().args(with_fixture(&args(&["apply", "--check"]))).expect(1);
    d.cmd().args(with_fixture(&args(&["apply"]))).expect(0);
    let patched = d.read("root/vllm/mod.py");
    assert_ne!(patched, original);
    d.cmd().args(with_fixture(&args(&["apply", "--check"]))).expect(0);
    d.cmd().args(with_fixture(&args(&["apply"]))).expect(0);
    assert_eq!(d.read("root/vllm/mod.py"), patched, "a second apply changed the file");
    d.cmd().args(with_fixture(&args(&["revert"]))).expect(0);
    assert_eq!(d.read("root/vllm/mod.py"), original, "revert is not byte-identical");
    d.cmd().args(with_fixture(&args(&["apply", "--check"]))).expect(1);
    patched
}

#[test]
fn crlf_patch_file_is_handled() {
    let d = fixture();
    d.write(FIX_A_DIFF, FIX_A_PATCH.replace('\n', "\r\n"));
    let patched = round_trip(&d, &["fix-a"], PRISTINE.as_bytes());
    assert_eq!(patched, lf_patched(), "a CRLF patch must patch like its LF twin");
}

#[test]
fn crlf_target_is_handled_and_patched_lines_use_crlf() {
    let d = fixture();
    let crlf = PRISTINE.replace('\n', "\r\n");
    d.write("root/vllm/mod.py", &crlf);
    let patched = round_trip(&d, &["fix-a"], crlf.as_bytes());
    let want = String::from_utf8(lf_patched()).unwrap().replace('\n', "\r\n");
    assert_eq!(String::from_utf8(patched).unwrap(), want, "every line, the new ones too, must end in CRLF");
}

#[test]
fn crlf_target_and_crlf_patch_are_handled() {
    let d = fixture();
    let crlf = PRISTINE.replace('\n', "\r\n");
    d.write("root/vllm/mod.py", &crlf);
    d.write(FIX_A_DIFF, FIX_A_PATCH.replace('\n', "\r\n"));
    let patched = round_trip(&d, &["fix-a"], crlf.as_bytes());
    assert_eq!(patched, String::from_utf8(lf_patched()).unwrap().replace('\n', "\r\n").into_bytes());
}

#[test]
fn missing_final_newline_with_a_hunk_at_the_end_round_trips() {
    let d = fixture();
    let trimmed = PRISTINE.strip_suffix('\n').unwrap();
    d.write("root/vllm/mod.py", trimmed);
    // fix-b inserts above the last line (`    return 2`, which has no newline here).
    let patched = round_trip(&d, &["fix-a", "fix-b"], trimmed.as_bytes());
    let text = String::from_utf8(patched).unwrap();
    assert!(text.ends_with("    # fix-b was here\n    return 2"), "{text:?}");
}

#[test]
fn hunk_appending_after_a_last_line_without_newline_round_trips() {
    let d = fixture();
    let trimmed = PRISTINE.strip_suffix('\n').unwrap();
    d.write("root/vllm/mod.py", trimmed);
    // What `diff -u` writes when a line is appended to a file without a final newline.
    d.write(
        "cat/fixes/fix-b/v0.26.0/mod.patch",
        "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -14,3 +14,4 @@ def sample(x):\n \n def other():\n-    return 2\n\\ No newline at end of file\n+    return 2\n+# fix-b: the end\n\\ No newline at end of file\n",
    );
    let patched = round_trip(&d, &["fix-b"], trimmed.as_bytes());
    let text = String::from_utf8(patched).unwrap();
    assert!(text.ends_with("    return 2\n# fix-b: the end"), "{text:?}");
}

/// A refused run leaves nothing in the way: once the input is fixed, `apply` just works.
#[test]
fn refusals_leave_the_tree_usable() {
    let d = fixture();
    let original: BTreeMap<String, Vec<u8>> = d.snapshot("root");
    d.write(FIX_A_DIFF, "garbage\n");
    refuse_apply(&d, &["mod.patch"]);
    d.write(FIX_A_DIFF, FIX_A_PATCH);
    assert_same(&d.snapshot("root"), &original, "tree");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
}

// ---- issue 9: confinement, checked journals, no silent waits, no panics ----

/// A planted symlink where the temp file goes: never followed (the outside file keeps its
/// bytes), and the target stays a regular file.
#[test]
fn planted_symlink_at_the_temp_path_is_not_followed() {
    let d = fixture();
    let outside = d.write("outside/victim.txt", "precious\n");
    std::os::unix::fs::symlink(&outside, d.path().join("root/vllm/.mod.py.gaudi-fixes.tmp")).unwrap();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert_eq!(d.read_string("outside/victim.txt"), "precious\n");
    let meta = fs::symlink_metadata(d.path().join("root/vllm/mod.py")).unwrap();
    assert!(meta.file_type().is_file(), "mod.py was replaced by a symlink");
    assert!(d.read_string("root/vllm/mod.py").contains("fix-a"));
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
}

/// A symlinked `.gaudi-fixes/`: exit 3 saying so; nothing written there or in the tree.
#[test]
fn symlinked_state_directory_is_refused() {
    let d = fixture();
    d.write("outside/state/keep.txt", "keep\n");
    d.write("outside/state/txn/keep", "keep\n");
    std::os::unix::fs::symlink(d.path().join("outside/state"), d.path().join("root/.gaudi-fixes")).unwrap();
    let outside = d.snapshot("outside");
    let before = d.snapshot("root");
    for args in [&["apply", "fix-a"][..], &["status"][..], &["apply", "--check", "fix-a"][..]] {
        let (_, stderr) = d.cmd().args(with_fixture(args)).expect(3);
        assert!(stderr.contains(".gaudi-fixes is a symlink"), "{args:?}: {stderr}");
    }
    assert_same(&d.snapshot("outside"), &outside, "outside");
    assert_same(&d.snapshot("root"), &before, "tree");
}

/// A symlinked `__pycache__/` beside a patched module: refused before anything is written;
/// the `.pyc` files it points at stay.
#[test]
fn symlinked_pycache_is_refused() {
    let d = fixture();
    d.write("outside/cache/mod.cpython-312.pyc", "bytecode");
    std::os::unix::fs::symlink(d.path().join("outside/cache"), d.path().join("root/vllm/__pycache__")).unwrap();
    let outside = d.snapshot("outside");
    refuse_apply(&d, &["__pycache__ is a symlink"]);
    assert_same(&d.snapshot("outside"), &outside, "outside");
}

/// Leave a pending journal in `root` (apply fix-a, killed after the journal's commit).
fn interrupted(d: &Dir) {
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-a"])).env("GAUDI_FIXES_FAULT", "after-journal").output();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(6));
}

/// `cp -a` of a tree with a pending journal: the copy's journal names the original tree, so
/// `apply` on the copy refuses it (and never touches the original).
#[test]
fn journal_copied_with_its_tree_is_refused() {
    let d = fixture();
    interrupted(&d);
    let ok = std::process::Command::new("cp").args(["-a", "root", "copy"]).current_dir(d.path()).status().unwrap();
    assert!(ok.success());
    let original = d.snapshot("root");
    let copy = d.snapshot("copy");
    let (_, stderr) = d.cmd().args(["--catalog", "cat", "--root", "copy", "apply", "fix-a"]).expect(3);
    assert!(stderr.contains("belongs to another tree") && stderr.contains("to clear it"), "{stderr}");
    assert_same(&d.snapshot("root"), &original, "the original tree");
    assert_same(&d.snapshot("copy"), &copy, "the copy");
}

/// The pending journal as JSON, edited by `edit`, written back with a valid checksum (an
/// attacker can compute one too: the checks that matter are on what it says).
fn tamper(d: &Dir, edit: impl Fn(&mut serde_json::Value)) {
    let path = "root/.gaudi-fixes/journal.json";
    let mut j: serde_json::Value = serde_json::from_slice(&d.read(path)).unwrap();
    edit(&mut j);
    j["checksum"] = "".into();
    j["checksum"] = sha256(&serde_json::to_vec(&j).unwrap()).into();
    d.write(path, serde_json::to_vec_pretty(&j).unwrap());
}

#[test]
fn tampered_journals_are_refused() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 5] = [
        ("path leaving the tree", |j| j["files"][0]["path"] = "../outside/victim.txt".into(), "leaves the tree"),
        ("absolute path", |j| j["files"][0]["path"] = "/etc/passwd".into(), "leaves the tree"),
        ("old-style saved dir", |j| j["saved"] = "/tmp".into(), "corrupt journal"),
        ("unknown tree", |j| j["files"][0]["tree"] = 7.into(), "names no tree"),
        ("other tree identity", |j| j["trees"][0]["ino"] = 1.into(), "belongs to another tree"),
    ];
    for (what, edit, needle) in cases {
        let d = fixture();
        d.write("outside/victim.txt", "precious\n");
        interrupted(&d);
        tamper(&d, edit);
        let before = d.snapshot("");
        let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(3);
        assert!(stderr.contains(needle) && stderr.contains("to clear it"), "{what}: {stderr}");
        // The check it advises is written with the run's flags (it said a bare `gaudi-fixes
        // apply --check`: the default catalogue and python3's trees, not these).
        let check = "check the tree with `gaudi-fixes --catalog cat --root root apply --check`";
        assert!(stderr.contains(check), "{what}: {stderr}");
        assert_same(&d.snapshot(""), &before, what);
    }
    // Edited without fixing the checksum.
    let d = fixture();
    interrupted(&d);
    let text = d.read_string("root/.gaudi-fixes/journal.json");
    d.write("root/.gaudi-fixes/journal.json", text.replace("vllm/mod.py", "vllm/__init__.py"));
    let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(3);
    assert!(stderr.contains("fails its checksum"), "{stderr}");
    let (out, _) = d.cmd().args(with_fixture(&["--format", "json", "apply", "fix-a"])).expect(3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["error"]["advice"], serde_json::json!([{"do": "check"}]), "{out}");
    assert!(v["error"]["message"].as_str().unwrap().contains("`gaudi-fixes --catalog cat --root root apply --check`"));
    let (out, _) = d.cmd().args(with_fixture(&["--format", "github", "apply", "fix-a"])).expect(3);
    assert!(
        out.starts_with("::error") && out.contains("`gaudi-fixes --catalog cat --root root apply --check`"),
        "{out}"
    );
}

/// A journal asking for mode 06777: recovery restores permission bits only.
#[test]
fn recovery_restores_permission_bits_only() {
    let d = fixture();
    interrupted(&d);
    tamper(&d, |j| j["files"][0]["mode"] = 0o6777.into());
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let mode = fs::metadata(d.path().join("root/vllm/mod.py")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7000, 0, "setuid/setgid restored: {mode:o}");
}

/// Run with a deadline, so a hang fails the test instead of hanging it.
fn run_bounded(d: &Dir, args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(args)
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gaudi-fixes {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A FIFO at `vllm/_version.py` (read for the version hint) is never opened; one as a target
/// is refused as not a regular file.
#[test]
fn fifos_are_never_opened() {
    let d = fixture();
    fs::remove_file(d.path().join("root/vllm/_version.py")).unwrap();
    let fifo = std::ffi::CString::new(d.path().join("root/vllm/_version.py").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    for args in [&["status"][..], &["apply", "--check", "fix-a"][..], &["list"][..], &["apply", "fix-a"][..]] {
        let out = run_bounded(&d, &with_fixture(args));
        assert!(out.status.code().is_some_and(|c| c <= 1), "{args:?}: {out:?}");
    }
    let d = fixture();
    fs::remove_file(d.path().join("root/vllm/mod.py")).unwrap();
    let fifo = std::ffi::CString::new(d.path().join("root/vllm/mod.py").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let out = run_bounded(&d, &with_fixture(&["apply", "fix-a"]));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"), "{out:?}");
}

/// One directory named twice (`--vllm T --vllm-gaudi T/vllm/..`) is locked once.
#[test]
fn a_directory_named_twice_is_locked_once() {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    for args in [&["apply", "fix-a"][..], &["status"][..], &["apply", "--check", "fix-a"][..]] {
        let mut all = vec!["--catalog", "cat", "--vllm", "root", "--vllm-gaudi", "root/vllm/.."];
        all.extend_from_slice(args);
        let out = run_bounded(&d, &all);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    }
}

/// A tree path that is not UTF-8: exit 3 with a sentence, never a panic.
#[test]
fn non_utf8_tree_path_is_refused_without_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let d = fixture();
    let name = std::ffi::OsStr::from_bytes(b"tr\xffee");
    fs::rename(d.path().join("root"), d.path().join(name)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .arg("--catalog")
        .arg("cat")
        .arg("--root")
        .arg(name)
        .args(["apply", "fix-a"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
}

#[test]
fn nul_byte_in_an_added_line_is_refused_at_load() {
    let d = fixture();
    d.write(FIX_A_DIFF, FIX_A_PATCH.replace("+    b = a * 3", "+    b = a * 3\0"));
    refuse_apply(&d, &["fixes/fix-a/v0.26.0/mod.patch:9:", "NUL byte"]);
}

#[test]
fn duplicate_yaml_keys_are_refused_with_their_line() {
    let d = fixture();
    rewrite_manifest(&d, |t| t.replace("kind: correctness\n", "kind: correctness\nkind: performance\n"));
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:4:", "duplicate", "kind"]);
}

/// Deeply nested YAML and huge catalogue files are refused at once (no parser sees them).
#[test]
fn deep_or_huge_yaml_is_refused_at_once() {
    let d = fixture();
    let deep = format!("name: fix-a\nextra: {}\n", "[".repeat(100_000));
    d.write(FIX_A_YAML, &deep);
    refuse_apply(&d, &["fixes/fix-a/fix.yaml:2:", "nested deeper"]);
    let big = format!("name: fix-a\nextra:\n{}", "  - 1\n".repeat(10_000_000));
    d.write(FIX_A_YAML, &big);
    refuse_apply(&d, &["fixes/fix-a/fix.yaml", "bytes is over"]);
    if let (Some((rss, code, report)), Some((base, _, _))) =
        (peak_rss_kib(&d, &["apply", "fix-a"]), peak_rss_kib(&d, &["--version"]))
    {
        eprintln!("60 MB fix.yaml: peak RSS {rss} KiB (idle binary {base} KiB)");
        assert_eq!(code, 3, "{report}");
        assert!(rss < base + 32 * 1024, "peak RSS {rss} KiB against {base} KiB idle");
    }
}

/// Applying as root keeps each patched file's owner and mode.
#[test]
fn owner_and_mode_are_kept() {
    use std::os::unix::fs::MetadataExt;
    let d = fixture();
    let path = d.path().join("root/vllm/mod.py");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
    } else {
        eprintln!("not root: owner kept trivially; checking the mode only");
    }
    let before = fs::metadata(&path).unwrap();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let after = fs::metadata(&path).unwrap();
    assert_eq!((after.uid(), after.gid(), after.mode()), (before.uid(), before.gid(), before.mode()));
}

/// `--only-tree vllm` with vllm_gaudi in another directory: nothing is written there (no
/// journal, no provenance, no lock needed), and apply + revert leave no empty state directory.
#[test]
fn only_tree_never_writes_into_the_tree_it_leaves_out() {
    let d = fixture();
    d.write("gaudi/vllm_gaudi/__init__.py", "");
    let gaudi = d.snapshot("gaudi");
    let args = |cmd: &'static str| {
        vec!["--catalog", "cat", "--vllm", "root", "--vllm-gaudi", "gaudi", "--only-tree", "vllm", cmd, "fix-a"]
    };
    d.cmd().args(args("apply")).expect(0);
    assert!(d.path().join("root/.gaudi-fixes/provenance.json").exists());
    assert_same(&d.snapshot("gaudi"), &gaudi, "the excluded tree");
    d.cmd().args(args("revert")).expect(0);
    assert_same(&d.snapshot("gaudi"), &gaudi, "the excluded tree");
    assert!(!d.path().join("root/.gaudi-fixes").exists(), "an empty .gaudi-fixes/ was left behind");
}
