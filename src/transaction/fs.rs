//! Confined file-system operations: every path reached from a directory handle, one component
//! at a time, with `O_NOFOLLOW`; no symlink is ever followed.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::error::FileContext;
use anyhow::{bail, Context, Result};

use crate::plan::MAX_FILE_BYTES;

use super::fault::fault_write_error;

pub(super) fn cname(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a name"))
}

pub(super) fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An open directory, and how to name it in messages.
pub(super) struct Dir {
    pub(super) fd: OwnedFd,
    pub(super) shown: PathBuf,
}

impl Dir {
    /// Open a directory by path (only for tree roots, which the user named).
    pub(super) fn open_path(path: &Path) -> Result<Dir> {
        let c = cname(path.as_os_str())?;
        // SAFETY: plain open(2) of a NUL-terminated path; the fd is owned below.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })
            .file_context(path, || format!("opening {}", path.display()))?;
        // SAFETY: fd was just returned by open and is not owned elsewhere.
        Ok(Dir { fd: unsafe { OwnedFd::from_raw_fd(fd) }, shown: path.to_path_buf() })
    }

    pub(super) fn path(&self, name: &OsStr) -> PathBuf {
        self.shown.join(name)
    }

    pub(super) fn raw_open(&self, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
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
    pub(super) fn open_dir(&self, name: &OsStr) -> Result<Option<Dir>> {
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
            Err(e) => Err(e).file_context(self.path(name), || format!("opening {}", self.path(name).display())),
        }
    }

    /// A subdirectory, created (0755) when missing. Returns whether it was created.
    pub(super) fn open_or_create_dir(&self, name: &OsStr) -> Result<(Dir, bool)> {
        if let Some(d) = self.open_dir(name)? {
            return Ok((d, false));
        }
        let c = cname(name)?;
        // SAFETY: mkdirat(2) relative to our directory fd.
        cvt(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o755) })
            .file_context(self.path(name), || format!("creating {}", self.path(name).display()))?;
        let d =
            self.open_dir(name)?.file_context(self.path(name), || format!("{} vanished", self.path(name).display()))?;
        Ok((d, true))
    }

    pub(super) fn lstat(&self, name: &OsStr) -> std::io::Result<Option<Stat>> {
        let c = cname(name)?;
        // SAFETY: fstatat(2) into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        match cvt(unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) }) {
            Ok(_) => Ok(Some(Stat::from(&st))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) fn stat_self(&self) -> Result<Stat> {
        // SAFETY: fstat(2) into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })
            .file_context(&self.shown, || format!("reading {}", self.shown.display()))?;
        Ok(Stat::from(&st))
    }

    /// Read a regular file (no symlink, no FIFO, bounded size); `None` when missing.
    pub(super) fn read(&self, name: &OsStr) -> Result<Option<Vec<u8>>> {
        let shown = self.path(name);
        let fd = match self.raw_open(name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                bail!("{} is a symlink; refusing to follow it (remove it, then run again)", shown.display())
            }
            Err(e) => return Err(e).file_context(&shown, || format!("reading {}", shown.display())),
        };
        let mut file = File::from(fd);
        let meta = file.metadata().file_context(&shown, || format!("reading {}", shown.display()))?;
        if !meta.is_file() {
            bail!("{}: not a regular file; refusing to read it", shown.display());
        }
        if meta.len() > MAX_FILE_BYTES {
            bail!("{}: {} bytes is too large; refusing", shown.display(), meta.len());
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).file_context(&shown, || format!("reading {}", shown.display()))?;
        Ok(Some(bytes))
    }

    /// Create `name` exclusively (a stale file or planted symlink of that name is removed
    /// first, never followed) and write `bytes`, with `mode` and, when given, `owner`; fsync.
    pub(super) fn create_exclusive(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let shown = self.path(name);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let fd = match self.raw_open(name, flags, 0o600) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.unlink(name)?;
                self.raw_open(name, flags, 0o600)
            }
            other => other,
        }
        .file_context(&shown, || format!("creating {}", shown.display()))?;
        if let Some(e) = fault_write_error() {
            let _ = self.unlink(name);
            return Err(e).file_context(&shown, || format!("writing {}", shown.display()));
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
            return Err(e).file_context(&shown, || format!("writing {}", shown.display()));
        }
        Ok(())
    }

    pub(super) fn rename(&self, from: &OsStr, to: &OsStr) -> Result<()> {
        let (a, b) = (cname(from)?, cname(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: renameat(2) within one directory fd.
        cvt(unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) }).file_context(self.path(to), || {
            format!("renaming {} over {}", self.path(from).display(), self.path(to).display())
        })?;
        Ok(())
    }

    /// Remove a non-directory entry (a symlink itself, never its target); missing is fine.
    pub(super) fn unlink(&self, name: &OsStr) -> Result<()> {
        let c = cname(name)?;
        // SAFETY: unlinkat(2) relative to our directory fd.
        match cvt(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).file_context(self.path(name), || format!("removing {}", self.path(name).display())),
        }
    }

    /// Remove an empty subdirectory; a non-empty or missing one is left alone.
    pub(super) fn rmdir_if_empty(&self, name: &OsStr) {
        if let Ok(c) = cname(name) {
            // SAFETY: unlinkat(2) with AT_REMOVEDIR: only ever removes an empty directory.
            let _ = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }

    pub(super) fn sync(&self) -> Result<()> {
        // SAFETY: fsync(2) on our directory fd.
        cvt(unsafe { libc::fsync(self.fd.as_raw_fd()) })
            .file_context(&self.shown, || format!("syncing directory {}", self.shown.display()))?;
        Ok(())
    }

    /// Set `name`'s modification time (the entry itself, never a symlink's target).
    pub(super) fn set_mtime(&self, name: &OsStr, (sec, nsec): (i64, i64)) -> Result<()> {
        let c = cname(name)?;
        let times = [
            libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
            libc::timespec { tv_sec: sec as libc::time_t, tv_nsec: nsec as _ },
        ];
        // SAFETY: utimensat(2) relative to our directory fd, two valid timespecs.
        cvt(unsafe { libc::utimensat(self.fd.as_raw_fd(), c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
            .file_context(self.path(name), || format!("setting the time of {}", self.path(name).display()))?;
        Ok(())
    }

    /// The entry names of this directory.
    pub(super) fn names(&self) -> Result<Vec<OsString>> {
        // Listing through /proc/self/fd reads exactly the directory we hold open.
        let via = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        let entries =
            std::fs::read_dir(&via).file_context(&self.shown, || format!("listing {}", self.shown.display()))?;
        Ok(entries.flatten().map(|e| e.file_name()).collect())
    }

    /// Bytes available to us on this directory's file system.
    pub(super) fn free_bytes(&self) -> Option<u64> {
        // SAFETY: fstatvfs(2) into a zeroed buffer.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut st) }).ok()?;
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Stat {
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) dev: u64,
    pub(super) ino: u64,
    /// Modification time: seconds and nanoseconds.
    pub(super) mtime: (i64, i64),
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
pub(super) fn check_rel(rel: &str) -> Result<Vec<&OsStr>> {
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
pub(super) fn parent_of(root: &Dir, rel: &str) -> Result<(Dir, OsString)> {
    let parts = check_rel(rel).file_context(&root.shown, || format!("{}: refusing", root.shown.display()))?;
    let (name, dirs) = parts.split_last().expect("non-empty");
    let mut dir = Dir { fd: root.fd.try_clone().context("duplicating a directory handle")?, shown: root.shown.clone() };
    for part in dirs {
        dir = dir
            .open_dir(part)?
            .file_context(dir.path(part), || format!("{}: no such directory", dir.path(part).display()))?;
    }
    Ok((dir, name.to_os_string()))
}

/// The temp file a write goes through: beside the target, so the rename stays on one device.
pub fn temp_path(path: &Path) -> PathBuf {
    path.with_file_name(temp_name(path.file_name().unwrap_or_default()))
}

pub(super) fn temp_name(name: &OsStr) -> OsString {
    let mut s = OsString::from(".");
    s.push(name);
    s.push(".gaudi-fixes.tmp");
    s
}
