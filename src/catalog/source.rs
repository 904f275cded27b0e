//! Where catalogue files come from: the copy built into the binary (so an installed
//! `gaudi-fixes` works in a Dockerfile `RUN` without the repository) or a directory given with
//! `--catalog` / `GAUDI_FIXES_CATALOG`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use include_dir::{include_dir, Dir};

use crate::error::{bail_at, bail_in, FileContext, Located};

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
        let mut total = 0u64;
        for sub in ["fixes", "profiles"] {
            let base = dir.join(sub);
            if !base.is_dir() {
                continue;
            }
            for entry in walkdir::WalkDir::new(&base).follow_links(false).sort_by_file_name() {
                let entry = entry.file_context(&base, || format!("reading catalogue {}", base.display()))?;
                if !entry.file_type().is_file() {
                    continue;
                }
                let rel = entry.path().strip_prefix(dir).expect("walk stays under its root").to_path_buf();
                if is_noise(&rel) {
                    continue;
                }
                let len = entry
                    .metadata()
                    .file_context(entry.path(), || format!("reading {}", entry.path().display()))?
                    .len();
                let limit = file_limit(&rel);
                if len > limit {
                    bail_in!(
                        entry.path(),
                        "{len} bytes is over the {} KiB a catalogue file of this kind may be; refusing",
                        limit >> 10
                    );
                }
                total += len;
                if total > MAX_CATALOG_BYTES {
                    bail!("catalogue {}: over {} MiB in all; refusing", dir.display(), MAX_CATALOG_BYTES >> 20);
                }
                let bytes = std::fs::read(entry.path())
                    .file_context(entry.path(), || format!("reading {}", entry.path().display()))?;
                files.insert(rel, bytes);
            }
        }
        Ok(CatalogFiles { origin: dir.display().to_string(), dir: Some(dir.to_path_buf()), files })
    }

    /// A file as UTF-8 text, or an error naming it.
    pub fn text(&self, rel: &Path) -> Result<&str> {
        let bytes =
            self.files.get(rel).ok_or_else(|| Located::in_file(self.display(rel), "no such file in the catalogue"))?;
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            Located::at(self.display(rel), line, "not valid UTF-8")
        })?;
        if let Some(at) = text.find('\0') {
            let line = text[..at].matches('\n').count() + 1;
            bail_at!(self.display(rel), line, "NUL byte; catalogue files are text");
        }
        if rel.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            check_yaml(text, &self.display(rel))?;
        }
        Ok(text)
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

/// Largest manifest or profile: real ones are a few KiB.
pub const MAX_YAML_BYTES: u64 = 256 * 1024;
/// Largest patch or other catalogue file.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Largest catalogue directory, all files together.
pub const MAX_CATALOG_BYTES: u64 = 64 * 1024 * 1024;
/// Deepest YAML nesting accepted (real manifests nest about 5 deep).
pub const MAX_YAML_DEPTH: usize = 32;

fn file_limit(rel: &Path) -> u64 {
    if rel.extension().is_some_and(|e| e == "yaml" || e == "yml") {
        MAX_YAML_BYTES
    } else {
        MAX_FILE_BYTES
    }
}

/// Refuse YAML nested deeper than [`MAX_YAML_DEPTH`] before any parser sees it (a parser's
/// time and memory on `[[[[…` grow much faster than the file), then refuse duplicate keys
/// (a YAML mapping silently keeps the last one), naming the file and line.
fn check_yaml(text: &str, shown: &str) -> Result<()> {
    let mut flow = 0usize;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let mut rest = &line[indent..];
        let mut block = indent / 2;
        while rest == "-" || rest.starts_with("- ") || rest.starts_with("? ") {
            block += 1;
            rest = rest.get(2..).unwrap_or("").trim_start_matches(' ');
        }
        let mut deepest = flow;
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        for c in rest.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '#') if prev == ' ' || prev == '\t' => break,
                (None, '[' | '{') => {
                    flow += 1;
                    deepest = deepest.max(flow);
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
            prev = c;
        }
        if block + deepest > MAX_YAML_DEPTH {
            bail_at!(shown, i + 1, "YAML nested deeper than {MAX_YAML_DEPTH} levels; refusing");
        }
    }
    if let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(text) {
        let msg = e.to_string();
        if !msg.contains("duplicate entry") {
            // Any other error is reported by the typed parse, with its own wording.
            return Ok(());
        }
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        let line = duplicate_line(text, &msg).or(e.location().map(|l| l.line())).unwrap_or(1);
        bail_at!(shown, line, "{msg}");
    }
    Ok(())
}

/// The line of the second `key:` at one indentation, for a "duplicate entry with key" error
/// (the parser reports where the mapping starts).
fn duplicate_line(text: &str, msg: &str) -> Option<usize> {
    let key = msg.split("duplicate entry with key ").nth(1)?.trim().trim_matches('"');
    let mut seen = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '-']).len();
        let rest = line.trim_start_matches([' ', '-']);
        let name = rest.split(':').next().unwrap_or("").trim().trim_matches(['"', '\'']);
        if name == key && rest.contains(':') && !seen.insert(indent) {
            return Some(i + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_yaml_is_refused_before_parsing() {
        let deep = "a: ".to_string() + &"[".repeat(MAX_YAML_DEPTH + 1);
        assert!(check_yaml(&deep, "f.yaml").unwrap_err().to_string().contains("f.yaml:1: YAML nested deeper"));
        let dashes = "- ".repeat(MAX_YAML_DEPTH + 1) + "x\n";
        assert!(check_yaml(&dashes, "f.yaml").is_err());
        let ok = "a: [[1, 2], {b: [3]}]\nc:\n  - d: 1\n    e: '[[[['\n";
        check_yaml(ok, "f.yaml").unwrap();
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_line() {
        let err = check_yaml("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml").unwrap_err().to_string();
        assert!(err.starts_with("f.yaml:4: ") && err.contains("duplicate"), "{err}");
        let err = check_yaml("a: 1\nb: 2\na: 3\n", "f.yaml").unwrap_err().to_string();
        assert!(err.starts_with("f.yaml:3: "), "{err}");
    }
}
