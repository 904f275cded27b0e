//! The in-memory copies of tree files a plan reads and edits, and the file-safety policy:
//! files are reached only inside their tree, read once per real file, capped in size, and
//! checked writable before anything is written.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::verdict::{Edit, MAX_FILE_BYTES};
use crate::catalog::chain::TextSource;
use crate::discover::{Tree, Trees};
use crate::error::bail_in;
use crate::patch::SourceText;
use crate::tree::{TreeFilter, TreeName};

/// In-memory copies of the files a run looks at, one per real file: a file reached under two
/// names (a symlink inside the tree, or both trees under one root) is one edit stream, so two
/// fixes patching it apply in `after:` order to the same content.
#[derive(Clone)]
pub(super) struct Workspace {
    pub(super) files: BTreeMap<PathBuf, Loaded>,
}

#[derive(Clone)]
pub(super) struct Loaded {
    /// The tree and relative path it was first reached by (what reports and edits name).
    pub(super) tree: TreeName,
    pub(super) rel: String,
    pub(super) path: PathBuf,
    pub(super) original: Vec<u8>,
    pub(super) text: SourceText,
    /// Fixes that edited it in this run, with the name each reached it by.
    pub(super) edited_by: Vec<(String, String)>,
}

impl Workspace {
    pub(super) fn new() -> Workspace {
        Workspace { files: BTreeMap::new() }
    }

    /// The file, read once per real file; `None` when it does not exist.
    pub(super) fn get(&mut self, tree: &Tree, rel: &str) -> Result<Option<&mut Loaded>> {
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

/// The workspace's copies of the trees' files as a chain's text source: a file of a tree not
/// found, or left out with `--only-tree`, is not in it.
pub(super) struct OnTrees<'w> {
    pub(super) ws: &'w mut Workspace,
    pub(super) trees: &'w Trees,
    pub(super) only: &'w TreeFilter,
}

impl TextSource for OnTrees<'_> {
    fn text(&mut self, tree: TreeName, file: &str) -> Result<Option<&mut SourceText>> {
        let Some(found) = self.trees.get(tree).filter(|_| self.only.includes(tree)) else { return Ok(None) };
        Ok(self.ws.get(found, file)?.map(|loaded| &mut loaded.text))
    }

    fn edited(&mut self, tree: TreeName, file: &str, fix: &str) {
        let Some(found) = self.trees.get(tree) else { return };
        if let Ok(Some(loaded)) = self.ws.get(found, file) {
            loaded.edited_by.push((fix.to_string(), file.to_string()));
        }
    }
}

/// The real (canonical) path of `rel` inside `tree`, and the path to write it by (the link's
/// target when the file itself is a symlink), refusing anything that resolves outside the
/// tree; `None` when it does not exist.
fn resolve_tree_file(tree: &Tree, rel: &str) -> Result<Option<(PathBuf, PathBuf)>> {
    let Some((real, is_symlink)) = crate::tree::resolve_inside(&tree.root, rel, "the tree")? else { return Ok(None) };
    let write = if is_symlink { real.clone() } else { tree.root.join(rel) };
    Ok(Some((real, write)))
}

/// Read the real file `real` (reached as `path`), refusing non-regular and too large files.
fn read_real_file(path: &Path, real: &Path) -> Result<Vec<u8>> {
    crate::tree::read_regular(path, real, MAX_FILE_BYTES)
}

/// Refuse to plan writes to files we must not write (read-only), before anything is written.
pub fn check_writable(edits: &[Edit]) -> Result<()> {
    for edit in edits {
        let meta = fs::metadata(&edit.path).with_context(|| format!("reading {}", edit.path.display()))?;
        if meta.permissions().readonly() {
            bail_in!(
                &edit.path,
                "file is read-only; nothing was written (make it writable, or run where the tree may be changed)"
            );
        }
    }
    Ok(())
}
