//! Locks on tree roots (flock on the root directory itself), the registry of locked roots the
//! other steps work from, and who holds a lock we wait for.

use std::collections::BTreeMap;

use std::fs::File;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::FileContext;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::fs::Dir;
use super::{notify, Event, READER_LOCK_TIMEOUT_S};

/// A locked tree root: its canonical path, identity and directory handle.
pub(super) struct Root {
    pub(super) path: PathBuf,
    pub(super) dir: Dir,
    pub(super) id: TreeId,
}

/// Held locks on tree roots; released on drop.
pub struct TreeLocks {
    pub(super) _held: Vec<File>,
}

/// The roots locked by this process, for [`recover`] and [`commit`] to work from the handles
/// the locks were taken on.
pub(super) fn registry() -> &'static Mutex<Vec<Root>> {
    static R: OnceLock<Mutex<Vec<Root>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

impl Drop for TreeLocks {
    fn drop(&mut self) {
        if let Ok(mut r) = registry().lock() {
            r.clear();
        }
    }
}

static LOCK_TIMEOUT: OnceLock<Option<f64>> = OnceLock::new();

/// `--lock-timeout SECONDS` for this process (set once, by [`crate::run`]).
pub fn set_lock_timeout(seconds: Option<f64>) {
    let _ = LOCK_TIMEOUT.set(seconds);
}

/// Lock `roots`: exclusive for writers, shared for readers (so a reader never sees a tree in
/// the middle of a write). A directory named twice (two spellings) is locked once. Waiting
/// prints who holds the lock; readers give up after [`READER_LOCK_TIMEOUT_S`] and anyone after
/// `--lock-timeout`.
pub fn lock(roots: &[PathBuf], exclusive: bool) -> Result<TreeLocks> {
    let mut unique: BTreeMap<(u64, u64), (PathBuf, Dir)> = BTreeMap::new();
    for root in roots {
        let canonical = std::fs::canonicalize(root).file_context(root, || format!("resolving {}", root.display()))?;
        let dir = Dir::open_path(&canonical)?;
        let st = dir.stat_self()?;
        unique.entry((st.dev, st.ino)).or_insert((canonical, dir));
    }
    let mut sorted: Vec<((u64, u64), (PathBuf, Dir))> = unique.into_iter().collect();
    sorted.sort_by(|a, b| a.1 .0.cmp(&b.1 .0));
    let timeout = LOCK_TIMEOUT
        .get()
        .copied()
        .flatten()
        .or(if exclusive { None } else { Some(READER_LOCK_TIMEOUT_S) })
        .map(Duration::from_secs_f64);
    let mut held = Vec::new();
    let mut registered = Vec::new();
    for ((dev, ino), (path, dir)) in sorted {
        let file = File::from(dir.fd.try_clone().context("duplicating a directory handle")?);
        acquire(&file, &path, (dev, ino), exclusive, timeout)?;
        held.push(file);
        registered.push(Root { id: TreeId { path: path.clone(), dev, ino }, path, dir });
    }
    *registry().lock().map_err(|_| anyhow!("lock registry poisoned"))? = registered;
    Ok(TreeLocks { _held: held })
}

pub(super) fn acquire(
    file: &File,
    path: &Path,
    id: (u64, u64),
    exclusive: bool,
    timeout: Option<Duration>,
) -> Result<()> {
    let try_once = || if exclusive { file.try_lock() } else { file.try_lock_shared() };
    let started = Instant::now();
    let mut said = false;
    loop {
        match try_once() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).file_context(path, || format!("locking {}", path.display()));
            }
        }
        if !said {
            notify(&Event::LockWait { path, holders: &holders(id), timeout });
            said = true;
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            bail!(
                "gave up waiting for the lock on {} after {:.1} s: held by {}",
                path.display(),
                started.elapsed().as_secs_f64(),
                holders(id)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Who holds a lock on the directory `(dev, ino)`, from /proc/locks: PID, command line and
/// since when it has been running.
pub(super) fn holders((dev, ino): (u64, u64)) -> String {
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return "another process".into() };
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let mut pids: Vec<u32> = locks
        .lines()
        .filter(|l| l.split_whitespace().any(|f| f == want))
        .filter_map(|l| l.split_whitespace().nth(4).and_then(|p| p.parse().ok()))
        .filter(|p| *p != std::process::id())
        .collect();
    pids.sort();
    pids.dedup();
    if pids.is_empty() {
        return "another process".into();
    }
    pids.iter().map(|&pid| describe_pid(pid)).collect::<Vec<_>>().join("; ")
}

pub(super) fn describe_pid(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the ")" closing the command name: state is 3rd, starttime 22nd overall.
    let after = state.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let run_state = match fields.first().copied() {
        Some("T") | Some("t") => ", stopped",
        _ => "",
    };
    let since = fields.get(19).and_then(|t| t.parse::<u64>().ok()).and_then(|ticks| {
        let btime: u64 = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse().ok()))?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(btime + ticks / hz)
    });
    let since = since.map(|s| format!(", running since {} (unix time {s})", utc(s))).unwrap_or_default();
    format!("PID {pid} ({}{run_state}{since})", if cmd.is_empty() { "?".into() } else { cmd })
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub(super) fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Run `f` with the locked root whose canonical path is `path`'s.
pub(super) fn with_roots<T>(f: impl FnOnce(&[Root]) -> Result<T>) -> Result<T> {
    let roots = registry().lock().map_err(|_| anyhow!("lock registry poisoned"))?;
    f(&roots)
}

pub(super) fn find_root<'r>(roots: &'r [Root], path: &Path) -> Result<&'r Root> {
    let canonical = std::fs::canonicalize(path).file_context(path, || format!("resolving {}", path.display()))?;
    let meta = std::fs::metadata(&canonical).file_context(&canonical, || format!("reading {}", canonical.display()))?;
    roots
        .iter()
        .find(|r| r.id.dev == meta.dev() && r.id.ino == meta.ino())
        .file_context(path, || format!("{}: not a locked tree root; refusing to write there", path.display()))
}

/// Which directory a journal belongs to: a copy of the tree (`cp -a`) has another identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TreeId {
    /// The canonical path of the tree root.
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}
