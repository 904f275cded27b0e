//! `matrix`'s cells: each fix on each release's pristine trees — its state, the variant that
//! applies, and whether its tests pass on a patched hard-link copy — and `--record`, which
//! writes the releases whose cell applied exactly and passed into `verified:`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::FileContext;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::catalog::manifest::release_key;
use crate::catalog::{Catalog, Fix};
use crate::discover::{self, Tree, Trees};
use crate::plan::ReasonCode;
use crate::plan::{self, FileOutcome, FixState, Op};
use crate::tree::{TreeFilter, TreeName};
use crate::upkeep::{self, upstream, yaml_edit};

/// What a fix is on a release's pristine trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// One fix on one release. Read back from another run's `--format json` by `--merge`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub fix: String,
    pub release: String,
    pub state: CellState,
    /// Hunks were found away from their header lines.
    pub offsets: bool,
    /// The variant that applies (or, when drifted, the nearest one).
    pub variant: Option<String>,
    #[serde(deserialize_with = "reason_code")]
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
    pub whole: bool,
}

/// A reason code as the JSON spells it (`ReasonCode` itself is only written).
fn reason_code<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ReasonCode>, D::Error> {
    use ReasonCode::*;
    let Some(word) = Option::<String>::deserialize(d)? else { return Ok(None) };
    let known = [UnsupportedRelease, LocallyModified, UnverifiedRelease, PartiallyApplied, FileMissing];
    known
        .into_iter()
        .find(|c| serde_json::to_value(c).ok().and_then(|v| v.as_str().map(|s| s == word)).unwrap_or(false))
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown reason `{word}`")))
}

/// One release's trees.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReleaseTrees {
    pub release: String,
    pub vllm_root: Option<PathBuf>,
    pub vllm_gaudi: Option<upstream::GaudiTree>,
    /// Why the release could not be prepared.
    pub error: Option<String>,
}

/// The releases a matrix covers: those asked for (tags in any spelling `release_tag` takes), or
/// every release the fixes' variants name or were verified on; in version order.
pub fn releases(fixes: &[&Fix], asked: &[String]) -> Result<Vec<String>> {
    let mut releases: Vec<String> = if asked.is_empty() {
        fixes
            .iter()
            .flat_map(|f| f.variants.iter().flat_map(|v| std::iter::once(v.release.clone()).chain(v.verified.clone())))
            .collect()
    } else {
        asked.iter().map(|r| upstream::release_tag(r.trim())).collect::<Result<_>>()?
    };
    releases.sort_by_key(|r| release_key(r));
    releases.dedup();
    Ok(releases)
}

/// One CI job of a fanned-out matrix: one release (every fix), or one fix on one release.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    /// A name safe in file names and job titles: `v0.26.0` or `v0.26.0-topk-subset-sampler`.
    pub id: String,
    pub release: String,
    pub fix: Option<String>,
    /// What the job passes to `gaudi-fixes matrix` (before `--format json`).
    pub args: String,
}

/// The jobs for `releases` × `fixes`: one per release, or with `per_fix` one per fix × release.
pub fn plan(fixes: &[&Fix], releases: &[String], per_fix: bool, all_fixes: bool) -> Vec<Job> {
    let mut jobs = Vec::new();
    for release in releases {
        if per_fix {
            for fix in fixes {
                let name = &fix.manifest.name;
                jobs.push(Job {
                    id: format!("{release}-{name}"),
                    release: release.clone(),
                    fix: Some(name.clone()),
                    args: format!("--releases {release} --fix {name}"),
                });
            }
        } else {
            let only: String = if all_fixes {
                String::new()
            } else {
                fixes.iter().map(|f| format!(" --fix {}", f.manifest.name)).collect()
            };
            jobs.push(Job {
                id: release.clone(),
                release: release.clone(),
                fix: None,
                args: format!("--releases {release}{only}"),
            });
        }
    }
    jobs
}

/// One `matrix --format json` document, read back.
#[derive(Debug, Deserialize)]
struct Results {
    schema: u32,
    command: String,
    /// `gaudi-fixes <version>` of the binary that ran it.
    gaudi_fixes: Option<String>,
    catalogue: Option<crate::catalog::CatalogIdentity>,
    /// Why the fixes' tests did not run in that job, when they did not.
    tests_not_run: Option<String>,
    releases: Vec<ReleaseTrees>,
    cells: Vec<Cell>,
}

/// Per-job results merged into one matrix.
#[derive(Debug)]
pub struct Merged {
    pub releases: Vec<ReleaseTrees>,
    pub cells: Vec<Cell>,
    /// `FILE: why` for each job whose tests did not run.
    pub tests_not_run: Vec<String>,
}

/// Every release name in a job's `results` in its one spelling (`0.32.1` and `v0.32.1` are one
/// release, so the two judge one cell); a name that is no release is refused, `shown` named.
fn canonical_releases(shown: &str, results: &mut Results) -> Result<()> {
    let one = |name: &mut String| -> Result<()> {
        *name = crate::catalog::manifest::canonical_release(name)
            .with_context(|| format!("{shown}: `{name}` is not a release name (like v0.26.0)"))?;
        Ok(())
    };
    for r in &mut results.releases {
        one(&mut r.release)?;
    }
    for cell in &mut results.cells {
        one(&mut cell.release)?;
        if let Some(variant) = &mut cell.variant {
            one(variant)?;
        }
    }
    Ok(())
}

/// Read the per-job results `files` and merge them into one matrix, as one run over all their
/// releases would have made it: refused (with the file named) when a file is not a `matrix`
/// document, was made by another gaudi-fixes version or from another catalogue (by content
/// hash) than `catalog`, or judges a cell another file judges too.
pub fn merge(catalog: &Catalog, files: &[PathBuf]) -> Result<Merged> {
    let tool = crate::provenance::tool_version();
    let identity = catalog.identity();
    let mut releases: Vec<ReleaseTrees> = Vec::new();
    let mut cells: Vec<Cell> = Vec::new();
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut tests_not_run = Vec::new();
    for file in files {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {shown}"))?;
        let mut results: Results = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{shown}:{}:{}: not a `matrix --format json` document: {e}", e.line(), e.column())
        })?;
        canonical_releases(&shown, &mut results)?;
        if results.command != "matrix" || results.schema != crate::schema::JSON {
            bail!(
                "{shown}: a `{}` document (schema {}), not `matrix --format json` (schema {})",
                results.command,
                results.schema,
                crate::schema::JSON
            );
        }
        match &results.gaudi_fixes {
            Some(v) if *v == tool => {}
            other => bail!(
                "{shown}: made by {}, not by this {tool}: merge results of one binary",
                other.as_deref().unwrap_or("a gaudi-fixes that does not say its version")
            ),
        }
        match &results.catalogue {
            Some(c) if c.sha256 == identity.sha256 => {}
            other => bail!(
                "{shown}: made from catalogue {}, not this one ({}, sha256 {}): run the jobs and the merge on one catalogue",
                other.as_ref().map_or("(none named)".to_string(), |c| format!("{} sha256 {}", c.origin, c.sha256)),
                identity.origin,
                identity.sha256
            ),
        }
        for cell in &results.cells {
            let fix = catalog.fix(&cell.fix).with_context(|| format!("{shown}: a cell for fix `{}`", cell.fix))?;
            if let Some(other) = seen.insert((cell.fix.clone(), cell.release.clone()), shown.clone()) {
                bail!("{shown} and {other} both judge {} on {}: merge each cell once", cell.fix, cell.release);
            }
            // Every cell checked here, before anything is recorded: the release must be one
            // this job prepared, the variant one the catalogue has.
            match results.releases.iter().find(|r| r.release == cell.release) {
                None => bail!(
                    "{shown} judges {} on {}, but that job did not prepare {}: its releases are {}. The file \
                     was changed after the job wrote it, or pieced together from several; merge the jobs' own \
                     files",
                    cell.fix,
                    cell.release,
                    cell.release,
                    results.releases.iter().map(|r| r.release.as_str()).collect::<Vec<_>>().join(", ")
                ),
                Some(r) if r.error.is_some() && cell.tests == TestsResult::Passed => bail!(
                    "{shown} says {}'s tests passed on {}, but that job could not prepare {} ({}). The file \
                     contradicts itself; merge the jobs' own files",
                    cell.fix,
                    cell.release,
                    cell.release,
                    r.error.as_deref().unwrap_or_default()
                ),
                Some(_) => {}
            }
            if let Some(variant) = &cell.variant {
                if !fix.variants.iter().any(|v| &v.release == variant) {
                    bail!(
                        "{shown} names the variant {variant} of {}, which this catalogue does not have (its variants \
                         are {}). The job ran another catalogue, or the file was changed after it wrote it",
                        cell.fix,
                        fix.variants.iter().map(|v| v.release.as_str()).collect::<Vec<_>>().join(", ")
                    );
                }
            }
        }
        if let Some(why) = results.tests_not_run {
            tests_not_run.push(format!("{shown}: {why}"));
        }
        for r in results.releases {
            match releases.iter_mut().find(|x| x.release == r.release) {
                Some(x) => {
                    if x.error.is_none() {
                        x.error = r.error;
                    }
                }
                None => releases.push(r),
            }
        }
        cells.extend(results.cells);
    }
    // The order one run gives: releases by version, then the catalogue's fix order.
    let order = |name: &str| catalog.fixes.iter().position(|f| f.manifest.name == name).unwrap_or(usize::MAX);
    releases.sort_by_key(|r| release_key(&r.release));
    cells.sort_by_key(|c| (release_key(&c.release), order(&c.fix)));
    Ok(Merged { releases, cells, tests_not_run })
}

/// The fixes `fix` comes after or requires, transitively, that the catalogue has: `apply`
/// applies what a fix requires first, so its tests run with them.
pub fn with_predecessors(catalog: &Catalog, fix: &Fix) -> Vec<String> {
    let mut names = catalog.predecessors(&fix.manifest.name).unwrap_or_default();
    names.push(fix.manifest.name.clone());
    names.sort();
    names
}

/// What a release's run is doing, for the progress display.
pub enum Step<'a> {
    /// A step within the release, in words.
    Doing(&'a str),
    /// One more cell (fix × release) is judged.
    CellDone,
}

/// One release: prepare its pristine trees (into the cache), then judge every fix on them.
/// A release that cannot be prepared gives an error cell per fix.
pub fn run_release(
    catalog: &Catalog,
    fixes: &[&Fix],
    release: &str,
    python: &str,
    tests_unavailable: Option<&str>,
    progress: &mut dyn FnMut(Step<'_>),
) -> (ReleaseTrees, Vec<Cell>) {
    progress(Step::Doing("preparing the pristine trees"));
    let vroot = upstream::vllm_tree(python, release, |what| progress(Step::Doing(what)));
    let gaudi = upstream::gaudi_tree(release);
    let (vroot, gaudi) = match (vroot, gaudi) {
        (Ok(v), Ok(g)) => (v, g),
        (v, g) => {
            let err = format!("{:#}", v.err().or(g.err()).expect("one failed"));
            let cells: Vec<Cell> = fixes.iter().map(|fix| error_cell(fix, release, &err)).collect();
            cells.iter().for_each(|_| progress(Step::CellDone));
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
            outside_site_packages: false,
        }),
        vllm_gaudi: gaudi.as_ref().map(|g| Tree {
            name: TreeName::VllmGaudi,
            version: discover::version_hint(TreeName::VllmGaudi, &g.root),
            root: g.root.clone(),
            found_by: g.source.clone(),
            outside_site_packages: false,
        }),
        notes: Vec::new(),
    };
    let only = if gaudi.is_some() { TreeFilter::all() } else { TreeFilter::only(vec![TreeName::Vllm]) };
    let mut cells = Vec::new();
    for fix in fixes {
        let name = &fix.manifest.name;
        progress(Step::Doing(&format!("{name}: checking")));
        let cell = evaluate_cell(catalog, fix, release, &trees, &only, python, tests_unavailable, |s| {
            progress(Step::Doing(&format!("{name}: {s}")))
        });
        cells.push(cell.unwrap_or_else(|e| error_cell(fix, release, &format!("{e:#}"))));
        progress(Step::CellDone);
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
        upkeep::pytest::Talk::Steps(&mut |beat| progress(&format!("running its tests: {beat}"))),
    );
    match run {
        Ok(run) => {
            cell.tests = if run.passed { TestsResult::Passed } else { TestsResult::Failed };
            cell.tests_summary = Some(run.summary);
        }
        // A signal to gaudi-fixes stops the whole matrix, not only this cell.
        Err(e) if e.chain().any(|c| c.is::<upkeep::child::Interrupted>()) => return Err(e),
        Err(e) => {
            cell.tests = TestsResult::Error;
            cell.tests_summary = Some(format!("{e:#}"));
        }
    }
    Ok(cell)
}

/// A patched copy of a release's trees, beside the cache (hard links need one file system):
/// `scratch/<release>-<fix>.gaudi-fixes-<pid>-<random>` (unique across PID namespaces, locked
/// while this run lives), removed when done, or by the next `matrix` when this one is killed
/// ([`upstream::remove_stale`]).
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
    // Every fix.yaml's new text is made before any is written: a cell that cannot be recorded
    // leaves the catalogue as it was.
    let mut edits: Vec<(PathBuf, String, String)> = Vec::new();
    for ((fix_name, variant), releases) in &add {
        let fix = catalog.fix(fix_name)?;
        let path = dir.join(&fix.dir).join("fix.yaml");
        let Some(v) = fix.variants.iter().find(|x| &x.release == variant) else {
            bail!(
                "cannot record {} as verified for {fix_name}: {} has no variant {variant} (it has {}); nothing was \
                 written",
                releases.join(", "),
                path.display(),
                fix.variants.iter().map(|v| v.release.as_str()).collect::<Vec<_>>().join(", ")
            );
        };
        let mut list = v.verified.clone();
        list.extend(releases.iter().cloned());
        list.sort_by_key(|r| release_key(r));
        list.dedup();
        // Several variants of one fix edit one fix.yaml: each edit goes on the text the one before made.
        let at = match edits.iter().position(|(p, _, _)| p == &path) {
            Some(at) => at,
            None => {
                let old =
                    std::fs::read_to_string(&path).file_context(&path, || format!("reading {}", path.display()))?;
                edits.push((path.clone(), old.clone(), old));
                edits.len() - 1
            }
        };
        let new = yaml_edit::set_verified(&edits[at].2, variant, &list).file_context(&path, || {
            format!("editing {}: cannot record verified: there; nothing was written", path.display())
        })?;
        edits[at].2 = new;
    }
    let put_back = |edits: &[(PathBuf, String, String)]| -> Result<()> {
        for (path, old, _) in edits {
            upstream::replace_file(path, old.as_bytes())?;
        }
        Ok(())
    };
    for (i, (path, _, new)) in edits.iter().enumerate() {
        if let Err(e) = upstream::replace_file(path, new.as_bytes()) {
            put_back(&edits[..i])?;
            return Err(e.context("the fix.yaml files written before it were put back"));
        }
    }
    if let Err(e) = Catalog::load(Some(dir)) {
        put_back(&edits)?;
        let paths: Vec<String> = edits.iter().map(|(p, _, _)| p.display().to_string()).collect();
        return Err(e.context(format!(
            "the catalogue does not load after recording verified: in {}; put back",
            paths.join(", ")
        )));
    }
    for ((fix_name, variant), releases) in &add {
        for c in cells.iter_mut().filter(|c| &c.fix == fix_name && c.variant.as_ref() == Some(variant)) {
            if releases.contains(&c.release) {
                c.recorded = true;
            }
        }
    }
    Ok(())
}
