//! The shipped catalogue on the real pristine trees, through the real binary: vLLM's `vllm/`
//! from the cache `scripts/fetch-upstream.sh` fills (`~/.cache/gaudi-fixes/upstream/vX.Y.Z`),
//! vllm_gaudi extracted from each pristine archive (`$GAUDI_FIXES_VLLM_GAUDI_ARCHIVES`, else
//! `shared/upstream` beside the checkout or above it). Every command reads every fix not applied
//! and `revert` is a no-op; after `apply --profile performance`, `status` names the variants
//! provenance recorded and `revert` restores the bytes; a vllm_gaudi-only tree applies and
//! reverts. Each test says SKIPPED on stderr when a tree or archive is not there.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::Dir;

const ARCHIVES: [&str; 2] = ["v0.26.0", "main-2026-08-21"];

fn cache_vllm(release: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = cache.join("gaudi-fixes/upstream").join(release).join("vllm");
    dir.join("__init__.py").is_file().then_some(dir)
}

fn archive(name: &str) -> Option<PathBuf> {
    let file = format!("vllm_gaudi-{name}.tar.gz");
    if let Some(dir) = std::env::var_os("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES") {
        return Some(PathBuf::from(dir).join(&file)).filter(|p| p.is_file());
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/upstream").join(&file))
        .find(|p| p.is_file())
}

fn run(args: &[&str]) {
    let status = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(status.success(), "{args:?}");
}

/// `root/` holding a hard-linked copy of `vllm` (when given; gaudi-fixes writes a new file and
/// renames it into place, so the cache is never written) and vllm_gaudi from `archive`.
fn tree(vllm: Option<&Path>, archive: &Path) -> Dir {
    let d = Dir::new();
    let root = d.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    if let Some(vllm) = vllm {
        run(&["cp", "-al", &vllm.display().to_string(), &root.display().to_string()]);
    }
    run(&["tar", "-xzf", &archive.display().to_string(), "-C", &root.display().to_string(), "vllm_gaudi"]);
    d
}

/// The paths under `root/` whose bytes differ from `pristine` (the vllm_gaudi snapshot taken
/// at the start) or, under `vllm/`, from the cache's file (`__pycache__` and the tool's own
/// state directory left out).
fn changed(d: &Dir, vllm: Option<&Path>, pristine: &std::collections::BTreeMap<String, Vec<u8>>) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let now = d.snapshot("root/vllm_gaudi");
    let mut out: Vec<String> = now
        .keys()
        .chain(pristine.keys())
        .filter(|k| !k.contains("__pycache__") && now.get(*k) != pristine.get(*k))
        .cloned()
        .collect();
    let Some(vllm) = vllm else { return out };
    let files = |dir: &Path| -> std::collections::BTreeSet<PathBuf> {
        walkdir::WalkDir::new(dir)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file() && !e.path().to_string_lossy().contains("__pycache__"))
            .map(|e| e.path().strip_prefix(dir).unwrap().to_path_buf())
            .collect()
    };
    let copy = d.path().join("root/vllm");
    let (here, there) = (files(&copy), files(vllm));
    for rel in here.union(&there) {
        let (a, b) = (copy.join(rel), vllm.join(rel));
        let same = match (std::fs::metadata(&a), std::fs::metadata(&b)) {
            (Ok(ma), Ok(mb)) => ma.ino() == mb.ino() || std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            _ => false,
        };
        if !same {
            out.push(format!("vllm/{}", rel.display()));
        }
    }
    out
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// (name, state, variant) of every fix `status --format json` reports.
fn states(d: &Dir) -> Vec<(String, String, String)> {
    let (out, _) = d.cmd().args(["--root", "root", "status", "--format", "json"]).expect(0);
    json(&out)["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("state"), s("variant"))
        })
        .collect()
}

/// On a pristine tree every command says not applied (or, for a fix whose tree is absent,
/// only that), and revert is a no-op twice over.
fn pristine_everywhere(d: &Dir, vllm: Option<&Path>, what: &str) {
    let before = d.snapshot("root/vllm_gaudi");
    for (name, state, _) in states(d) {
        assert!(state == "not-applied" || state == "error", "{what}: {name} reads {state}");
    }
    // The fixes made on top of others (the ones that read drifted when judged alone).
    for name in ["logitsprocs-batch-updates", "async-penalties-output-tokens"] {
        let (diff, _) = d.cmd().args(["--root", "root", "diff", name, "--format", "github"]).expect(0);
        assert!(!diff.contains("::error"), "{what}: {diff}");
    }
    let (list, _) = d.cmd().args(["--root", "root", "list"]).expect(0);
    assert!(!list.contains("drifted"), "{what}: {list}");
    let (github, _) = d.cmd().args(["--root", "root", "status", "--format", "github"]).expect(0);
    // Only a fix whose other tree is absent is an error, and it says so.
    for line in github.lines().filter(|l| l.starts_with("::error")) {
        assert!(vllm.is_none() && line.contains("needs the vllm tree, which was not found"), "{what}: {line}");
    }
    d.cmd().args(["--root", "root", "revert", "--dry-run"]).expect(0);
    d.cmd().args(["--root", "root", "revert", "--profile", "performance"]).expect(0);
    d.cmd().args(["--root", "root", "revert", "--profile", "performance"]).expect(0);
    let differ = changed(d, vllm, &before);
    assert!(differ.is_empty(), "{what}: a revert of a pristine tree wrote {differ:?}");
}

fn release(release: &str) {
    let Some(vllm) = cache_vllm(release) else {
        eprintln!("SKIPPED real_trees {release}: no pristine vllm tree in the cache (run scripts/fetch-upstream.sh {release})");
        return;
    };
    for name in ARCHIVES {
        let Some(archive) = archive(name) else {
            eprintln!("SKIPPED real_trees {release} + vllm_gaudi {name}: archive not found (set GAUDI_FIXES_VLLM_GAUDI_ARCHIVES)");
            continue;
        };
        let what = format!("vLLM {release} + vllm_gaudi {name}");
        let d = tree(Some(&vllm), &archive);
        let before = d.snapshot("root/vllm_gaudi");
        pristine_everywhere(&d, Some(&vllm), &what);
        d.cmd().args(["--root", "root", "apply", "--profile", "performance"]).expect(0);
        let record = json(&d.read_string("root/.gaudi-fixes/provenance.json"));
        for (fix, state, variant) in states(&d) {
            assert_eq!(state, "applied", "{what}: {fix}");
            assert_eq!(record["fixes"][&fix]["variant"].as_str(), Some(variant.as_str()), "{what}: {fix}");
        }
        d.cmd().args(["--root", "root", "apply", "--check", "--profile", "performance"]).expect(0);
        d.cmd().args(["--root", "root", "revert", "--profile", "performance"]).expect(0);
        let differ = changed(&d, Some(&vllm), &before);
        assert!(differ.is_empty(), "{what}: apply then revert is not byte-identical: {differ:?}");
    }
}

#[test]
fn pristine_and_applied_v0_26_0() {
    release("v0.26.0");
}

#[test]
fn pristine_and_applied_v0_30_0() {
    release("v0.30.0");
}

#[test]
fn pristine_and_applied_v0_33_0() {
    release("v0.33.0");
}

#[test]
fn a_vllm_gaudi_only_tree_applies_and_reverts() {
    let Some(archive) = archive("v0.26.0") else {
        eprintln!("SKIPPED real_trees vllm_gaudi-only: archive vllm_gaudi-v0.26.0.tar.gz not found");
        return;
    };
    let d = tree(None, &archive);
    let pristine = d.snapshot("root/vllm_gaudi");
    pristine_everywhere(&d, None, "vllm_gaudi only");
    for revert in [&["revert"][..], &["--only-tree", "vllm_gaudi", "revert"], &["revert", "--profile", "performance"]] {
        d.cmd().args(["--root", "root", "apply"]).expect(0);
        let args: Vec<&str> = ["--root", "root"].iter().chain(revert).copied().collect();
        d.cmd().args(&args).expect(0);
        let differ = changed(&d, None, &pristine);
        assert!(differ.is_empty(), "{revert:?} after apply is not byte-identical: {differ:?}");
    }
}
