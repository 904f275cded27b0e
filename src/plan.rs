//! Evaluate fixes against trees and plan the edits, entirely in memory.
//!
//! A fix's state is decided by content: each release variant is tried (pristine hash first,
//! then exact hunk matches) and the first one that is cleanly applied or cleanly not applied
//! wins; the version string is only a hint. Drift is a finding (a [`FixState`]), not an error;
//! only broken input and I/O are errors. Apply and revert simulate every selected fix in order
//! on in-memory copies, so a later fix sees an earlier one's edits and nothing is written unless
//! every fix can be done.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::catalog::{Fix, Kind, Variant};
use crate::tree::{TreeFilter, TreeName};
use crate::discover::{Tree, Trees};
use crate::exit_status::ExitStatus;
use crate::patch::state::{self, FileEval};
use crate::patch::{FileState, HunkReport, SourceText};

/// Files larger than this are not Python sources we patch; refusing keeps memory bounded.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A fix's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FixState {
    Applied,
    NotApplied,
    Drifted,
    /// The matching release has the fix upstream; nothing to apply.
    Upstreamed,
    /// The fix cannot be evaluated (a tree it needs is missing).
    Error,
    /// Every file of the fix is in a tree left out with `--only-tree`; nothing to judge.
    Skipped,
}

impl FixState {
    /// The word reports use (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            FixState::Applied => "applied",
            FixState::NotApplied => "not-applied",
            FixState::Drifted => "drifted",
            FixState::Upstreamed => "upstreamed",
            FixState::Error => "error",
            FixState::Skipped => "skipped",
        }
    }

    /// The exit status this state asks for under `--check`.
    pub fn check_status(self) -> ExitStatus {
        match self {
            FixState::Applied | FixState::Upstreamed | FixState::Skipped => ExitStatus::Applied,
            FixState::NotApplied => ExitStatus::NotApplied,
            FixState::Drifted => ExitStatus::Drifted,
            FixState::Error => ExitStatus::Error,
        }
    }
}

/// One file's outcome within a fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileOutcome {
    Applied,
    NotApplied,
    Drifted,
    /// The file does not exist in the tree.
    Missing,
    /// Its tree was left out with `--only-tree`.
    Skipped,
    /// Its tree was not found (the fix's state is then `error`; the other tree is still judged).
    NoTree,
}

/// One file of the chosen (or nearest) variant.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub tree: TreeName,
    /// Relative to the tree root.
    pub path: String,
    /// The tree root, when the tree was found.
    pub tree_root: Option<PathBuf>,
    pub state: FileOutcome,
    /// Whether the file's sha256 is the recorded pristine one.
    pub pristine: bool,
    /// Every hunk found, but some applied and others not.
    pub partial: bool,
    /// The patch file, as the catalogue names it.
    pub patch: String,
    pub hunks: Vec<HunkReport>,
    /// sha256 of the file as found (null when it was not read).
    pub sha256: Option<String>,
    /// Why this file is in its state, with the next step (see [`crate::reason`]).
    pub reason: Option<crate::reason::Reason>,
}

/// What a run does to a fix: the direction of its edits (also a journal's operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Apply,
    Revert,
}

impl Action {
    /// The word used in reports and journals.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Apply => "apply",
            Action::Revert => "revert",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fix's full report.
#[derive(Debug, Clone, Serialize)]
pub struct FixReport {
    pub name: String,
    pub kind: Kind,
    pub state: FixState,
    /// The release variant that matched (or, when drifted, the nearest one).
    pub variant: Option<String>,
    /// What this run does about it: apply, revert, or nothing.
    pub action: Option<Action>,
    /// Why the state is what it is, when a sentence helps (missing tree, upstreamed, …).
    pub message: Option<String>,
    /// Why, with the next step: unsupported release, locally modified, unverified release, …
    pub reason: Option<crate::reason::Reason>,
    pub files: Vec<FileReport>,
}

/// A planned write of one file.
#[derive(Debug, Clone)]
pub struct Edit {
    pub tree: TreeName,
    pub tree_root: PathBuf,
    /// Relative to the tree root.
    pub rel: String,
    /// The real file written (symlinks inside the tree resolved).
    pub path: PathBuf,
    pub old: Vec<u8>,
    pub new: Vec<u8>,
}

/// What a run is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Report only; each fix judged on the tree as it is.
    Status,
    /// Report as `--check`: simulate the selection in order, write nothing.
    Check,
    Apply,
    Revert,
}

/// The outcome of planning.
#[derive(Debug)]
pub struct Plan {
    pub reports: Vec<FixReport>,
    pub edits: Vec<Edit>,
}

impl Plan {
    /// The exit status of this plan for `op` (before writing).
    pub fn status(&self, op: Op) -> ExitStatus {
        let worst = self.reports.iter().map(|r| r.state.check_status()).max().unwrap_or(ExitStatus::Applied);
        match op {
            Op::Status | Op::Check => worst,
            // Not-applied is what apply/revert fix; only drift and errors refuse.
            Op::Apply | Op::Revert if worst == ExitStatus::NotApplied => ExitStatus::Applied,
            Op::Apply | Op::Revert => worst,
        }
    }
}

/// sha256 of bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// In-memory copies of the files a run looks at, one per real file: a file reached under two
/// names (a symlink inside the tree, or both trees under one root) is one edit stream, so two
/// fixes patching it apply in `after:` order to the same content.
struct Workspace {
    files: BTreeMap<PathBuf, Loaded>,
}

struct Loaded {
    /// The tree and relative path it was first reached by (what reports and edits name).
    tree: TreeName,
    rel: String,
    path: PathBuf,
    original: Vec<u8>,
    text: SourceText,
    /// Fixes that edited it in this run, with the name each reached it by.
    edited_by: Vec<(String, String)>,
}

impl Workspace {
    fn new() -> Workspace {
        Workspace { files: BTreeMap::new() }
    }

    /// The file, read once per real file; `None` when it does not exist.
    fn get(&mut self, tree: &Tree, rel: &str) -> Result<Option<&mut Loaded>> {
        let Some((real, path)) = resolve_tree_file(tree, rel)? else { return Ok(None) };
        if !self.files.contains_key(&real) {
            let bytes = read_real_file(&tree.root.join(rel), &real)?;
            let text = SourceText::decode(&bytes, &path)?;
            self.files.insert(
                real.clone(),
                Loaded { tree: tree.name, rel: rel.to_string(), path, original: bytes, text, edited_by: Vec::new() },
            );
        }
        Ok(self.files.get_mut(&real))
    }
}

/// The real (canonical) path of `rel` inside `tree`, and the path to write it by (the link's
/// target when the file itself is a symlink), refusing anything that resolves outside the
/// tree; `None` when it does not exist.
fn resolve_tree_file(tree: &Tree, rel: &str) -> Result<Option<(PathBuf, PathBuf)>> {
    let path = tree.root.join(rel);
    let meta = match fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    // Resolve every component, not only the last: a symlinked directory on the way can lead
    // outside the tree just as well as a symlinked file.
    let real = fs::canonicalize(&path).with_context(|| format!("{}: broken symlink", path.display()))?;
    let root = fs::canonicalize(&tree.root).with_context(|| format!("resolving {}", tree.root.display()))?;
    if !real.starts_with(&root) {
        let through =
            if meta.file_type().is_symlink() { "symlink points" } else { "a symlinked directory on its path leads" };
        bail!("{}: {through} outside the tree (to {}); refusing to touch it", path.display(), real.display());
    }
    let write = if meta.file_type().is_symlink() { real.clone() } else { path };
    Ok(Some((real, write)))
}

/// Read the real file `real` (reached as `path`), refusing non-regular and too large files.
fn read_real_file(path: &Path, real: &Path) -> Result<Vec<u8>> {
    let meta = fs::metadata(real).with_context(|| format!("reading {}", real.display()))?;
    if !meta.is_file() {
        bail!("{}: not a regular file", path.display());
    }
    if meta.len() > MAX_FILE_BYTES {
        bail!(
            "{}: {} bytes is larger than the {} MiB a patched source may be; refusing",
            path.display(),
            meta.len(),
            MAX_FILE_BYTES >> 20
        );
    }
    fs::read(real).with_context(|| format!("reading {}", real.display()))
}

/// Evaluate and (for apply/revert) simulate `fixes`, in the order given.
pub fn plan(fixes: &[&Fix], trees: &Trees, only: &TreeFilter, op: Op) -> Result<Plan> {
    let mut ws = Workspace::new();
    let mut reports = Vec::new();
    let ordered: Vec<&Fix> = if op == Op::Revert { fixes.iter().rev().copied().collect() } else { fixes.to_vec() };
    for fix in ordered {
        let (mut report, chosen) = evaluate(fix, trees, only, &mut ws)?;
        if report.state == FixState::Drifted {
            if let Some(conflict) = shared_file_conflict(fix, &report, trees, &mut ws)? {
                report.message = Some(conflict);
            }
        }
        let simulate = match (op, report.state) {
            (Op::Apply | Op::Check, FixState::NotApplied) => Some(true),
            (Op::Revert, FixState::Applied) => Some(false),
            _ => None,
        };
        if let (Some(forward), Some(variant)) = (simulate, chosen) {
            if op != Op::Check {
                report.action = Some(if forward { Action::Apply } else { Action::Revert });
            }
            edit_variant(variant, trees, only, &mut ws, forward, &fix.manifest.name)?;
        }
        reports.push(report);
    }
    if op == Op::Revert {
        reports.reverse();
    }
    let mut edits = Vec::new();
    if matches!(op, Op::Apply | Op::Revert) {
        for loaded in ws.files.values() {
            let new = loaded.text.encode();
            if new != loaded.original {
                let tree_root = trees.get(loaded.tree).expect("loaded files come from found trees").root.clone();
                edits.push(Edit {
                    tree: loaded.tree,
                    tree_root,
                    rel: loaded.rel.clone(),
                    path: loaded.path.clone(),
                    old: loaded.original.clone(),
                    new,
                });
            }
        }
    }
    Ok(Plan { reports, edits })
}

/// Judge one fix on the trees found, explain the verdict, and when a tree it needs is
/// missing, make it an error that still shows what the other tree holds.
fn evaluate<'f>(
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let (mut report, chosen) = evaluate_found(fix, trees, only, ws)?;
    crate::reason::explain(fix, &mut report, trees);
    let missing: Vec<String> = fix
        .variants
        .iter()
        .flat_map(|v| v.patches.iter().map(|p| p.tree))
        .filter(|t| only.includes(*t) && trees.get(*t).is_none())
        .map(|t| t.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return Ok((report, chosen));
    }
    let checked = report.files.iter().any(|f| !matches!(f.state, FileOutcome::NoTree | FileOutcome::Skipped));
    let mut message = format!(
        "needs the {} tree, which was not found (give --root DIR holding {}/, or --{} DIR; or leave it out with --only-tree)",
        missing.join(" and "),
        missing[0],
        missing[0].replace('_', "-")
    );
    if checked {
        let state = serde_json::to_value(report.state).ok().and_then(|v| v.as_str().map(str::to_string));
        message.push_str(&format!(
            "; the trees found were checked: {}{}",
            state.unwrap_or_default().replace('-', " "),
            report.variant.as_deref().map_or(String::new(), |v| format!(" [{v}]"))
        ));
    }
    report.message = Some(message);
    report.state = FixState::Error;
    Ok((report, None))
}

/// Judge one fix: try each variant, keep the first clean one.
fn evaluate_found<'f>(
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let mut report = FixReport {
        name: fix.manifest.name.clone(),
        kind: fix.manifest.kind,
        state: FixState::Error,
        variant: None,
        action: None,
        message: None,
        reason: None,
        files: Vec::new(),
    };
    let selected = |t: TreeName| only.includes(t);
    let needed: Vec<TreeName> = {
        let mut v: Vec<TreeName> =
            fix.variants.iter().flat_map(|v| v.patches.iter().map(|p| p.tree)).filter(|t| selected(*t)).collect();
        v.sort();
        v.dedup();
        v
    };
    if needed.is_empty() && fix.variants.iter().any(|v| !v.patches.is_empty()) {
        report.state = FixState::Skipped;
        report.message = Some("every file of this fix is in a tree left out with --only-tree".into());
        return Ok((report, None));
    }
    // A tree that is missing makes the fix an error (in `evaluate`), but the trees found are
    // still judged, so one missing tree does not hide the other's state.
    if needed.iter().all(|t| trees.get(*t).is_none()) {
        return Ok((report, None));
    }

    struct Candidate<'f> {
        variant: &'f Variant,
        files: Vec<FileReport>,
        clean: Option<FixState>,
        pristine: bool,
        drifted_hunks: usize,
    }
    let mut candidates = Vec::new();
    for variant in fix.variants.iter().filter(|v| !v.upstreamed) {
        let mut files = Vec::new();
        for vp in &variant.patches {
            let patch = vp.patch_path.display().to_string();
            if !selected(vp.tree) {
                files.push(FileReport {
                    tree: vp.tree,
                    path: vp.file.clone(),
                    tree_root: None,
                    state: FileOutcome::Skipped,
                    pristine: false,
                    partial: false,
                    patch,
                    hunks: Vec::new(),
                    sha256: None,
                    reason: None,
                });
                continue;
            }
            let Some(tree) = trees.get(vp.tree) else {
                files.push(FileReport {
                    tree: vp.tree,
                    path: vp.file.clone(),
                    tree_root: None,
                    state: FileOutcome::NoTree,
                    pristine: false,
                    partial: false,
                    patch,
                    hunks: Vec::new(),
                    sha256: None,
                    reason: None,
                });
                continue;
            };
            let Some(loaded) = ws.get(tree, &vp.file)? else {
                files.push(FileReport {
                    tree: vp.tree,
                    path: vp.file.clone(),
                    tree_root: Some(tree.root.clone()),
                    state: FileOutcome::Missing,
                    pristine: false,
                    partial: false,
                    patch,
                    hunks: Vec::new(),
                    sha256: None,
                    reason: None,
                });
                continue;
            };
            let mut eval: FileEval = state::evaluate(&vp.diff, &loaded.text);
            crate::reason::align_excerpts(&loaded.text, &mut eval.hunks);
            let sha256 = sha256_hex(&loaded.text.encode());
            let pristine = sha256 == vp.pristine_sha256;
            let state = match eval.state {
                FileState::Applied => FileOutcome::Applied,
                FileState::NotApplied => FileOutcome::NotApplied,
                FileState::Drifted => FileOutcome::Drifted,
            };
            files.push(FileReport {
                tree: vp.tree,
                path: vp.file.clone(),
                tree_root: Some(tree.root.clone()),
                state,
                pristine,
                partial: eval.partial,
                patch,
                hunks: eval.hunks,
                sha256: Some(sha256),
                reason: None,
            });
        }
        let judged: Vec<FileOutcome> = files
            .iter()
            .map(|f| f.state)
            .filter(|s| !matches!(s, FileOutcome::Skipped | FileOutcome::NoTree))
            .collect();
        let clean = if !judged.is_empty() && judged.iter().all(|s| *s == FileOutcome::Applied) {
            Some(FixState::Applied)
        } else if !judged.is_empty() && judged.iter().all(|s| *s == FileOutcome::NotApplied) {
            Some(FixState::NotApplied)
        } else {
            None
        };
        let pristine =
            files.iter().filter(|f| !matches!(f.state, FileOutcome::Skipped | FileOutcome::NoTree)).all(|f| f.pristine);
        let drifted_hunks = files
            .iter()
            .map(|f| match f.state {
                FileOutcome::Missing => 1000,
                _ => f.hunks.iter().filter(|h| matches!(h.state, crate::patch::HunkState::Drifted { .. })).count(),
            })
            .sum();
        candidates.push(Candidate { variant, files, clean, pristine, drifted_hunks });
    }

    let hint_matches = |release: &str| {
        let want = release.trim_start_matches('v');
        trees.vllm.as_ref().and_then(|t| t.version.as_deref()).is_some_and(|v| v == want)
    };
    // A pristine tree is the strongest evidence; then any clean variant, in manifest order.
    let best = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.clean.is_some())
        .min_by_key(|(i, c)| (!c.pristine, !hint_matches(&c.variant.release), *i));
    if let Some((_, c)) = best {
        report.state = c.clean.expect("filtered");
        report.variant = Some(c.variant.release.clone());
        report.files = c.files.clone();
        let offsets = c.files.iter().flat_map(|f| &f.hunks).any(|h| match h.state {
            crate::patch::HunkState::Applied { offset, .. } | crate::patch::HunkState::NotApplied { offset, .. } => {
                offset != 0
            }
            _ => false,
        });
        if offsets {
            report.message = Some("some hunks were found at an offset (another fix or local change above them)".into());
        }
        return Ok((report, Some(c.variant)));
    }
    if let Some(up) = fix.variants.iter().find(|v| v.upstreamed && hint_matches(&v.release)) {
        report.state = FixState::Upstreamed;
        report.variant = Some(up.release.clone());
        report.message = Some(format!("release {} has this fix upstream; nothing to apply", up.release));
        return Ok((report, None));
    }
    report.state = FixState::Drifted;
    if let Some((_, c)) =
        candidates.iter().enumerate().min_by_key(|(i, c)| (!hint_matches(&c.variant.release), c.drifted_hunks, *i))
    {
        report.variant = Some(c.variant.release.clone());
        report.files = c.files.clone();
        let partial = c.files.iter().any(|f| f.partial)
            || (c.files.iter().any(|f| f.state == FileOutcome::Applied)
                && c.files.iter().any(|f| f.state == FileOutcome::NotApplied));
        report.message = Some(if partial {
            "partially applied: some hunks are applied and others are not".into()
        } else if c.files.iter().any(|f| f.state == FileOutcome::Missing) {
            "a file this fix patches is missing from the tree".into()
        } else {
            format!("no release variant applies exactly to this tree; showing the nearest ({})", c.variant.release)
        });
    }
    Ok((report, None))
}

/// When a drifted fix patches a file an earlier fix of this run already edited (under this
/// name or another), the two conflict: say so, naming both.
fn shared_file_conflict(fix: &Fix, report: &FixReport, trees: &Trees, ws: &mut Workspace) -> Result<Option<String>> {
    for file in report.files.iter().filter(|f| f.state == FileOutcome::Drifted) {
        let Some(tree) = trees.get(file.tree) else { continue };
        let Some(loaded) = ws.get(tree, &file.path)? else { continue };
        let others: Vec<String> = loaded
            .edited_by
            .iter()
            .filter(|(name, _)| *name != fix.manifest.name)
            .map(|(name, rel)| if *rel == file.path { format!("`{name}`") } else { format!("`{name}` (as {rel})") })
            .collect();
        if !others.is_empty() {
            return Ok(Some(format!(
                "conflict: {} is also patched by {}, applied before `{}` in after: order, and its hunks do not apply on top of that; select one of them, or make one patch the other's result",
                file.path,
                others.join(" and "),
                fix.manifest.name
            )));
        }
    }
    Ok(None)
}

/// Apply (`forward`) or revert a variant's patches to the in-memory copies.
fn edit_variant(
    variant: &Variant,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
    forward: bool,
    fix: &str,
) -> Result<()> {
    for vp in &variant.patches {
        if !only.includes(vp.tree) {
            continue;
        }
        let tree = trees.get(vp.tree).expect("evaluated trees exist");
        let loaded = ws.get(tree, &vp.file)?.expect("evaluated files exist");
        let eval = state::evaluate(&vp.diff, &loaded.text);
        let edited = if forward {
            state::apply(&vp.diff, &loaded.text, &eval)
        } else {
            state::revert(&vp.diff, &loaded.text, &eval)
        };
        loaded.text = edited.with_context(|| format!("{}: state changed while planning", loaded.path.display()))?;
        loaded.edited_by.push((fix.to_string(), vp.file.clone()));
    }
    Ok(())
}

/// Refuse to plan writes to files we must not write (read-only), before anything is written.
pub fn check_writable(edits: &[Edit]) -> Result<()> {
    for edit in edits {
        let meta = fs::metadata(&edit.path).with_context(|| format!("reading {}", edit.path.display()))?;
        if meta.permissions().readonly() {
            bail!(
                "{}: file is read-only; nothing was written (make it writable, or run where the tree may be changed)",
                edit.path.display()
            );
        }
    }
    Ok(())
}

/// Where a tree's package file lives, for messages.
pub fn display_path(root: &Path, rel: &str) -> String {
    root.join(rel).display().to_string()
}

#[cfg(test)]
mod fix_state_tests {
    use super::*;

    #[test]
    fn fix_state_words_are_their_json_spelling() {
        use FixState::*;
        for state in [Applied, NotApplied, Drifted, Upstreamed, Error, Skipped] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
