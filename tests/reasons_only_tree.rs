//! Reasons on a fix whose vLLM half is left out with `--only-tree vllm_gaudi`: nothing may be
//! said about how the fix fits the vLLM release, since its vLLM file was not looked at.

use crate::common::{fixture, sha256, with_fixture};

#[test]
fn no_release_note_when_the_vllm_half_is_left_out() {
    let d = fixture();
    d.write(
        "cat/fixes/fix-a/v0.26.0/g.patch",
        "--- a/vllm_gaudi/x.py\n+++ b/vllm_gaudi/x.py\n@@ -1,3 +1,3 @@\n a = 0\n-x = 1\n+x = 2\n b = 0\n",
    );
    let y = d.read_string("cat/fixes/fix-a/fix.yaml")
        + &format!(
            "      - tree: vllm_gaudi\n        file: vllm_gaudi/x.py\n        patch: v0.26.0/g.patch\n        pristine_sha256: {}\n",
            sha256(b"a = 0\nx = 1\nb = 0\n")
        );
    d.write("cat/fixes/fix-a/fix.yaml", y.replace("  v0.26.0:\n", "  v0.26.0:\n    verified: [v0.26.0]\n"));
    // A release the fix does not cover, whose vLLM file the fix does not fit at all; the
    // vllm_gaudi file sits two lines down.
    d.write("root/vllm/_version.py", "__version__ = version = '0.99.0'\n");
    d.write("root/vllm/mod.py", "def nothing_alike():\n    pass\n");
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("root/vllm_gaudi/x.py", "# one\n# two\na = 0\nx = 1\nb = 0\n");
    // The whole fix: unsupported release, as it should be.
    let (out, _) = d.cmd().args(with_fixture(&["apply", "--check", "fix-a"])).expect(2);
    assert!(out.contains("vLLM 0.99.0 is not covered by fix-a"), "{out}");
    // Only vllm_gaudi: not applied, and no claim about vLLM 0.99.0.
    let (out, _) = d.cmd().args(with_fixture(&["--only-tree", "vllm_gaudi", "apply", "--check", "fix-a"])).expect(1);
    assert!(out.contains("offset +2"), "{out}");
    assert!(!out.contains("0.99.0 "), "a claim about the vLLM release whose file was left out:\n{out}");
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--only-tree", "vllm_gaudi", "--format", "json", "apply", "--check", "fix-a"]))
        .expect(1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["fixes"][0]["reason"].is_null(), "{out}");
    assert!(v["fixes"][0]["files"].as_array().unwrap().iter().all(|f| f["reason"].is_null()), "{out}");
}
