//! All-or-nothing, crash-safe writes, one writer per tree, confined to the locked tree roots.
//!
//! Protocol (per run that writes):
//! 1. lock every tree root involved (flock on the root directory itself, so the lock leaves
//!    no file behind; one lock per directory however it is spelled; sorted order, so two runs
//!    cannot deadlock). A run that has to wait says at once who holds the lock;
//! 2. finish any transaction a killed run left behind (see [`recover`]); its journal is
//!    checked data: checksum, tree identity, tree-relative paths only;
//! 3. (the caller plans in memory, under the lock);
//! 4. check for real that every write can happen: each target opened for writing, a probe temp
//!    file created (and owned like the target) beside it, free space for the new bytes;
//! 5. save each file's old and new bytes under `<root>/.gaudi-fixes/txn/`, fsync, then commit
//!    the journal by renaming `journal.json.tmp` to `journal.json` in every involved root;
//! 6. for each file: write a temp file beside it (`O_EXCL`, owner and permission bits of the
//!    target), fsync, check the target still holds the bytes the plan was made from, rename
//!    over it, fsync the directory; drop the module's stale `__pycache__` entries (an apply
//!    that first changes a module keeps its `.pyc` files and the source's mtime under
//!    `.gaudi-fixes/bytecode/`; the write that gives the source back restores both);
//! 7. write the provenance record, then remove the journals, the saved copies and any state
//!    directory left empty.
//!
//! Every path is reached from the locked root's directory handle, one component at a time,
//! with `O_NOFOLLOW`: a symlink anywhere on the way (planted temp file, symlinked
//! `.gaudi-fixes/` or `__pycache__/`) is refused, never followed.
//!
//! If a write fails after step 5, the files already written are put back from the old bytes
//! and the journal is removed: the run exits 3 with the tree as it was. If that rollback fails
//! too, the error names each file's state, the journal stays, and the next run rolls the
//! transaction forward ([`RollbackFailed`], exit 4).
//!
//! `GAUDI_FIXES_FAULT`, for tests: `after-journal`, `after-rename:N` (after the N-th file
//! rename, 1-based) and `before-journal-remove` abort the process there; `write-error:N` makes
//! the N-th file write fail with an I/O error (after the journal), and `write-error:rollback`
//! every write putting a file back; steps combine with commas. `pause-before-rename:N`
//! creates `$GAUDI_FIXES_FAULT_PAUSE` and waits until it is removed, before the N-th rename.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::hash::sha256_hex;
use crate::plan::{Action, Edit, MAX_FILE_BYTES};
use crate::provenance::{tool_version, Provenance};

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

// ---------------------------------------------------------------------------------------------
// Confined file-system operations: directory handles, one component at a time, no symlinks.
// ---------------------------------------------------------------------------------------------

fn cname(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a name"))
}

fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An open directory, and how to name it in messages.
struct Dir {
    fd: OwnedFd,
    shown: PathBuf,
}

impl Dir {
    /// Open a directory by path (only for tree roots, which the user named).
    fn open_path(path: &Path) -> Result<Dir> {
        let c = cname(path.as_os_str())?;
        // SAFETY: plain open(2) of a NUL-terminated path; the fd is owned below.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: fd was just returned by open and is not owned elsewhere.
        Ok(Dir { fd: unsafe { OwnedFd::from_raw_fd(fd) }, shown: path.to_path_buf() })
    }

    fn path(&self, name: &OsStr) -> PathBuf {
        self.shown.join(name)
    }

    fn raw_open(&self, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
        let c = cname(name)?;
        // SAFETY: openat(2) relative to a directory fd we own; the result is owned below.
        let fd = cvt(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: fd was just returned by openat.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A subdirectory; a symlink (or anything but a directory) is refused with a message that
    /// says so.
    fn open_dir(&self, name: &OsStr) -> Result<Option<Dir>> {
        match self.raw_open(name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => Ok(Some(Dir { fd, shown: self.path(name) })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                let what = match self.lstat(name) {
                    Ok(Some(st)) if st.mode & libc::S_IFMT == libc::S_IFLNK => "is a symlink",
                    _ => "is not a directory",
                };
                bail!("{} {what}; refusing to write through it (remove it, then run again)", self.path(name).display())
            }
            Err(e) => Err(e).with_context(|| format!("opening {}", self.path(name).display())),
        }
    }

    /// A subdirectory, created (0755) when missing. Returns whether it was created.
    fn open_or_create_dir(&self, name: &OsStr) -> Result<(Dir, bool)> {
        if let Some(d) = self.open_dir(name)? {
            return Ok((d, false));
        }
        let c = cname(name)?;
        // SAFETY: mkdirat(2) relative to our directory fd.
        cvt(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o755) })
            .with_context(|| format!("creating {}", self.path(name).display()))?;
        let d = self.open_dir(name)?.with_context(|| format!("{} vanished", self.path(name).display()))?;
        Ok((d, true))
    }

    fn lstat(&self, name: &OsStr) -> std::io::Result<Option<Stat>> {
        let c = cname(name)?;
        // SAFETY: fstatat(2) into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match cvt(unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) }) {
            Ok(_) => Ok(Some(Stat::from(&st))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn stat_self(&self) -> Result<Stat> {
        // SAFETY: fstat(2) into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })
            .with_context(|| format!("reading {}", self.shown.display()))?;
        Ok(Stat::from(&st))
    }

    /// Read a regular file (no symlink, no FIFO, bounded size); `None` when missing.
    fn read(&self, name: &OsStr) -> Result<Option<Vec<u8>>> {
        let shown = self.path(name);
        let fd = match self.raw_open(name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                bail!("{} is a symlink; refusing to follow it (remove it, then run again)", shown.display())
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", shown.display())),
        };
        let mut file = File::from(fd);
        let meta = file.metadata().with_context(|| format!("reading {}", shown.display()))?;
        if !meta.is_file() {
            bail!("{}: not a regular file; refusing to read it", shown.display());
        }
        if meta.len() > MAX_FILE_BYTES {
            bail!("{}: {} bytes is too large; refusing", shown.display(), meta.len());
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).with_context(|| format!("reading {}", shown.display()))?;
        Ok(Some(bytes))
    }

    /// Create `name` exclusively (a stale file or planted symlink of that name is removed
    /// first, never followed) and write `bytes`, with `mode` and, when given, `owner`; fsync.
    fn create_exclusive(&self, name: &OsStr, bytes: &[u8], mode: u32, owner: Option<(u32, u32)>) -> Result<()> {
        let shown = self.path(name);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let fd = match self.raw_open(name, flags, 0o600) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.unlink(name)?;
                self.raw_open(name, flags, 0o600)
            }
            other => other,
        }
        .with_context(|| format!("creating {}", shown.display()))?;
        if let Some(e) = fault_write_error() {
            let _ = self.unlink(name);
            return Err(e).with_context(|| format!("writing {}", shown.display()));
        }
        let mut file = File::from(fd);
        let written = (|| -> std::io::Result<()> {
            file.write_all(bytes)?;
            if let Some((uid, gid)) = owner {
                let st = file.metadata()?;
                if st.uid() != uid || st.gid() != gid {
                    // SAFETY: fchown(2) on a file we own the fd of.
                    cvt(unsafe { libc::fchown(file.as_raw_fd(), uid, gid) })?;
                }
            }
            // SAFETY: fchmod(2) on a file we own the fd of; permission bits only.
            cvt(unsafe { libc::fchmod(file.as_raw_fd(), (mode & 0o777) as libc::mode_t) })?;
            file.sync_all()
        })();
        if let Err(e) = written {
            drop(file);
            let _ = self.unlink(name);
            return Err(e).with_context(|| format!("writing {}", shown.display()));
        }
        Ok(())
    }

    fn rename(&self, from: &OsStr, to: &OsStr) -> Result<()> {
        let (a, b) = (cname(from)?, cname(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: renameat(2) within one directory fd.
        cvt(unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) })
            .with_context(|| format!("renaming {} over {}", self.path(from).display(), self.path(to).display()))?;
        Ok(())
    }

    /// Remove a non-directory entry (a symlink itself, never its target); missing is fine.
    fn unlink(&self, name: &OsStr) -> Result<()> {
        let c = cname(name)?;
        // SAFETY: unlinkat(2) relative to our directory fd.
        match cvt(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", self.path(name).display())),
        }
    }

    /// Remove an empty subdirectory; a non-empty or missing one is left alone.
    fn rmdir_if_empty(&self, name: &OsStr) {
        if let Ok(c) = cname(name) {
            // SAFETY: unlinkat(2) with AT_REMOVEDIR: only ever removes an empty directory.
            let _ = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: fsync(2) on our directory fd.
        cvt(unsafe { libc::fsync(self.fd.as_raw_fd()) })
            .with_context(|| format!("syncing directory {}", self.shown.display()))?;
        Ok(())
    }

    /// Set `name`'s modification time (the entry itself, never a symlink's target).
    fn set_mtime(&self, name: &OsStr, (sec, nsec): (i64, i64)) -> Result<()> {
        let c = cname(name)?;
        let times = [
            libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
            libc::timespec { tv_sec: sec as libc::time_t, tv_nsec: nsec as _ },
        ];
        // SAFETY: utimensat(2) relative to our directory fd, two valid timespecs.
        cvt(unsafe { libc::utimensat(self.fd.as_raw_fd(), c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
            .with_context(|| format!("setting the time of {}", self.path(name).display()))?;
        Ok(())
    }

    /// The entry names of this directory.
    fn names(&self) -> Result<Vec<OsString>> {
        // Listing through /proc/self/fd reads exactly the directory we hold open.
        let via = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        let entries = std::fs::read_dir(&via).with_context(|| format!("listing {}", self.shown.display()))?;
        Ok(entries.flatten().map(|e| e.file_name()).collect())
    }

    /// Bytes available to us on this directory's file system.
    fn free_bytes(&self) -> Option<u64> {
        // SAFETY: fstatvfs(2) into a zeroed buffer.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut st) }).ok()?;
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

#[derive(Debug, Clone, Copy)]
struct Stat {
    mode: u32,
    uid: u32,
    gid: u32,
    dev: u64,
    ino: u64,
    /// Modification time: seconds and nanoseconds.
    mtime: (i64, i64),
}

impl From<&libc::stat> for Stat {
    fn from(st: &libc::stat) -> Stat {
        Stat {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, st.st_mtime_nsec),
        }
    }
}

/// Check a tree-relative path: plain components only (no `..`, no root, no `.`), UTF-8.
fn check_rel(rel: &str) -> Result<Vec<&OsStr>> {
    let path = Path::new(rel);
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => parts.push(s),
            _ => bail!("`{rel}` is not a plain tree-relative path"),
        }
    }
    if parts.is_empty() {
        bail!("empty path");
    }
    Ok(parts)
}

/// The directory holding `rel` (reached from `root` with no symlink on the way) and the
/// file's name.
fn parent_of(root: &Dir, rel: &str) -> Result<(Dir, OsString)> {
    let parts = check_rel(rel).with_context(|| format!("{}: refusing", root.shown.display()))?;
    let (name, dirs) = parts.split_last().expect("non-empty");
    let mut dir = Dir { fd: root.fd.try_clone().context("duplicating a directory handle")?, shown: root.shown.clone() };
    for part in dirs {
        dir = dir.open_dir(part)?.with_context(|| format!("{}: no such directory", dir.path(part).display()))?;
    }
    Ok((dir, name.to_os_string()))
}

/// The temp file a write goes through: beside the target, so the rename stays on one device.
pub fn temp_path(path: &Path) -> PathBuf {
    path.with_file_name(temp_name(path.file_name().unwrap_or_default()))
}

fn temp_name(name: &OsStr) -> OsString {
    let mut s = OsString::from(".");
    s.push(name);
    s.push(".gaudi-fixes.tmp");
    s
}

// ---------------------------------------------------------------------------------------------
// Locks.
// ---------------------------------------------------------------------------------------------

/// A locked tree root: its canonical path, identity and directory handle.
struct Root {
    path: PathBuf,
    dir: Dir,
    id: TreeId,
}

/// Held locks on tree roots; released on drop.
pub struct TreeLocks {
    _held: Vec<File>,
}

/// The roots locked by this process, for [`recover`] and [`commit`] to work from the handles
/// the locks were taken on.
fn registry() -> &'static Mutex<Vec<Root>> {
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
        let canonical = std::fs::canonicalize(root).with_context(|| format!("resolving {}", root.display()))?;
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

fn acquire(file: &File, path: &Path, id: (u64, u64), exclusive: bool, timeout: Option<Duration>) -> Result<()> {
    let try_once = || if exclusive { file.try_lock() } else { file.try_lock_shared() };
    let started = Instant::now();
    let mut said = false;
    loop {
        match try_once() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        if !said {
            let limit = match timeout {
                Some(t) => format!("up to {} s (--lock-timeout)", t.as_secs_f64()),
                None => "until it is released (--lock-timeout SECONDS bounds this)".to_string(),
            };
            eprintln!(
                "gaudi-fixes: waiting for the lock on {}: held by {}; waiting {limit}",
                path.display(),
                holders(id)
            );
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
fn holders((dev, ino): (u64, u64)) -> String {
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

fn describe_pid(pid: u32) -> String {
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
fn utc(secs: u64) -> String {
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
fn with_roots<T>(f: impl FnOnce(&[Root]) -> Result<T>) -> Result<T> {
    let roots = registry().lock().map_err(|_| anyhow!("lock registry poisoned"))?;
    f(&roots)
}

fn find_root<'r>(roots: &'r [Root], path: &Path) -> Result<&'r Root> {
    let canonical = std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let meta = std::fs::metadata(&canonical).with_context(|| format!("reading {}", canonical.display()))?;
    roots
        .iter()
        .find(|r| r.id.dev == meta.dev() && r.id.ino == meta.ino())
        .with_context(|| format!("{}: not a locked tree root; refusing to write there", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Journal and provenance data.
// ---------------------------------------------------------------------------------------------

/// Which directory a journal belongs to: a copy of the tree (`cp -a`) has another identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TreeId {
    /// The canonical path of the tree root.
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

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
    fn compute_checksum(&self) -> String {
        let mut copy = self.clone();
        copy.checksum.clear();
        // Through a JSON value, so the form hashed does not depend on field order.
        let value = serde_json::to_value(&copy).expect("journal serialises");
        sha256_hex(&serde_json::to_vec(&value).expect("journal serialises"))
    }
}

/// The state directory of `root` if there is one; a symlink there is an error.
fn state_dir(root: &Dir) -> Result<Option<Dir>> {
    root.open_dir(OsStr::new(STATE_DIR))
}

/// Read a root's provenance record, if any.
pub fn read_provenance(root: &Path) -> Result<Option<Provenance>> {
    let root_dir = Dir::open_path(root)?;
    let Some(state) = state_dir(&root_dir)? else { return Ok(None) };
    let Some(bytes) = state.read(OsStr::new(PROVENANCE))? else { return Ok(None) };
    let path = state.path(OsStr::new(PROVENANCE));
    Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("{}: not a provenance record", path.display()))?))
}

/// How to clear a journal this run will not use.
fn clear_hint(state: &Path) -> String {
    format!(
        "to clear it: check the tree with `gaudi-fixes apply --check` (restore any file it reports as drifted from a \
         pristine copy), then remove {} and {} by hand",
        state.join(JOURNAL).display(),
        state.join(SAVED).display()
    )
}

/// Read and check the journal in a state directory: format, checksum, paths.
fn read_journal(state: &Dir) -> Result<Option<Journal>> {
    let Some(bytes) = state.read(OsStr::new(JOURNAL))? else { return Ok(None) };
    let path = state.path(OsStr::new(JOURNAL));
    let journal: Journal = serde_json::from_slice(&bytes).with_context(|| {
        format!("{}: corrupt journal (not one this gaudi-fixes writes); {}", path.display(), clear_hint(&state.shown))
    })?;
    if journal.format != JOURNAL_FORMAT {
        bail!("{}: corrupt journal (format {}); {}", path.display(), journal.format, clear_hint(&state.shown));
    }
    if journal.compute_checksum() != journal.checksum {
        bail!(
            "{}: corrupt journal: it fails its checksum (damaged or edited), so it was not used; {}",
            path.display(),
            clear_hint(&state.shown)
        );
    }
    for f in &journal.files {
        if f.tree >= journal.trees.len() {
            bail!("{}: corrupt journal: file {} names no tree; {}", path.display(), f.path, clear_hint(&state.shown));
        }
        check_rel(&f.path).map_err(|e| {
            anyhow!("{}: corrupt journal: {e} (it leaves the tree); {}", path.display(), clear_hint(&state.shown))
        })?;
    }
    if journal.provenance.iter().any(|(i, _)| *i >= journal.trees.len()) {
        bail!("{}: corrupt journal: provenance names no tree; {}", path.display(), clear_hint(&state.shown));
    }
    Ok(Some(journal))
}

/// The journal left in `root` by an interrupted run, if any (checked, not acted on).
pub fn pending(root: &Path) -> Result<Option<Journal>> {
    let root_dir = Dir::open_path(root)?;
    let Some(state) = state_dir(&root_dir)? else { return Ok(None) };
    read_journal(&state)
}

// ---------------------------------------------------------------------------------------------
// Recovery.
// ---------------------------------------------------------------------------------------------

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
                    root.dir.rmdir_if_empty(OsStr::new(STATE_DIR));
                }
            }
        }
        Ok(said)
    })
}

/// The locked roots a journal's trees are, refusing a journal of another tree (a copy) or of
/// a tree this run has not locked.
fn journal_roots<'r>(journal: &Journal, here: &Root, locked: &'r [Root], state: &Dir) -> Result<Vec<&'r Root>> {
    let path = state.path(OsStr::new(JOURNAL));
    if !journal.trees.contains(&here.id) {
        let named: Vec<String> =
            journal.trees.iter().map(|t| format!("{} (device {}, inode {})", t.path.display(), t.dev, t.ino)).collect();
        bail!(
            "{}: this journal belongs to another tree ({}), not {} (device {}, inode {}); it was probably copied \
             with the tree while a run was interrupted, and was not used; {}",
            path.display(),
            named.join(", "),
            here.path.display(),
            here.id.dev,
            here.id.ino,
            clear_hint(&state.shown)
        );
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

fn remove_saved(state: &Dir) -> Result<()> {
    if let Some(saved) = state.open_dir(OsStr::new(SAVED))? {
        for name in saved.names()? {
            saved.unlink(&name)?;
        }
    }
    state.rmdir_if_empty(OsStr::new(SAVED));
    Ok(())
}

fn roll_forward(journal: &Journal, trees: &[&Root]) -> Result<()> {
    let shown_journal = trees.first().map(|r| r.path.join(STATE_DIR).join(JOURNAL)).unwrap_or_default();
    // Check every file before writing any, so a refused recovery leaves the tree as it was.
    let mut todo = Vec::new();
    for (i, f) in journal.files.iter().enumerate() {
        let root = trees[f.tree];
        let (dir, name) = parent_of(&root.dir, &f.path)?;
        let current = dir.read(&name)?.with_context(|| format!("recovering {}: missing", dir.path(&name).display()))?;
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
        let state = state_dir(&root.dir)?.with_context(|| format!("{}: no saved copies", root.path.display()))?;
        let saved = state.open_dir(OsStr::new(SAVED))?.context("the journal's saved copies are missing")?;
        let copy = OsString::from(format!("{i}.post"));
        let post = saved.read(&copy)?.with_context(|| format!("{}: missing", saved.path(&copy).display()))?;
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
            return Err(anyhow::Error::new(RollbackFailed {
                message: format!(
                    "{err:#}; while finishing an interrupted run, so the tree is half-written:\n{}\nthe journal \
                     stays in {}; fix the cause, and the next `gaudi-fixes apply` or `revert` finishes it (exit 4)",
                    states.join("\n"),
                    shown_journal.display()
                ),
            }));
        }
    }
    for f in &journal.files {
        let (dir, name) = parent_of(&trees[f.tree].dir, &f.path)?;
        drop_stale_bytecode(&dir, &name)?;
        dir.unlink(&temp_name(&name))?;
    }
    let provenance: Vec<(&Root, &Provenance)> = journal.provenance.iter().map(|(i, p)| (trees[*i], p)).collect();
    write_provenance(&provenance)?;
    fault("before-journal-remove");
    finish(trees)
}

// ---------------------------------------------------------------------------------------------
// Commit.
// ---------------------------------------------------------------------------------------------

/// A write failed, and so did putting the tree back (or finishing an interrupted run failed
/// half-way): exit 4. Each file's state is named; the journal stays, so the next `apply` /
/// `revert` finishes the transaction.
#[derive(Debug)]
pub struct RollbackFailed {
    pub message: String,
}

impl std::fmt::Display for RollbackFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RollbackFailed {}

/// One planned write, resolved to its locked root and directory.
struct Target<'r> {
    root: &'r Root,
    rel: String,
    dir: Dir,
    name: OsString,
    old: &'r [u8],
    new: &'r [u8],
    mode: u32,
    owner: (u32, u32),
}

impl Target<'_> {
    fn shown(&self) -> PathBuf {
        self.dir.path(&self.name)
    }
}

/// Write `edits` as one transaction (locks must be held). `provenance` is the record each
/// tree root should have afterwards. On any failure before the journal, nothing was written;
/// after it, the files written so far are put back (or, if that fails, [`RollbackFailed`]).
pub fn commit(operation: Action, edits: &[Edit], provenance: BTreeMap<PathBuf, Provenance>) -> Result<()> {
    if edits.is_empty() && provenance.is_empty() {
        return Ok(());
    }
    with_roots(|locked| commit_locked(operation, edits, &provenance, locked))
}

fn commit_locked(
    operation: Action,
    edits: &[Edit],
    provenance: &BTreeMap<PathBuf, Provenance>,
    locked: &[Root],
) -> Result<()> {
    // Resolve and check every target before anything is written.
    let mut targets = Vec::new();
    for edit in edits {
        let root = find_root(locked, &edit.tree_root)?;
        let rel = tree_relative(root, &edit.path)?;
        let (dir, name) = parent_of(&root.dir, &rel)?;
        let st = dir.lstat(&name)?.with_context(|| format!("{}: vanished", dir.path(&name).display()))?;
        targets.push(Target {
            root,
            rel,
            dir,
            name,
            old: &edit.old,
            new: &edit.new,
            mode: st.mode & 0o777,
            owner: (st.uid, st.gid),
        });
    }
    let mut records: Vec<(&Root, &Provenance)> = Vec::new();
    for (path, record) in provenance {
        let root = find_root(locked, path)?;
        if !records.iter().any(|(r, _)| r.id == root.id) {
            records.push((root, record));
        }
    }
    let mut involved: Vec<&Root> = targets.iter().map(|t| t.root).chain(records.iter().map(|(r, _)| *r)).collect();
    involved.sort_by(|a, b| a.path.cmp(&b.path));
    involved.dedup_by(|a, b| a.id == b.id);
    preflight(&targets, &involved)?;

    // Old provenance bytes, to put back if a later step fails.
    let mut old_provenance = Vec::new();
    for (root, _) in &records {
        let old = match state_dir(&root.dir)? {
            Some(s) => s.read(OsStr::new(PROVENANCE))?,
            None => None,
        };
        old_provenance.push(old);
    }

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
    let bytes = serde_json::to_vec_pretty(&journal).context("serialising the journal")?;

    // Saved copies and journals. A failure here has written nothing in the tree proper.
    let mut created_state = Vec::new();
    let mut stashed: Vec<(&Root, String)> = Vec::new();
    let staged = (|| -> Result<()> {
        for root in &involved {
            let (state, created) = root.dir.open_or_create_dir(OsStr::new(STATE_DIR))?;
            if created {
                created_state.push(*root);
            }
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
        for root in &involved {
            let state = state_dir(&root.dir)?.context("state directory vanished")?;
            let tmp = temp_name(OsStr::new(JOURNAL));
            state.create_exclusive(&tmp, &bytes, 0o644, None)?;
            state.rename(&tmp, OsStr::new(JOURNAL))?;
            state.sync()?;
        }
        Ok(())
    })();
    if let Err(err) = staged {
        for root in &involved {
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
    fault("after-journal");

    // The files. `renamed` counts the targets that hold their new bytes.
    let mut renamed = 0;
    let written = (|| -> Result<()> {
        for (i, t) in targets.iter().enumerate() {
            replace_checked(t, t.new, t.old, i + 1)?;
            renamed += 1;
            fault(&format!("after-rename:{}", i + 1));
        }
        for t in &targets {
            drop_stale_bytecode(&t.dir, &t.name)?;
            restore_bytecode(t)?;
        }
        write_provenance(&records)
    })();
    if let Err(err) = written {
        // The tree goes back to how it was, with its bytecode where it was: no stash needed.
        for (root, rel) in &stashed {
            if let Ok(Some(state)) = state_dir(&root.dir) {
                let _ = drop_stash(&state, rel);
            }
        }
        return Err(rollback(&targets, renamed, &records, &old_provenance, &involved, err));
    }
    fault("before-journal-remove");
    finish(&involved)
}

/// A target's path relative to its locked root (symlinks inside the tree already resolved by
/// the plan; the directory part is resolved again here and must stay inside the root).
fn tree_relative(root: &Root, path: &Path) -> Result<String> {
    let parent = path.parent().context("a file has a directory")?;
    let name = path.file_name().context("a file has a name")?;
    let real = std::fs::canonicalize(parent).with_context(|| format!("resolving {}", parent.display()))?.join(name);
    let rel = real
        .strip_prefix(&root.path)
        .with_context(|| format!("{}: outside the tree {}; refusing", path.display(), root.path.display()))?;
    let rel = rel.to_str().with_context(|| format!("{}: path is not UTF-8; refusing", path.display()))?;
    check_rel(rel)?;
    Ok(rel.to_string())
}

/// Check for real that every write can happen, before anything is written: targets regular
/// and holding the planned bytes, openable for writing; a temp file creatable (and ownable like
/// the target) beside each; `__pycache__` not a symlink; free space for the new bytes and the
/// saved copies.
fn preflight(targets: &[Target<'_>], involved: &[&Root]) -> Result<()> {
    let mut need: BTreeMap<u64, (u64, u64, PathBuf)> = BTreeMap::new(); // dev → (bytes, free, where)
    for t in targets {
        let shown = t.shown();
        let now = t.dir.read(&t.name)?.with_context(|| format!("{}: vanished", shown.display()))?;
        if now != t.old {
            bail!("{}: changed while applying (someone else saved it); nothing was changed", shown.display());
        }
        if let Err(e) = t.dir.raw_open(&t.name, libc::O_WRONLY | libc::O_NONBLOCK, 0) {
            let why = why(&e);
            return Err(e)
                .with_context(|| format!("{}: cannot be written ({why}); nothing was changed", shown.display()));
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
fn why(e: &std::io::Error) -> &'static str {
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
fn replace_checked(t: &Target<'_>, bytes: &[u8], expect: &[u8], nth: usize) -> Result<()> {
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
fn rollback(
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
    anyhow::Error::new(RollbackFailed {
        message: format!(
            "{cause:#}; rolling back failed as well, so the tree is half-written:\n{}\nthe journal stays in {}; the \
             next `gaudi-fixes apply` or `revert` finishes the interrupted transaction first (exit 4)",
            lines.join("\n"),
            involved.first().map(|r| r.path.join(STATE_DIR).display().to_string()).unwrap_or_default()
        ),
    })
}

fn write_provenance(records: &[(&Root, &Provenance)]) -> Result<()> {
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
        state.create_exclusive(&tmp, &bytes, 0o644, None)?;
        state.rename(&tmp, OsStr::new(PROVENANCE))?;
        state.sync()?;
    }
    Ok(())
}

/// Remove the journals, then the saved copies, then state directories left empty.
fn finish(involved: &[&Root]) -> Result<()> {
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

/// Remove `__pycache__/<module>.*.pyc` beside a changed module, so Python cannot run stale
/// bytecode (its mtime check can miss a same-second edit). Entries are unlinked, never
/// followed; a symlinked `__pycache__` is refused.
fn drop_stale_bytecode(dir: &Dir, name: &OsStr) -> Result<()> {
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

// ---------------------------------------------------------------------------------------------
// The compiled bytecode a tree had: kept at the first apply, given back when the source is.
// ---------------------------------------------------------------------------------------------

/// Where a module's bytecode is kept, under the state directory: `bytecode/<key>/` holding
/// `source.json` ([`Stashed`]) and the `.pyc` files as they were in `__pycache__`.
const BYTECODE: &str = "bytecode";
const STASH_RECORD: &str = "source.json";

/// The source a stash belongs to: its bytes' hash and modification time, and the `.pyc` files
/// kept (name, permission bits). The `.pyc` files were valid for exactly that source.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stashed {
    path: String,
    sha256: String,
    mtime: (i64, i64),
    pyc: Vec<(String, u32)>,
}

fn stash_key(rel: &str) -> OsString {
    OsString::from(&sha256_hex(rel.as_bytes())[..32])
}

/// The `__pycache__/<module>.*.pyc` names of the module `name` in `cache`.
fn bytecode_names(cache: &Dir, name: &OsStr) -> Result<Vec<OsString>> {
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
fn stash_bytecode(state: &Dir, t: &Target<'_>) -> Result<bool> {
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
    let st = t.dir.lstat(&t.name)?.with_context(|| format!("{}: vanished", t.shown().display()))?;
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
    let record = Stashed { path: t.rel.clone(), sha256: sha256_hex(t.old), mtime: st.mtime, pyc };
    let bytes = serde_json::to_vec_pretty(&record).context("serialising a bytecode record")?;
    entry.create_exclusive(OsStr::new(STASH_RECORD), &bytes, 0o600, None)?;
    entry.sync()?;
    Ok(true)
}

/// Remove the stash of `rel` (and the bytecode directory when it is left empty).
fn drop_stash(state: &Dir, rel: &str) -> Result<()> {
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
/// then drop the stash.
fn restore_bytecode(t: &Target<'_>) -> Result<()> {
    let Some(state) = state_dir(&t.root.dir)? else { return Ok(()) };
    let Some(stash) = state.open_dir(OsStr::new(BYTECODE))? else { return Ok(()) };
    let Some(entry) = stash.open_dir(&stash_key(&t.rel))? else { return Ok(()) };
    let Some(bytes) = entry.read(OsStr::new(STASH_RECORD))? else { return Ok(()) };
    let Ok(record) = serde_json::from_slice::<Stashed>(&bytes) else { return drop_stash(&state, &t.rel) };
    let now = t.dir.read(&t.name)?.unwrap_or_default();
    if record.path != t.rel || record.sha256 != sha256_hex(&now) {
        return Ok(());
    }
    t.dir.set_mtime(&t.name, record.mtime)?;
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
        let (cache, _) = t.dir.open_or_create_dir(OsStr::new("__pycache__"))?;
        for (name, mode) in &record.pyc {
            let name = OsStr::new(name);
            if Path::new(name).components().count() != 1 {
                continue;
            }
            if let Some(pyc) = entry.read(name)? {
                if valid(&pyc) {
                    cache.create_exclusive(name, &pyc, *mode, Some(t.owner))?;
                }
            }
        }
        cache.sync()?;
    }
    drop_stash(&state, &t.rel)
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Fault injection (tests only; inert unless GAUDI_FIXES_FAULT is set).
// ---------------------------------------------------------------------------------------------

/// Abort here if `GAUDI_FIXES_FAULT` names this step (crash tests only).
fn fault(step: &str) {
    if std::env::var("GAUDI_FIXES_FAULT").is_ok_and(|v| v.split(',').any(|f| f == step)) {
        eprintln!("gaudi-fixes: GAUDI_FIXES_FAULT={step}: aborting");
        std::process::abort();
    }
}

/// Whether `GAUDI_FIXES_FAULT` (comma-separated steps) names `kind:nth`; rollback writes are
/// numbered `rollback` (`write-error:rollback` makes putting files back fail too).
fn fault_matches(kind: &str, nth: usize) -> bool {
    let want = if nth == ROLLBACK_WRITE { format!("{kind}:rollback") } else { format!("{kind}:{nth}") };
    std::env::var("GAUDI_FIXES_FAULT").is_ok_and(|v| v.split(',').any(|f| f == want))
}

/// The `nth` of a rollback write, for [`fault_matches`].
const ROLLBACK_WRITE: usize = usize::MAX;

thread_local! {
    static WRITE_ERROR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn arm_write_error() {
    WRITE_ERROR.with(|c| c.set(true));
}

/// The injected I/O error, once, when armed.
fn fault_write_error() -> Option<std::io::Error> {
    if WRITE_ERROR.with(|c| c.replace(false)) {
        eprintln!("gaudi-fixes: GAUDI_FIXES_FAULT: injecting an I/O error");
        return Some(std::io::Error::from_raw_os_error(libc::EIO));
    }
    None
}

/// Create `$GAUDI_FIXES_FAULT_PAUSE` and wait until the test removes it.
fn pause() {
    let Some(marker) = std::env::var_os("GAUDI_FIXES_FAULT_PAUSE") else { return };
    let _ = std::fs::write(&marker, b"paused\n");
    while Path::new(&marker).exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
}
