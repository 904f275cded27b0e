//! The provenance record: what gaudi-fixes applied to one tree root (fix, variant, file
//! hashes), for audits. It never overrides the files: the state of a fix is what the files say,
//! and where the record disagrees, [`disagreements`] says so. `transaction/` reads and
//! writes the record with the tree's other state; this module decides what it holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::FileContext;
use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::catalog::CatalogIdentity;
use crate::hash::sha256_hex;
use crate::plan::{Action, FixReport, FixState, Plan};

/// What gaudi-fixes applied to one tree root, for audits. Never overrides file contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Provenance {
    pub tool: String,
    /// The catalogue the last write used (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogIdentity>,
    /// Fix name → what was applied.
    pub fixes: BTreeMap<String, ProvenanceFix>,
}

/// One applied fix in a provenance record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProvenanceFix {
    pub variant: String,
    /// Tree-relative path → sha256 after the apply.
    pub files: BTreeMap<String, String>,
}

/// The tool name and version written into journals and provenance.
pub fn tool_version() -> String {
    format!("gaudi-fixes {}", env!("CARGO_PKG_VERSION"))
}

/// Each root's record after `plan` is written with `catalog`, from `current` (each root this run
/// may touch, with its record as read, or none). A fix skipped by `--only-tree` keeps what its
/// record says.
pub fn after(
    plan: &Plan,
    current: BTreeMap<PathBuf, Option<Provenance>>,
    catalog: &CatalogIdentity,
) -> Result<BTreeMap<PathBuf, Provenance>> {
    let mut records: BTreeMap<PathBuf, Provenance> = current
        .into_iter()
        .map(|(root, record)| {
            (root, Provenance { tool: tool_version(), catalog: Some(catalog.clone()), ..record.unwrap_or_default() })
        })
        .collect();
    let final_bytes: BTreeMap<PathBuf, &[u8]> =
        plan.edits.iter().map(|e| (e.tree_root.join(&e.rel), e.new.as_slice())).collect();
    for report in &plan.reports {
        if report.state == FixState::Skipped {
            continue; // its trees were left out: whatever the record says about it stands
        }
        let keep =
            report.action == Some(Action::Apply) || (report.action.is_none() && report.state == FixState::Applied);
        for record in records.values_mut() {
            record.fixes.remove(&report.name);
        }
        if !keep {
            continue;
        }
        for file in &report.files {
            let Some(root) = &file.tree_root else { continue };
            let Some(record) = records.get_mut(root) else { continue };
            let path = root.join(&file.path);
            let hash = match final_bytes.get(&path) {
                Some(bytes) => sha256_hex(bytes),
                None => sha256_hex(&read(&path)?),
            };
            let entry = record.fixes.entry(report.name.clone()).or_insert_with(|| ProvenanceFix {
                variant: report.variant.clone().unwrap_or_default(),
                files: BTreeMap::new(),
            });
            entry.files.insert(file.path.clone(), hash);
        }
    }
    Ok(records)
}

/// Where each root's record (as read, or none) and the files disagree, as sentences. The files
/// win; this only says so.
pub fn disagreements(reports: &[FixReport], records: &BTreeMap<PathBuf, Option<Provenance>>) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for (root, record) in records {
        let recorded = record.as_ref().map(|r| &r.fixes);
        for r in reports {
            let touches_root = r.files.iter().any(|f| f.tree_root.as_ref() == Some(root));
            if !touches_root {
                continue;
            }
            match (recorded.and_then(|m| m.get(&r.name)), r.state) {
                (Some(p), FixState::Applied) => {
                    for (path, hash) in &p.files {
                        let now = sha256_hex(&read(&root.join(path))?);
                        if &now != hash {
                            notes.push(format!(
                                "{}: changed since gaudi-fixes applied {} (provenance hash differs)",
                                root.join(path).display(),
                                r.name
                            ));
                        }
                    }
                }
                (Some(p), state) => notes.push(format!(
                    "provenance in {} says {} ({}) is applied, but the files say {}",
                    root.display(),
                    r.name,
                    p.variant,
                    state.words()
                )),
                (None, FixState::Applied) => notes.push(format!(
                    "{} is applied in {} but gaudi-fixes has no record of applying it",
                    r.name,
                    root.display()
                )),
                _ => {}
            }
        }
    }
    Ok(notes)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .file_context(path, || format!("reading {} to compare with its provenance record", path.display()))
}
