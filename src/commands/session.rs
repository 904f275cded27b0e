//! The context the tree-judging commands (`apply`, `revert`, `status`, `list`, `diff`) share:
//! the trees found, the roots this run may touch (`--only-tree`), their locks, and what an
//! interrupted run left behind. One place instead of helpers borrowed from `apply`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use crate::cli::GlobalArgs;
use crate::discover::{self, Trees};
use crate::provenance::Provenance;
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
    _locks: Option<TreeLocks>,
}

impl Session {
    /// Discover the trees and lock the roots this run may touch (none found: nothing locked).
    pub fn open(global: &GlobalArgs, access: Access) -> Result<Session> {
        let trees = discover::discover(&global.tree_query())?;
        let filter = global.tree_filter();
        let roots: Vec<PathBuf> = trees.all().filter(|t| filter.includes(t.name)).map(|t| t.root.clone()).collect();
        let locks = if roots.is_empty() { None } else { Some(transaction::lock(&roots, access == Access::Write)?) };
        Ok(Session { trees, filter, roots, _locks: locks })
    }

    /// For writers: finish the transaction a killed run left in the roots; a sentence each.
    pub fn recover(&self) -> Result<Vec<String>> {
        transaction::recover(&self.roots)
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

    /// Each root's provenance record as it is now (none where gaudi-fixes never wrote one).
    pub fn provenance(&self) -> Result<BTreeMap<PathBuf, Option<Provenance>>> {
        self.roots.iter().map(|root| Ok((root.clone(), transaction::read_provenance(root)?))).collect()
    }
}
