//! The journal and provenance records: what a committed, unfinished transaction must finish,
//! checked data (checksum, tree identity, tree-relative paths).

use std::ffi::OsStr;

use std::path::Path;

use crate::error::FileContext;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::advice::{Advice, Advised};
use crate::hash::sha256_hex;
use crate::plan::Action;
use crate::provenance::Provenance;

use super::fs::{check_rel, temp_name, Dir};
use super::lock::{Root, TreeId};
use super::{JOURNAL, JOURNAL_FORMAT, PROVENANCE, SAVED, STATE_DIR};

/// One file in a journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalFile {
    /// Index into [`Journal::trees`].
    pub tree: usize,
    /// Relative to that tree's root; plain components only.
    pub path: String,
    pub pre_sha256: String,
    pub post_sha256: String,
    /// Permission bits (0o777) only.
    pub mode: u32,
}

/// A committed, unfinished transaction. Each involved root holds an identical copy; saved
/// copies live in the file's own root at `.gaudi-fixes/txn/<index>.pre|post`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    pub format: u32,
    pub tool: String,
    pub operation: Action,
    /// Identifies the transaction across its roots.
    pub id: String,
    pub trees: Vec<TreeId>,
    pub files: Vec<JournalFile>,
    /// The provenance record to write per tree (index into `trees`) once the files are in place.
    pub provenance: Vec<(usize, Provenance)>,
    /// sha256 over this record serialised with `checksum` empty.
    pub checksum: String,
}

impl Journal {
    pub(super) fn compute_checksum(&self) -> String {
        let mut copy = self.clone();
        copy.checksum.clear();
        // Through a JSON value, so the form hashed does not depend on field order.
        let value = serde_json::to_value(&copy).expect("journal serialises");
        sha256_hex(&serde_json::to_vec(&value).expect("journal serialises"))
    }
}

/// The state directory of `root` if there is one; a symlink there is an error.
pub(super) fn state_dir(root: &Dir) -> Result<Option<Dir>> {
    root.open_dir(OsStr::new(STATE_DIR))
}

/// Read a root's provenance record, if any.
pub fn read_provenance(root: &Path) -> Result<Option<Provenance>> {
    let root_dir = Dir::open_path(root)?;
    let Some(state) = state_dir(&root_dir)? else { return Ok(None) };
    let Some(bytes) = state.read(OsStr::new(PROVENANCE))? else { return Ok(None) };
    let path = state.path(OsStr::new(PROVENANCE));
    Ok(Some(
        serde_json::from_slice(&bytes)
            .file_context(&path, || format!("{}: not a provenance record", path.display()))?,
    ))
}

/// A journal this run will not use: `what` is wrong with it, then how to clear it (check the
/// trees first: the command, advice as data, is written out by `report/`).
pub(super) fn unusable(what: String, state: &Path) -> Advised {
    Advised::new(
        format!(
            "{what}; to clear it: check the tree with {{0}} (restore any file it reports as drifted from a pristine \
             copy), then remove {} and {} by hand",
            state.join(JOURNAL).display(),
            state.join(SAVED).display()
        ),
        vec![Advice::Check],
    )
}

/// Read and check the journal in a state directory: format, checksum, paths.
pub(super) fn read_journal(state: &Dir) -> Result<Option<Journal>> {
    let Some(bytes) = state.read(OsStr::new(JOURNAL))? else { return Ok(None) };
    let path = state.path(OsStr::new(JOURNAL));
    let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| {
        let what = format!("{}: corrupt journal (not one this gaudi-fixes writes)", path.display());
        unusable(what, &state.shown).caused_by(e)
    })?;
    if journal.format != JOURNAL_FORMAT {
        let what = format!("{}: corrupt journal (format {})", path.display(), journal.format);
        return Err(unusable(what, &state.shown).into());
    }
    if journal.compute_checksum() != journal.checksum {
        let what = format!(
            "{}: corrupt journal: it fails its checksum (damaged or edited), so it was not used",
            path.display()
        );
        return Err(unusable(what, &state.shown).into());
    }
    for f in &journal.files {
        if f.tree >= journal.trees.len() {
            let what = format!("{}: corrupt journal: file {} names no tree", path.display(), f.path);
            return Err(unusable(what, &state.shown).into());
        }
        check_rel(&f.path).map_err(|e| {
            unusable(format!("{}: corrupt journal: {e} (it leaves the tree)", path.display()), &state.shown)
        })?;
    }
    if journal.provenance.iter().any(|(i, _)| *i >= journal.trees.len()) {
        let what = format!("{}: corrupt journal: provenance names no tree", path.display());
        return Err(unusable(what, &state.shown).into());
    }
    Ok(Some(journal))
}

/// The journal left in `root` by an interrupted run, if any (checked, not acted on).
pub fn pending(root: &Path) -> Result<Option<Journal>> {
    let root_dir = Dir::open_path(root)?;
    let Some(state) = state_dir(&root_dir)? else { return Ok(None) };
    read_journal(&state)
}

pub(super) fn remove_saved(state: &Dir) -> Result<()> {
    if let Some(saved) = state.open_dir(OsStr::new(SAVED))? {
        for name in saved.names()? {
            saved.unlink(&name)?;
        }
    }
    state.rmdir_if_empty(OsStr::new(SAVED));
    Ok(())
}

pub(super) fn write_provenance(records: &[(&Root, &Provenance)]) -> Result<()> {
    for (root, record) in records {
        if record.fixes.is_empty() {
            // Nothing of ours is left in the tree: leave no record behind either.
            if let Some(state) = state_dir(&root.dir)? {
                state.unlink(OsStr::new(PROVENANCE))?;
            }
            continue;
        }
        let (state, _) = root.dir.open_or_create_dir(OsStr::new(STATE_DIR))?;
        let bytes = serde_json::to_vec_pretty(record).context("serialising provenance")?;
        let tmp = temp_name(OsStr::new(PROVENANCE));
        if super::fault::fault_named("write-error:provenance") {
            super::fault::arm_write_error();
        }
        state.create_exclusive(&tmp, &bytes, 0o644, None)?;
        state.rename(&tmp, OsStr::new(PROVENANCE))?;
        state.sync()?;
    }
    Ok(())
}

/// Remove the journals, then the saved copies, then state directories left empty.
pub(super) fn finish(involved: &[&Root]) -> Result<()> {
    for root in involved {
        if let Some(state) = state_dir(&root.dir)? {
            state.unlink(OsStr::new(JOURNAL))?;
            state.sync()?;
        }
    }
    for root in involved {
        if let Some(state) = state_dir(&root.dir)? {
            remove_saved(&state)?;
        }
        root.dir.rmdir_if_empty(OsStr::new(STATE_DIR));
    }
    Ok(())
}
