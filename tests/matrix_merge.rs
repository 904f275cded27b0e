//! `matrix --plan` / `--merge`: the matrix fanned out over CI runners. Each job's
//! `matrix … --format json` file merges into the table one run over all releases gives, and
//! `--merge --record` writes the same `verified:` lines a local `matrix --record` does; results
//! of another catalogue or version, a cell judged twice, a broken file, or jobs whose tests did
//! not run are refused with the file named, and nothing is written.

use crate::common::Dir;
use crate::upkeep::{cache, with_tests};

const RELEASES: [&str; 2] = ["v0.26.0", "v0.27.0"];

/// The fixture with tests and a cache of pristine releases.
fn setup() -> Dir {
    let d = with_tests();
    cache(&d);
    d
}

/// One CI job: `matrix --releases REL --fix fix-a --format json` into `REL.json`.
fn job(d: &Dir, release: &str) -> String {
    let (out, _) = d
        .cmd()
        .args(["--catalog", "cat", "--python", "./py", "matrix", "--releases", release, "--fix", "fix-a"])
        .args(["--format", "json"])
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .expect(0);
    d.write(&format!("{release}.json"), &out);
    format!("{release}.json")
}

fn value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn two_jobs_merge_into_the_table_and_verified_lines_of_one_local_run() {
    let jobs = setup();
    let files: Vec<String> = RELEASES.iter().map(|r| job(&jobs, r)).collect();
    // Given newest first: the merged table is still in release order.
    let merge = ["--catalog", "cat", "matrix", "--merge", &files[1], &files[0]];

    let local = setup();
    let both = RELEASES.join(",");
    let local_args = ["--catalog", "cat", "--python", "./py", "matrix", "--releases", &both, "--fix", "fix-a"];
    let cache = local.path().join("cache");

    // The table: the same cells, in the same order, as one run over both releases.
    let (merged, _) = jobs.cmd().args(merge).args(["--format", "json"]).expect(0);
    let (one, _) = local.cmd().args(local_args).args(["--format", "json"]).env("GAUDI_FIXES_CACHE", &cache).expect(0);
    let cells = |doc: &str| {
        let mut v = value(doc)["cells"].clone();
        for c in v.as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("tests_summary"); // pytest's timing
        }
        v
    };
    assert_eq!(cells(&merged), cells(&one), "merged:\n{merged}\none run:\n{one}");
    let (github, _) = jobs.cmd().args(merge).args(["--format", "github"]).expect(0);
    assert!(github.lines().all(|l| l.starts_with("::")), "human text under --format github:\n{github}");
    assert!(github.contains("::notice::gaudi-fixes matrix: "), "{github}");
    let (human, _) = jobs.cmd().args(merge).expect(0);
    assert!(human.contains("v0.27.0  fix-a  applies (offsets)  v0.26.0  passed  no"), "{human}");

    // --record: fix.yaml as a local `matrix --record` leaves it.
    let before = jobs.read_string("cat/fixes/fix-a/fix.yaml");
    let (human, _) = jobs.cmd().args(merge).args(["--record"]).expect(0);
    assert!(human.contains("passed  recorded"), "{human}");
    local.cmd().args(local_args).args(["--record"]).env("GAUDI_FIXES_CACHE", &cache).expect(0);
    let (merged_yaml, local_yaml) =
        (jobs.read_string("cat/fixes/fix-a/fix.yaml"), local.read_string("cat/fixes/fix-a/fix.yaml"));
    assert_ne!(merged_yaml, before, "--merge --record wrote nothing");
    assert!(merged_yaml.contains("    verified: [v0.26.0, v0.27.0]\n"), "{merged_yaml}");
    assert_eq!(merged_yaml, local_yaml);
}

#[test]
fn merge_refuses_results_it_cannot_vouch_for_and_writes_nothing() {
    let d = setup();
    let file = job(&d, "v0.26.0");
    let doc = value(&d.read_string(&file));
    let variant = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = doc.clone();
        edit(&mut v);
        d.write(name, serde_json::to_string_pretty(&v).unwrap());
        name.to_string()
    };
    let other_version = variant("version.json", &|v| v["gaudi_fixes"] = "gaudi-fixes 0.0.1".into());
    let other_catalogue = variant("catalogue.json", &|v| v["catalogue"]["sha256"] = "00".repeat(32).into());
    let not_run = variant("not-run.json", &|v| v["tests_not_run"] = "--no-tests".into());
    d.write("broken.json", "{\n  \"schema\": 1,\n  \"command\": \"matrix\",\n  oops\n}\n");
    let before = d.snapshot("cat");
    let cases: [(&[&str], &str); 6] = [
        (&[&other_version], "version.json: made by gaudi-fixes 0.0.1, not by this gaudi-fixes"),
        (&[&other_catalogue], "catalogue.json: made from catalogue"),
        (&[&file, &file], "both judge fix-a on v0.26.0"),
        (&["broken.json"], "broken.json:4:3: not a `matrix --format json` document"),
        (&["missing.json"], "reading missing.json"),
        (&[&not_run], "some jobs did not run them: not-run.json: --no-tests"),
    ];
    for (args, want) in cases {
        let (out, err) = d.cmd().args(["--catalog", "cat", "matrix", "--record", "--merge"]).args(args).expect(3);
        assert!(err.contains(want), "{args:?}: wanted `{want}` in:\n{err}{out}");
    }
    assert_eq!(d.snapshot("cat"), before, "a refused merge wrote into the catalogue");
}

/// `--merge --record` checks every cell before it writes anything: a cell naming a variant the
/// catalogue lacks (after another fix's cell that could be recorded), or a release its job did
/// not prepare, is refused in a sentence saying what is wrong, and no fix.yaml is written.
#[test]
fn merge_record_checks_every_cell_before_writing_anything() {
    let d = setup();
    let file = job(&d, "v0.26.0");
    let doc = value(&d.read_string(&file));
    let forged = |name: &str, fix: &str, release: &str, variant: &str| {
        let mut v = doc.clone();
        let mut cell = v["cells"][0].clone();
        (cell["fix"], cell["release"], cell["variant"]) = (fix.into(), release.into(), variant.into());
        v["cells"].as_array_mut().unwrap().push(cell);
        d.write(name, serde_json::to_string_pretty(&v).unwrap());
        name.to_string()
    };
    let bad_variant = forged("bad-variant.json", "fix-b", "v0.26.0", "v0.9.9");
    let not_prepared = forged("not-prepared.json", "fix-a", "v0.27.0", "v0.26.0");
    let before = d.snapshot("cat");
    let cases = [
        (&bad_variant, "bad-variant.json names the variant v0.9.9 of fix-b, which this catalogue does not have"),
        (&not_prepared, "not-prepared.json judges fix-a on v0.27.0, but that job did not prepare v0.27.0"),
    ];
    for (file, want) in cases {
        let (out, err) = d.cmd().args(["--catalog", "cat", "matrix", "--record", "--merge", file]).expect(3);
        assert!(err.contains(want), "{file}: wanted `{want}` in:\n{err}{out}");
        assert_eq!(d.snapshot("cat"), before, "{file}: a refused merge wrote into the catalogue");
    }
}

#[test]
fn plan_lists_one_job_per_release_or_per_fix_and_release() {
    let d = setup();
    let (out, _) = d.cmd().args(["--catalog", "cat", "matrix", "--plan", "--format", "github"]).expect(0);
    let line = out.strip_prefix("matrix=").unwrap_or_else(|| panic!("no matrix= line: {out}"));
    let plan = value(line.trim_end());
    assert_eq!(plan["include"].as_array().unwrap().len(), 1, "{out}"); // the fixture names v0.26.0 only
    assert_eq!(plan["include"][0]["args"], "--releases v0.26.0", "{out}");
    let (out, _) = d
        .cmd()
        .args([
            "--catalog",
            "cat",
            "matrix",
            "--plan",
            "--per-fix",
            "--releases",
            "v0.26.0,v0.27.0",
            "--format",
            "json",
        ])
        .expect(0);
    let ids: Vec<String> =
        value(&out)["plan"]["include"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().into()).collect();
    assert_eq!(ids, ["v0.26.0-fix-a", "v0.26.0-fix-b", "v0.27.0-fix-a", "v0.27.0-fix-b"]);
    // A plan runs nothing and cannot record.
    d.cmd().args(["--catalog", "cat", "matrix", "--plan", "--record"]).expect(3);
}

/// Issue 50 (10): a job's file saying `0.32.1` and another's saying `v0.32.1` were two
/// releases: tests passed in one and failed in the other, and `--record` recorded it. A release
/// name has one spelling on every input: the two judge one cell, and the merge refuses; a name
/// that is no release is refused with the file named.
#[test]
fn merge_reads_every_spelling_of_a_release_as_one() {
    let d = setup();
    let file = job(&d, "v0.26.0");
    let doc = value(&d.read_string(&file));
    let respelled = |name: &str, release: &str| {
        let mut v = doc.clone();
        v["releases"][0]["release"] = release.into();
        for cell in v["cells"].as_array_mut().unwrap() {
            cell["release"] = release.into();
        }
        d.write(name, serde_json::to_string_pretty(&v).unwrap());
        name.to_string()
    };
    let bare = respelled("bare.json", "0.26.0");
    let short = respelled("short.json", "0.26");
    let nonsense = respelled("nonsense.json", "latest");
    let before = d.snapshot("cat");
    for (args, want) in [
        ([&file, &bare], "both judge fix-a on v0.26.0"),
        ([&short, &file], "both judge fix-a on v0.26.0"),
        ([&nonsense, &file], "nonsense.json: `latest` is not a release name"),
    ] {
        let (out, err) = d.cmd().args(["--catalog", "cat", "matrix", "--record", "--merge"]).args(args).expect(3);
        assert!(err.contains(want), "{args:?}: wanted `{want}` in:\n{err}{out}");
    }
    assert_eq!(d.snapshot("cat"), before, "a refused merge wrote into the catalogue");
    let (out, _) = d.cmd().args(["--catalog", "cat", "matrix", "--merge", &bare, "--format", "json"]).expect(0);
    assert_eq!(value(&out)["cells"][0]["release"], "v0.26.0", "{out}");
}
