//! Steps 4 to 7 of the protocol: check, save, journal, write, record, finish; and the rollback
//! when a write fails.

use std::collections::BTreeMap;
use std::ffi::OsStr;

use std::path::{Path, PathBuf};

use crate::error::FileContext;
use anyhow::{bail, Context, Result};

use crate::hash::sha256_hex;
use crate::plan::{Action, Edit};
use crate::provenance::{tool_version, Provenance};

use super::bytecode::{drop_stale_bytecode, drop_stash, now_nanos, restore_bytecode, stash_bytecode};
use super::fault::{arm_write_error, fault, fault_matches, pause, ROLLBACK_WRITE};
use super::fs::{check_rel, parent_of, temp_name};
use super::journal::{finish, remove_saved, state_dir, write_provenance, Journal, JournalFile};
use super::lock::{find_root, with_roots, Root};
use super::target::Target;
use super::{RollbackFailed, JOURNAL, JOURNAL_FORMAT, PROVENANCE, SAVED, STATE_DIR};

/// Write `edits` as one transaction (locks must be held). `provenance` is the record each
/// tree root should have afterwards. On any failure before the journal, nothing was written;
/// after it, the files written so far are put back (or, if that fails, [`RollbackFailed`]).
pub fn commit(operation: Action, edits: &[Edit], provenance: BTreeMap<PathBuf, Provenance>) -> Result<()> {
    if edits.is_empty() && provenance.is_empty() {
        return Ok(());
    }
    with_roots(|locked| commit_locked(operation, edits, &provenance, locked))
}

pub(super) fn commit_locked(
    operation: Action,
    edits: &[Edit],
    provenance: &BTreeMap<PathBuf, Provenance>,
    locked: &[Root],
) -> Result<()> {
    // Steps 1-3 (lock, recover, plan) are done. 4: check that every write can happen.
    let targets = resolve_targets(edits, locked)?;
    let records = provenance_records(provenance, locked)?;
    let involved = involved_roots(&targets, &records);
    preflight(&targets, &involved)?;
    let old_provenance = read_old_provenance(&records)?;
    // 5: saved copies and journals; a failure here has written nothing in the tree proper.
    let journal = make_journal(operation, &targets, &records, &involved)?;
    let stashed = stage(operation, &journal, &targets, &involved)?;
    fault("after-journal");
    // 6: the files; a failure puts back what was written.
    let mut renamed = 0;
    if let Err(err) = write_files(&targets, &records, &mut renamed) {
        // The tree goes back to how it was, with its bytecode where it was: no stash needed.
        for (root, rel) in &stashed {
            if let Ok(Some(state)) = state_dir(&root.dir) {
                let _ = drop_stash(&state, rel);
            }
        }
        return Err(rollback(&targets, renamed, &records, &old_provenance, &involved, err));
    }
    // 7: the provenance is written; remove the journals and saved copies.
    fault("before-journal-remove");
    finish(&involved)
}

/// Each edit resolved to its locked root, directory and current mode and owner.
fn resolve_targets<'r>(edits: &'r [Edit], locked: &'r [Root]) -> Result<Vec<Target<'r>>> {
    let mut targets = Vec::new();
    for edit in edits {
        let root = find_root(locked, &edit.tree_root)?;
        let rel = tree_relative(root, &edit.path)?;
        let (dir, name) = parent_of(&root.dir, &rel)?;
        let st =
            dir.lstat(&name)?.file_context(dir.path(&name), || format!("{}: vanished", dir.path(&name).display()))?;
        targets.push(Target {
            root,
            rel,
            dir,
            name,
            old: &edit.old,
            new: &edit.new,
            mode: st.mode & 0o777,
            owner: (st.uid, st.gid),
            mtime: st.mtime,
        });
    }
    Ok(targets)
}

/// The provenance record to write per locked root (the first one named for a root wins).
fn provenance_records<'r>(
    provenance: &'r BTreeMap<PathBuf, Provenance>,
    locked: &'r [Root],
) -> Result<Vec<(&'r Root, &'r Provenance)>> {
    let mut records: Vec<(&Root, &Provenance)> = Vec::new();
    for (path, record) in provenance {
        let root = find_root(locked, path)?;
        if !records.iter().any(|(r, _)| r.id == root.id) {
            records.push((root, record));
        }
    }
    Ok(records)
}

/// Every root the transaction writes in, once each, sorted by path.
fn involved_roots<'r>(targets: &[Target<'r>], records: &[(&'r Root, &Provenance)]) -> Vec<&'r Root> {
    let mut involved: Vec<&Root> = targets.iter().map(|t| t.root).chain(records.iter().map(|(r, _)| *r)).collect();
    involved.sort_by(|a, b| a.path.cmp(&b.path));
    involved.dedup_by(|a, b| a.id == b.id);
    involved
}

/// The provenance bytes each root has now, to put back if a later step fails.
fn read_old_provenance(records: &[(&Root, &Provenance)]) -> Result<Vec<Option<Vec<u8>>>> {
    records
        .iter()
        .map(|(root, _)| match state_dir(&root.dir)? {
            Some(s) => s.read(OsStr::new(PROVENANCE)),
            None => Ok(None),
        })
        .collect()
}

/// The journal of this transaction, checksummed.
fn make_journal(
    operation: Action,
    targets: &[Target<'_>],
    records: &[(&Root, &Provenance)],
    involved: &[&Root],
) -> Result<Journal> {
    let tree_index = |root: &Root| involved.iter().position(|r| r.id == root.id).expect("involved");
    let mut journal = Journal {
        format: JOURNAL_FORMAT,
        tool: tool_version(),
        operation,
        id: format!("{}-{}", std::process::id(), now_nanos()),
        trees: involved.iter().map(|r| r.id.clone()).collect(),
        files: targets
            .iter()
            .map(|t| JournalFile {
                tree: tree_index(t.root),
                path: t.rel.clone(),
                pre_sha256: sha256_hex(t.old),
                post_sha256: sha256_hex(t.new),
                mode: t.mode,
            })
            .collect(),
        provenance: records.iter().map(|(r, p)| (tree_index(r), (*p).clone())).collect(),
        checksum: String::new(),
    };
    journal.checksum = journal.compute_checksum();
    Ok(journal)
}

/// Step 5: save every file's old and new bytes (and, for an apply, the bytecode a module had),
/// then commit the journal in every involved root. On failure everything staged is removed
/// and the error says nothing was changed. Returns the bytecode stashes made.
fn stage<'r>(
    operation: Action,
    journal: &Journal,
    targets: &[Target<'r>],
    involved: &[&'r Root],
) -> Result<Vec<(&'r Root, String)>> {
    let bytes = serde_json::to_vec_pretty(journal).context("serialising the journal")?;
    let mut stashed: Vec<(&Root, String)> = Vec::new();
    let staged = (|| -> Result<()> {
        for root in involved {
            let (state, _) = root.dir.open_or_create_dir(OsStr::new(STATE_DIR))?;
            let (saved, _) = state.open_or_create_dir(OsStr::new(SAVED))?;
            for (i, t) in targets.iter().enumerate().filter(|(_, t)| t.root.id == root.id) {
                saved.create_exclusive(OsStr::new(&format!("{i}.pre")), t.old, 0o600, None)?;
                saved.create_exclusive(OsStr::new(&format!("{i}.post")), t.new, 0o600, None)?;
                if operation == Action::Apply && stash_bytecode(&state, t)? {
                    stashed.push((*root, t.rel.clone()));
                }
            }
            saved.sync()?;
        }
        for root in involved {
            let state = state_dir(&root.dir)?.context("state directory vanished")?;
            let tmp = temp_name(OsStr::new(JOURNAL));
            state.create_exclusive(&tmp, &bytes, 0o644, None)?;
            state.rename(&tmp, OsStr::new(JOURNAL))?;
            state.sync()?;
        }
        Ok(())
    })();
    if let Err(err) = staged {
        for root in involved {
            if let Ok(Some(state)) = state_dir(&root.dir) {
                let _ = state.unlink(OsStr::new(JOURNAL));
                let _ = state.unlink(&temp_name(OsStr::new(JOURNAL)));
                let _ = remove_saved(&state);
                for (_, rel) in stashed.iter().filter(|(r, _)| r.id == root.id) {
                    let _ = drop_stash(&state, rel);
                }
            }
            root.dir.rmdir_if_empty(OsStr::new(STATE_DIR));
        }
        return Err(err.context("nothing was changed"));
    }
    Ok(stashed)
}

/// Step 6: each file replaced (checked against the bytes planned from), the provenance, then
/// stale bytecode dropped and kept bytecode given back. `renamed` counts the targets
/// that hold their new bytes.
fn write_files(targets: &[Target<'_>], records: &[(&Root, &Provenance)], renamed: &mut usize) -> Result<()> {
    for (i, t) in targets.iter().enumerate() {
        replace_checked(t, t.new, t.old, i + 1)?;
        *renamed += 1;
        fault(&format!("after-rename:{}", i + 1));
    }
    // The provenance before the bytecode: a failed write (a full disk) then finds the `.pyc`
    // files as they were, valid again once a rollback gives the sources their bytes and mtime.
    write_provenance(records)?;
    for t in targets {
        drop_stale_bytecode(&t.dir, &t.name)?;
        restore_bytecode(t)?;
    }
    Ok(())
}

/// A target's path relative to its locked root (symlinks inside the tree already resolved by
/// the plan; the directory part is resolved again here and must stay inside the root).
pub(super) fn tree_relative(root: &Root, path: &Path) -> Result<String> {
    let parent = path.parent().context("a file has a directory")?;
    let name = path.file_name().context("a file has a name")?;
    let real =
        std::fs::canonicalize(parent).file_context(parent, || format!("resolving {}", parent.display()))?.join(name);
    let rel = real
        .strip_prefix(&root.path)
        .file_context(path, || format!("{}: outside the tree {}; refusing", path.display(), root.path.display()))?;
    let rel = rel.to_str().file_context(path, || format!("{}: path is not UTF-8; refusing", path.display()))?;
    check_rel(rel)?;
    Ok(rel.to_string())
}

/// Check for real that every write can happen, before anything is written: targets regular
/// and holding the planned bytes, openable for writing; a temp file creatable (and ownable like
/// the target) beside each; `__pycache__` not a symlink; free space for the new bytes and the
/// saved copies.
pub(super) fn preflight(targets: &[Target<'_>], involved: &[&Root]) -> Result<()> {
    let mut need: BTreeMap<u64, (u64, u64, PathBuf)> = BTreeMap::new(); // dev → (bytes, free, where)
    for t in targets {
        let shown = t.shown();
        let now = t.dir.read(&t.name)?.file_context(&shown, || format!("{}: vanished", shown.display()))?;
        if now != t.old {
            bail!("{}: changed while applying (someone else saved it); nothing was changed", shown.display());
        }
        if let Err(e) = t.dir.raw_open(&t.name, libc::O_WRONLY | libc::O_NONBLOCK, 0) {
            let why = why(&e);
            return Err(e).file_context(&shown, || {
                format!("{}: cannot be written ({why}); nothing was changed", shown.display())
            });
        }
        let probe = temp_name(&t.name);
        t.dir.create_exclusive(&probe, b"", t.mode, Some(t.owner)).with_context(|| {
            format!("{}: its directory cannot be written; nothing was changed", t.dir.shown.display())
        })?;
        t.dir.unlink(&probe)?;
        // __pycache__ is only ever reached through the directory handle; refuse a symlink.
        t.dir.open_dir(OsStr::new("__pycache__"))?;
        let st = t.dir.stat_self()?;
        let entry = need.entry(st.dev).or_insert((0, t.dir.free_bytes().unwrap_or(u64::MAX), t.dir.shown.clone()));
        entry.0 += t.new.len() as u64 + 4096;
    }
    for root in involved {
        let st = root.dir.stat_self()?;
        let saved: u64 =
            targets.iter().filter(|t| t.root.id == root.id).map(|t| (t.old.len() + t.new.len()) as u64).sum();
        let entry = need.entry(st.dev).or_insert((0, root.dir.free_bytes().unwrap_or(u64::MAX), root.path.clone()));
        entry.0 += saved + 64 * 1024;
        // The state directory must be a real directory (or absent).
        state_dir(&root.dir)?;
    }
    for (bytes, free, place) in need.values() {
        if bytes > free {
            bail!(
                "{}: not enough free space ({} bytes needed, {} available); nothing was changed",
                place.display(),
                bytes,
                free
            );
        }
    }
    Ok(())
}

/// A short reason for a failed open, in words.
pub(super) fn why(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EROFS) => "read-only file system",
        Some(libc::EPERM) => "not permitted: immutable (chattr +i)?",
        Some(libc::EACCES) => "permission denied",
        Some(libc::ETXTBSY) => "busy",
        _ => "open for writing failed",
    }
}

/// Replace a target with `bytes` via an exclusive temp file, but only if it still holds
/// `expect` right before the rename ("someone else's save wins").
pub(super) fn replace_checked(t: &Target<'_>, bytes: &[u8], expect: &[u8], nth: usize) -> Result<()> {
    let tmp = temp_name(&t.name);
    if fault_matches("write-error", nth) {
        arm_write_error();
    }
    t.dir.create_exclusive(&tmp, bytes, t.mode, Some(t.owner))?;
    if fault_matches("pause-before-rename", nth) {
        pause();
    }
    let now = t.dir.read(&t.name)?;
    if now.as_deref() != Some(expect) {
        let _ = t.dir.unlink(&tmp);
        bail!("{}: changed while applying (someone else saved it; their version is kept)", t.shown().display());
    }
    t.dir.rename(&tmp, &t.name)?;
    t.dir.sync()
}

/// Put back the first `renamed` targets and the old provenance, remove the journal: the tree
/// is as it was. If that fails, say which file is in which state.
pub(super) fn rollback(
    targets: &[Target<'_>],
    renamed: usize,
    records: &[(&Root, &Provenance)],
    old_provenance: &[Option<Vec<u8>>],
    involved: &[&Root],
    cause: anyhow::Error,
) -> anyhow::Error {
    let mut failed = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let _ = t.dir.unlink(&temp_name(&t.name));
        if i < renamed {
            if let Err(e) = replace_checked(t, t.old, t.new, ROLLBACK_WRITE) {
                failed.push((i, format!("{e:#}")));
            } else {
                // The old bytes with their old mtime: the file is as it was, and the bytecode
                // compiled for it (which records the mtime) is still valid. Only a time: a
                // failure here changes no byte, so it is no failed rollback.
                let _ = t.dir.set_mtime(&t.name, t.mtime);
                // A stash that followed the write follows it back.
                let _ = restore_bytecode(t);
            }
        }
    }
    for ((root, _), old) in records.iter().zip(old_provenance) {
        let restored = (|| -> Result<()> {
            let Some(state) = state_dir(&root.dir)? else { return Ok(()) };
            match old {
                Some(bytes) => {
                    let tmp = temp_name(OsStr::new(PROVENANCE));
                    state.create_exclusive(&tmp, bytes, 0o644, None)?;
                    state.rename(&tmp, OsStr::new(PROVENANCE))
                }
                None => state.unlink(OsStr::new(PROVENANCE)),
            }
        })();
        if let Err(e) = restored {
            failed.push((usize::MAX, format!("provenance in {}: {e:#}", root.path.display())));
        }
    }
    if failed.is_empty() {
        if let Err(e) = finish(involved) {
            return cause.context(format!("rolled back every file, but removing the journal failed: {e:#}"));
        }
        return cause.context("rolled back: nothing was changed");
    }
    let mut lines = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let state = match t.dir.read(&t.name) {
            Ok(Some(b)) if b == t.old => "old content (as before the run)",
            Ok(Some(b)) if b == t.new => "NEW content (patched)",
            Ok(_) => "neither old nor new content",
            Err(_) => "unreadable",
        };
        lines.push(format!("  {}: {state}", t.shown().display()));
        if let Some((_, e)) = failed.iter().find(|(j, _)| *j == i) {
            lines.push(format!("    (putting it back failed: {e})"));
        }
    }
    for (_, e) in failed.iter().filter(|(j, _)| *j == usize::MAX) {
        lines.push(format!("  {e}"));
    }
    anyhow::Error::new(RollbackFailed::new(format!(
        "{cause:#}; rolling back failed as well, so the tree is half-written:\n{}\nthe journal stays in {}; the \
         next {{0}} or {{1}} finishes the interrupted transaction first (exit 4)",
        lines.join("\n"),
        involved.first().map(|r| r.path.join(STATE_DIR).display().to_string()).unwrap_or_default()
    )))
}
