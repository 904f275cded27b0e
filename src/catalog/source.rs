//! Where catalogue files come from: the copy built into the binary (so an installed
//! `gaudi-fixes` works in a Dockerfile `RUN` without the repository) or a directory given with
//! `--catalog` / `GAUDI_FIXES_CATALOG`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use include_dir::{include_dir, Dir};

static BUILTIN_FIXES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/fixes");
static BUILTIN_PROFILES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/profiles");

/// All files of a catalogue, by path relative to its root (`fixes/…`, `profiles/…`).
#[derive(Debug, Clone)]
pub struct CatalogFiles {
    /// How to name the catalogue in messages: its directory, or `<built-in>`.
    pub origin: String,
    /// The directory, when it is one (READMEs are shown by path).
    pub dir: Option<PathBuf>,
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

impl CatalogFiles {
    /// The catalogue compiled into this binary.
    pub fn builtin() -> CatalogFiles {
        let mut files = BTreeMap::new();
        for (prefix, dir) in [("fixes", &BUILTIN_FIXES), ("profiles", &BUILTIN_PROFILES)] {
            collect_builtin(dir, Path::new(prefix), &mut files);
        }
        CatalogFiles { origin: "<built-in>".into(), dir: None, files }
    }

    /// A catalogue directory holding `fixes/` and `profiles/`.
    pub fn from_dir(dir: &Path) -> Result<CatalogFiles> {
        if !dir.join("fixes").is_dir() {
            bail!("catalogue {}: no fixes/ directory there", dir.display());
        }
        let mut files = BTreeMap::new();
        for sub in ["fixes", "profiles"] {
            let base = dir.join(sub);
            if !base.is_dir() {
                continue;
            }
            for entry in walkdir::WalkDir::new(&base).follow_links(false).sort_by_file_name() {
                let entry = entry.with_context(|| format!("reading catalogue {}", base.display()))?;
                if !entry.file_type().is_file() {
                    continue;
                }
                let rel = entry.path().strip_prefix(dir).expect("walk stays under its root").to_path_buf();
                if is_noise(&rel) {
                    continue;
                }
                let bytes =
                    std::fs::read(entry.path()).with_context(|| format!("reading {}", entry.path().display()))?;
                files.insert(rel, bytes);
            }
        }
        Ok(CatalogFiles { origin: dir.display().to_string(), dir: Some(dir.to_path_buf()), files })
    }

    /// A file as UTF-8 text, or an error naming it.
    pub fn text(&self, rel: &Path) -> Result<&str> {
        let bytes =
            self.files.get(rel).with_context(|| format!("{}: no such file in the catalogue", self.display(rel)))?;
        std::str::from_utf8(bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            anyhow::anyhow!("{}:{line}: not valid UTF-8", self.display(rel))
        })
    }

    /// How to show a catalogue path in a message: a real path when the catalogue is a directory.
    pub fn display(&self, rel: &Path) -> String {
        match &self.dir {
            Some(dir) => dir.join(rel).display().to_string(),
            None => format!("<built-in>/{}", rel.display()),
        }
    }
}

/// Editor droppings and caches are not catalogue content.
fn is_noise(rel: &Path) -> bool {
    rel.components().any(|c| {
        let s = c.as_os_str().to_string_lossy();
        s == "__pycache__" || s == ".pytest_cache" || s.ends_with(".pyc") || s.ends_with('~') || s.starts_with(".#")
    })
}

fn collect_builtin(dir: &Dir<'_>, prefix: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for file in dir.files() {
        let rel = prefix.join(file.path());
        if !is_noise(&rel) {
            out.insert(rel, file.contents().to_vec());
        }
    }
    for sub in dir.dirs() {
        collect_builtin(sub, prefix, out);
    }
}
