//! Evaluate fixes against trees and plan the edits, entirely in memory.
//!
//! A fix's state is decided by content: each release variant is tried (pristine hash first,
//! then exact hunk matches) and the first one that is cleanly applied or cleanly not applied
//! wins; the version string is only a hint. Drift is a finding (a [`FixState`]), not an error;
//! only broken input and I/O are errors. Apply and revert simulate every selected fix in order
//! on in-memory copies, so a later fix sees an earlier one's edits and nothing is written unless
//! every fix can be done.
//!
//! The outcome types and [`plan`] live here; judging and choosing a fix's variant in
//! `evaluate.rs`; the in-memory workspace that reads tree files (and the file-safety policy
//! for writing them) in `workspace.rs`.

mod evaluate;
pub mod reason;
mod workspace;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::catalog::{Fix, Kind};
use crate::discover::Trees;
use crate::exit_status::ExitStatus;
use crate::patch::{FileState, HunkReport};
use crate::tree::{TreeFilter, TreeName};

pub use workspace::check_writable;

use evaluate::{edit_variant, evaluate, shared_file_conflict};
use workspace::Workspace;

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
    /// Why this file is in its state, with the next step (see [`reason`]).
    pub reason: Option<crate::plan::reason::Reason>,
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
    pub reason: Option<crate::plan::reason::Reason>,
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
