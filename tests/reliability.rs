//! Crash safety and concurrency of the real binary: injected faults at every step of a
//! transaction, SIGKILL at random moments, and many runs on one tree at once. After any of
//! these, the next run must leave the tree byte-identical to fully patched (or pristine), with
//! no journal, saved copies or temp files behind.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{assert_same, fixture, sha256, with_fixture, Dir, FIX_A_PATCH, PRISTINE};

/// A second module, patched by fix-c (so fix-a + fix-c change two files in one transaction).
const TWO: &str = "\
def first():
    return 'one'


def second():
    return 'two'
";

const FIX_C_PATCH: &str = "\
--- a/vllm/two.py
+++ b/vllm/two.py
@@ -3,4 +3,5 @@ def first():
 
 
 def second():
+    # fix-c was here
     return 'two'
";

/// The fixture plus `vllm/two.py` and fix-c patching it, and fix-both: one fix whose single
/// variant patches both files (a reader seeing one written and not the other would call it
/// drifted).
fn two_file_fixture() -> Dir {
    let d = fixture();
    d.write("root/vllm/two.py", TWO);
    d.write(
        "cat/fixes/fix-c/fix.yaml",
        format!(
            "name: fix-c\nsummary: mark second\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/two.py\n        patch: v0.26.0/two.patch\n        pristine_sha256: {}\n",
            sha256(TWO.as_bytes())
        ),
    );
    d.write("cat/fixes/fix-c/v0.26.0/two.patch", FIX_C_PATCH);
    d.write(
        "cat/fixes/fix-both/fix.yaml",
        format!(
            "name: fix-both\nsummary: both files\nkind: correctness\nupstream: {{status: not-filed}}\nconflicts: [fix-a, fix-c]\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {}\n      - tree: vllm\n        file: vllm/two.py\n        patch: v0.26.0/two.patch\n        pristine_sha256: {}\n",
            sha256(PRISTINE.as_bytes()),
            sha256(TWO.as_bytes())
        ),
    );
    d.write("cat/fixes/fix-both/v0.26.0/mod.patch", FIX_A_PATCH);
    d.write("cat/fixes/fix-both/v0.26.0/two.patch", FIX_C_PATCH);
    d
}

/// The tree's files (`.gaudi-fixes/` left out), for comparing states.
fn tree_files(d: &Dir) -> BTreeMap<String, Vec<u8>> {
    d.snapshot("root").into_iter().filter(|(k, _)| !k.starts_with(".gaudi-fixes")).collect()
}

/// Journals, saved copies and temp files: anything a finished run must not leave behind.
fn leftovers(d: &Dir) -> Vec<String> {
    d.snapshot("root")
        .into_keys()
        .filter(|k| {
            let name = Path::new(k).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            name.ends_with(".tmp") || name.starts_with("journal") || k.starts_with(".gaudi-fixes/txn")
        })
        .collect()
}

/// The tree after a clean run of `args`, from a fresh copy of the fixture.
fn expected_after(args: &[&str]) -> BTreeMap<String, Vec<u8>> {
    let d = two_file_fixture();
    d.cmd().args(with_fixture(args)).expect(0);
    tree_files(&d)
}

fn assert_aborted(out: &std::process::Output, shown: &str) {
    assert_eq!(
        out.status.signal(),
        Some(6),
        "{shown}: expected SIGABRT from the injected fault, got {:?}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("GAUDI_FIXES_FAULT"), "{shown}: no fault message");
}

const FAULTS: [&str; 4] = ["after-journal", "after-rename:1", "after-rename:2", "before-journal-remove"];

/// Interrupt `apply fix-a fix-c` at every step; `status` says a recovery is pending; the next
/// `apply` finishes it: tree fully patched, journal gone.
#[test]
fn apply_interrupted_at_each_step_is_finished_by_the_next_apply() {
    let patched = expected_after(&["apply", "fix-a", "fix-c"]);
    let pristine = tree_files(&two_file_fixture());
    for fault in FAULTS {
        let d = two_file_fixture();
        let (out, shown) =
            d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", fault).output();
        assert_aborted(&out, &shown);
        assert!(d.path().join("root/.gaudi-fixes/journal.json").exists(), "{fault}: no journal left behind");
        let now = tree_files(&d);
        match fault {
            "after-journal" => assert_eq!(now, pristine, "{fault}: nothing should be written yet"),
            "after-rename:1" => {
                // Genuinely half-written: the first file is patched, the second is not.
                assert_eq!(now["vllm/mod.py"], patched["vllm/mod.py"], "{fault}");
                assert_eq!(now["vllm/two.py"], TWO.as_bytes(), "{fault}");
            }
            _ => assert_eq!(now, patched, "{fault}: every file is written by now"),
        }

        let (stdout, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
        assert!(
            stdout.contains("pending recovery"),
            "{fault}: status does not mention the pending recovery:\n{stdout}"
        );
        let (stdout, _) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
        assert!(stdout.contains("recovered an interrupted `apply`"), "{fault}: no recovery note:\n{stdout}");
        assert_same(&tree_files(&d), &patched, &format!("{fault}: not fully patched after recovery"));
        assert!(leftovers(&d).is_empty(), "{fault}: left behind {:?}", leftovers(&d));
        let (stdout, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
        assert!(!stdout.contains("pending recovery"), "{fault}: {stdout}");
        d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "fix-c"])).expect(0);
    }
}

/// The same, recovering with `apply` directly (no `status` first) and with a fix whose one
/// variant spans both files: the recovered fix must read as applied, never drifted.
#[test]
fn one_fix_over_two_files_interrupted_then_recovered() {
    let patched = expected_after(&["apply", "fix-both"]);
    for fault in FAULTS {
        let d = two_file_fixture();
        let (out, shown) = d.cmd().args(with_fixture(&["apply", "fix-both"])).env("GAUDI_FIXES_FAULT", fault).output();
        assert_aborted(&out, &shown);
        d.cmd().args(with_fixture(&["apply", "fix-both"])).expect(0);
        assert_same(&tree_files(&d), &patched, fault);
        assert!(leftovers(&d).is_empty(), "{fault}: left behind {:?}", leftovers(&d));
        d.cmd().args(with_fixture(&["apply", "--check", "fix-both"])).expect(0);
    }
}

/// Interrupt `revert` at every step; the next `revert` finishes it: byte-identical pristine.
#[test]
fn revert_interrupted_at_each_step_is_finished_by_the_next_revert() {
    let pristine = tree_files(&two_file_fixture());
    for fault in FAULTS {
        let d = two_file_fixture();
        d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
        let patched = tree_files(&d);
        let (out, shown) =
            d.cmd().args(with_fixture(&["revert", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", fault).output();
        assert_aborted(&out, &shown);
        if fault == "after-rename:1" {
            let now = tree_files(&d);
            assert_eq!(now["vllm/mod.py"], PRISTINE.as_bytes(), "{fault}");
            assert_eq!(now["vllm/two.py"], patched["vllm/two.py"], "{fault}");
        }
        let (stdout, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
        assert!(stdout.contains("pending recovery of an interrupted `revert`"), "{fault}:\n{stdout}");
        let (stdout, _) = d.cmd().args(with_fixture(&["revert", "fix-a", "fix-c"])).expect(0);
        assert!(stdout.contains("recovered an interrupted `revert`"), "{fault}:\n{stdout}");
        assert_same(&tree_files(&d), &pristine, &format!("{fault}: not pristine after recovery"));
        assert!(leftovers(&d).is_empty(), "{fault}: left behind {:?}", leftovers(&d));
        d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "fix-c"])).expect(1);
    }
}

/// A run of the *other* command finds the journal, finishes the interrupted one first, then
/// does its own work: interrupted apply + revert → pristine.
#[test]
fn interrupted_apply_then_revert_gives_pristine() {
    let pristine = tree_files(&two_file_fixture());
    let d = two_file_fixture();
    let (out, shown) =
        d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", "after-rename:1").output();
    assert_aborted(&out, &shown);
    d.cmd().args(with_fixture(&["revert", "fix-a", "fix-c"])).expect(0);
    assert_same(&tree_files(&d), &pristine, "tree");
    assert!(leftovers(&d).is_empty(), "left behind {:?}", leftovers(&d));
}

/// A file changed by hand after a crash (neither its old nor its new content): recovery refuses,
/// names the file, writes nothing (not even the files it could finish) and keeps the journal.
#[test]
fn recovery_refuses_a_file_changed_since_the_crash_and_writes_nothing() {
    for fault in ["after-journal", "after-rename:1"] {
        let d = two_file_fixture();
        let (out, shown) =
            d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", fault).output();
        assert_aborted(&out, &shown);
        d.write("root/vllm/two.py", "# edited by hand after the crash\n");
        let before = d.snapshot("root");
        let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(3);
        assert!(stderr.contains("vllm/two.py") && stderr.contains("changed since an interrupted"), "{fault}: {stderr}");
        assert!(stderr.contains("journal.json"), "{fault}: the error should say where the journal is: {stderr}");
        assert_same(&d.snapshot("root"), &before, &format!("{fault}: a refused recovery wrote something"));
    }
}

/// A journal that is not JSON is an error naming it, never silently ignored or removed.
#[test]
fn corrupt_journal_is_an_error_naming_it() {
    let d = two_file_fixture();
    d.write("root/.gaudi-fixes/journal.json", "{ not json");
    let before = d.snapshot("root");
    for args in [&["apply", "fix-a"][..], &["status"][..], &["apply", "--check", "fix-a"][..]] {
        let (_, stderr) = d.cmd().args(with_fixture(args)).expect(3);
        assert!(
            stderr.contains(".gaudi-fixes/journal.json") && stderr.contains("corrupt journal"),
            "{args:?}: {stderr}"
        );
    }
    assert_same(&d.snapshot("root"), &before, "tree");
}

/// `apply --check` and `--dry-run` never recover (they do not write): they say a journal is
/// there and leave it.
#[test]
fn check_reports_a_pending_journal_and_leaves_it() {
    let d = two_file_fixture();
    let (out, shown) =
        d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", "after-rename:1").output();
    assert_aborted(&out, &shown);
    let before = d.snapshot("root");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "fix-c"])).output();
    assert_ne!(out.status.code(), Some(0), "a half-written tree is not applied");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("left a journal"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_same(&d.snapshot("root"), &before, "--check wrote something");
}

/// Tiny deterministic PRNG (xorshift64*), seeded from the clock; the seed is printed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("GAUDI_FIXES_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
        });
        eprintln!("rng seed {seed} (set GAUDI_FIXES_TEST_SEED to repeat)");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const BIG_FILES: usize = 3;
const BIG_LINES: usize = 2_500;

fn big_module(k: usize) -> String {
    (0..BIG_LINES).map(|i| format!("value_{k}_{i:06} = compute({i}, 'padding text to make lines longer')\n")).collect()
}

/// A catalogue with one fix patching BIG_FILES modules of a few hundred KB each, three hunks
/// per file; the pristine tree and the fully patched tree.
/// A tree's files, relative path → bytes.
type Files = BTreeMap<String, Vec<u8>>;

fn big_fixture() -> (Dir, Files, Files) {
    let d = Dir::new();
    d.write("root/vllm/__init__.py", "");
    let mut entries = String::new();
    for k in 0..BIG_FILES {
        let old = big_module(k);
        let mut lines: Vec<String> = old.lines().map(str::to_string).collect();
        for at in [10, BIG_LINES / 2, BIG_LINES - 5] {
            lines[at] = format!("value_{k}_{at:06} = patched({at})  # big-fix");
        }
        let new: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let rel = format!("vllm/big{k}.py");
        let diff = similar::TextDiff::from_lines(&old, &new)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{rel}"), &format!("b/{rel}"))
            .to_string();
        d.write(&format!("root/{rel}"), &old);
        d.write(&format!("cat/fixes/big-fix/v0.26.0/big{k}.patch"), diff);
        entries.push_str(&format!(
            "      - tree: vllm\n        file: {rel}\n        patch: v0.26.0/big{k}.patch\n        pristine_sha256: {}\n",
            sha256(old.as_bytes())
        ));
    }
    d.write(
        "cat/fixes/big-fix/fix.yaml",
        format!("name: big-fix\nsummary: big\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n{entries}"),
    );
    d.write("cat/profiles/default.yaml", "name: default\ndescription: all\nfixes: [big-fix]\n");
    let pristine = tree_files(&d);
    d.cmd().args(with_fixture(&["apply"])).expect(0);
    let patched = tree_files(&d);
    d.cmd().args(with_fixture(&["revert"])).expect(0);
    assert_same(&tree_files(&d), &pristine, "revert is not byte-identical");
    (d, pristine, patched)
}

fn restore(d: &Dir, files: &BTreeMap<String, Vec<u8>>) {
    let _ = std::fs::remove_dir_all(d.path().join("root/.gaudi-fixes"));
    for (rel, bytes) in files {
        if !rel.ends_with('/') {
            d.write(&format!("root/{rel}"), bytes);
        }
    }
}

/// What the tree looked like right after the kill.
fn classify(d: &Dir, pristine: &BTreeMap<String, Vec<u8>>, patched: &BTreeMap<String, Vec<u8>>) -> &'static str {
    let now = tree_files(d);
    let journal = d.path().join("root/.gaudi-fixes/journal.json").exists();
    let stray_tmp = now.keys().any(|k| k.ends_with(".gaudi-fixes.tmp"));
    let files_now: BTreeMap<_, _> = now.iter().filter(|(k, _)| !k.ends_with(".gaudi-fixes.tmp")).collect();
    let same = |want: &BTreeMap<String, Vec<u8>>| {
        files_now.len() == want.len() && want.iter().all(|(k, v)| files_now.get(k) == Some(&v))
    };
    match (journal, same(pristine), same(patched), stray_tmp) {
        (false, true, _, false) => "pristine, no journal",
        (false, true, _, true) => "pristine, no journal, temp file",
        (false, _, true, _) => "patched, no journal",
        (true, true, _, _) => "pristine, journal",
        (true, _, true, _) => "patched, journal",
        (true, false, false, _) => "half-written, journal",
        (false, false, false, _) => "HALF-WRITTEN WITHOUT JOURNAL",
    }
}

/// Spawn `args`, kill it with SIGKILL after a random delay, then recover with `recover` and
/// check the result is exactly `want`. Returns (outcome, how the tree looked after the kill).
#[allow(clippy::too_many_arguments)]
fn kill_trial(
    d: &Dir,
    delay: Duration,
    args: &[&str],
    recover: &[&str],
    want: &BTreeMap<String, Vec<u8>>,
    pristine: &BTreeMap<String, Vec<u8>>,
    patched: &BTreeMap<String, Vec<u8>>,
) -> (&'static str, &'static str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(with_fixture(args))
        .current_dir(d.path())
        .env_remove("GAUDI_FIXES_FAULT")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning gaudi-fixes");
    std::thread::sleep(delay);
    // Child::kill sends SIGKILL on unix; it fails only if the child was already reaped.
    let _ = child.kill();
    let status = child.wait().unwrap();
    let outcome = match (status.code(), status.signal()) {
        (Some(0), _) => "finished before the kill",
        (_, Some(9)) => "killed",
        _ => panic!("unexpected exit {status:?}"),
    };
    let seen = classify(d, pristine, patched);
    assert_ne!(seen, "HALF-WRITTEN WITHOUT JOURNAL", "a killed run left a half-written tree and no journal");
    d.cmd().args(with_fixture(recover)).expect(0);
    let now = tree_files(d);
    assert!(
        now == *want,
        "after `{}` recovering from a kill ({seen}), the tree is not as expected; differing: {:?}",
        recover.join(" "),
        now.keys().filter(|k| want.get(*k) != now.get(*k)).collect::<Vec<_>>()
    );
    let left = leftovers(d);
    assert!(left.is_empty(), "after recovery ({seen}): left behind {left:?}");
    (outcome, seen)
}

/// SIGKILL `apply` (and `revert`) at random moments, many times (200 trials or 60 s,
/// `GAUDI_FIXES_SIGKILL_SECS` to change the time); every time the next run must leave the tree
/// exactly fully patched (pristine), with no temp files.
#[test]
fn sigkill_at_random_moments_never_leaves_a_half_patched_tree() {
    let (d, pristine, patched) = big_fixture();
    let mut rng = Rng::new();

    // Calibrate: how long an undisturbed apply takes here, and how long until its journal is
    // committed (the writes happen between the two). Half the kills land anywhere in the run,
    // half in the write window, which is short next to planning.
    let mut full = Duration::ZERO;
    let mut to_journal = Duration::ZERO;
    for _ in 0..3 {
        restore(&d, &pristine);
        let start = Instant::now();
        let (out, shown) = d.cmd().args(with_fixture(&["apply"])).env("GAUDI_FIXES_FAULT", "after-journal").output();
        assert_aborted(&out, &shown);
        to_journal = to_journal.max(start.elapsed());
        restore(&d, &pristine);
        let start = Instant::now();
        d.cmd().args(with_fixture(&["apply"])).expect(0);
        full = full.max(start.elapsed());
    }
    let late_from = to_journal.as_micros() as u64 * 8 / 10;
    let until = (full.as_micros() as u64 * 11 / 10).max(2_000);
    eprintln!("undisturbed apply: {full:?}, journal committed after {to_journal:?}; kills at 0..={until} µs, half of them from {late_from} µs");

    let budget =
        Duration::from_secs(std::env::var("GAUDI_FIXES_SIGKILL_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60));
    let started = Instant::now();
    let mut tally: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    let mut trials = 0;
    while trials < 200 && started.elapsed() < budget {
        // Every 10th trial kills a revert instead (from fully patched, recovering to pristine).
        let (op, args, recover, want, from): (&str, &[&str], &[&str], _, _) = if trials % 10 == 9 {
            ("revert", &["revert"], &["revert"], &pristine, &patched)
        } else {
            ("apply", &["apply"], &["apply"], &patched, &pristine)
        };
        restore(&d, from);
        let from_us = if rng.below(2) == 0 { 0 } else { late_from };
        let delay = Duration::from_micros(from_us + rng.below(until.saturating_sub(from_us) + 1));
        let (outcome, seen) = kill_trial(&d, delay, args, recover, want, &pristine, &patched);
        *tally.entry((op, outcome, seen)).or_default() += 1;
        trials += 1;
    }
    eprintln!("SIGKILL trials: {trials} in {:.1?}", started.elapsed());
    for ((op, outcome, seen), n) in &tally {
        eprintln!("  {op:<6} {outcome:<26} tree after kill: {seen:<32} ×{n}");
    }
    assert!(trials >= 20, "too few trials ({trials}) to mean anything");
    let killed_mid_write = tally
        .iter()
        .filter(|((_, o, s), _)| *o == "killed" && s.contains("journal") && !s.contains("no journal"))
        .map(|(_, n)| n)
        .sum::<usize>();
    eprintln!("  killed while a journal was committed: {killed_mid_write}");
}

/// Eight `apply` runs on one tree at once: all succeed, exactly one writes, and the file is
/// patched exactly once. `apply --check` running alongside never sees a half-written tree.
#[test]
fn concurrent_applies_write_once_and_checks_never_see_drift() {
    let patched = expected_after(&["apply", "fix-both"]);
    for round in 0..5 {
        let d = two_file_fixture();
        let spawn = |args: &[&str]| {
            let mut all = vec!["--format", "json"];
            all.extend(with_fixture(args));
            Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
                .args(all)
                .current_dir(d.path())
                .env("NO_COLOR", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning gaudi-fixes")
        };
        let mut checks = Vec::new();
        let mut applies = Vec::new();
        for i in 0..8 {
            checks.push(spawn(&["apply", "--check", "fix-both"]));
            applies.push(spawn(&["apply", "fix-both"]));
            if i % 2 == 0 {
                checks.push(spawn(&["apply", "--check", "fix-both"]));
            }
        }
        let mut writers = 0;
        for child in applies {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: apply failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let doc: serde_json::Value =
                serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("round {round}: not JSON ({e}):\n{stdout}"));
            let written = doc["written"].as_array().expect("`written` is an array");
            match written.len() {
                0 => {}
                2 => writers += 1,
                n => panic!("round {round}: a run wrote {n} files, expected 0 or 2:\n{stdout}"),
            }
        }
        let mut codes = Vec::new();
        for child in checks {
            let out = child.wait_with_output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0) | Some(1)),
                "round {round}: a concurrent check said {code:?}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
            codes.push(code.unwrap());
        }
        assert_eq!(writers, 1, "round {round}: {writers} runs wrote; exactly one should have");
        assert_same(&tree_files(&d), &patched, &format!("round {round}: not patched exactly once"));
        assert!(leftovers(&d).is_empty(), "round {round}: left behind {:?}", leftovers(&d));
        eprintln!("round {round}: 8 applies, 1 wrote; {} checks said {:?}", codes.len(), codes);
    }
}

// ---- issue 9: all or nothing on I/O errors, someone else's save, locks, exit codes ----

/// `apply` or `revert` with an injected I/O error on the N-th file write (after the journal):
/// exit 3, the files already written put back, nothing left behind.
#[test]
fn write_error_after_the_journal_rolls_back_and_exits_3() {
    let pristine = tree_files(&two_file_fixture());
    for n in ["1", "2"] {
        let d = two_file_fixture();
        let fault = format!("write-error:{n}");
        let (_, stderr) =
            d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", &fault).expect(3);
        assert!(stderr.contains("rolled back: nothing was changed"), "{fault}: {stderr}");
        assert_same(&tree_files(&d), &pristine, &format!("{fault}: apply"));
        assert!(!d.path().join("root/.gaudi-fixes").exists(), "{fault}: left .gaudi-fixes/ behind");

        d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
        let patched = d.snapshot("root");
        let (_, stderr) =
            d.cmd().args(with_fixture(&["revert", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", &fault).expect(3);
        assert!(stderr.contains("rolled back"), "{fault}: {stderr}");
        assert_same(&d.snapshot("root"), &patched, &format!("{fault}: revert (provenance included)"));
    }
}

/// A rolled-back apply (a write failing after the journal, as a full disk would) leaves each
/// file as it was, mtime included: pip's `.pyc` files record the source's mtime, so they stay
/// valid, and a later apply + revert gives them back instead of deleting them as stale.
#[test]
fn a_rolled_back_apply_keeps_the_mtimes_so_pips_bytecode_stays_valid() {
    let d = two_file_fixture();
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    for f in ["mod.py", "two.py"] {
        let file = std::fs::File::options().write(true).open(d.path().join("root/vllm").join(f)).unwrap();
        file.set_modified(day_ago).unwrap();
    }
    match Command::new("python3").args(["-m", "compileall", "-q", "root"]).current_dir(d.path()).status() {
        Ok(status) => assert!(status.success(), "compileall failed"),
        Err(_) => return eprintln!("no python3: skipped"),
    }
    let installed = tree_files(&d);
    assert!(installed.keys().any(|k| k.starts_with("vllm/__pycache__/mod.")), "{installed:?}");
    let mtime = |f: &str| std::fs::metadata(d.path().join("root/vllm").join(f)).unwrap().modified().unwrap();

    // The second file's write failing, then the last write (the provenance record): the .pyc
    // are not touched before every write is done.
    for fault in ["write-error:2", "write-error:provenance"] {
        let (_, stderr) =
            d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", fault).expect(3);
        assert!(stderr.contains("rolled back: nothing was changed"), "{fault}: {stderr}");
        assert_same(&tree_files(&d), &installed, &format!("{fault}: after the rollback"));
        let stale = format!("{fault}: the rolled-back vllm/mod.py got a new mtime: its .pyc is stale now");
        assert_eq!(mtime("mod.py"), day_ago, "{stale}");
        assert_eq!(mtime("two.py"), day_ago, "{fault}");
    }

    d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
    d.cmd().args(with_fixture(&["revert", "fix-a", "fix-c"])).expect(0);
    assert_same(&tree_files(&d), &installed, "after apply and revert (the .pyc pip compiled included)");
    assert_eq!(mtime("mod.py"), day_ago);
}

/// The write fails and so does putting the first file back: exit 4, each file's state named,
/// the journal kept; the next run finishes the transaction.
#[test]
fn failed_rollback_names_each_file_and_exits_4_then_recovers() {
    let patched = expected_after(&["apply", "fix-a", "fix-c"]);
    let d = two_file_fixture();
    let (_, stderr) = d
        .cmd()
        .args(with_fixture(&["apply", "fix-a", "fix-c"]))
        .env("GAUDI_FIXES_FAULT", "write-error:2,write-error:rollback")
        .expect(4);
    assert!(stderr.contains("rolling back failed"), "{stderr}");
    // The runs that finish it, with this run's flags (advice as data, written out by report/).
    let next = "next `gaudi-fixes --catalog cat --root root apply` or `gaudi-fixes --catalog cat --root root revert` \
                finishes the interrupted transaction first (exit 4)";
    assert!(stderr.contains(next), "{stderr}");
    assert!(stderr.contains("vllm/mod.py: NEW content"), "{stderr}");
    assert!(stderr.contains("vllm/two.py: old content"), "{stderr}");
    assert!(d.path().join("root/.gaudi-fixes/journal.json").exists());
    let (stdout, _) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
    assert!(stdout.contains("recovered an interrupted `apply`"), "{stdout}");
    assert_same(&tree_files(&d), &patched, "after recovery");
    assert!(leftovers(&d).is_empty(), "left behind {:?}", leftovers(&d));
}

/// Another process saves the second file while apply is about to rename over it: its save
/// wins, the first file is put back, exit 3 "changed while applying".
#[test]
fn someone_elses_save_wins_and_the_apply_rolls_back() {
    let d = two_file_fixture();
    let marker = d.path().join("paused");
    let child = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(with_fixture(&["apply", "fix-a", "fix-c"]))
        .current_dir(d.path())
        .env("GAUDI_FIXES_FAULT", "pause-before-rename:2")
        .env("GAUDI_FIXES_FAULT_PAUSE", &marker)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the run never reached its pause");
        std::thread::sleep(Duration::from_millis(20));
    }
    let theirs = "# saved by someone else\n";
    d.write("root/vllm/two.py", theirs);
    std::fs::remove_file(&marker).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("vllm/two.py: changed while applying"), "{stderr}");
    assert_eq!(d.read_string("root/vllm/two.py"), theirs, "their save was lost");
    assert_eq!(d.read_string("root/vllm/mod.py"), PRISTINE, "mod.py was not put back");
    assert!(!d.path().join("root/.gaudi-fixes").exists(), "left .gaudi-fixes/ behind");
}

/// Hold the tree's lock from this process; a writer says at once who holds it (this PID) and
/// goes on once it is released; `--lock-timeout` bounds the wait of a reader.
#[test]
fn waiting_for_a_lock_says_who_holds_it() {
    use std::io::BufRead;
    let d = two_file_fixture();
    let root = std::fs::File::open(d.path().join("root")).unwrap();
    root.lock().unwrap();
    let me = format!("PID {}", std::process::id());

    let (_, stderr) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a", "--lock-timeout", "0.3"])).expect(3);
    assert!(stderr.contains("gave up waiting for the lock") && stderr.contains(&me), "{stderr}");
    let (_, stderr) = d.cmd().args(with_fixture(&["status", "--lock-timeout", "0"])).expect(3);
    assert!(stderr.contains("gave up waiting") && stderr.contains(&me), "{stderr}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        // A bound only so a broken build fails this test instead of hanging it.
        .args(with_fixture(&["apply", "fix-a", "--lock-timeout", "120"]))
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().expect("a line while waiting").unwrap();
    assert!(first.starts_with("gaudi-fixes: waiting for the lock") && first.contains(&me), "{first}");
    assert!(first.contains("running since"), "{first}");
    root.unlock().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(0);
}

/// `--quiet` holds while waiting for a lock: the transaction reports the wait as an event the
/// command line renders, so a quiet run prints nothing, and the exit code still tells.
#[test]
fn a_quiet_run_waiting_for_a_lock_prints_nothing() {
    let d = two_file_fixture();
    let root = std::fs::File::open(d.path().join("root")).unwrap();
    root.lock().unwrap();
    let (stdout, stderr) =
        d.cmd().args(with_fixture(&["-q", "apply", "--check", "fix-a", "--lock-timeout", "0.3"])).expect(3);
    assert!(!stderr.contains("gaudi-fixes: waiting for the lock"), "--quiet printed the wait line: {stderr}");
    assert!(stderr.contains("gave up waiting for the lock"), "the error itself is still said: {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}

/// Run with stdout a pipe whose reader is already gone (`| head -0`, deterministically).
fn closed_stdout(d: &Dir, args: &[&str]) -> (Option<i32>, String) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let out = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(with_fixture(args))
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn exit_codes_do_not_depend_on_a_closed_stdout() {
    let d = two_file_fixture();
    for format in ["human", "json", "github"] {
        let (code, stderr) = closed_stdout(&d, &["--format", format, "apply", "--check", "fix-a"]);
        assert_eq!(code, Some(1), "{format}: not applied: {stderr}");
        assert!(stderr.is_empty(), "{format}: a closed stdout is not worth a word: {stderr}");
    }
    d.write("root/vllm/mod.py", PRISTINE.replace("b = a * 2", "b = a * 5"));
    for format in ["human", "json"] {
        assert_eq!(closed_stdout(&d, &["--format", format, "apply", "--check", "fix-a"]).0, Some(2), "{format}");
        assert_eq!(closed_stdout(&d, &["--format", format, "apply", "fix-a"]).0, Some(2), "{format}: refused");
        assert_eq!(closed_stdout(&d, &["--format", format, "diff", "fix-a"]).0, Some(2), "{format}: diff");
    }
    // The same through a shell pipeline, as CI writes it.
    let bin = env!("CARGO_BIN_EXE_gaudi-fixes");
    for tail in ["head -0", "true"] {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("'{bin}' --catalog cat --root root apply --check fix-a | {tail}; exit ${{PIPESTATUS[0]}}"))
            .current_dir(d.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "| {tail}");
    }
}

/// Every `--format json` run prints one JSON document, errors included.
#[test]
fn json_errors_are_one_document() {
    let d = two_file_fixture();
    let yaml = d.read_string("cat/fixes/fix-a/fix.yaml");
    d.write("cat/fixes/fix-a/fix.yaml", yaml.replace("kind: correctness\n", "kind: correctness\nkind: performance\n"));
    for args in [&["--format", "json", "apply", "fix-a"][..], &["--format=json", "status"][..]] {
        let (stdout, stderr) = d.cmd().args(with_fixture(args)).expect(3);
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(doc["exit_code"], 3, "{stdout}");
        let file = doc["error"]["file"].as_str().unwrap_or_default();
        assert!(file.ends_with("cat/fixes/fix-a/fix.yaml"), "{stdout}");
        assert_eq!(doc["error"]["line"], 4, "{stdout}");
        assert!(doc["error"]["message"].as_str().unwrap().contains("duplicate"), "{stdout}");
        assert!(stderr.contains("duplicate"), "{stderr}");
    }
    let (stdout, _) = d.cmd().args(["--format", "json", "apply", "--no-such-flag"]).expect(3);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(doc["exit_code"], 3);
}

/// two_file_fixture plus `vllm_gaudi/g.py` and fix-g patching it: `apply fix-a fix-g` writes
/// into both packages of one root.
fn gaudi_fixture() -> Dir {
    let d = two_file_fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/g.py", TWO);
    d.write(
        "cat/fixes/fix-g/fix.yaml",
        format!(
            "name: fix-g\nsummary: mark gaudi\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm_gaudi\n        file: vllm_gaudi/g.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\n",
            sha256(TWO.as_bytes())
        ),
    );
    d.write("cat/fixes/fix-g/v0.26.0/g.patch", FIX_C_PATCH.replace("vllm/two.py", "vllm_gaudi/g.py"));
    d
}

/// A mount made for a test, undone on drop.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Bind-mount `at` onto itself read-only.
fn read_only_bind(at: &Path) -> Option<Mount> {
    let bind = mount(&["--bind", at.to_str().unwrap()], at)?;
    let out = Command::new("mount").args(["-o", "remount,ro,bind"]).arg(at).output().ok()?;
    if !out.status.success() {
        eprintln!("SKIPPED: cannot remount read-only ({})", String::from_utf8_lossy(&out.stderr).trim());
        return None;
    }
    Some(bind)
}

fn mount(args: &[&str], at: &Path) -> Option<Mount> {
    let out = Command::new("mount").args(args).arg(at).output().ok()?;
    if !out.status.success() {
        eprintln!(
            "SKIPPED: cannot mount here ({}); run as root with mount rights",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    Some(Mount(at.to_path_buf()))
}

/// `vllm_gaudi/` on a read-only bind mount: apply exits 3 with `vllm/` untouched too; after a
/// successful apply, revert exits 3 with the tree still fully patched.
#[test]
fn read_only_bind_mount_is_all_or_nothing() {
    let d = gaudi_fixture();
    let gaudi = d.path().join("root/vllm_gaudi");
    let pristine = tree_files(&d);
    {
        let Some(_ro) = read_only_bind(&gaudi) else { return };
        let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-g"])).expect(3);
        eprintln!("apply on a read-only vllm_gaudi: {stderr}");
        assert!(stderr.contains("vllm_gaudi/g.py") && stderr.contains("nothing was changed"), "{stderr}");
        assert_same(&tree_files(&d), &pristine, "apply on a read-only vllm_gaudi");
        assert!(!d.path().join("root/.gaudi-fixes").exists(), "left .gaudi-fixes/ behind");
    }
    d.cmd().args(with_fixture(&["apply", "fix-a", "fix-g"])).expect(0);
    let patched = d.snapshot("root");
    let Some(_ro) = read_only_bind(&gaudi) else { return };
    let (_, stderr) = d.cmd().args(with_fixture(&["revert", "fix-a", "fix-g"])).expect(3);
    eprintln!("revert on a read-only vllm_gaudi: {stderr}");
    assert_same(&d.snapshot("root"), &patched, "revert on a read-only vllm_gaudi");
}

/// An immutable file (`chattr +i`; root ignores mode bits): exit 3, nothing changed.
#[test]
fn immutable_file_is_all_or_nothing() {
    let d = gaudi_fixture();
    let g = d.path().join("root/vllm_gaudi/g.py");
    let ok = Command::new("chattr").arg("+i").arg(&g).output();
    if !ok.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: chattr +i not available here: {ok:?}");
        return;
    }
    struct Undo<'a>(&'a Path);
    impl Drop for Undo<'_> {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-i").arg(self.0).status();
        }
    }
    let _undo = Undo(&g);
    let pristine = tree_files(&d);
    let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-g"])).expect(3);
    eprintln!("apply with an immutable file: {stderr}");
    assert!(stderr.contains("vllm_gaudi/g.py") && stderr.contains("nothing was changed"), "{stderr}");
    assert_same(&tree_files(&d), &pristine, "apply with an immutable file");
    assert!(!d.path().join("root/.gaudi-fixes").exists(), "left .gaudi-fixes/ behind");
}

/// The tree on a full tmpfs: exit 3, nothing changed (whichever check stops it).
#[test]
fn full_disk_is_all_or_nothing() {
    let d = gaudi_fixture();
    let small = d.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let Some(_tmpfs) = mount(&["-t", "tmpfs", "-o", "size=256k", "tmpfs"], &small) else { return };
    let ok = Command::new("cp").args(["-a", "root/.", "small/"]).current_dir(d.path()).status().unwrap();
    assert!(ok.success());
    // Fill it up.
    let mut filler = std::fs::File::create(small.join("filler")).unwrap();
    let block = vec![b'x'; 4096];
    while std::io::Write::write_all(&mut filler, &block).is_ok() {}
    drop(filler);
    let before = d.snapshot("small");
    let (_, stderr) = d.cmd().args(["--catalog", "cat", "--root", "small", "apply", "fix-a", "fix-g"]).expect(3);
    eprintln!("apply on a full disk: {stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_same(&d.snapshot("small"), &before, "apply on a full disk");
}

/// `--check` and `status` do not wait forever by default (a stopped writer holding the lock
/// would otherwise hang them): they give up after the default reader timeout, naming the holder.
#[test]
fn readers_give_up_waiting_by_default() {
    let d = two_file_fixture();
    let root = std::fs::File::open(d.path().join("root")).unwrap();
    root.lock().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(with_fixture(&["apply", "--check", "fix-a"]))
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A watchdog far beyond the default, so a build that waits forever fails instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`apply --check` waited for the lock for 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("gave up waiting for the lock"), "{stderr}");
    assert!(stderr.contains(&format!("PID {}", std::process::id())), "{stderr}");
}

/// Finishing an interrupted run fails on its second file: exit 4 (not 3: the first file is
/// finished), each file's state named, the journal kept; the run after that finishes it.
#[test]
fn recovery_failing_half_way_exits_4_and_the_next_run_finishes() {
    let patched = expected_after(&["apply", "fix-a", "fix-c"]);
    let d = two_file_fixture();
    let (out, shown) =
        d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).env("GAUDI_FIXES_FAULT", "after-journal").output();
    assert_aborted(&out, &shown);
    let two = d.path().join("root/vllm/two.py");
    let ok = Command::new("chattr").arg("+i").arg(&two).output();
    if !ok.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: chattr +i not available here: {ok:?}");
        return;
    }
    let (_, stderr) = d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(4);
    let _ = Command::new("chattr").arg("-i").arg(&two).status();
    assert!(stderr.contains("while finishing an interrupted run"), "{stderr}");
    assert!(stderr.contains("vllm/mod.py: NEW content") && stderr.contains("vllm/two.py: old content"), "{stderr}");
    assert!(d.path().join("root/.gaudi-fixes/journal.json").exists());
    d.cmd().args(with_fixture(&["apply", "fix-a", "fix-c"])).expect(0);
    assert_same(&tree_files(&d), &patched, "after the second recovery");
    assert!(leftovers(&d).is_empty(), "left behind {:?}", leftovers(&d));
}
