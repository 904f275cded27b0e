//! Integration tests of the reference sampler (feature `reference`): they run the real
//! `gaudi-fixes` binary — `equiv`, `equiv --emit-vectors`, `bench` — on small settings and
//! check exit codes and the JSON they print. On failure each shows the command and its output.

#![cfg(feature = "reference")]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Small suite settings: every fixture, one generated batch per configuration at V=4096, the
/// default draws (fewer lose the power the suite requires), few calibration and power runs.
const SMALL_EQUIV: &[&str] =
    &["equiv", "--cases", "1", "--vocab", "4096", "--draws", "1000", "--calibration-runs", "100", "--power-runs", "20"];

/// Run the binary; return its output with a description for assertion messages.
fn run(args: &[&str]) -> (Output, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"))
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .env("NO_COLOR", "1")
        .output()
        .expect("running gaudi-fixes");
    let shown = format!(
        "command: gaudi-fixes {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        args.join(" "),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, shown)
}

fn json(output: &Output, shown: &str) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{shown}"))
}

#[test]
fn equiv_finds_the_subset_equivalent_and_catches_every_mutant() {
    let mut args = SMALL_EQUIV.to_vec();
    args.extend(["--format", "json"]);
    let (output, shown) = run(&args);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let report = json(&output, &shown);
    assert_eq!(report["schema"], 1, "README, JSON output: every document carries schema 1\n{shown}");
    assert_eq!(report["verdict"], "equivalent", "{shown}");
    for verdict in report["subset"]["verdicts"].as_array().unwrap() {
        assert_eq!(verdict["passed"], true, "{verdict}\n{shown}");
    }
    assert!(report["rows_checked"].as_u64().unwrap() > 100);
    assert_eq!(report["subset"]["exact"]["unexplained"], 0);
    assert!(report["subset"]["exact"]["max_ulps"].as_u64().unwrap() <= report["ulp_bound"].as_u64().unwrap());
    assert_eq!(report["subset"]["statistical"]["outside_support_draws"], 0);
    assert!(report["fallback_cases"].as_u64().unwrap() >= 2, "fixtures include two fallbacks");
    // The fixtures plant ties: the by-value rule must have mattered somewhere.
    assert!(report["ties"]["kth_ties_kept_by_value"].as_u64().unwrap() > 0, "{}", report["ties"]);
    // Since v2 a tie group crossing the window is completed, never excused: 0 such rows,
    // while the fixtures make such groups spill in many rows.
    assert_eq!(report["ties"]["kth_tie_crosses_window"], 0, "{}", report["ties"]);
    assert_eq!(report["subset"]["exact"]["kth_tie_crosses_window"], 0);
    assert!(report["ties"]["kth_tie_spills_past_window"].as_u64().unwrap() >= 20, "{}", report["ties"]);
    assert_eq!(report["subset"]["coupled"]["mismatches"], 0);
    let coupled = &report["subset"]["coupled"];
    assert!(coupled["tie_class_cut"].as_u64().unwrap() <= report["ties"]["top_p_cuts_tie_class"].as_u64().unwrap());
    let power = &report["power"];
    assert_eq!(power["ok"], true, "{power}");
    assert_eq!(power["rows"].as_array().unwrap().len(), 6, "{power}");
    for row in power["rows"].as_array().unwrap() {
        if row["tvd"] == 0.03 {
            assert!(row["power"].as_f64().unwrap() >= 0.95, "{row}");
        }
    }
    let calibration = &report["calibration"];
    assert_eq!(calibration["runs"], 100);
    assert!(calibration["false_alarm_rate"].as_f64().unwrap() <= 0.01, "{calibration}");

    let mutants = report["mutants"].as_array().unwrap();
    let names: Vec<&str> = mutants.iter().map(|m| m["name"].as_str().unwrap()).collect();
    for expected in [
        "k-off-by-one",
        "window-too-small",
        "top-p-before-top-k",
        "descending-cumsum",
        "strict-top-p",
        "no-keep-one",
        "rolled-k",
        "mask-by-position",
        "no-tie-completion",
        "tie-first-member",
    ] {
        assert!(names.contains(&expected), "mutant {expected} missing from {names:?}");
    }
    for mutant in mutants {
        assert_eq!(mutant["caught"], true, "{mutant}\n{shown}");
        assert!(!mutant["caught_by"].as_array().unwrap().is_empty(), "{mutant}");
    }
    // v1 is caught by the new count itself; the non-uniform member only by the draws.
    let v1 = mutants.iter().find(|m| m["name"] == "no-tie-completion").unwrap();
    assert!(v1["kth_tie_crosses_window_rows"].as_u64().unwrap() > 0, "{v1}");
    let first = mutants.iter().find(|m| m["name"] == "tie-first-member").unwrap();
    assert!(first["statistical_failed_cases"].as_u64().unwrap() > 0, "{first}");
    // The same run's speculative steps (one equiv run serves both: CI time).
    speculative_steps_keep_the_target_distribution(&report, &shown);
}

/// Speculative steps (issue 49): vLLM's rejection sampling emits a first token, and a first
/// pair of tokens, distributed as sampling from the target; the gate is calibrated and catches
/// a total variation of 0.03; each listed mutant is rejected by a test that can see its
/// mistake, and a surviving one would make `equiv` exit 1 (checked by the caller's exit 0).
fn speculative_steps_keep_the_target_distribution(report: &Value, shown: &str) {
    let spec = &report["speculative"];
    assert_eq!(spec["passed"], true, "{spec}\n{shown}");
    let tests = spec["reference"].as_array().unwrap();
    assert_eq!(tests.len(), spec["tests"].as_u64().unwrap() as usize, "{spec}");
    for emitted in ["first_token", "two_tokens"] {
        assert!(tests.iter().filter(|t| t["emitted"] == emitted).count() >= 7, "{emitted}: {spec}");
    }
    for test in tests {
        assert_eq!(test["failed"], false, "{test}");
        assert_eq!(test["test"]["outside_support"], 0, "{test}");
    }
    // The case: temperature 1.0 with an ngram draft, within the gate.
    assert!(tests.iter().any(|t| t["case"] == "ngram-t1.0" && t["emitted"] == "first_token"), "{spec}");
    assert_eq!(spec["calibration"]["ok"], true, "{}", spec["calibration"]);
    assert_eq!(spec["power"]["ok"], true, "{}", spec["power"]);
    // Each test alone, too: a mistake may show in one test only.
    assert!(spec["weakest_test_power"].as_f64().unwrap() >= 0.95, "{spec}");
    for row in spec["power"]["rows"].as_array().unwrap() {
        if row["tvd"] == 0.03 {
            assert!(row["power"].as_f64().unwrap() >= 0.95, "{row}");
        }
    }
    let mutants = spec["mutants"].as_array().unwrap();
    // Each mutant, and a test where its mistake shows (not merely some test).
    for (name, seen_by) in [
        ("spec-accept-always", "ngram-t1.0: first token"),
        ("spec-residual-not-renormalised", "ngram-t1.0: first token"),
        ("spec-bonus-from-draft", "ngram-t1.0: two tokens"),
        ("spec-temperature-twice", "ngram-t0.7-top-k4-top-p0.9: first token"),
        ("spec-greedy-divided-by-minus-1", "greedy-hpu-temperature-minus-1: first token"),
    ] {
        let m = mutants.iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("no mutant {name}: {spec}"));
        assert_eq!(m["caught"], true, "{m}\n{shown}");
        let by: Vec<&str> = m["caught_by"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert!(by.contains(&seen_by), "{name} not caught by {seen_by}: {m}");
    }
    // Bonus from the draft changes only what follows an accepted last draft: no first token.
    let bonus = mutants.iter().find(|m| m["name"] == "spec-bonus-from-draft").unwrap();
    assert!(
        bonus["caught_by"].as_array().unwrap().iter().all(|t| t.as_str().unwrap().ends_with("two tokens")),
        "{bonus}"
    );
}

#[test]
fn a_gate_without_power_makes_the_suite_refuse_a_verdict() {
    // 300 draws per row cannot see a total variation of 0.03 in 95% of runs: the power table
    // must say so and equiv must exit 1 ("the suite itself is broken").
    let mut args = SMALL_EQUIV.to_vec();
    let at = args.iter().position(|&a| a == "--draws").unwrap();
    args[at + 1] = "300";
    args.extend(["--format", "json"]);
    let (output, shown) = run(&args);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    let report = json(&output, &shown);
    assert_eq!(report["verdict"], "suite_broken", "{shown}");
    assert_eq!(report["power"]["ok"], false, "{}", report["power"]);
    assert_eq!(report["calibration"]["ok"], true, "{}", report["calibration"]);
}

#[test]
fn equiv_human_output_has_the_check_and_mutant_tables() {
    let (output, shown) = run(SMALL_EQUIV);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let text = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "exact",
        "coupled",
        "statistical",
        "fallback",
        "calibration",
        "power",
        "from top",
        "to top",
        "mask-by-position",
        "no-tie-completion",
        "k-th tie cut at the window (must be 0)",
        "speculative steps:",
        "spec-greedy-divided-by-minus-1",
        "EQUIVALENT",
    ] {
        assert!(text.contains(needle), "missing {needle:?}\n{shown}");
    }
}

#[test]
fn a_gate_that_alarms_on_stock_itself_makes_the_suite_refuse_a_verdict() {
    // alpha 0.999 rejects nearly every honest draw: calibration must catch that, and equiv
    // must exit 1 ("the suite itself is broken"), not 0.
    let mut args = SMALL_EQUIV.to_vec();
    args.extend(["--alpha", "0.999", "--format", "json"]);
    let (output, shown) = run(&args);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    let report = json(&output, &shown);
    assert_eq!(report["verdict"], "suite_broken", "{shown}");
    assert_eq!(report["calibration"]["ok"], false);
}

#[test]
fn bad_flags_are_errors_with_exit_3() {
    for args in [
        &["equiv", "--vocab", "100"][..],
        &["equiv", "--release", "v0.27.0"],
        &["bench", "--top-k", "2000"],
        &["bench", "--repeats", "0"],
    ] {
        let (output, shown) = run(args);
        assert_eq!(output.status.code(), Some(3), "{shown}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("error"), "{shown}");
    }
}

/// A parsed `.npy`: descr, shape and the raw little-endian data.
struct Npy {
    descr: String,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn read_npy(path: &Path) -> Npy {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "{}: not an .npy v1.0", path.display());
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0, "{}: header not 64-byte aligned", path.display());
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'fortran_order': False"), "{header}");
    let descr = header.split("'descr': '").nth(1).unwrap().split('\'').next().unwrap().to_string();
    let shape_text = header.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape = shape_text.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().unwrap()).collect();
    Npy { descr, shape, data: bytes[10 + header_len..].to_vec() }
}

impl Npy {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
    fn i32s(&self) -> Vec<i32> {
        assert_eq!(self.descr, "<i4");
        self.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn i64s(&self) -> Vec<i64> {
        assert_eq!(self.descr, "<i8");
        self.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn f32s(&self) -> Vec<f32> {
        assert_eq!(self.descr, "<f4");
        self.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }
}

#[test]
fn emit_vectors_writes_parseable_cases_and_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vectors");
    let (output, shown) = run(&["equiv", "--emit-vectors", out.to_str().unwrap(), "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let manifest: Value = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_array().unwrap();
    let doc = json(&output, &shown);
    assert_eq!(doc["schema"], 1, "{shown}");
    assert_eq!(doc["cases"].as_u64(), Some(cases.len() as u64), "{shown}");
    assert_eq!(doc["manifest"].as_str().map(Path::new), Some(out.join("manifest.json").as_path()), "{shown}");
    assert!(cases.len() >= 10, "{manifest}");
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for needle in [
        "bf16-ties-at-kth",
        "p-tiny",
        "all-equal",
        "all-equal-k50",
        "top-k-over-1024",
        "batch-of-one",
        "kth-tie-spill-k64",
        "kth-tie-spill-k128",
        "kth-tie-spill-k1024",
        "bf16-model-tie-spill-k64-v151936",
    ] {
        assert!(names.iter().any(|n| n.starts_with(needle)), "no {needle} case in {names:?}");
    }
    // Tie groups past the window are listed, and are no reason to differ any more.
    for case in cases.iter().filter(|c| c["name"].as_str().unwrap().contains("tie-spill")) {
        let spills = case["kth_tie_spill_rows"].as_array().unwrap();
        assert!(!spills.is_empty(), "{case}");
        for may in case["subset_may_differ"].as_array().unwrap() {
            assert!(!may["reason"].as_str().unwrap().contains("k-th"), "{may}");
        }
    }
    let mut total_bytes = 0;
    for case in cases {
        let case_dir = out.join(case["name"].as_str().unwrap());
        let mut npy = |name: &str| {
            let path = case_dir.join(name);
            total_bytes += std::fs::metadata(&path).unwrap().len();
            read_npy(&path)
        };
        let logits = npy("logits.npy");
        let (b, v) = (logits.shape[0], logits.shape[1]);
        assert_eq!(logits.f32s().len(), b * v);
        // Read once: each read adds the file's size to the total.
        let noise = npy("noise.npy");
        assert_eq!(noise.shape, vec![b, v]);
        assert!(noise.f32s().iter().all(|&q| q >= 0.0), "Exp(1) noise is non-negative");
        assert_eq!(npy("k.npy").i64s().len(), b);
        assert_eq!(npy("p.npy").f32s().len(), b);
        let expected = npy("expected_tokens.npy").i64s();
        let lengths = npy("support_lengths.npy").i32s();
        let ids = npy("support_ids.npy");
        let logprobs = npy("support_logprobs.npy");
        assert_eq!(ids.len(), lengths.iter().map(|&n| n as usize).sum::<usize>());
        assert_eq!(logprobs.len(), ids.len());
        let (ids, logprobs) = (ids.i32s(), logprobs.f32s());
        let mut at = 0;
        for (row, &n) in lengths.iter().enumerate() {
            let row_ids = &ids[at..at + n as usize];
            assert!(row_ids.windows(2).all(|w| w[0] < w[1]), "ids ascending within a row");
            assert!(row_ids.contains(&(expected[row] as i32)), "stock's token is in its support");
            let mass: f64 = logprobs[at..at + n as usize].iter().map(|&l| f64::from(l).exp()).sum();
            assert!((mass - 1.0).abs() < 1e-4, "support logprobs sum to one ({mass})");
            at += n as usize;
        }
    }
    assert!(total_bytes < 8_000_000, "vectors should stay a few MB, got {total_bytes} bytes");
}

#[test]
fn bench_runs_a_small_shape_and_reports_json() {
    let (output, shown) =
        run(&["bench", "--batch", "2", "--vocab", "4096", "--repeats", "1", "--threads", "1", "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let report = json(&output, &shown);
    assert_eq!(report["schema"], 1, "{shown}");
    assert_eq!(report["torch_threads"], 1);
    assert_eq!(report["window"], 64);
    let shape = &report["shapes"][0];
    assert_eq!((shape["batch"].as_i64(), shape["vocab"].as_i64()), (Some(2), Some(4096)));
    for op in ["stock", "subset", "subset_v1", "subset_masks_selected", "subset_masks_support", "floor_amax", "topk"] {
        assert!(shape["median_ms"][op].as_f64().unwrap() > 0.0, "{op}: {shape}");
    }
    // The target shape was not run, so no target may claim to be met.
    for target in report["targets"].as_array().unwrap() {
        assert!(target["met"].is_null(), "{target}");
    }
}
