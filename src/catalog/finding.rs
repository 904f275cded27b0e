//! What `lint` reports: findings (data, not errors) and what it checked or skipped, filled in
//! by `lint.rs` and `relations.rs` alike.

use serde::Serialize;

/// One lint finding (data, not an error).
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The catalogue file the finding is about.
    pub file: String,
    pub message: String,
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
