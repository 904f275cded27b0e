//! The vocabulary of a plan: a fix's verdict ([`FixState`], [`FixReport`] with its files,
//! [`Reason`] and [`Basis`]), what the run does about it ([`Action`], [`Op`]) and the edits it makes
//! ([`Edit`], [`Plan`]). Data only; judging lives in `evaluate.rs` and `reason.rs`.

use std::path::PathBuf;

use serde::Serialize;

use crate::catalog::Kind;
use crate::exit_status::ExitStatus;
use crate::patch::HunkReport;
use crate::tree::TreeName;

pub use crate::tree::MAX_FILE_BYTES;

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

    /// The words human text uses (`not applied`; JSON's `not-applied` is [`FixState::as_str`]).
    pub fn words(self) -> &'static str {
        match self {
            FixState::NotApplied => "not applied",
            other => other.as_str(),
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
    pub reason: Option<Reason>,
}

impl FileReport {
    /// A file that was not read (left out, its tree not found, or missing): no hunks, no hash.
    pub fn unread(
        tree: TreeName,
        path: &str,
        tree_root: Option<PathBuf>,
        state: FileOutcome,
        patch: String,
    ) -> FileReport {
        FileReport {
            tree,
            path: path.to_string(),
            tree_root,
            state,
            pristine: false,
            partial: false,
            patch,
            hunks: Vec::new(),
            sha256: None,
            reason: None,
        }
    }
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
    pub reason: Option<Reason>,
    pub files: Vec<FileReport>,
    /// How the verdict was reached, as data (see [`Basis`]); `report/` writes its words.
    pub basis: Basis,
    /// The commands `message` suggests (its `{0}`, `{1}`, … in order), as data: `report/`
    /// writes each in the sentence as a command line of the run's own invocation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<Advice>,
}

pub use crate::advice::Advice;

/// How a fix's verdict was reached: which judgement of the chain (`chain.rs`) gave it, or what
/// this run found that overrides it. Data, in JSON as `basis` (`{"code": "on-chain"}`, with the
/// fixes or file it names); the sentence for the cases that have one is written in `report/`
/// (then `message`), and `super::plan` decides by it, never by a sentence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "kebab-case")]
pub enum Basis {
    /// Judged on the tree as the fixes it comes after leave it (those not applied applied in
    /// memory first); for a fix that comes after none, the tree as it is.
    #[default]
    OnChain,
    /// Judged on its own chain: a fix it does not come after edits its files.
    OwnChain,
    /// The chain reads it drifted; the tree as it is gives its state.
    AsItIs,
    /// It reads so once the fixes made on top of it that are applied (`fixes`) are reverted
    /// in memory.
    UnderSuccessors { fixes: Vec<String> },
    /// Applied, but on top of fixes it comes after that are not applied in the tree (undone
    /// since): `fixes`. Its advice applies them under it.
    OnUndone { fixes: Vec<String> },
    /// Revert: applied on top of `fixes`, not applied in the tree; reverted over them (applied
    /// under it in memory), which stay not applied.
    RevertedOver { fixes: Vec<String> },
    /// Revert: drifted, but no hunk of it reads applied and no provenance record says it was
    /// applied: nothing to revert (its state then reads not applied).
    NeverApplied,
    /// Revert: a tree it needs is missing and nothing of it is applied in the trees found:
    /// nothing to revert (its state then reads not applied; `message` says which tree).
    AbsentFromFoundTrees,
    /// Drifted on `file`, which fixes applied before it in this run (`with`) patch too.
    Conflict { file: String, with: Vec<Editor> },
    /// Apply: its patch is made on top of `fixes` (those it comes after), and those not applied
    /// yet are not selected: an error; its advice applies them together.
    PredecessorsNotSelected { fixes: Vec<String> },
    /// Revert: applied, but a fix outside the selection was applied on top of it: drifted.
    UnderUnselected,
}

/// A fix that edited a file in this run, under the path it patches (another name of the same
/// file, through a link, when not the one the conflicting fix patches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Editor {
    pub fix: String,
    pub path: String,
}

impl FixReport {
    /// An error only because a tree it needs was not found, while every file of it in the
    /// trees found is not applied: there is nothing of it to undo on these trees, and nothing
    /// of it there that what it requires could be needed by.
    pub fn absent_from_found_trees(&self) -> bool {
        // `error` is only ever a tree not found; with none of its trees found, no file is read.
        self.state == FixState::Error
            && self.files.iter().all(|f| matches!(f.state, FileOutcome::NoTree | FileOutcome::NotApplied))
    }

    /// Drifted, but no file or hunk of it reads applied and no provenance record (`recorded`)
    /// says gaudi-fixes applied it: a fix never applied here (its release unsupported, or its
    /// context changed before it was). A revert has nothing of it to undo, and nothing of it
    /// can need what it requires. (A drifted hunk may look more like the post-image than the
    /// pre-image without being applied: vLLM 0.34.0 changed topk-subset-sampler's lines so.)
    pub fn never_applied(&self, recorded: &Recorded) -> bool {
        use crate::patch::HunkState;
        self.state == FixState::Drifted
            && !recorded.contains_key(&self.name)
            && self.files.iter().all(|f| {
                !f.partial
                    && f.state != FileOutcome::Applied
                    && !f.hunks.iter().any(|h| matches!(h.state, HunkState::Applied { .. }))
            })
    }
}

/// What the provenance records say was applied: fix name → the variant apply wrote. Only a
/// preference among variants that read applied; the files decide the state.
pub type Recorded = std::collections::BTreeMap<String, String>;

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

/// The kind of explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCode {
    /// The tree is a release the fix has no variant for.
    UnsupportedRelease,
    /// The tree is a release the fix covers, but the file was changed.
    LocallyModified,
    /// A variant applies exactly, but to a release it was not verified on (a note).
    UnverifiedRelease,
    /// Some hunks are applied and others are not.
    PartiallyApplied,
    /// A file the fix patches is not in the tree.
    FileMissing,
}

/// An explanation: what was found and what to do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub code: ReasonCode,
    /// One sentence: what was found.
    pub message: String,
    /// One sentence: what to do about it; its `{0}`, `{1}`, … are `advice`, in order.
    pub next_step: String,
    /// The commands `next_step` suggests, as data (see [`Advice`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<Advice>,
    /// True when this is only a note: it does not change the state or the exit code.
    pub note: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fix_state_words_are_their_json_spelling() {
        use FixState::*;
        for state in [Applied, NotApplied, Drifted, Upstreamed, Error, Skipped] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
