//! All-or-nothing, crash-safe writes, one writer per tree.
//!
//! Protocol (per run that writes):
//! 1. lock every tree root involved (flock on the root directory itself, so the lock leaves
//!    no file behind; sorted order, so two runs cannot deadlock);
//! 2. finish any transaction a killed run left behind (see [`recover`]);
//! 3. (the caller plans in memory, under the lock);
//! 4. save each file's old and new bytes under `<root>/.gaudi-fixes/txn/`, fsync, then commit
//!    the journal by renaming `journal.json.tmp` to `journal.json` in every involved root;
//! 5. for each file: write a temp file beside it, keep the mode, fsync, rename over it, fsync
//!    the directory; drop the module's stale `__pycache__` entries;
//! 6. write the provenance record, then remove the journals and the saved copies.
//!
//! A run killed before step 4's rename leaves the tree untouched; after it, the journal holds
//! everything needed to roll forward, which the next run does before anything else. So a tree
//! is only ever pristine or fully patched once any run has finished.
//!
//! `GAUDI_FIXES_FAULT` aborts the process at a named step, for tests: `after-journal`,
//! `after-rename:N` (after the N-th file rename, 1-based), `before-journal-remove`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::plan::{sha256_hex, Edit};

/// The per-tree state directory (journal, saved copies, provenance).
pub const STATE_DIR: &str = ".gaudi-fixes";
const JOURNAL: &str = "journal.json";
const PROVENANCE: &str = "provenance.json";

/// Held locks on tree roots; released on drop.
pub struct TreeLocks {
    _files: Vec<File>,
}

/// Lock `roots`: exclusive for writers, shared for readers (so a reader never sees a tree in
/// the middle of a write, and waits only for as long as a write takes).
pub fn lock(roots: &[PathBuf], exclusive: bool) -> Result<TreeLocks> {
    let unique: BTreeSet<&PathBuf> = roots.iter().collect();
    let mut files = Vec::new();
    for root in unique {
        let dir = File::open(root).with_context(|| format!("opening {} to lock it", root.display()))?;
        if exclusive {
            dir.lock().with_context(|| format!("locking {}", root.display()))?;
        } else {
            dir.lock_shared().with_context(|| format!("locking {} for reading", root.display()))?;
        }
        files.push(dir);
    }
    Ok(TreeLocks { _files: files })
}

/// One file in a journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JournalFile {
    pub path: PathBuf,
    pub pre_sha256: String,
    pub post_sha256: String,
    pub mode: u32,
    /// Saved copies of the old and new bytes.
    pub pre_copy: PathBuf,
    pub post_copy: PathBuf,
}

/// A committed, unfinished transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub tool: String,
    pub operation: String,
    pub files: Vec<JournalFile>,
    /// Every journal file of this transaction (one per tree root).
    pub journals: Vec<PathBuf>,
    /// The provenance record to write per tree root once the files are in place.
    pub provenance: BTreeMap<PathBuf, Provenance>,
    /// The directory holding the saved copies.
    pub saved: PathBuf,
}

/// What gaudi-fixes applied to one tree root, for audits. Never overrides file contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Provenance {
    pub tool: String,
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

/// Read a root's provenance record, if any.
pub fn read_provenance(root: &Path) -> Result<Option<Provenance>> {
    let path = root.join(STATE_DIR).join(PROVENANCE);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).with_context(|| format!("{}: not a provenance record", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The journal left in `root` by an interrupted run, if any.
pub fn pending(root: &Path) -> Result<Option<Journal>> {
    let path = root.join(STATE_DIR).join(JOURNAL);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: corrupt journal; inspect it and remove it by hand", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Finish every transaction a killed run left in `roots` (call with the locks held). Returns a
/// sentence per recovered transaction.
pub fn recover(roots: &[PathBuf]) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for root in roots.iter().collect::<BTreeSet<_>>() {
        // A crash before the journal's commit can leave a half-written journal.tmp: harmless.
        let _ = fs::remove_file(root.join(STATE_DIR).join(format!("{JOURNAL}.tmp")));
        if let Some(journal) = pending(root)? {
            roll_forward(&journal)?;
            said.push(format!(
                "recovered an interrupted `{}` in {}: finished it ({} file(s) now fully {})",
                journal.operation,
                root.display(),
                journal.files.len(),
                if journal.operation == "revert" { "reverted" } else { "patched" }
            ));
        } else {
            // Without a journal, saved copies are from a run killed before its journal's
            // commit or while removing them after it: never needed, so never left behind.
            let saved = root.join(STATE_DIR).join("txn");
            match fs::remove_dir_all(&saved) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing stale saved copies {}", saved.display())),
            }
        }
    }
    Ok(said)
}

fn roll_forward(journal: &Journal) -> Result<()> {
    // Check every file before writing any, so a refused recovery leaves the tree as it was.
    let mut todo = Vec::new();
    for f in &journal.files {
        let current = fs::read(&f.path).with_context(|| format!("recovering {}", f.path.display()))?;
        let hash = sha256_hex(&current);
        if hash == f.post_sha256 {
            continue;
        }
        if hash != f.pre_sha256 {
            bail!(
                "{}: changed since an interrupted gaudi-fixes run (neither its old nor its new content); \
                 the journal is {}; restore the file or remove the journal by hand",
                f.path.display(),
                journal.journals.first().map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
        let post = fs::read(&f.post_copy).with_context(|| format!("reading saved copy {}", f.post_copy.display()))?;
        if sha256_hex(&post) != f.post_sha256 {
            bail!("{}: saved copy is damaged; the file still has its old content", f.post_copy.display());
        }
        todo.push((f, post));
    }
    for (f, post) in todo {
        replace_file(&f.path, &post, f.mode)?;
    }
    for f in &journal.files {
        drop_stale_bytecode(&f.path)?;
        let _ = fs::remove_file(temp_path(&f.path));
    }
    finish(journal)
}

/// Write the provenance records, then remove the journals and saved copies.
fn finish(journal: &Journal) -> Result<()> {
    for (root, record) in &journal.provenance {
        let dir = root.join(STATE_DIR);
        if record.fixes.is_empty() {
            // Nothing of ours is left in the tree: leave no record behind either.
            match fs::remove_file(dir.join(PROVENANCE)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", dir.join(PROVENANCE).display())),
            }
            continue;
        }
        let bytes = serde_json::to_vec_pretty(record).expect("provenance serialises");
        write_atomic(&dir.join(PROVENANCE), &bytes, 0o644)?;
    }
    fault("before-journal-remove");
    for path in &journal.journals {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        if let Some(dir) = path.parent() {
            fsync_dir(dir)?;
        }
    }
    let _ = fs::remove_dir_all(&journal.saved);
    // Empty state directories go too, so a revert leaves the tree exactly as it was.
    for root in journal.provenance.keys() {
        let _ = fs::remove_dir(root.join(STATE_DIR));
    }
    Ok(())
}

/// Write `edits` as one transaction (locks must be held). `provenance` is the record each
/// tree root should have afterwards.
pub fn commit(operation: &str, edits: &[Edit], provenance: BTreeMap<PathBuf, Provenance>) -> Result<()> {
    if edits.is_empty() && provenance.is_empty() {
        return Ok(());
    }
    let roots: BTreeSet<PathBuf> =
        edits.iter().map(|e| e.tree_root.clone()).chain(provenance.keys().cloned()).collect();
    let first = roots.iter().next().expect("non-empty").join(STATE_DIR);
    let saved = first.join("txn");
    fs::create_dir_all(&saved).with_context(|| format!("creating {}", saved.display()))?;
    let mut files = Vec::new();
    for (i, edit) in edits.iter().enumerate() {
        let mode =
            fs::metadata(&edit.path).with_context(|| format!("reading {}", edit.path.display()))?.permissions().mode();
        let pre_copy = saved.join(format!("{i}.pre"));
        let post_copy = saved.join(format!("{i}.post"));
        write_synced(&pre_copy, &edit.old, 0o600)?;
        write_synced(&post_copy, &edit.new, 0o600)?;
        files.push(JournalFile {
            path: edit.path.clone(),
            pre_sha256: sha256_hex(&edit.old),
            post_sha256: sha256_hex(&edit.new),
            mode,
            pre_copy,
            post_copy,
        });
    }
    fsync_dir(&saved)?;
    let journals: Vec<PathBuf> = roots.iter().map(|r| r.join(STATE_DIR).join(JOURNAL)).collect();
    let journal = Journal {
        tool: tool_version(),
        operation: operation.to_string(),
        files,
        journals: journals.clone(),
        provenance,
        saved,
    };
    let bytes = serde_json::to_vec_pretty(&journal).expect("journal serialises");
    for path in &journals {
        let dir = path.parent().expect("journal has a directory");
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_atomic(path, &bytes, 0o644)?;
    }
    fault("after-journal");
    for (i, f) in journal.files.iter().enumerate() {
        let new = &edits[i].new;
        replace_file(&f.path, new, f.mode)?;
        fault(&format!("after-rename:{}", i + 1));
    }
    for f in &journal.files {
        drop_stale_bytecode(&f.path)?;
    }
    finish(&journal)
}

/// Replace `path` with `bytes` atomically, keeping `mode`.
fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = temp_path(path);
    write_synced(&tmp, bytes, mode)?;
    fs::rename(&tmp, path).with_context(|| format!("renaming {} over {}", tmp.display(), path.display()))?;
    fsync_dir(path.parent().expect("file has a directory"))
}

fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    write_synced(&tmp, bytes, mode)?;
    fs::rename(&tmp, path).with_context(|| format!("renaming {} over {}", tmp.display(), path.display()))?;
    fsync_dir(path.parent().expect("file has a directory"))
}

/// The temp file a write goes through: beside the target, so the rename stays on one device.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.gaudi-fixes.tmp"))
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    file.set_permissions(fs::Permissions::from_mode(mode & 0o7777))
        .with_context(|| format!("setting mode of {}", path.display()))?;
    file.sync_all().with_context(|| format!("syncing {}", path.display()))
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing directory {}", dir.display()))
}

/// Remove `__pycache__/<module>.*.pyc` beside a changed module, so Python cannot run stale
/// bytecode (its mtime check can miss a same-second edit).
fn drop_stale_bytecode(path: &Path) -> Result<()> {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else { return Ok(()) };
    let cache = dir.join("__pycache__");
    let Ok(entries) = fs::read_dir(&cache) else { return Ok(()) };
    let prefix = format!("{}.", stem.to_string_lossy());
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with(&prefix) && name.ends_with(".pyc") {
            fs::remove_file(entry.path())
                .with_context(|| format!("removing stale bytecode {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Abort here if `GAUDI_FIXES_FAULT` names this step (crash tests only).
fn fault(step: &str) {
    if std::env::var("GAUDI_FIXES_FAULT").is_ok_and(|v| v == step) {
        eprintln!("gaudi-fixes: GAUDI_FIXES_FAULT={step}: aborting");
        std::process::abort();
    }
}
