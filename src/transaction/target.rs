//! One planned write, resolved to its locked root and directory: what commit and the bytecode
//! stash work on.

use std::ffi::OsString;

use std::path::PathBuf;

use super::fs::Dir;
use super::lock::Root;

/// One planned write, resolved to its locked root and directory.
pub(super) struct Target<'r> {
    pub(super) root: &'r Root,
    pub(super) rel: String,
    pub(super) dir: Dir,
    pub(super) name: OsString,
    pub(super) old: &'r [u8],
    pub(super) new: &'r [u8],
    pub(super) mode: u32,
    pub(super) owner: (u32, u32),
    /// Its modification time before the run: a rollback gives it back with the old bytes, so
    /// the `.pyc` files compiled for them (which record it) stay valid.
    pub(super) mtime: (i64, i64),
}

impl Target<'_> {
    pub(super) fn shown(&self) -> PathBuf {
        self.dir.path(&self.name)
    }
}
