//! `matrix` checks a fix on the copy with what it `requires:` applied first, as `apply` does —
//! not only the fixes it comes `after:` (a fix may require another without an `after:`).

use crate::common::{fake_python, fixture, PRISTINE};

/// A stand-in for python: the module probe answers nothing missing; "pytest" passes when the
/// tree's mod.py carries both fix-a's and fix-b's edits.
const FAKE_PYTHON: &str = r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo gaudi-fixes-probe-ok; exit 0; fi
if grep -q "a \* 3" "$GAUDI_FIXES_ROOT/vllm/mod.py" && grep -q "fix-b was here" "$GAUDI_FIXES_ROOT/vllm/mod.py"; then
  echo "1 passed in 0.01s"; verdict 0 1 0; exit 0
fi
echo "1 failed in 0.01s"; verdict 1 0 1; exit 1
"#;

#[test]
fn matrix_applies_what_a_fix_requires_before_testing_it() {
    let d = fixture();
    let yaml = d.read_string("cat/fixes/fix-b/fix.yaml").replace("after: [fix-a]", "requires: [fix-a]")
        + "tests: [test_b.py]\n";
    d.write("cat/fixes/fix-b/fix.yaml", yaml);
    d.write("cat/fixes/fix-b/test_b.py", "def test_b():\n    pass\n");
    fake_python(&d, "py", FAKE_PYTHON);
    d.write("cache/upstream/v0.26.0/vllm/mod.py", PRISTINE);
    d.write("cache/upstream/v0.26.0/vllm/_version.py", "__version__ = version = '0.26.0'\n");
    let (out, _) = d
        .cmd()
        .args(["--catalog", "cat", "--python", "./py", "matrix", "--releases", "v0.26.0", "--fix", "fix-b"])
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let cell = &v["cells"][0];
    assert_eq!((cell["fix"].as_str(), cell["state"].as_str()), (Some("fix-b"), Some("applies")), "{out}");
    assert_eq!(cell["tests"], "passed", "{out}");
}
