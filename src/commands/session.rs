//! The context the tree-judging commands (`apply`, `revert`, `status`, `list`, `diff`) share:
//! the trees found, the roots this run may touch (`--only-tree`), their locks, and what an
//! interrupted run left behind. One place instead of helpers borrowed from `apply`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::error::FileContext;
use anyhow::Result;

use crate::catalog::Catalog;

use crate::discover::{self, Trees};
use crate::provenance::Provenance;
use crate::settings::Settings;
use crate::transaction::{self, Journal, TreeLocks};
use crate::tree::TreeFilter;

/// Whether the run writes: writers lock exclusively and finish an interrupted transaction
/// first; readers share the lock and only say that one is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Trees, roots and locks of one run; the locks are held until it is dropped.
pub struct Session {
    pub trees: Trees,
    pub filter: TreeFilter,
    /// The roots of the trees this run may touch, in report order.
    pub roots: Vec<PathBuf>,
    access: Access,
    _locks: Option<TreeLocks>,
}

impl Session {
    /// Discover the trees and lock the roots this run may touch (none found: nothing locked).
    pub fn open(global: &Settings, access: Access) -> Result<Session> {
        let trees = discover::discover(&global.trees.clone())?;
        let filter = global.filter.clone();
        let roots: Vec<PathBuf> = trees.all().filter(|t| filter.includes(t.name)).map(|t| t.root.clone()).collect();
        let locks = if roots.is_empty() { None } else { Some(transaction::lock(&roots, access == Access::Write)?) };
        Ok(Session { trees, filter, roots, access, _locks: locks })
    }

    /// An error (exit 3, on stderr, `-q` or not) when neither tree was found: a run that judges
    /// or changes trees has nothing to act on, and says why (the notes of discovery).
    pub fn require_a_tree(&self) -> Result<()> {
        if self.trees.vllm.is_none() && self.trees.vllm_gaudi.is_none() {
            let why =
                if self.trees.notes.is_empty() { String::new() } else { format!(" ({})", self.trees.notes.join("; ")) };
            anyhow::bail!(
                "no vllm or vllm_gaudi tree found{why}; give --root DIR (holding vllm/ and vllm_gaudi/), \
                 --vllm/--vllm-gaudi DIR, GAUDI_FIXES_ROOT, or --python PY for the interpreter they are installed in"
            );
        }
        Ok(())
    }

    /// An error (exit 3) when the vLLM found lacks the V1 sampling path that the vllm_gaudi
    /// found imports and the catalogue's fixes plug into ([`crate::plan::pairing`]): tests and
    /// the conformance suite would fail inside the harness, far from the reason.
    pub fn require_the_sampling_path(&self, catalog: &Catalog) -> Result<()> {
        let Some(vllm) = &self.trees.vllm else { return Ok(()) };
        if let Some(refusal) = crate::plan::pairing::check(catalog, &self.trees)?.and_then(|p| p.refusal(vllm)) {
            anyhow::bail!("{refusal}");
        }
        Ok(())
    }

    /// For writers: finish the transaction a killed run left in the roots; a sentence each.
    pub fn recover(&self) -> Result<Vec<String>> {
        transaction::recover(&self.roots)
    }

    /// For writers whose plan does not refuse: drop the bytecode stashes nothing refers to any
    /// more in the roots; a sentence each.
    pub fn sweep(&self) -> Result<Vec<String>> {
        transaction::sweep(&self.roots)
    }

    /// For readers: the journal a killed run left in each root, if any.
    pub fn pending(&self) -> Result<Vec<(PathBuf, Journal)>> {
        let mut found = Vec::new();
        for root in &self.roots {
            if let Some(journal) = transaction::pending(root)? {
                found.push((root.clone(), journal));
            }
        }
        Ok(found)
    }

    /// Remove the temp files a killed run left beside the files the catalogue patches
    /// (`.<file>.gaudi-fixes.tmp`, from the probe or the write step), in the roots this run
    /// locked; a sentence each. Safe under a shared lock too: a writer holds its lock
    /// exclusively while its temp files exist, so any found now are stale. One already gone
    /// (another reader removed it) is fine. A reader that may not remove one (a read-only tree,
    /// another user's) says so and goes on: its verdict does not depend on a clean-up, and the
    /// next writer removes it; a writer that cannot is stopped, as it could not write there.
    pub fn remove_stale_temp_files(&self, catalog: &Catalog) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut seen = BTreeSet::new();
        for vp in catalog.fixes.iter().flat_map(|f| &f.variants).flat_map(|v| &v.patches) {
            let Some(tree) = self.trees.get(vp.tree).filter(|t| self.filter.includes(t.name)) else { continue };
            let tmp = transaction::temp_path(&tree.root.join(&vp.file));
            if !seen.insert(tmp.clone()) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&tmp) else { continue };
            // Only inside the tree (no symlinked directory on the way out of it), never a directory.
            let inside = match (tmp.parent().map(std::fs::canonicalize), std::fs::canonicalize(&tree.root)) {
                (Some(Ok(dir)), Ok(root)) => dir.starts_with(root),
                _ => false,
            };
            if meta.is_dir() || !inside {
                continue;
            }
            match std::fs::remove_file(&tmp) {
                Ok(()) => notes.push(format!("removed {}, a temp file left by a killed run", tmp.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) if self.access == Access::Read => notes.push(format!(
                    "cannot remove {}, a temp file left by a killed run ({e}); the next `apply` or `revert` \
                     removes it",
                    tmp.display()
                )),
                Err(e) => {
                    return Err(e).file_context(&tmp, || format!("removing the stale temp file {}", tmp.display()));
                }
            }
        }
        Ok(notes)
    }

    /// What the provenance records of these roots say was applied (fix → variant): the
    /// variant a fix that reads applied is named by, when it is one of those that match. Only
    /// a preference: a record that cannot be read is left out here (`status` reports it).
    pub fn recorded(&self) -> Result<crate::plan::Recorded> {
        let mut recorded = crate::plan::Recorded::new();
        for record in self.roots.iter().filter_map(|root| transaction::read_provenance(root).ok().flatten()) {
            recorded.extend(record.fixes.into_iter().map(|(name, fix)| (name, fix.variant)));
        }
        Ok(recorded)
    }

    /// Each root's provenance record as it is now (none where gaudi-fixes never wrote one).
    pub fn provenance(&self) -> Result<BTreeMap<PathBuf, Option<Provenance>>> {
        self.roots.iter().map(|root| Ok((root.clone(), transaction::read_provenance(root)?))).collect()
    }
}
