//! The compiled bytecode a tree had: kept at the first apply, given back when the source is.

use std::ffi::{OsStr, OsString};

use std::os::unix::ffi::OsStrExt;

use std::path::Path;

use crate::error::FileContext;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::hash::sha256_hex;

use super::fs::{parent_of, temp_name, Dir};
use super::journal::state_dir;
use super::target::Target;

/// Where a module's bytecode is kept, under the state directory: `bytecode/<key>/` holding
/// `source.json` ([`Stashed`]) and the `.pyc` files as they were in `__pycache__`.
pub(super) const BYTECODE: &str = "bytecode";
pub(super) const STASH_RECORD: &str = "source.json";

/// The source a stash belongs to: its bytes' hash and modification time, and the `.pyc` files
/// kept (name, permission bits). The `.pyc` files were valid for exactly that source.
/// `written` is the hash of what gaudi-fixes last wrote to the file: while the file holds it,
/// the stash is the way back; once it holds anything else (the package upgraded or reinstalled
/// in place), nothing refers to the stash any more.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stashed {
    pub(super) path: String,
    sha256: String,
    pub(super) mtime: (i64, i64),
    pub(super) pyc: Vec<(String, u32)>,
    /// Absent in stashes made before it was recorded: those are kept as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written: Option<String>,
}

pub(super) fn stash_key(rel: &str) -> OsString {
    OsString::from(&sha256_hex(rel.as_bytes())[..32])
}

/// The `__pycache__/<module>.*.pyc` names of the module `name` in `cache`.
pub(super) fn bytecode_names(cache: &Dir, name: &OsStr) -> Result<Vec<OsString>> {
    let Some(stem) = Path::new(name).file_stem() else { return Ok(Vec::new()) };
    let mut prefix = stem.as_bytes().to_vec();
    prefix.push(b'.');
    let mut names: Vec<OsString> = cache
        .names()?
        .into_iter()
        .filter(|e| e.as_bytes().starts_with(&prefix) && e.as_bytes().ends_with(b".pyc"))
        .collect();
    names.sort();
    Ok(names)
}

/// Before an apply first changes a module, keep its source's mtime and its `.pyc` files (what
/// pip compiled), so the revert that gives the source back leaves the tree as it was. Only the
/// first state is kept: bytecode of an already patched source is a cache Python rebuilds.
/// Returns whether a stash was made.
pub(super) fn stash_bytecode(state: &Dir, t: &Target<'_>) -> Result<bool> {
    let key = stash_key(&t.rel);
    if let Some(entry) = state.open_dir(OsStr::new(BYTECODE))?.map(|s| s.open_dir(&key)).transpose()?.flatten() {
        if entry.read(OsStr::new(STASH_RECORD))?.is_some() {
            return Ok(false);
        }
        // Left half-made by a killed run: make it again (dropping it may remove `bytecode/`
        // itself, so it is opened only after).
        drop_stash(state, &t.rel)?;
    }
    let (stash, _) = state.open_or_create_dir(OsStr::new(BYTECODE))?;
    let st = t.dir.lstat(&t.name)?.file_context(t.shown(), || format!("{}: vanished", t.shown().display()))?;
    let (entry, _) = stash.open_or_create_dir(&key)?;
    let mut pyc = Vec::new();
    if let Some(cache) = t.dir.open_dir(OsStr::new("__pycache__"))? {
        for name in bytecode_names(&cache, &t.name)? {
            let Some(bytes) = cache.read(&name)? else { continue };
            let mode = cache.lstat(&name)?.map_or(0o644, |s| s.mode & 0o777);
            entry.create_exclusive(&name, &bytes, 0o600, None)?;
            pyc.push((name.to_string_lossy().into_owned(), mode));
        }
    }
    let record = Stashed {
        path: t.rel.clone(),
        sha256: sha256_hex(t.old),
        mtime: st.mtime,
        pyc,
        written: Some(sha256_hex(t.new)),
    };
    let bytes = serde_json::to_vec_pretty(&record).context("serialising a bytecode record")?;
    entry.create_exclusive(OsStr::new(STASH_RECORD), &bytes, 0o600, None)?;
    entry.sync()?;
    Ok(true)
}

/// Remove the stash of `rel` (and the bytecode directory when it is left empty).
pub(super) fn drop_stash(state: &Dir, rel: &str) -> Result<()> {
    let Some(stash) = state.open_dir(OsStr::new(BYTECODE))? else { return Ok(()) };
    let key = stash_key(rel);
    if let Some(entry) = stash.open_dir(&key)? {
        for name in entry.names()? {
            entry.unlink(&name)?;
        }
    }
    stash.rmdir_if_empty(&key);
    state.rmdir_if_empty(OsStr::new(BYTECODE));
    Ok(())
}

/// When a target now holds the source a stash was made from, give it back its mtime and the
/// `.pyc` files still valid for it (a timestamp `.pyc` records the source's mtime and size),
/// then drop the stash. Otherwise the stash follows the write: it records what the file now
/// holds, so that a later change by another hand is told from this one.
pub(super) fn restore_bytecode(t: &Target<'_>) -> Result<()> {
    follow_stash(&t.root.dir, &t.dir, &t.name, &t.rel, t.owner)
}

/// [`restore_bytecode`] for the file `name` in `dir`, `rel` in the tree `root`, whose owner
/// the restored `.pyc` files get (a recovery's roll-forward has no [`Target`]).
pub(super) fn follow_stash(root: &Dir, dir: &Dir, name: &OsStr, rel: &str, owner: (u32, u32)) -> Result<()> {
    let Some(state) = state_dir(root)? else { return Ok(()) };
    let Some(stash) = state.open_dir(OsStr::new(BYTECODE))? else { return Ok(()) };
    let Some(entry) = stash.open_dir(&stash_key(rel))? else { return Ok(()) };
    let Some(bytes) = entry.read(OsStr::new(STASH_RECORD))? else { return Ok(()) };
    let Ok(mut record) = serde_json::from_slice::<Stashed>(&bytes) else { return drop_stash(&state, rel) };
    let now = dir.read(name)?.unwrap_or_default();
    if record.path != rel {
        return Ok(());
    }
    if record.sha256 != sha256_hex(&now) {
        record.written = Some(sha256_hex(&now));
        let bytes = serde_json::to_vec_pretty(&record).context("serialising a bytecode record")?;
        let tmp = temp_name(OsStr::new(STASH_RECORD));
        let _ = entry.unlink(&tmp);
        entry.create_exclusive(&tmp, &bytes, 0o600, None)?;
        entry.rename(&tmp, OsStr::new(STASH_RECORD))?;
        return entry.sync();
    }
    dir.set_mtime(name, record.mtime)?;
    let size = now.len() as u64;
    let valid = |pyc: &[u8]| {
        let word = |i: usize| pyc.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match word(4) {
            // Hash-based: checked against the source's bytes, which are the stashed ones.
            Some(flags) if flags & 1 == 1 => true,
            Some(0) => word(8) == Some(record.mtime.0 as u32) && word(12) == Some(size as u32),
            _ => false,
        }
    };
    if !record.pyc.is_empty() {
        let (cache, _) = dir.open_or_create_dir(OsStr::new("__pycache__"))?;
        for (name, mode) in &record.pyc {
            let name = OsStr::new(name);
            if Path::new(name).components().count() != 1 {
                continue;
            }
            if let Some(pyc) = entry.read(name)? {
                if valid(&pyc) {
                    cache.create_exclusive(name, &pyc, *mode, Some(owner))?;
                }
            }
        }
        cache.sync()?;
    }
    drop_stash(&state, rel)
}

/// Remove the stashes nothing refers to in a locked tree `root`: each whose file no longer
/// holds what gaudi-fixes last wrote there (upgraded or reinstalled in place, or gone), so its
/// `.pyc` files would never be given back, or would replace the ones the new source was
/// compiled to. A sentence each. An apply that changes such a file again then keeps the
/// bytecode the file has now.
pub(super) fn sweep_stashes(root: &Dir) -> Result<Vec<String>> {
    let mut said = Vec::new();
    let Some(state) = state_dir(root)? else { return Ok(said) };
    let Some(stash) = state.open_dir(OsStr::new(BYTECODE))? else { return Ok(said) };
    for key in stash.names()? {
        let Some(entry) = stash.open_dir(&key)? else { continue };
        // A record update a killed run left half-made.
        entry.unlink(&temp_name(OsStr::new(STASH_RECORD)))?;
        let Some(bytes) = entry.read(OsStr::new(STASH_RECORD))? else { continue };
        let Ok(record) = serde_json::from_slice::<Stashed>(&bytes) else { continue };
        let Some(written) = &record.written else { continue };
        if key != stash_key(&record.path) {
            continue;
        }
        let now = match parent_of(root, &record.path) {
            Ok((dir, name)) => dir.read(&name).ok().flatten(),
            Err(_) => None,
        };
        if now.as_deref().map(sha256_hex).as_ref() == Some(written) {
            continue;
        }
        drop_stash(&state, &record.path)?;
        said.push(format!(
            "removed the bytecode kept for {} at its first apply: the file {} since gaudi-fixes wrote it \
             (upgraded or reinstalled in place), so it was never to be given back",
            root.path(OsStr::new(&record.path)).display(),
            if now.is_some() { "changed" } else { "is gone" }
        ));
    }
    Ok(said)
}

pub(super) fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// Remove `__pycache__/<module>.*.pyc` beside a changed module, so Python cannot run stale
/// bytecode (its mtime check can miss a same-second edit). Entries are unlinked, never
/// followed; a symlinked `__pycache__` is refused.
pub(super) fn drop_stale_bytecode(dir: &Dir, name: &OsStr) -> Result<()> {
    let Some(stem) = Path::new(name).file_stem() else { return Ok(()) };
    let Some(cache) = dir.open_dir(OsStr::new("__pycache__"))? else { return Ok(()) };
    let mut prefix = stem.as_bytes().to_vec();
    prefix.push(b'.');
    for entry in cache.names()? {
        let b = entry.as_bytes();
        if b.starts_with(&prefix) && b.ends_with(b".pyc") {
            cache.unlink(&entry)?;
        }
    }
    Ok(())
}
