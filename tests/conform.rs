//! `conform` through the real binary: the suite's report rendered (table, JSON, GitHub), its exit
//! codes (0 no difference, 1 differences, 3 cannot run, with the pip line), and the built-in
//! suite on a real pristine tree when this machine has one and the venv. The catalogue's
//! `fixes/_support` folder is no fix, and `test` writes it beside every fix's tests.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{fixture, with_fixture, Dir};

/// A stand-in for python: passes the module probe; run as `conform.py` (which must have been
/// written into its working directory) it prints `$FAKE_REPORT`.
const FAKE_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo gaudi-fixes-probe-ok; echo; exit 0; fi
[ "$1" = conform.py ] && [ -f conform.py ] && [ -f vllm_gaudi_stubs.py ] || { echo "not the suite: $*"; exit 4; }
echo "$FAKE_REPORT"
"#;

const DIFFERS: &str = r#"{"root": "r", "schedules": 4, "seed": 7, "seconds": 0.1, "features": [{"name": "min_p", "schedules": 3, "differences": 2, "first": "schedule 7, step 2 (sync, decode call): request r3 asked min_p=0.2; the HPU sampler applied none"}, {"name": "seeds", "schedules": 4, "differences": 0, "first": null}]}"#;
const CLEAN: &str = r#"{"root": "r", "schedules": 4, "seed": 7, "seconds": 0.1, "features": [{"name": "min_p", "schedules": 3, "differences": 0, "first": null}]}"#;
const GPU_DISAGREES: &str = r#"{"root": "r", "schedules": 4, "seed": 7, "seconds": 0.1, "reference": "vLLM's GPU path of the tree (gpu_input_batch.InputBatch)", "features": [{"name": "allowed_token_ids", "schedules": 3, "differences": 0, "first": null}], "gpu_disagrees": [{"name": "allowed_token_ids", "count": 5, "first": "schedule 1, step 5 (async, prefill call): request r6 (no allowed_token_ids): the HPU path hands the sampler 'every token' for allowed_token_ids, vLLM's GPU path '[2, 3]'; vLLM's GPU path disagrees with the request"}]}"#;
const MISSING: &str = r#"{"error": "the suite needs the Python module numpy", "missing": "numpy", "pip": "py -m pip install --no-deps numpy"}"#;

fn with_suite() -> Dir {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("cat/fixes/_support/conform.py", "# the suite\n");
    d.write("cat/fixes/_support/vllm_gaudi_stubs.py", "# the stubs\n");
    let py = d.write("py", FAKE_PYTHON);
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn differences_are_a_table_with_the_first_as_a_sentence_and_exit_1() {
    let d = with_suite();
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "conform", "--schedules", "4"]))
        .env("FAKE_REPORT", DIFFERS)
        .expect(1);
    assert!(out.contains("request r3 asked min_p=0.2; the HPU sampler applied none"), "{out}");
    assert!(out.contains("conform: 2 difference(s)"), "{out}");
    let row = out.lines().find(|l| l.trim_start().starts_with("min_p")).unwrap_or_default();
    assert!(row.split_whitespace().take(3).eq(["min_p", "3", "2"]), "{out}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "--format", "json", "conform"]))
        .env("FAKE_REPORT", DIFFERS)
        .expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((v["differences"].clone(), v["exit_code"].clone()), (2.into(), 1.into()), "{out}");
    assert_eq!(v["features"][0]["name"], "min_p", "{out}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "--format", "github", "conform"]))
        .env("FAKE_REPORT", DIFFERS)
        .expect(1);
    assert!(out.starts_with("::error title=conform min_p::2 difference(s)"), "{out}");
}

#[test]
fn where_only_vllms_gpu_path_disagrees_with_the_request_it_is_a_note_and_exit_0() {
    let d = with_suite();
    let (out, _) =
        d.cmd().args(with_fixture(&["--python", "./py", "conform"])).env("FAKE_REPORT", GPU_DISAGREES).expect(0);
    assert!(out.contains("note: allowed_token_ids: vLLM's GPU path disagrees with the request 5 time(s)"), "{out}");
    assert!(out.contains("conform: no difference"), "{out}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", "./py", "--format", "json", "conform"]))
        .env("FAKE_REPORT", GPU_DISAGREES)
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["gpu_disagrees"][0]["count"], 5, "{out}");
    assert!(v["reference"].as_str().is_some_and(|r| r.contains("gpu_input_batch")), "{out}");
}

#[test]
fn no_difference_exits_0_and_a_missing_module_exits_3_with_its_pip_line() {
    let d = with_suite();
    let (out, _) = d.cmd().args(with_fixture(&["--python", "./py", "conform"])).env("FAKE_REPORT", CLEAN).expect(0);
    assert!(out.contains("conform: no difference"), "{out}");
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "conform"])).env("FAKE_REPORT", MISSING).expect(3);
    assert!(
        err.contains("needs the Python module numpy") && err.contains("`py -m pip install --no-deps numpy`"),
        "{err}"
    );
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "conform"])).env("FAKE_REPORT", "garbage").expect(3);
    assert!(err.contains("the conformance suite did not report"), "{err}");
}

#[test]
fn conform_needs_both_trees() {
    let d = fixture();
    let py = d.write("py", FAKE_PYTHON);
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, err) = d.cmd().args(with_fixture(&["--python", "./py", "conform"])).expect(3);
    assert!(err.contains("conform needs a vllm tree and a vllm_gaudi tree"), "{err}");
}

#[test]
fn the_support_folder_is_no_fix_but_another_folder_without_a_manifest_is_an_error() {
    let d = with_suite();
    d.cmd().args(with_fixture(&["lint"])).expect(0);
    d.write("cat/fixes/typo/test_x.py", "");
    let (_, err) = d.cmd().args(with_fixture(&["lint"])).expect(3);
    assert!(err.contains("fixes/typo") && err.contains("fix directory without fix.yaml"), "{err}");
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

#[test]
fn the_built_in_suite_finds_the_pristine_trees_bugs() {
    let Some((python, tree)) = real_python_and_tree() else {
        eprintln!("skipped: no venv with torch or no ~/.cache/gaudi-fixes/upstream/v0.30.0 with vllm_gaudi");
        return;
    };
    let d = Dir::new();
    let python = python.to_str().expect("utf-8 path");
    let root = tree.to_str().expect("utf-8 path");
    let (out, _) =
        d.cmd().args(["--root", root, "--python", python, "--format", "json", "conform", "--schedules", "2"]).expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let differs = |name: &str| {
        v["features"].as_array().unwrap().iter().any(|f| f["name"] == name && f["differences"].as_u64() > Some(0))
    };
    // Pristine 0.30.0: the logits processors never learn about rows (logitsprocs-batch-updates).
    assert!(differs("min_p") && differs("logit_bias"), "{out}");
    // The differential half ran: vLLM's own GPU path of the tree, compared row by request id
    // (schedule 0: the HPU rows hand a request that asked no top_k another request's top_k).
    assert!(v["reference"].as_str().is_some_and(|r| r.contains("gpu_input_batch")), "{out}");
    let firsts: Vec<&str> = v["features"].as_array().unwrap().iter().filter_map(|f| f["first"].as_str()).collect();
    assert!(firsts.iter().any(|f| f.contains("vLLM's GPU path")), "{out}");
    assert!(Path::new(root).is_dir());
}
