//! `record` for a fix whose patch is made on top of another fix it `requires:` (both editing
//! one file, as topk-subset-sampler on swap-states-sampling-params): the edited tree carries
//! both fixes' edits, and the recorded patch must hold only this fix's, made on the file
//! `apply` and `lint --upstream` give it (the pristine file with the required fix applied).

use crate::common::{fixture, with_fixture, FIX_B_PATCH, PRISTINE};

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
