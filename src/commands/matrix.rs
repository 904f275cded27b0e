//! `gaudi-fixes matrix [--releases LIST] [--fix NAME…] [--record] [--no-tests] [--markdown]`:
//! every fix × release on pristine upstream trees (fetched into the user cache, see
//! [`crate::upkeep::upstream`]): the state, the variant used, and whether the fix's tests pass
//! on the patched real code (the pristine tree is hard-link copied, the fix — after the fixes
//! it comes `after:` or `requires:` — applied to the copy, and its tests run there). `--record` writes each
//! release whose cell applied exactly and passed its tests into the variant's `verified:`.
//!
//! Exit 0 when every release could be prepared, 3 otherwise (or on bad input).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::catalog::{Catalog, Fix};
use crate::discover::{self, Tree, Trees};
use crate::exit_status::ExitStatus;
use crate::plan::ReasonCode;
use crate::plan::{self, FileOutcome, FixState, Op};
use crate::report::progress::Progress;
use crate::report::Format;
use crate::settings::{MatrixArgs, Settings};
use crate::tree::{TreeFilter, TreeName};
use crate::upkeep::{self, upstream, yaml_edit};

/// One fix on one release.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub fix: String,
    pub release: String,
    /// `applies` (cleanly, on the pristine tree), `applied`, `drifted`, `upstreamed`, `error`.
    pub state: String,
    /// Hunks were found away from their header lines.
    pub offsets: bool,
    /// The variant that applies (or, when drifted, the nearest one).
    pub variant: Option<String>,
    pub reason: Option<ReasonCode>,
    pub message: Option<String>,
    /// `passed`, `failed`, `not-run` or `error`.
    pub tests: String,
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

#[derive(Debug, Serialize)]
struct Document<'a> {
    schema: u32,
    command: &'static str,
    exit_code: u8,
    python: &'a str,
    releases: &'a [ReleaseTrees],
    cells: &'a [Cell],
}

/// Numeric order of release tags (`v0.9.0` before `v0.10.0`).
fn version_key(tag: &str) -> Vec<u64> {
    tag.trim_start_matches('v').split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse().ok()).collect()
}

/// The fixes `fix` comes after or requires, transitively, that the catalogue has: `apply`
/// applies what a fix requires first, so its tests run with them.
fn with_predecessors(catalog: &Catalog, fix: &Fix) -> Vec<String> {
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

/// Run `matrix`.
pub fn run(global: &Settings, args: &MatrixArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    if args.record {
        upkeep::writable_catalog(global.catalog.as_deref(), "matrix --record")?;
        if args.no_tests {
            bail!("--record writes releases where the fix's tests passed; it cannot be combined with --no-tests");
        }
    }
    let fixes: Vec<&Fix> = if args.fixes.is_empty() {
        catalog.fixes.iter().collect()
    } else {
        args.fixes.iter().map(|n| catalog.fix(n)).collect::<Result<_>>()?
    };
    let mut releases: Vec<String> = if args.releases.is_empty() {
        fixes
            .iter()
            .flat_map(|f| f.variants.iter().flat_map(|v| std::iter::once(v.release.clone()).chain(v.verified.clone())))
            .collect()
    } else {
        args.releases.iter().map(|r| upstream::release_tag(r.trim())).collect::<Result<_>>()?
    };
    releases.sort_by_key(|r| version_key(r));
    releases.dedup();
    let python = global.python.as_str();
    let tests_unavailable = if args.no_tests {
        Some("--no-tests".to_string())
    } else {
        match super::test::check_python(python) {
            Ok(()) => None,
            Err(e) if args.record => return Err(e.context("--record needs the fixes' tests to run")),
            Err(e) => Some(format!("{e:#}")),
        }
    };

    // What killed runs left in the cache (patched copies, half-extracted releases) goes first.
    for note in upstream::remove_stale(&upstream::cache_dir()?) {
        eprintln!("gaudi-fixes: {note}");
    }
    let mut progress = Progress::or_lines(global);
    let mut prepared = Vec::new();
    let mut cells = Vec::new();
    for (ri, release) in releases.iter().enumerate() {
        let step = format!("matrix: {release} ({}/{})", ri + 1, releases.len());
        progress.draw(&format!("{step}: preparing the pristine trees"));
        let vroot = upstream::vllm_tree(python, release, |what| progress.draw(&format!("{step}: {what}")));
        let gaudi = upstream::gaudi_tree(release);
        let (vroot, gaudi) = match (vroot, gaudi) {
            (Ok(v), Ok(g)) => (v, g),
            (v, g) => {
                let err = v.err().or(g.err()).expect("one failed");
                prepared.push(ReleaseTrees {
                    release: release.clone(),
                    vllm_root: None,
                    vllm_gaudi: None,
                    error: Some(format!("{err:#}")),
                });
                for fix in &fixes {
                    cells.push(error_cell(fix, release, &format!("{err:#}")));
                }
                continue;
            }
        };
        prepared.push(ReleaseTrees {
            release: release.clone(),
            vllm_root: Some(vroot.clone()),
            vllm_gaudi: gaudi.clone(),
            error: None,
        });
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
        for fix in &fixes {
            progress.draw(&format!("{step}: {}: checking", fix.manifest.name));
            let cell =
                evaluate_cell(&catalog, fix, release, &trees, &only, python, tests_unavailable.as_deref(), |s| {
                    progress.draw(&format!("{step}: {}: {s}", fix.manifest.name))
                });
            cells.push(cell.unwrap_or_else(|e| error_cell(fix, release, &format!("{e:#}"))));
        }
    }
    progress.clear();
    if args.record {
        record(global.catalog.as_deref().expect("checked above"), &mut cells)?;
    }
    let status = if prepared.iter().any(|r| r.error.is_some()) { ExitStatus::Error } else { ExitStatus::Applied };
    if !global.quiet {
        let mut out = crate::report::stdout().lock();
        if args.markdown {
            markdown(&mut out, &fixes, &cells)?;
        } else if global.format == Format::Json {
            let doc = Document {
                schema: 1,
                command: "matrix",
                exit_code: status.code(),
                python,
                releases: &prepared,
                cells: &cells,
            };
            serde_json::to_writer_pretty(&mut out, &doc)?;
            writeln!(out)?;
        } else {
            human(&mut out, &prepared, &cells, tests_unavailable.as_deref())?;
        }
    }
    Ok(status)
}

fn error_cell(fix: &Fix, release: &str, message: &str) -> Cell {
    Cell {
        fix: fix.manifest.name.clone(),
        release: release.to_string(),
        state: "error".into(),
        offsets: false,
        variant: None,
        reason: None,
        message: Some(message.to_string()),
        tests: "not-run".into(),
        tests_summary: None,
        verified: false,
        recorded: false,
        whole: false,
    }
}

#[allow(clippy::too_many_arguments)]
fn evaluate_cell(
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
    let plan = plan::plan(&ordered, trees, only, Op::Apply)?;
    let report = plan.reports.iter().find(|r| r.name == fix.manifest.name).context("the fix has a report")?;
    let state = match report.state {
        FixState::NotApplied => "applies",
        FixState::Applied => "applied",
        FixState::Drifted => "drifted",
        FixState::Upstreamed => "upstreamed",
        FixState::Skipped => "skipped",
        FixState::Error => "error",
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
        state: state.into(),
        offsets,
        variant: report.variant.clone(),
        reason: report.reason.as_ref().filter(|r| !r.note).map(|r| r.code),
        message: report.reason.as_ref().map(|r| r.message.clone()).or_else(|| report.message.clone()),
        tests: "not-run".into(),
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
    let run = super::test::run_tests(
        catalog,
        fix,
        python,
        Some(&scratch.0),
        has_gaudi.then_some(scratch.0.as_path()),
        &[],
        true,
    );
    match run {
        Ok(run) => {
            cell.tests = if run.passed { "passed" } else { "failed" }.into();
            cell.tests_summary = Some(run.summary);
        }
        Err(e) => {
            cell.tests = "error".into();
            cell.tests_summary = Some(format!("{e:#}"));
        }
    }
    Ok(cell)
}

/// A patched copy of a release's trees, beside the cache (hard links need one file system):
/// `scratch/<release>-<fix>.gaudi-fixes-<pid>`, removed when done, or by the next `matrix`
/// when this one is killed ([`upstream::remove_stale`]).
struct ScratchTree(PathBuf, Option<upstream::OwnDir>);

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
fn record(dir: &Path, cells: &mut [Cell]) -> Result<()> {
    // Under the catalogue's lock, from fix.yaml as it is now: another writer may have recorded
    // or ported since this run loaded it.
    let _lock = upkeep::lock_catalog(dir)?;
    let catalog = &Catalog::load(Some(dir))?;
    let mut add: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.state == "applies" && c.tests == "passed" && c.whole && !c.verified) {
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

fn state_text(c: &Cell) -> String {
    let mut s = c.state.clone();
    if c.offsets {
        s.push_str(" (offsets)");
    }
    if let Some(r) = c.reason {
        s = format!("{s}: {}", crate::report::human::reason_word(r));
    }
    s
}

fn verified_text(c: &Cell) -> &'static str {
    match (c.verified, c.recorded) {
        (true, _) => "yes",
        (false, true) => "recorded",
        _ if c.state == "applies" => "no",
        _ => "-",
    }
}

fn human(out: &mut dyn Write, releases: &[ReleaseTrees], cells: &[Cell], no_tests: Option<&str>) -> Result<()> {
    for r in releases {
        match (&r.error, &r.vllm_gaudi) {
            (Some(e), _) => writeln!(out, "{}: cannot prepare: {e}", r.release)?,
            (None, Some(g)) => writeln!(out, "{}: vllm_gaudi from {}", r.release, g.source)?,
            (None, None) => writeln!(out, "{}: no vllm_gaudi tree (its half is not checked)", r.release)?,
        }
    }
    if let Some(why) = no_tests {
        writeln!(out, "tests not run: {why}")?;
    }
    let rows: Vec<[String; 6]> = cells
        .iter()
        .map(|c| {
            let tests = match c.tests.as_str() {
                "not-run" => "-".to_string(),
                t => t.to_string(),
            };
            [
                c.release.clone(),
                c.fix.clone(),
                state_text(c),
                c.variant.clone().unwrap_or_else(|| "-".into()),
                tests,
                verified_text(c).to_string(),
            ]
        })
        .collect();
    let head = ["release", "fix", "state", "variant", "tests", "verified"].map(str::to_string);
    let mut widths = head.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&head).chain(&rows) {
        let line: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    for c in cells.iter().filter(|c| c.tests == "failed" || c.tests == "error") {
        writeln!(out, "{} {}: tests {}: {}", c.release, c.fix, c.tests, c.tests_summary.as_deref().unwrap_or(""))?;
    }
    Ok(())
}

/// One Markdown table per fix, as the fix pages embed them.
fn markdown(out: &mut dyn Write, fixes: &[&Fix], cells: &[Cell]) -> Result<()> {
    for fix in fixes {
        let name = &fix.manifest.name;
        writeln!(out, "<!-- gaudi-fixes matrix --fix {name} --markdown -->")?;
        writeln!(out, "| vLLM | state | variant | tests | verified |")?;
        writeln!(out, "|---|---|---|---|---|")?;
        for c in cells.iter().filter(|c| &c.fix == name) {
            let tests = match c.tests.as_str() {
                "passed" => "pass",
                "failed" => "**fail**",
                "error" => "error",
                _ => "–",
            };
            let verified = match verified_text(c) {
                "yes" | "recorded" => "✓",
                "no" => "no",
                _ => "–",
            };
            writeln!(
                out,
                "| {} | {} | {} | {tests} | {verified} |",
                c.release.trim_start_matches('v'),
                state_text(c),
                c.variant.as_deref().unwrap_or("–"),
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}
