//! The vocabulary of trees: the two source trees a fix may patch ([`TreeName`]), which of
//! them a run may touch ([`TreeFilter`], `--only-tree`), and how a file of a directory tree is
//! read safely ([`resolve_inside`], [`read_regular`], [`read_inside`]): never through a
//! symlink that leads out of it, never a FIFO, device or directory, never unbounded — the
//! one policy `apply`, `record`, `port` and `lint --upstream` share. Ground floor: knows no
//! flags.

use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Result;

use crate::error::{bail_in, FileContext, Located};

/// Files larger than this are not Python sources we patch; refusing keeps memory bounded.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The two source trees a fix may patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeName {
    /// vLLM core (the directory holding `vllm/`).
    Vllm,
    /// The Gaudi plugin (the directory holding `vllm_gaudi/`).
    VllmGaudi,
}

impl TreeName {
    /// The package directory name inside the tree root, as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            TreeName::Vllm => "vllm",
            TreeName::VllmGaudi => "vllm_gaudi",
        }
    }

    /// Both trees, in report order.
    pub const ALL: [TreeName; 2] = [TreeName::Vllm, TreeName::VllmGaudi];
}

impl std::fmt::Display for TreeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TreeName {
    type Err = String;

    /// The manifest spelling, or `vllm-gaudi` (the flag spelling people type).
    fn from_str(s: &str) -> Result<TreeName, String> {
        match s {
            "vllm" => Ok(TreeName::Vllm),
            "vllm_gaudi" | "vllm-gaudi" => Ok(TreeName::VllmGaudi),
            _ => Err(format!("`{s}` is not a tree (vllm, vllm_gaudi)")),
        }
    }
}

/// Which trees a run may touch or inspect; the others are reported as skipped. Empty (no
/// `--only-tree`) means every tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeFilter(Vec<TreeName>);

impl TreeFilter {
    /// Only these trees; an empty list means all of them.
    pub fn only(trees: Vec<TreeName>) -> TreeFilter {
        TreeFilter(trees)
    }

    /// Every tree.
    pub fn all() -> TreeFilter {
        TreeFilter::default()
    }

    /// Whether the run may touch `tree`.
    pub fn includes(&self, tree: TreeName) -> bool {
        self.0.is_empty() || self.0.contains(&tree)
    }
}

/// The real (canonical) path of `rel` under `root`, and whether `rel` itself is a symlink;
/// `None` when nothing is there. A path that resolves outside `root` — the file a symlink, or
/// a symlinked directory on its way — is refused; `within` names `root` in that error (`the
/// tree`, `--edited DIR`).
pub fn resolve_inside(root: &Path, rel: &str, within: &str) -> Result<Option<(PathBuf, bool)>> {
    let path = root.join(rel);
    let meta = match fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).file_context(&path, || format!("reading {}", path.display())),
    };
    // Resolve every component, not only the last: a symlinked directory on the way can lead
    // outside just as well as a symlinked file.
    let real = fs::canonicalize(&path).map_err(|e| Located::in_file(&path, format!("broken symlink: {e}")))?;
    let root_real = fs::canonicalize(root).file_context(root, || format!("resolving {}", root.display()))?;
    let is_symlink = meta.file_type().is_symlink();
    if !real.starts_with(&root_real) {
        let through = if is_symlink { "symlink points" } else { "a symlinked directory on its path leads" };
        bail_in!(path, "{through} outside {within} (to {}); refusing to touch it", real.display());
    }
    Ok(Some((real, is_symlink)))
}

/// What a non-regular file is, for errors.
fn kind(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a file"
    }
}

/// The bytes of the regular file `real` (a resolved path, reached as `shown`), at most `max`
/// of them. Anything else is refused before it is opened — a FIFO would block the read
/// forever, a device could do anything — and checked again on the open file (no symlink
/// followed, opened non-blocking), so a file swapped in between is refused too.
pub fn read_regular(shown: &Path, real: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |ft: fs::FileType| {
        anyhow::Error::from(Located::in_file(shown, format!("not a regular file ({}); refusing to read it", kind(ft))))
    };
    let meta = fs::symlink_metadata(real).file_context(shown, || format!("reading {}", shown.display()))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(real)
        .file_context(shown, || format!("reading {}", shown.display()))?;
    let meta = file.metadata().file_context(shown, || format!("reading {}", shown.display()))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > max {
        bail_in!(
            shown,
            "{} bytes is larger than the {} MiB gaudi-fixes reads as a source file; refusing",
            meta.len(),
            max >> 20
        );
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.by_ref()
        .take(max + 1)
        .read_to_end(&mut bytes)
        .file_context(shown, || format!("reading {}", shown.display()))?;
    if bytes.len() as u64 > max {
        bail_in!(shown, "grew past {} MiB while it was read; refusing", max >> 20);
    }
    Ok(bytes)
}

/// `rel` under `root`, read by the policy above (inside `root`, regular, at most `max` bytes);
/// `None` when nothing is there.
pub fn read_inside(root: &Path, rel: &str, within: &str, max: u64) -> Result<Option<Vec<u8>>> {
    let Some((real, _)) = resolve_inside(root, rel, within)? else { return Ok(None) };
    read_regular(&root.join(rel), &real, max).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_filter_includes_every_tree_and_a_list_only_its_own() {
        assert!(TreeName::ALL.iter().all(|&t| TreeFilter::all().includes(t)));
        let only = TreeFilter::only(vec![TreeName::VllmGaudi]);
        assert!(only.includes(TreeName::VllmGaudi));
        assert!(!only.includes(TreeName::Vllm));
    }

    #[test]
    fn names_parse_in_both_spellings_and_print_as_in_manifests() {
        for t in TreeName::ALL {
            assert_eq!(t.as_str().parse::<TreeName>(), Ok(t));
        }
        assert_eq!("vllm-gaudi".parse::<TreeName>(), Ok(TreeName::VllmGaudi));
        assert!("torch".parse::<TreeName>().is_err());
    }
}
