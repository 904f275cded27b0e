//! What `lint` reports: findings (data, not errors) and what it checked or skipped, filled in
//! by `lint.rs` and `relations.rs` alike.

use serde::Serialize;

/// One lint finding (data, not an error).
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The catalogue file the finding is about.
    pub file: String,
    /// What kind of finding it is: what `port` tells new findings apart by.
    pub code: Code,
    pub message: String,
}

/// The kind of a lint finding (as JSON spells it: kebab-case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    /// The `after:`/`requires:` graph has a cycle (or names what is not there).
    OrderCycle,
    /// A `requires:` cycle.
    RequiresCycle,
    /// A profile `include:` cycle.
    IncludeCycle,
    /// A fix requires what it conflicts with.
    RequiresConflict,
    /// A profile selects conflicting fixes.
    ProfileConflict,
    /// A profile selects a fix without what it requires.
    ProfileMissesRequirement,
    /// `default` holds a fix that is not a correctness fix.
    DefaultKind,
    /// Two fixes of a profile touch the same lines.
    Overlap,
    /// With a profile applied, a later fix not ordered after an earlier one edits its lines.
    EditsEarlierFix,
    /// A release is not named vX.Y.Z, or not in release order, or a `verified:` entry neither.
    ReleaseName,
    ReleaseOrder,
    /// `detect:` names no text in a file the fix patches, or text with no code.
    DetectCoverage,
    /// A `detect:` text is found in a pristine release the fix has a patch variant for.
    DetectInPristine,
    /// A file a patch names is not in the pristine release.
    PristineFileMissing,
    /// The pristine file is not the one the variant records (sha256).
    PristineHash,
    /// A fix this one comes after does not apply to the pristine release.
    PredecessorDoesNotApply,
    /// The patch does not apply to its pristine file (with its hunks' reasons).
    DoesNotApply,
    /// A hunk's header anchor is missing or not a definition enclosing it.
    Anchor,
    /// After applying, the patch is not found applied, or a revert does not give the bytes back.
    RoundTrip,
    /// A hunk's image is not found once, or not at its header's line.
    NotUnique,
    /// The patch applies only on top of a fix it is ordered after but does not require.
    NeedsRequires,
    /// The conformance key (`conform:` features) of a fix.
    ConformKey,
}

/// What `lint` found and what it checked.
#[derive(Debug, Default, Serialize)]
pub struct LintReport {
    pub findings: Vec<Finding>,
    /// Things verified, one sentence each (so a clean run says what it proved).
    pub checked: Vec<String>,
    /// Things not checked and why (e.g. a tree missing from --upstream).
    pub skipped: Vec<String>,
}
