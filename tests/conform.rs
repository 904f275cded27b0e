//! `conform` through the real binary, with a stand-in suite (a small Python `conform.py` in a
//! `--catalog` copy, run by `python3` behind a stand-in interpreter that answers the module
//! probe and pip): the report rendered (table with each feature's fixes, JSON, GitHub), the
//! verdict's conditions (exit 0 only with the suite's exit 0, a complete report and a schedule;
//! 3 otherwise, the reason said), every missing module named before the suite runs, `--setup`
//! and `--requirements` from the built-in requirements, progress lines in a log at least every
//! 10 s, `--first` and `--replay`. Also the built-in suite on a real pristine tree when this
//! machine has one and the venv. The catalogue's `fixes/_support` folder is no fix.

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fixture, with_fixture, Dir};

/// A stand-in interpreter: answers gaudi-fixes' probe with `$FAKE_PROBE` (default: everything
/// there), records pip's arguments in `$FAKE_STATE/pip.args`, makes a layered venv whose
/// `bin/python` is itself, and runs anything else with the real `python3` (the stand-in suite,
/// the question where its packages are).
const FAKE_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = venv ]; then
  for dir; do :; done
  mkdir -p "$dir/bin" && cp "$0" "$dir/bin/python" && exit 0
fi
if [ "$1" = "-c" ] && [ -z "${2##*gaudi_fixes_site*}" ]; then exec python3 "$@"; fi
if [ "$1" = "-c" ]; then
  echo gaudi-fixes-probe-ok
  if [ -e "$FAKE_STATE/installed" ]; then echo "$FAKE_PROBE_AFTER"; else echo "${FAKE_PROBE:-$ALL_THERE}"; fi
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = pip ]; then
  echo "$@" > "$FAKE_STATE/pip.args"; [ -n "$FAKE_PIP_FAILS" ] && exit 1
  touch "$FAKE_STATE/installed"; exit 0
fi
exec python3 "$@"
"#;

const ALL_THERE: &str =
    r#"{"missing_modules": [], "dists": {"msgspec": "0.23.0", "pydantic": "2.14.4"}, "torch": "2.13.0"}"#;

const REQUIREMENTS: &str = "# pins for the stand-in suite\nmsgspec==0.23.0\npydantic==2.14.4\n";

/// The stand-in suite: behaves as `$FAKE_MODE` says, records its argv in `$FAKE_STATE/argv.json`.
const SUITE: &str = r#"
import argparse, json, os, sys, time
ap = argparse.ArgumentParser()
for flag in ("--root", "--replay"):
    ap.add_argument(flag)
ap.add_argument("--schedules", type=int)
ap.add_argument("--seed", type=int)
for flag in ("--first", "--no-reference", "--progress"):
    ap.add_argument(flag, action="store_true")
a = ap.parse_args()
json.dump(sys.argv[1:], open(os.path.join(os.environ["FAKE_STATE"], "argv.json"), "w"))
open(os.path.join(os.environ["FAKE_STATE"], "suite.pid"), "w").write(str(os.getpid()))
mode = os.environ.get("FAKE_MODE", "clean")
time.sleep(float(os.environ.get("FAKE_IMPORT", "0")))

def feature(name, n, d=0, first=None):
    return {"name": name, "schedules": n, "differences": d, "first": first}

def report(**kw):
    doc = {"root": a.root, "schedules": a.schedules, "requested": a.schedules, "complete": True, "seed": a.seed,
           "seconds": 0.1, "reference": None, "features": [feature("min_p", a.schedules), feature("seeds", a.schedules)],
           "gpu_disagrees": [], "reference_errors": []}
    doc.update(kw)
    print(json.dumps(doc))

if mode in ("clean", "differs"):
    for n in range(a.schedules):
        time.sleep(float(os.environ.get("FAKE_PAUSE", "0")))
        if a.progress:
            tick = {"done": n + 1, "total": a.schedules, "differences": 0, "seconds": n + 1}
            print("conform-progress " + json.dumps(tick), file=sys.stderr, flush=True)
if mode == "clean":
    report()
elif mode == "differs":
    first = "schedule 7, step 2 (sync, decode call): request r3 asked min_p=0.2; the HPU sampler applied none"
    report(features=[feature("min_p", 3, 2, first), feature("seeds", 4)])
elif mode == "crash":
    print("{}")
    print("Traceback (most recent call last):\nRuntimeError: boom in step 3", file=sys.stderr)
    sys.exit(1)
elif mode == "empty":
    print("{}")
elif mode == "report-then-exit-1":
    report()
    sys.exit(1)
elif mode == "incomplete":
    report(schedules=2, complete=False)
elif mode == "old-and-short":
    doc = {"root": a.root, "schedules": a.schedules - 1, "seed": a.seed, "features": [feature("min_p", 1)]}
    print(json.dumps(doc))
elif mode == "missing":
    print(json.dumps({"error": "the suite needs the Python modules numpy and msgspec", "missing": ["numpy", "msgspec"],
                      "pip": "py -m pip install --no-deps numpy msgspec"}))
    sys.exit(3)
elif mode == "first":
    schedule = {"version": 1, "seed": 7, "mode": "async",
                "requests": {"r0": {"prompt": [5, 6], "params": {"min_p": 0.2}, "grammar": None}},
                "steps": [{"arrive": ["r0"], "scheduled": {"r0": 2}}]}
    report(schedules=3, features=[feature("min_p", 3, 1, "schedule 7, step 0: r0 asked min_p=0.2")],
           failing_schedule=schedule)
elif mode == "replay":
    s = json.load(open(a.replay))
    report(schedules=1, requested=1, features=[feature("min_p", 1, 1, "replayed seed %d" % s["seed"])])
elif mode == "gpu":
    report(reference="vLLM's GPU path of the tree (gpu_input_batch.InputBatch)",
           gpu_disagrees=[{"name": "allowed_token_ids", "count": 5, "first": "schedule 1, step 5: vLLM's GPU path disagrees with the request"}],
           reference_errors=[{"name": "logprobs", "count": 2, "first": "schedule 3: gpu_input_batch raised KeyError: 'r4'"}])
"#;

/// The fixture (fix-a names `min_p` in `conform:`), a vllm_gaudi package, the stand-in suite
/// and interpreter.
fn with_suite() -> Dir {
    let d = fixture();
    let manifest = d.read_string("cat/fixes/fix-a/fix.yaml");
    d.write("cat/fixes/fix-a/fix.yaml", format!("{manifest}conform: [min_p]\n"));
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("cat/fixes/_support/conform.py", SUITE);
    d.write("cat/fixes/_support/vllm_gaudi_stubs.py", "# the stubs\n");
    d.write("cat/fixes/_support/requirements.txt", REQUIREMENTS);
    let py = d.write("py", FAKE_PYTHON);
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// `conform` with `args` in `d`, the stand-in suite in `mode`; returns (stdout, stderr).
fn conform(d: &Dir, mode: &str, args: &[&str], code: i32) -> (String, String) {
    let mut all = vec!["--python", "./py"];
    all.extend_from_slice(args);
    d.cmd()
        .args(with_fixture(&all))
        .env("FAKE_MODE", mode)
        .env("FAKE_STATE", d.path())
        .env("ALL_THERE", ALL_THERE)
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(code)
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn differences_are_a_table_naming_each_features_fix_with_the_first_as_a_sentence_and_exit_1() {
    let d = with_suite();
    let (out, _) = conform(&d, "differs", &["conform", "--schedules", "4"], 1);
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("request r3 asked min_p=0.2; the HPU sampler applied none"), "{out}");
    assert!(out.contains("conform: 2 difference(s)"), "{out}");
    let header = out.lines().find(|l| l.trim_start().starts_with("feature")).unwrap_or_default();
    assert!(header.split_whitespace().eq(["feature", "schedules", "differences", "fix"]), "{out}");
    let row = |name: &str| out.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_default().to_string();
    assert!(row("min_p").split_whitespace().take(4).eq(["min_p", "3", "2", "fix-a"]), "{out}");
    assert!(row("seeds").split_whitespace().eq(["seeds", "4", "0", "none"]), "{out}");
    // The table fits 100 columns; the first difference is under its row.
    assert!(out.lines().all(|l| l.chars().count() <= 100), "a line is over 100 columns:\n{out}");
    assert!(row("first:").contains("schedule 7, step 2 (sync, decode call): request r3"), "{out}");
    let (out, _) = conform(&d, "differs", &["--format", "json", "conform", "--schedules", "4"], 1);
    let v = json(&out);
    assert_eq!((v["differences"].clone(), v["exit_code"].clone()), (2.into(), 1.into()), "{out}");
    assert_eq!(
        (v["features"][0]["name"].clone(), v["features"][0]["fixes"].clone()),
        ("min_p".into(), serde_json::json!(["fix-a"]))
    );
    assert_eq!(v["features"][1]["fixes"], serde_json::json!([]), "{out}");
    let (out, _) = conform(&d, "differs", &["--format", "github", "conform", "--schedules", "4"], 1);
    assert!(out.starts_with("::error title=conform min_p (fix-a)::2 difference(s)"), "{out}");
}

#[test]
fn where_only_vllms_gpu_path_disagrees_or_fails_it_is_a_note_and_exit_0() {
    let d = with_suite();
    let (out, _) = conform(&d, "gpu", &["conform", "--schedules", "2"], 0);
    assert!(out.contains("note: allowed_token_ids: vLLM's GPU path disagrees with the request 5 time(s)"), "{out}");
    assert!(
        out.contains("note: vLLM's GPU reference failed (the reference's error, not counted): logprobs: 2 time(s)"),
        "{out}"
    );
    assert!(out.contains("conform: no difference"), "{out}");
    let (out, _) = conform(&d, "gpu", &["--format", "json", "conform", "--schedules", "2"], 0);
    let v = json(&out);
    assert_eq!(v["gpu_disagrees"][0]["count"], 5, "{out}");
    assert_eq!(v["reference_errors"][0]["name"], "logprobs", "{out}");
    assert!(v["reference"].as_str().is_some_and(|r| r.contains("gpu_input_batch")), "{out}");
    let (out, _) = conform(&d, "gpu", &["--format", "github", "conform", "--schedules", "2"], 0);
    assert!(out.contains("::warning title=conform reference::vLLM's GPU reference failed"), "{out}");
}

/// Issue 36, finding 4: before, `--schedules 0` exited 0, and a suite that crashed after a `{}`
/// line was read as a complete report ("0 schedules on ?", exit 0); its exit code never checked.
#[test]
fn no_difference_needs_the_suites_exit_0_a_complete_report_and_a_schedule() {
    let d = with_suite();
    let (out, _) = conform(&d, "clean", &["conform", "--schedules", "3"], 0);
    assert!(out.contains("conform: no difference"), "{out}");
    // GitHub output is annotations or a notice, a clean run's and a failed one's alike.
    for (mode, code) in [("clean", 0), ("crash", 3)] {
        let (out, _) = conform(&d, mode, &["--format", "github", "conform", "--schedules", "3"], code);
        assert!(!out.is_empty() && out.lines().all(|l| l.starts_with("::")), "{mode}: {out}");
    }
    let (_, err) = conform(&d, "clean", &["conform", "--schedules", "0"], 3);
    assert!(err.contains("'0' for '--schedules <N>'"), "{err}");
    let (_, err) = conform(&d, "crash", &["conform", "--schedules", "3"], 3);
    assert!(err.contains("ended with exit status 1") && err.contains("RuntimeError: boom in step 3"), "{err}");
    assert!(!err.contains("Some("), "{err}");
    let (_, err) = conform(&d, "empty", &["conform", "--schedules", "3"], 3);
    assert!(err.contains("ran no schedule: nothing was checked"), "{err}");
    let (_, err) = conform(&d, "report-then-exit-1", &["conform", "--schedules", "3"], 3);
    assert!(err.contains("printed a report but then ended with exit status 1"), "{err}");
    let (_, err) = conform(&d, "incomplete", &["conform", "--schedules", "4"], 3);
    assert!(err.contains("ran 2 of the 4 schedule(s) asked for"), "{err}");
    // A report without `complete`: every schedule asked for must be in it.
    let (_, err) = conform(&d, "old-and-short", &["conform", "--schedules", "4"], 3);
    assert!(err.contains("ran 3 of the 4 schedule(s)"), "{err}");
    let (out, _) = conform(&d, "crash", &["--format", "json", "conform", "--schedules", "3"], 3);
    assert_eq!(json(&out)["exit_code"], 3, "{out}");
    let (_, err) = conform(&d, "garbage", &["conform", "--schedules", "3"], 3);
    assert!(err.contains("ended without a report (exit status 0) (it printed nothing on stderr)"), "{err}");
}

#[test]
fn every_missing_module_is_named_at_once_before_the_suite_runs() {
    let d = with_suite();
    let probe = r#"{"missing_modules": ["torch"], "dists": {"msgspec": null, "pydantic": null}, "torch": null}"#;
    let (_, err) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "conform"]))
        .env("FAKE_STATE", d.path())
        .env("FAKE_PROBE", probe)
        .expect(3);
    assert!(err.contains("/py` has no torch: conform drives vLLM's and vllm_gaudi's sampling code"), "{err}");
    assert!(err.contains("-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`"), "{err}");
    assert!(!err.contains("the fix's tests"), "{err}");
    assert!(
        err.contains("2 of the 2 distributions the suite imports") && err.contains("msgspec==0.23.0, pydantic==2.14.4"),
        "{err}"
    );
    assert!(err.contains("`gaudi-fixes --catalog cat --python ./py conform --setup`"), "{err}");
    assert!(!d.path().join("argv.json").exists(), "the suite ran");
    // What the suite itself finds missing is said with its pip line.
    let (_, err) = conform(&d, "missing", &["conform"], 3);
    assert!(
        err.contains("missing: numpy, msgspec") && err.contains("`py -m pip install --no-deps numpy msgspec`"),
        "{err}"
    );
}

#[test]
fn setup_installs_the_built_in_requirements_without_dependencies_and_requirements_prints_them() {
    let d = with_suite();
    let after = ALL_THERE;
    let probe = r#"{"missing_modules": [], "dists": {"msgspec": null, "pydantic": "2.14.4"}, "torch": "2.13.0"}"#;
    let run = |extra: &[(&str, &str)], code| {
        let mut cmd = d
            .cmd()
            .args(with_fixture(&["--python", "./py", "conform", "--setup"]))
            .env("FAKE_STATE", d.path())
            .env("FAKE_PROBE", probe)
            .env("FAKE_PROBE_AFTER", after)
            .env("GAUDI_FIXES_CACHE", d.path().join("cache"));
        for (k, v) in extra {
            cmd = cmd.env(k, v);
        }
        cmd.expect(code)
    };
    let (out, err) = run(&[], 0);
    let file = d.path().join("cache/conform/requirements.txt");
    let pip = d.read_string("pip.args");
    // Into conform's own venv, never into the interpreter's environment.
    let venv = std::fs::read_dir(d.path().join("cache/conform"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("venv-")));
    let venv = venv.unwrap_or_else(|| panic!("no venv in the cache:\n{err}"));
    let (head, target) = pip.trim().split_once(" --target ").unwrap_or_else(|| panic!("pip has no --target: {pip}"));
    assert_eq!(head, "-m pip install --no-deps --upgrade", "{err}");
    assert!(target.starts_with(&format!("{}/lib/python3.", venv.display())), "{pip}");
    assert!(target.ends_with(&format!("/site-packages -r {}", file.display())), "{pip}");
    assert!(venv.join("bin/python").is_file(), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), REQUIREMENTS);
    assert!(
        err.contains(&format!("running {}/py -m pip install --no-deps --upgrade --target", d.path().display())),
        "{err}"
    );
    // The run it suggests is this one's: its catalogue, trees and interpreter.
    assert!(out.contains("ready; run `gaudi-fixes --catalog cat --root root --python ./py conform`"), "{out}");
    std::fs::remove_file(d.path().join("installed")).unwrap();
    let (_, err) = run(&[("FAKE_PIP_FAILS", "1")], 3);
    assert!(err.contains("failed (exit status 1); its output is above"), "{err}");
    // The pinned file as built in: the catalogue's, byte for byte.
    let (out, _) = d.cmd().args(["conform", "--requirements"]).expect(0);
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixes/_support/requirements.txt"));
    assert_eq!(out, shipped.unwrap());
    let (out, _) = d.cmd().args(["--catalog", "cat", "--format", "json", "conform", "--requirements"]).expect(0);
    assert_eq!(json(&out)["requirements"], serde_json::json!(["msgspec==0.23.0", "pydantic==2.14.4"]));
}

/// Run `args` in `d` and return its exit code, its stderr's lines with the seconds each came at,
/// and the longest time between two lines (from the start to the end).
fn timed_stderr(d: &Dir, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<(f64, String)>, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"));
    cmd.current_dir(d.path()).args(args).env("NO_COLOR", "1").env("FAKE_STATE", d.path()).env("ALL_THERE", ALL_THERE);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    let (mut last, mut gap, mut lines) = (start, Duration::ZERO, Vec::new());
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        gap = gap.max(last.elapsed());
        last = Instant::now();
        lines.push((start.elapsed().as_secs_f64(), line.unwrap()));
    }
    let code = child.wait().unwrap().code();
    (code, lines, gap.max(last.elapsed()))
}

/// Before: nothing on stderr until the report (1 min 44 s to 2 min 23 s on real trees).
#[test]
fn a_long_run_in_a_log_prints_progress_at_least_every_10_s() {
    let d = with_suite();
    let args = with_fixture(&["--python", "./py", "conform", "--schedules", "4"]);
    let env = [("FAKE_MODE", "clean"), ("FAKE_IMPORT", "11"), ("FAKE_PAUSE", "0.5")];
    let (code, lines, gap) = timed_stderr(&d, &args, &env);
    assert_eq!(code, Some(0), "{lines:#?}");
    assert!(gap < Duration::from_secs(10), "{gap:?} without a line: {lines:#?}");
    let importing = lines.iter().filter(|(_, l)| l.contains("no schedule done yet")).count();
    assert!(importing >= 2, "a line at the start and one while importing: {lines:#?}");
    let counted = lines
        .iter()
        .any(|(_, l)| l.starts_with("conform: ") && l.contains("/4 schedules, 0 differences") && l.contains("left)"));
    assert!(counted, "no line with schedules done of the total and the time left: {lines:#?}");
}

#[test]
fn first_prints_the_failing_schedule_and_replay_runs_it() {
    let d = with_suite();
    let (out, _) = conform(&d, "first", &["conform", "--first"], 1);
    let replay =
        "to replay it, save it to a file and run `gaudi-fixes --catalog cat --root root --python ./py conform \
                  --replay FILE`";
    assert!(out.contains(replay), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert_eq!(json(last)["seed"], 7, "{out}");
    assert!(d.read_string("argv.json").contains("\"--first\""));
    let (out, _) = conform(&d, "first", &["--format", "json", "conform", "--first"], 1);
    assert_eq!(json(&out)["failing_schedule"]["steps"][0]["arrive"][0], "r0", "{out}");
    d.write("saved.json", format!("{last}\n"));
    let (out, _) = conform(&d, "replay", &["conform", "--replay", "saved.json", "--no-reference"], 1);
    assert!(out.contains("replaying saved.json") && out.contains("replayed seed 7"), "{out}");
    let argv: Vec<String> = serde_json::from_str(&d.read_string("argv.json")).unwrap();
    let at = argv.iter().position(|a| a == "--replay").expect("--replay passed");
    assert_eq!(Path::new(&argv[at + 1]), d.path().join("saved.json"), "{argv:?}");
    assert!(argv.contains(&"--no-reference".to_string()), "{argv:?}");
    // A file that is no schedule: exit 3 naming it (and the line), the suite not run.
    std::fs::remove_file(d.path().join("argv.json")).unwrap();
    d.write("bad.json", "{\"seed\": 7,\n  oops\n");
    let (_, err) = conform(&d, "replay", &["conform", "--replay", "bad.json"], 3);
    assert!(err.contains("bad.json:2:") && err.contains("not a schedule"), "{err}");
    let (_, err) = conform(&d, "replay", &["conform", "--replay", "absent.json"], 3);
    assert!(err.contains("absent.json"), "{err}");
    assert!(!d.path().join("argv.json").exists(), "the suite ran");
}

/// Issue 50 (6): a replayed schedule whose step names a request it does not define was
/// reported as a difference of the HPU path (exit 1, feature `raised`), and an empty schedule
/// passed (exit 0, every feature "exercised"). A schedule is checked before the suite runs: a
/// verdict needs at least one request and one step, and every name a step uses defined; else
/// exit 3 naming the file and what is wrong.
#[test]
fn replay_refuses_a_schedule_that_cannot_give_a_verdict() {
    let d = with_suite();
    let request = r#""r0": {"prompt": [5, 6], "params": {}, "grammar": null}"#;
    let cases = [
        ("empty.json", r#"{"seed": 7}"#.to_string(), "no requests"),
        ("no-steps.json", format!(r#"{{"seed": 7, "requests": {{{request}}}, "steps": []}}"#), "no steps"),
        (
            "undefined.json",
            format!(
                r#"{{"seed": 7, "requests": {{{request}}}, "steps": [{{"arrive": ["r0"], "scheduled": {{"r0": 2, "r9": 1}}}}]}}"#
            ),
            "step 0's `scheduled` names r9, a request the schedule does not define",
        ),
        (
            "bad-list.json",
            format!(r#"{{"seed": 7, "requests": {{{request}}}, "steps": [{{"finish": "r0"}}]}}"#),
            "step 0's `finish` is not a list of request names",
        ),
    ];
    for (file, text, want) in cases {
        d.write(file, text);
        let (_, err) = conform(&d, "replay", &["conform", "--replay", file], 3);
        assert!(err.contains(file) && err.contains(want), "{file}: wanted `{want}` in:\n{err}");
        assert!(!d.path().join("argv.json").exists(), "{file}: the suite ran");
    }
}

#[test]
fn conform_needs_both_trees() {
    let d = fixture();
    let py = d.write("py", FAKE_PYTHON);
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "conform"])).expect(3);
    assert!(err.contains("conform needs a vllm tree and a vllm_gaudi tree"), "{err}");
}

/// The suite reads the trees under the shared lock, as `status` does: while a writer holds a
/// tree it waits (here: gives up after `--lock-timeout`) instead of running the suite on a tree
/// an `apply` is halfway through.
#[test]
fn conform_waits_for_a_writer_holding_the_tree() {
    let d = with_suite();
    let root = std::fs::File::open(d.path().join("root")).unwrap();
    root.lock().unwrap();
    let (_, err) = conform(&d, "clean", &["conform", "--schedules", "2", "--lock-timeout", "0.3"], 3);
    assert!(err.contains("gave up waiting for the lock"), "{err}");
    assert!(!d.path().join("argv.json").exists(), "the suite ran");
    root.unlock().unwrap();
    conform(&d, "clean", &["conform", "--schedules", "2"], 0);
}

#[test]
fn the_support_folder_is_no_fix_but_another_folder_without_a_manifest_is_an_error() {
    let d = with_suite();
    d.cmd().args(with_fixture(&["lint"])).expect(0);
    d.write("cat/fixes/typo/test_x.py", "");
    let (_, err) = d.cmd().args(with_fixture(&["lint"])).expect(3);
    assert!(err.contains("fixes/typo") && err.contains("fix directory without fix.yaml"), "{err}");
}

#[test]
fn lint_refuses_a_default_fix_that_names_no_conformance_feature() {
    let d = with_suite();
    let manifest = d.read_string("cat/fixes/fix-a/fix.yaml");
    d.write("cat/fixes/fix-a/fix.yaml", manifest.replace("conform: [min_p]\n", ""));
    let (out, _) = d.cmd().args(with_fixture(&["lint"])).expect(1);
    assert!(out.contains("fix-a is in the default profile but names no conformance feature"), "{out}");
    assert!(out.contains("cat/fixes/fix-a/fix.yaml:1"), "{out}");
    // A catalogue without a conformance suite has no feature to name.
    std::fs::remove_file(d.path().join("cat/fixes/_support/conform.py")).unwrap();
    d.cmd().args(with_fixture(&["lint"])).expect(0);
    d.write("cat/fixes/_support/conform.py", SUITE);
    d.write("cat/fixes/fix-a/fix.yaml", manifest.replace("conform: [min_p]", "conform: [min_p, min_p]"));
    let (out, _) = d.cmd().args(with_fixture(&["lint"])).expect(1);
    assert!(out.contains("fix-a: conform: names `min_p` twice"), "{out}");
    // fix-b is not in the default profile: it may name none.
    d.write("cat/fixes/fix-a/fix.yaml", &manifest);
    d.cmd().args(with_fixture(&["lint"])).expect(0);
}

/// The venv's python with torch, and a pristine v0.30.0 tree with vllm_gaudi, when this machine has both.
fn real_python_and_tree() -> Option<(PathBuf, PathBuf)> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let python = std::env::var_os("GAUDI_FIXES_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/gaudi-fixes/venv/bin/python"));
    let tree = home.join(".cache/gaudi-fixes/upstream/v0.30.0");
    let ok = std::process::Command::new(&python).args(["-c", "import torch, numpy"]).output().ok()?.status.success();
    (ok && tree.join("vllm_gaudi/v1/worker/hpu_input_batch.py").is_file()).then_some((python, tree))
}

/// `real_python_and_tree` as the command line's strings; None (after saying so) when this
/// machine has neither.
fn real_paths() -> Option<(String, String)> {
    let Some((python, tree)) = real_python_and_tree() else {
        eprintln!("skipped: no venv with torch or no ~/.cache/gaudi-fixes/upstream/v0.30.0 with vllm_gaudi");
        return None;
    };
    Some((python.to_str()?.to_string(), tree.to_str()?.to_string()))
}

#[test]
fn the_built_in_suite_finds_the_pristine_trees_bugs_and_names_their_fixes() {
    let Some((python, tree)) = real_python_and_tree() else {
        eprintln!("skipped: no venv with torch or no ~/.cache/gaudi-fixes/upstream/v0.30.0 with vllm_gaudi");
        return;
    };
    let d = Dir::new();
    let python = python.to_str().expect("utf-8 path");
    let root = tree.to_str().expect("utf-8 path");
    let args = ["--root", root, "--python", python, "--format", "json", "conform", "--schedules", "2", "--seed", "10"];
    let (out, _) = d.cmd().args(args).expect(1);
    let v = json(&out);
    let feature = |name: &str| v["features"].as_array().unwrap().iter().find(|f| f["name"] == name).cloned();
    let differs = |name: &str| feature(name).is_some_and(|f| f["differences"].as_u64() > Some(0));
    // Pristine 0.30.0: the logits processors never learn about rows (logitsprocs-batch-updates,
    // schedule 11, async), and an exception in the HPU path is its own feature (schedule 10:
    // bad_words on the wrong rows).
    assert!(differs("min_p") && differs("raised"), "{out}");
    assert_eq!(feature("min_p").unwrap()["fixes"], serde_json::json!(["logitsprocs-batch-updates"]), "{out}");
    // The differential half ran: vLLM's own GPU path of the tree, compared row by request id.
    assert!(v["reference"].as_str().is_some_and(|r| r.contains("gpu_input_batch")), "{out}");
    let firsts: Vec<&str> = v["features"].as_array().unwrap().iter().filter_map(|f| f["first"].as_str()).collect();
    assert!(firsts.iter().any(|f| f.contains("vLLM's GPU path")), "{out}");
}

/// A report's "schedule N" is what `--seed N --schedules 1` runs (its mode follows from N alone):
/// schedule 11 of a run from seed 10 is found again, word for word, alone.
#[test]
fn schedule_n_of_a_report_is_what_seed_n_schedules_1_runs() {
    let Some((python, root)) = real_paths() else { return };
    let (d, python, root) = (Dir::new(), python.as_str(), root.as_str());
    let min_p_first = |seed: &str, count: &str| {
        let args =
            ["--root", root, "--python", python, "--format", "json", "conform", "--schedules", count, "--seed", seed];
        let (out, _) = d.cmd().args(args).expect(1);
        let v = json(&out);
        let f = v["features"].as_array().unwrap().iter().find(|f| f["name"] == "min_p").cloned();
        f.and_then(|f| f["first"].as_str().map(str::to_string)).unwrap_or_else(|| panic!("no min_p row: {out}"))
    };
    let in_run = min_p_first("10", "2");
    assert!(in_run.starts_with("schedule 11, step 0 (async"), "{in_run}");
    assert_eq!(min_p_first("11", "1"), in_run);
}

/// Issue 50 (10): `conform --schedules 4294967295` built its whole plan in memory (1.3 GB and
/// growing before the first schedule). Above the most a run can mean (100000 schedules, about
/// 14 hours) it is refused as a usage error, saying the range, before the suite starts.
#[test]
fn a_schedule_count_past_the_maximum_is_refused_before_the_suite_runs() {
    let d = with_suite();
    for n in ["1000001", "4294967295"] {
        let (_, err) = conform(&d, "clean", &["conform", "--schedules", n], 3);
        assert!(err.contains(&format!("'{n}' for '--schedules <N>'")) && err.contains("1..=100000"), "{err}");
        assert!(!d.path().join("argv.json").exists(), "the suite ran");
    }
    conform(&d, "clean", &["conform", "--schedules", "100000"], 0);
}

/// `--shrink` on a pristine tree's first failing schedule prints a smaller schedule (fewer requests,
/// and fewer prompt tokens than the requests it keeps had) that still differs in the same feature,
/// and `--replay` of it says so again.
#[test]
fn shrink_prints_a_smaller_schedule_that_still_differs_on_replay() {
    let Some((python, root)) = real_paths() else { return };
    let (d, python, root) = (Dir::new(), python.as_str(), root.as_str());
    let gf = |args: &[&str], code: i32| {
        let mut all = vec!["--root", root, "--python", python, "--format", "json", "conform"];
        all.extend_from_slice(args);
        json(&d.cmd().args(all).expect(code).0)
    };
    let first = gf(&["--seed", "10", "--schedules", "5", "--first"], 1);
    d.write("failing.json", first["failing_schedule"].to_string());
    let failing = d.path().join("failing.json");
    let shrunk = gf(&["--shrink", failing.to_str().unwrap()], 1)["shrunk"].clone();
    let (before, after) = (&shrunk["before"], &shrunk["after"]);
    let size = |v: &serde_json::Value| (v["requests"].as_u64().unwrap(), v["steps"].as_u64().unwrap());
    assert!(size(after).0 < size(before).0 && size(after).1 <= size(before).1, "{shrunk}");
    // Prompt tokens too: the requests left keep only the prompt the difference needs.
    let prompt = |v: &serde_json::Value| v["prompt_tokens"].as_u64().unwrap();
    let kept: u64 = shrunk["schedule"]["requests"]
        .as_object()
        .unwrap()
        .keys()
        .map(|rid| first["failing_schedule"]["requests"][rid]["prompt"].as_array().unwrap().len() as u64)
        .sum();
    assert!(prompt(after) < kept && kept <= prompt(before), "{shrunk}");
    d.write("small.json", shrunk["schedule"].to_string());
    let small = d.path().join("small.json");
    let replayed = gf(&["--replay", small.to_str().unwrap()], 1);
    let feature = shrunk["feature"].as_str().unwrap();
    let row = replayed["features"].as_array().unwrap().iter().find(|f| f["name"] == feature).cloned().unwrap();
    assert!(row["differences"].as_u64() > Some(0), "{replayed}");
}

/// Issue 45: `--jobs N` splits a run's schedules over N workers and merges their findings back in
/// schedule order: the report of a real tree is the same, word for word, for 1 and 2 workers but
/// for the time taken, the rate and the worker count (which it gives).
#[test]
fn jobs_2_reports_what_jobs_1_reports() {
    let Some((python, root)) = real_paths() else { return };
    let (d, python, root) = (Dir::new(), python.as_str(), root.as_str());
    let report = |jobs: &str| {
        let args = [
            "--root",
            root,
            "--python",
            python,
            "--format",
            "json",
            "conform",
            "--schedules",
            "6",
            "--seed",
            "10",
            "--jobs",
            jobs,
        ];
        let mut v = json(&d.cmd().args(args).expect(1).0);
        assert_eq!(v["jobs"].as_u64().map(|j| j.to_string()).as_deref(), Some(jobs), "{v}");
        assert!(v["schedules_per_minute"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert_eq!(v["last_seed"].as_u64(), Some(15), "{v}");
        for timing in ["seconds", "jobs", "schedules_per_minute"] {
            v.as_object_mut().unwrap().remove(timing);
        }
        v
    };
    let (one, two) = (report("1"), report("2"));
    // Several features differ on pristine 0.30.0 in these schedules, each with its first sentence.
    assert!(one["features"].as_array().unwrap().iter().filter(|f| f["differences"].as_u64() > Some(0)).count() > 2);
    assert_eq!(one, two);
}

/// Issue 45: a shrink cut (a step left out, drafts dropped) can leave a step scheduling more tokens
/// than its request has left, which no scheduler sends (a shrunk corpus schedule that "differed"
/// only so): `--shrink` refuses such a schedule, naming the step, and never keeps such a cut.
#[test]
fn shrink_refuses_a_step_that_schedules_tokens_a_request_does_not_have() {
    let Some((python, root)) = real_paths() else { return };
    let d = Dir::new();
    // r0's prompt has 5 tokens: step 0 computes 4, step 1 asks for 3 of the 1 left.
    let schedule = serde_json::json!({
        "version": 1, "seed": 0, "mode": "sync",
        "requests": {"r0": {"prompt": [5, 6, 7, 8, 9], "params": {"temperature": 0.0}, "grammar": null}},
        "steps": [
            {"finish": [], "preempt": [], "arrive": ["r0"], "scheduled": {"r0": 4}, "structured": []},
            {"finish": [], "preempt": [], "arrive": [], "scheduled": {"r0": 3}, "structured": []}
        ]
    });
    d.write("over.json", schedule.to_string());
    let file = d.path().join("over.json");
    let args = ["--root", root.as_str(), "--python", python.as_str(), "conform", "--shrink", file.to_str().unwrap()];
    let (out, err) = d.cmd().args(args).expect(3);
    assert!(err.contains("step 1 schedules 3 tokens of r0, which has 1 left"), "{out}{err}");
}

/// Issue 44: a schedule file is read by its `version`; one of another version than the suite's
/// (a later format, or a hand-edited file) is refused before anything runs, naming the version
/// and the file, for `--replay` and `--shrink` alike.
#[test]
fn replay_and_shrink_refuse_a_schedule_of_another_version_naming_it() {
    let Some((python, root)) = real_paths() else { return };
    let d = Dir::new();
    let schedule = serde_json::json!({
        "version": 99, "seed": 0, "mode": "sync",
        "requests": {"r0": {"prompt": [5, 6, 7, 8, 9], "params": {"temperature": 0.0}, "grammar": null}},
        "steps": [{"finish": [], "preempt": [], "arrive": ["r0"], "scheduled": {"r0": 5}, "structured": []}]
    });
    d.write("v99.json", schedule.to_string());
    let file = d.path().join("v99.json");
    for flag in ["--replay", "--shrink"] {
        let args = ["--root", root.as_str(), "--python", python.as_str(), "conform", flag, file.to_str().unwrap()];
        let (out, err) = d.cmd().args(args).expect(3);
        assert!(err.contains("of version 99") && err.contains("v99.json"), "{flag}: {out}{err}");
    }
}

/// SIGTERM to `conform` while the suite runs reaches the suite (its own process group, the
/// signal forwarded), which is waited for; its scratch directory is removed and the exit code is
/// 143 (128 + SIGTERM), as for a process the signal ended. Before: gaudi-fixes died at once, the
/// suite ran on (reading a tree a later `apply` writes) and its scratch directory stayed.
#[test]
fn sigterm_reaches_the_suite_and_removes_the_scratch() {
    let d = with_suite();
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .current_dir(d.path())
        .args(with_fixture(&["--python", "./py", "conform", "--schedules", "3"]))
        .env("FAKE_MODE", "clean")
        .env("FAKE_IMPORT", "120")
        .env("FAKE_STATE", d.path())
        .env("ALL_THERE", ALL_THERE)
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .env("TMPDIR", &tmp)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = d.path().join("suite.pid");
    let started = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| s.is_empty()) {
        assert!(started.elapsed() < Duration::from_secs(60), "the stand-in suite never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let suite: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(std::fs::read_dir(&tmp).unwrap().count() > 0, "the suite runs from a scratch directory under TMPDIR");
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let waited = Instant::now();
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "exit 128 + SIGTERM ({status:?}); stderr: {err}");
    assert!(waited.elapsed() < Duration::from_secs(30), "the suite was stopped, not waited out");
    assert!(err.contains("SIGTERM"), "{err}");
    let alive = unsafe { libc::kill(suite, 0) } == 0;
    assert!(!alive, "the suite (pid {suite}) still runs after gaudi-fixes exited");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}
