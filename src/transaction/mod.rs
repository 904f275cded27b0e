//! All-or-nothing, crash-safe writes, one writer per tree, confined to the locked tree roots.
//!
//! Protocol (per run that writes):
//! 1. lock every tree root involved (flock on the root directory itself, so the lock leaves
//!    no file behind; one lock per directory however it is spelled; sorted order, so two runs
//!    cannot deadlock). A run that has to wait says at once who holds the lock;
//! 2. finish any transaction a killed run left behind (see [`recover`]); its journal is
//!    checked data: checksum, tree identity, tree-relative paths only;
//! 3. (the caller plans in memory, under the lock; a plan it will write, or that has nothing
//!    to write, then drops the bytecode stashes nothing refers to any more, see [`sweep`]: a
//!    run that refuses changes no byte);
//! 4. check for real that every write can happen: each target opened for writing, a probe temp
//!    file created (and owned like the target) beside it, free space for the new bytes;
//! 5. save each file's old and new bytes under `<root>/.gaudi-fixes/txn/`, fsync, then commit
//!    the journal by renaming `journal.json.tmp` to `journal.json` in every involved root;
//! 6. for each file: write a temp file beside it (`O_EXCL`, owner and permission bits of the
//!    target), fsync, check the target still holds the bytes the plan was made from, rename
//!    over it, fsync the directory;
//! 7. write the provenance record; drop each module's stale `__pycache__` entries (an apply
//!    that first changes a module keeps its `.pyc` files and the source's mtime under
//!    `.gaudi-fixes/bytecode/`; the write that gives the source back restores both); then
//!    remove the journals, the saved copies and any state directory left empty.
//!
//! Every path is reached from the locked root's directory handle, one component at a time,
//! with `O_NOFOLLOW`: a symlink anywhere on the way (planted temp file, symlinked
//! `.gaudi-fixes/` or `__pycache__/`) is refused, never followed.
//!
//! If a write fails after step 5, the files already written are put back from the old bytes,
//! with their old modification times (the `.pyc` files, untouched until every write is done,
//! stay valid), and the journal is removed: the run exits 3 with the tree as it was. If that
//! rollback fails too, the error names each file's state, the journal stays, and the next run
//! rolls the transaction forward ([`RollbackFailed`], exit 4).
//!
//! `GAUDI_FIXES_FAULT`, for tests: `after-journal`, `after-rename:N` (after the N-th file
//! rename, 1-based) and `before-journal-remove` abort the process there; `write-error:N` makes
//! the N-th file write fail with an I/O error (after the journal), `write-error:provenance` the
//! provenance record's, and `write-error:rollback` every write putting a file back; steps
//! combine with commas. `pause-before-rename:N` creates `$GAUDI_FIXES_FAULT_PAUSE` and waits
//! until it is removed, before the N-th rename.

/// The per-tree state directory (journal, saved copies, provenance).
pub const STATE_DIR: &str = ".gaudi-fixes";
const JOURNAL: &str = "journal.json";
const PROVENANCE: &str = "provenance.json";
const SAVED: &str = "txn";
/// The journal format this build writes and accepts.
const JOURNAL_FORMAT: u32 = 2;
/// Readers (`--check`, `status`, `list`, `diff`) give up waiting for a lock after this long
/// unless `--lock-timeout` says otherwise; writers wait as long as it takes (saying so).
pub const READER_LOCK_TIMEOUT_S: f64 = 30.0;

mod bytecode;
mod commit;
mod fault;
mod fs;
mod journal;
mod lock;
mod recover;
mod target;

pub use commit::commit;
pub use fs::temp_path;
pub use journal::{pending, read_provenance, Journal, JournalFile};
pub use lock::{lock, set_lock_timeout, TreeId, TreeLocks};
pub use recover::{recover, sweep};

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// What a transaction has to tell the user while it runs. It prints nothing itself: the
/// listener set by [`set_listener`] (the command line's, rendered by `report::`) decides.
#[derive(Debug)]
pub enum Event<'a> {
    /// Waiting for a lock another process holds (said once per lock, at once).
    LockWait {
        path: &'a Path,
        /// Who holds it: PIDs, command lines, since when.
        holders: &'a str,
        /// How long this run will wait (`None`: until it is released).
        timeout: Option<Duration>,
    },
    /// `GAUDI_FIXES_FAULT` aborts the process at this step (crash tests).
    FaultAbort { step: &'a str },
    /// `GAUDI_FIXES_FAULT` makes this write fail with an I/O error (crash tests).
    FaultWriteError,
}

type Listener = Box<dyn Fn(&Event<'_>) + Send + Sync>;

static LISTENER: OnceLock<Listener> = OnceLock::new();

/// Where this process's transaction events go (set once, by [`crate::run`]); without a
/// listener they are dropped.
pub fn set_listener(listener: impl Fn(&Event<'_>) + Send + Sync + 'static) {
    let _ = LISTENER.set(Box::new(listener));
}

fn notify(event: &Event<'_>) {
    if let Some(listener) = LISTENER.get() {
        listener(event);
    }
}

/// A write failed, and so did putting the tree back (or finishing an interrupted run failed
/// half-way): exit 4. Each file's state is named; the journal stays, so the next `apply` /
/// `revert` finishes the transaction.
#[derive(Debug)]
pub struct RollbackFailed {
    /// What happened, each file's state, and the run that finishes it (advice, as data).
    pub advised: crate::advice::Advised,
}

impl RollbackFailed {
    /// `message`, whose `{0}` and `{1}` are the next `apply` and `revert` that finish it.
    pub(crate) fn new(message: String) -> RollbackFailed {
        use crate::advice::{Advice, Advised};
        let finish = vec![Advice::Apply { fixes: Vec::new() }, Advice::Revert { fixes: Vec::new() }];
        RollbackFailed { advised: Advised::new(message, finish) }
    }
}

impl std::fmt::Display for RollbackFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.advised.fmt(f)
    }
}

impl std::error::Error for RollbackFailed {}
