//! Step 2 of the protocol: finish a transaction a killed run left behind.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};

use std::path::PathBuf;

use crate::error::FileContext;
use anyhow::{bail, Context, Result};

use crate::hash::sha256_hex;
use crate::plan::Action;
use crate::provenance::Provenance;

use super::bytecode::{drop_stale_bytecode, follow_stash, sweep_stashes};
use super::fault::fault;
use super::fs::{parent_of, temp_name, Dir};
use super::journal::{finish, read_journal, remove_saved, state_dir, unusable, write_provenance, Journal};
use super::lock::{find_root, with_roots, Root};
use super::{RollbackFailed, JOURNAL, SAVED, STATE_DIR};

/// Finish every transaction a killed run left in `roots` (call with the locks held). Returns a
/// sentence per recovered transaction.
pub fn recover(roots: &[PathBuf]) -> Result<Vec<String>> {
    with_roots(|locked| {
        let mut said = Vec::new();
        let mut done: BTreeSet<String> = BTreeSet::new();
        let wanted: Vec<&Root> = {
            let mut v = Vec::new();
            for r in roots {
                let root = find_root(locked, r)?;
                if !v.iter().any(|x: &&Root| x.id == root.id) {
                    v.push(root);
                }
            }
            v
        };
        for root in wanted {
            let Some(state) = state_dir(&root.dir)? else { continue };
            // A crash before the journal's commit can leave a half-written journal.tmp: harmless.
            state.unlink(&temp_name(OsStr::new(JOURNAL)))?;
            match read_journal(&state)? {
                Some(journal) if done.contains(&journal.id) => {}
                Some(journal) => {
                    let trees = journal_roots(&journal, root, locked, &state)?;
                    roll_forward(&journal, &trees)?;
                    done.insert(journal.id.clone());
                    said.push(format!(
                        "recovered an interrupted `{}` in {}: finished it ({} file(s) now fully {})",
                        journal.operation,
                        root.path.display(),
                        journal.files.len(),
                        match journal.operation {
                            Action::Revert => "reverted",
                            Action::Apply => "patched",
                        }
                    ));
                }
                None => {
                    // Without a journal, saved copies are from a run killed before its
                    // journal's commit or while removing them after it: never needed.
                    remove_saved(&state)?;
                }
            }
            root.dir.rmdir_if_empty(OsStr::new(STATE_DIR));
        }
        Ok(said)
    })
}

/// A writer's clean-up, once it knows it will not refuse: remove the bytecode kept for files
/// in `roots` changed since by another hand (see `sweep_stashes`); a sentence each. Not part of
/// [`recover`]: a run that then refuses (drift) changes nothing, and a stash dropped for an
/// edit the user undoes afterwards would be lost for the revert that follows.
pub fn sweep(roots: &[PathBuf]) -> Result<Vec<String>> {
    with_roots(|locked| {
        let mut said = Vec::new();
        let mut seen = Vec::new();
        for r in roots {
            let root = find_root(locked, r)?;
            if seen.contains(&root.id) {
                continue;
            }
            seen.push(root.id.clone());
            match sweep_stashes(&root.dir) {
                Ok(swept) => said.extend(swept),
                // A user who may read the tree but not its state (a root-owned install): a run
                // with nothing to write needs no more than a reader (one with edits was checked
                // writable first). Whether any stash there is stale it cannot tell, so it says
                // nothing; the next writer that may read them sweeps them.
                Err(e) if denied(&e) => {}
                Err(e) => return Err(e),
            }
            root.dir.rmdir_if_empty(OsStr::new(STATE_DIR));
        }
        Ok(said)
    })
}

/// Whether `e` is a permission refused by the file system.
fn denied(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied))
}

/// The locked roots a journal's trees are, refusing a journal of another tree (a copy) or of
/// a tree this run has not locked.
pub(super) fn journal_roots<'r>(
    journal: &Journal,
    here: &Root,
    locked: &'r [Root],
    state: &Dir,
) -> Result<Vec<&'r Root>> {
    let path = state.path(OsStr::new(JOURNAL));
    if !journal.trees.contains(&here.id) {
        let named: Vec<String> =
            journal.trees.iter().map(|t| format!("{} (device {}, inode {})", t.path.display(), t.dev, t.ino)).collect();
        let what = format!(
            "{}: this journal belongs to another tree ({}), not {} (device {}, inode {}); it was probably copied \
             with the tree while a run was interrupted, and was not used",
            path.display(),
            named.join(", "),
            here.path.display(),
            here.id.dev,
            here.id.ino,
        );
        return Err(unusable(what, &state.shown).into());
    }
    journal
        .trees
        .iter()
        .map(|t| {
            locked.iter().find(|r| r.id == *t).with_context(|| {
                format!(
                    "{}: the interrupted run also wrote {}, which this run does not cover; run again naming both \
                     trees (--vllm / --vllm-gaudi, without --only-tree) so it can be finished",
                    path.display(),
                    t.path.display()
                )
            })
        })
        .collect()
}

pub(super) fn roll_forward(journal: &Journal, trees: &[&Root]) -> Result<()> {
    let shown_journal = trees.first().map(|r| r.path.join(STATE_DIR).join(JOURNAL)).unwrap_or_default();
    // Check every file before writing any, so a refused recovery leaves the tree as it was.
    let mut todo = Vec::new();
    for (i, f) in journal.files.iter().enumerate() {
        let root = trees[f.tree];
        let (dir, name) = parent_of(&root.dir, &f.path)?;
        let current = dir
            .read(&name)?
            .file_context(dir.path(&name), || format!("recovering {}: missing", dir.path(&name).display()))?;
        let hash = sha256_hex(&current);
        if hash == f.post_sha256 {
            continue;
        }
        if hash != f.pre_sha256 {
            bail!(
                "{}: changed since an interrupted gaudi-fixes run (neither its old nor its new content); \
                 the journal is {}; restore the file or remove the journal by hand",
                dir.path(&name).display(),
                shown_journal.display()
            );
        }
        let state =
            state_dir(&root.dir)?.file_context(&root.path, || format!("{}: no saved copies", root.path.display()))?;
        let saved = state.open_dir(OsStr::new(SAVED))?.context("the journal's saved copies are missing")?;
        let copy = OsString::from(format!("{i}.post"));
        let post = saved
            .read(&copy)?
            .file_context(saved.path(&copy), || format!("{}: missing", saved.path(&copy).display()))?;
        if sha256_hex(&post) != f.post_sha256 {
            bail!("{}: saved copy is damaged; the file still has its old content", saved.path(&copy).display());
        }
        let owner = dir.lstat(&name)?.map(|st| (st.uid, st.gid));
        todo.push((dir, name, post, f.mode, owner));
    }
    for (k, (dir, name, post, mode, owner)) in todo.iter().enumerate() {
        let tmp = temp_name(name);
        let written = dir.create_exclusive(&tmp, post, *mode, *owner).and_then(|()| dir.rename(&tmp, name));
        if let Err(err) = written.and_then(|()| dir.sync()) {
            let _ = dir.unlink(&tmp);
            // Some files may be finished already: not "nothing changed", so not exit 3.
            let states: Vec<String> = todo
                .iter()
                .enumerate()
                .map(|(j, (d, n, _, _, _))| {
                    let state = if j < k { "NEW content (finished)" } else { "old content" };
                    format!("  {}: {state}", d.path(n).display())
                })
                .collect();
            return Err(anyhow::Error::new(RollbackFailed::new(format!(
                "{err:#}; while finishing an interrupted run, so the tree is half-written:\n{}\nthe journal \
                 stays in {}; fix the cause, and the next {{0}} or {{1}} finishes it (exit 4)",
                states.join("\n"),
                shown_journal.display()
            ))));
        }
    }
    for f in &journal.files {
        let (dir, name) = parent_of(&trees[f.tree].dir, &f.path)?;
        drop_stale_bytecode(&dir, &name)?;
        dir.unlink(&temp_name(&name))?;
        let owner = dir.lstat(&name)?.map_or((0, 0), |st| (st.uid, st.gid));
        follow_stash(&trees[f.tree].dir, &dir, &name, &f.path, owner)?;
    }
    let provenance: Vec<(&Root, &Provenance)> = journal.provenance.iter().map(|(i, p)| (trees[*i], p)).collect();
    write_provenance(&provenance)?;
    fault("before-journal-remove");
    finish(trees)
}
