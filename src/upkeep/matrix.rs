//! `matrix`'s cells: each fix on each release's pristine trees — its state, the variant that
//! applies, and whether its tests pass on a patched hard-link copy — and `--record`, which
//! writes the releases whose cell applied exactly and passed into `verified:`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::catalog::{Catalog, Fix};
use crate::discover::{self, Tree, Trees};
use crate::plan::ReasonCode;
use crate::plan::{self, FileOutcome, FixState, Op};
use crate::tree::{TreeFilter, TreeName};
use crate::upkeep::{self, upstream, yaml_edit};

/// What a fix is on a release's pristine trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellState {
    /// Applies cleanly on the pristine tree.
    Applies,
    /// Already there as the fix leaves it.
    Applied,
    Drifted,
    /// Upstream carries it.
    Upstreamed,
    /// Every file in a tree left out.
    Skipped,
    /// Could not be judged (the release could not be prepared, a tree is missing, …).
    Error,
}

impl CellState {
    pub fn as_str(self) -> &'static str {
        match self {
            CellState::Applies => "applies",
            CellState::Applied => "applied",
            CellState::Drifted => "drifted",
            CellState::Upstreamed => "upstreamed",
            CellState::Skipped => "skipped",
            CellState::Error => "error",
        }
    }
}

/// How the fix's tests went on the patched copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestsResult {
    Passed,
    Failed,
    /// Not run: the fix does not apply, `--no-tests`, no tests, no usable interpreter.
    NotRun,
    /// pytest could not run them (or no test ran).
    Error,
}

impl TestsResult {
    pub fn as_str(self) -> &'static str {
        match self {
            TestsResult::Passed => "passed",
            TestsResult::Failed => "failed",
            TestsResult::NotRun => "not-run",
            TestsResult::Error => "error",
        }
    }
}

/// One fix on one release.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub fix: String,
    pub release: String,
    pub state: CellState,
    /// Hunks were found away from their header lines.
    pub offsets: bool,
    /// The variant that applies (or, when drifted, the nearest one).
    pub variant: Option<String>,
    pub reason: Option<ReasonCode>,
    pub message: Option<String>,
    pub tests: TestsResult,
    /// pytest's summary line, or why the tests did not run.
    pub tests_summary: Option<String>,
    /// The release was already in the variant's `verified:`.
    pub verified: bool,
    /// `--record` added the release to the variant's `verified:`.
    pub recorded: bool,
    /// Every file of the variant was judged in a tree found (none left out, none in a missing
    /// tree): only then did the apply and the tests cover both halves, and `--record` may write.
    #[serde(skip)]
    pub whole: bool,
}

/// One release's trees.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseTrees {
    pub release: String,
    pub vllm_root: Option<PathBuf>,
    pub vllm_gaudi: Option<upstream::GaudiTree>,
    /// Why the release could not be prepared.
    pub error: Option<String>,
}

/// Numeric order of release tags (`v0.9.0` before `v0.10.0`).
pub fn version_key(tag: &str) -> Vec<u64> {
    tag.trim_start_matches('v').split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse().ok()).collect()
}

/// The fixes `fix` comes after or requires, transitively, that the catalogue has: `apply`
/// applies what a fix requires first, so its tests run with them.
pub fn with_predecessors(catalog: &Catalog, fix: &Fix) -> Vec<String> {
    let mut names = BTreeSet::new();
    let mut todo = vec![fix.manifest.name.clone()];
    while let Some(n) = todo.pop() {
        if names.insert(n.clone()) {
            if let Ok(f) = catalog.fix(&n) {
                todo.extend(f.manifest.after.iter().chain(&f.manifest.requires).cloned());
            }
        }
    }
    names.into_iter().collect()
}

/// One release: prepare its pristine trees (into the cache), then judge every fix on them.
/// A release that cannot be prepared gives an error cell per fix.
pub fn run_release(
    catalog: &Catalog,
    fixes: &[&Fix],
    release: &str,
    python: &str,
    tests_unavailable: Option<&str>,
    progress: &mut dyn FnMut(&str),
) -> (ReleaseTrees, Vec<Cell>) {
    progress("preparing the pristine trees");
    let vroot = upstream::vllm_tree(python, release, |what| progress(what));
    let gaudi = upstream::gaudi_tree(release);
    let (vroot, gaudi) = match (vroot, gaudi) {
        (Ok(v), Ok(g)) => (v, g),
        (v, g) => {
            let err = format!("{:#}", v.err().or(g.err()).expect("one failed"));
            let cells = fixes.iter().map(|fix| error_cell(fix, release, &err)).collect();
            let trees =
                ReleaseTrees { release: release.to_string(), vllm_root: None, vllm_gaudi: None, error: Some(err) };
            return (trees, cells);
        }
    };
    let prepared = ReleaseTrees {
        release: release.to_string(),
        vllm_root: Some(vroot.clone()),
        vllm_gaudi: gaudi.clone(),
        error: None,
    };
    let trees = Trees {
        vllm: Some(Tree {
            name: TreeName::Vllm,
            version: discover::version_hint(TreeName::Vllm, &vroot),
            root: vroot.clone(),
            found_by: "cache".into(),
        }),
        vllm_gaudi: gaudi.as_ref().map(|g| Tree {
            name: TreeName::VllmGaudi,
            version: discover::version_hint(TreeName::VllmGaudi, &g.root),
            root: g.root.clone(),
            found_by: g.source.clone(),
        }),
        notes: Vec::new(),
    };
    let only = if gaudi.is_some() { TreeFilter::all() } else { TreeFilter::only(vec![TreeName::Vllm]) };
    let mut cells = Vec::new();
    for fix in fixes {
        let name = &fix.manifest.name;
        progress(&format!("{name}: checking"));
        let cell = evaluate_cell(catalog, fix, release, &trees, &only, python, tests_unavailable, |s| {
            progress(&format!("{name}: {s}"))
        });
        cells.push(cell.unwrap_or_else(|e| error_cell(fix, release, &format!("{e:#}"))));
    }
    (prepared, cells)
}

pub fn error_cell(fix: &Fix, release: &str, message: &str) -> Cell {
    Cell {
        fix: fix.manifest.name.clone(),
        release: release.to_string(),
        state: CellState::Error,
        offsets: false,
        variant: None,
        reason: None,
        message: Some(message.to_string()),
        tests: TestsResult::NotRun,
        tests_summary: None,
        verified: false,
        recorded: false,
        whole: false,
    }
}

#[allow(clippy::too_many_arguments)]
pub fn evaluate_cell(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    trees: &Trees,
    only: &TreeFilter,
    python: &str,
    no_tests: Option<&str>,
    mut progress: impl FnMut(&str),
) -> Result<Cell> {
    let names = with_predecessors(catalog, fix);
    let ordered = catalog.order(&names)?;
    let plan = plan::plan(catalog, &ordered, trees, only, &plan::Recorded::new(), Op::Apply)?;
    let report = plan.reports.iter().find(|r| r.name == fix.manifest.name).context("the fix has a report")?;
    let state = match report.state {
        FixState::NotApplied => CellState::Applies,
        FixState::Applied => CellState::Applied,
        FixState::Drifted => CellState::Drifted,
        FixState::Upstreamed => CellState::Upstreamed,
        FixState::Skipped => CellState::Skipped,
        FixState::Error => CellState::Error,
    };
    // Offsets say something only about a variant that applies; a drifted one has its reason.
    let applies = matches!(report.state, FixState::NotApplied | FixState::Applied);
    let offsets = applies
        && report.files.iter().flat_map(|f| &f.hunks).any(|h| match h.state {
            crate::patch::HunkState::Applied { offset, .. } | crate::patch::HunkState::NotApplied { offset, .. } => {
                offset != 0
            }
            crate::patch::HunkState::Drifted { .. } => false,
        });
    let verified = report
        .variant
        .as_deref()
        .and_then(|v| fix.variants.iter().find(|x| x.release == v))
        .is_some_and(|v| v.verified.iter().any(|r| r == release));
    let mut cell = Cell {
        fix: fix.manifest.name.clone(),
        release: release.to_string(),
        state,
        offsets,
        variant: report.variant.clone(),
        reason: report.reason.as_ref().filter(|r| !r.note).map(|r| r.code),
        message: report.reason.as_ref().map(|r| r.message.clone()).or_else(|| report.message.clone()),
        tests: TestsResult::NotRun,
        tests_summary: None,
        verified,
        recorded: false,
        whole: report.files.iter().all(|f| !matches!(f.state, FileOutcome::Skipped | FileOutcome::NoTree)),
    };
    if report.state != FixState::NotApplied {
        return Ok(cell);
    }
    if let Some(why) = no_tests {
        cell.tests_summary = Some(why.to_string());
        return Ok(cell);
    }
    if fix.manifest.tests.is_empty() {
        cell.tests_summary = Some("the fix has no tests".into());
        return Ok(cell);
    }
    progress("copying the tree and applying");
    let scratch = ScratchTree::new(release, &fix.manifest.name)?;
    for tree in trees.all().filter(|t| only.includes(t.name)) {
        upstream::link_copy(&tree.root.join(tree.name.as_str()), &scratch.0.join(tree.name.as_str()))?;
    }
    for edit in &plan.edits {
        upstream::replace_file(&scratch.0.join(&edit.rel), &edit.new)?;
    }
    progress("running its tests");
    let has_gaudi = scratch.0.join("vllm_gaudi").is_dir();
    let run = upkeep::pytest::run_tests(
        catalog,
        fix,
        python,
        Some(&scratch.0),
        has_gaudi.then_some(scratch.0.as_path()),
        &[],
        None,
    );
    match run {
        Ok(run) => {
            cell.tests = if run.passed { TestsResult::Passed } else { TestsResult::Failed };
            cell.tests_summary = Some(run.summary);
        }
        Err(e) => {
            cell.tests = TestsResult::Error;
            cell.tests_summary = Some(format!("{e:#}"));
        }
    }
    Ok(cell)
}

/// A patched copy of a release's trees, beside the cache (hard links need one file system):
/// `scratch/<release>-<fix>.gaudi-fixes-<pid>`, removed when done, or by the next `matrix`
/// when this one is killed ([`upstream::remove_stale`]).
pub struct ScratchTree(PathBuf, Option<upstream::OwnDir>);

impl ScratchTree {
    fn new(release: &str, fix: &str) -> Result<ScratchTree> {
        let parent = upstream::cache_dir()?.join("scratch");
        let own = upstream::OwnDir::new(&parent, &format!("{release}-{fix}"))?;
        Ok(ScratchTree(own.path().to_path_buf(), Some(own)))
    }
}

impl Drop for ScratchTree {
    fn drop(&mut self) {
        drop(self.1.take());
        // The scratch/ directory itself goes when it is empty (another run may be using it).
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Add each release that applied exactly and passed to its variant's `verified:`.
pub fn record(dir: &Path, cells: &mut [Cell]) -> Result<()> {
    // Under the catalogue's lock, from fix.yaml as it is now: another writer may have recorded
    // or ported since this run loaded it.
    let _lock = upkeep::lock_catalog(dir)?;
    let catalog = &Catalog::load(Some(dir))?;
    let mut add: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for c in cells
        .iter()
        .filter(|c| c.state == CellState::Applies && c.tests == TestsResult::Passed && c.whole && !c.verified)
    {
        if let Some(v) = &c.variant {
            add.entry((c.fix.clone(), v.clone())).or_default().push(c.release.clone());
        }
    }
    for ((fix_name, variant), releases) in &add {
        let fix = catalog.fix(fix_name)?;
        let v = fix.variants.iter().find(|x| &x.release == variant).context("variant exists")?;
        let mut list = v.verified.clone();
        list.extend(releases.iter().cloned());
        list.sort_by_key(|r| version_key(r));
        list.dedup();
        let path = dir.join(&fix.dir).join("fix.yaml");
        let old = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let new =
            yaml_edit::set_verified(&old, variant, &list).with_context(|| format!("editing {}", path.display()))?;
        upstream::replace_file(&path, new.as_bytes())?;
        if let Err(e) = Catalog::load(Some(dir)) {
            upstream::replace_file(&path, old.as_bytes())?;
            return Err(e.context(format!("{} does not load after recording verified:; put back", path.display())));
        }
        for c in cells.iter_mut().filter(|c| &c.fix == fix_name && c.variant.as_ref() == Some(variant)) {
            if releases.contains(&c.release) {
                c.recorded = true;
            }
        }
    }
    Ok(())
}
