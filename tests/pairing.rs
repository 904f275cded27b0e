//! Whether the vllm_gaudi found imports on the vLLM found, read statically: reported by
//! `status` (and its JSON `pairing`); a vLLM without the V1 sampling path the fixes plug into
//! (vLLM 0.34.0 removed it) makes `apply` refuse (exit 2, nothing written) and `--check` fail;
//! other unresolved names are a warning.

use crate::common::{fixture, with_fixture, Dir};

/// The fixture with a vllm_gaudi tree beside vLLM: its plugin entry point imports a module
/// that imports the V1 sampler and a name `vllm.mod` does not define.
fn paired() -> Dir {
    let d = fixture();
    d.write("root/vllm_gaudi/__init__.py", "def register():\n    from vllm_gaudi.platform import HpuPlatform\n");
    d.write(
        "root/vllm_gaudi/platform.py",
        "from vllm.mod import (\n    sample,\n    not_in_vllm,\n)\nfrom vllm.v1.sample.sampler import Sampler\n",
    );
    d
}

/// vLLM's V1 sampler module, as releases before 0.34.0 have it.
fn with_sampler(d: &Dir) {
    for init in ["root/vllm/v1/__init__.py", "root/vllm/v1/sample/__init__.py"] {
        d.write(init, "");
    }
    d.write("root/vllm/v1/sample/sampler.py", "class Sampler:\n    pass\n");
}

#[test]
fn apply_refuses_a_vllm_without_the_sampling_path_and_writes_nothing() {
    let d = paired();
    let before = d.snapshot("root");
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(2);
    assert!(out.contains("lacks vllm/v1/sample/sampler.py"), "no reason naming the module:\n{out}");
    assert!(out.contains("nothing was written"), "{out}");
    crate::common::assert_same(&d.snapshot("root"), &before, "a refused apply");
    let (check, _) = d.cmd().args(with_fixture(&["apply", "--check"])).expect(2);
    assert!(!check.contains("everything applied") && check.contains("the check does not pass"), "{check}");
    let (github, _) = d.cmd().args(with_fixture(&["apply", "--check", "--format", "github"])).expect(2);
    assert!(github.starts_with("::error::") && github.contains("vllm/v1/sample/sampler.py"), "{github}");
    let (json, _) = d.cmd().args(with_fixture(&["status", "--format", "json"])).expect(0);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["pairing"]["missing_sampling_path"], serde_json::json!(["vllm/v1/sample/sampler.py"]));
    let names: Vec<&str> =
        json["pairing"]["unresolved"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["not_in_vllm", "Sampler"]);
    // Undoing stays possible.
    d.cmd().args(with_fixture(&["revert"])).expect(0);
}

#[test]
fn other_unresolved_names_are_a_warning_in_status_and_apply_goes_on() {
    let d = paired();
    with_sampler(&d);
    let (status, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
    let line =
        status.lines().find(|l| l.starts_with("pairing:")).unwrap_or_else(|| panic!("no pairing line:\n{status}"));
    assert!(
        line.contains("1 name(s)") && line.contains("vllm_gaudi/platform.py:1 imports not_in_vllm from vllm.mod"),
        "the first unresolved name is not in words: {line}"
    );
    d.cmd().args(with_fixture(&["apply", "--profile", "performance"])).expect(0);
    let (json, _) = d.cmd().args(with_fixture(&["apply", "--check", "--format", "json"])).expect(0);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["pairing"]["unresolved"].as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn a_pair_whose_imports_all_resolve_says_so() {
    let d = paired();
    with_sampler(&d);
    d.write("root/vllm_gaudi/platform.py", "from vllm.mod import sample, helper\nfrom vllm.v1.sample import sampler\n");
    let (status, _) = d.cmd().args(with_fixture(&["status"])).expect(0);
    assert!(status.contains("pairing: vllm_gaudi's imports from vLLM all resolve (2 files read)"), "{status}");
}

#[test]
fn test_and_conform_refuse_a_vllm_without_the_sampling_path_naming_it() {
    let d = paired();
    // A python that would say the tests passed: the refusal comes before it runs.
    let py = crate::common::fake_python(&d, "py/python", "verdict 0 1 0\nexit 0\n");
    let py = py.to_str().unwrap();
    for args in [vec!["--python", py, "test", "fix-a"], vec!["--python", py, "conform"]] {
        let (_, err) = d.cmd().args(with_fixture(&args)).expect(3);
        assert!(
            err.contains("the vLLM 0.26.0 at") && err.contains("lacks vllm/v1/sample/sampler.py"),
            "{args:?}: the vLLM side is not named:\n{err}"
        );
    }
}
