//! Which trees to act on, from a [`TreeQuery`]: the directories given (`--root` or
//! `GAUDI_FIXES_ROOT`, `--vllm`, `--vllm-gaudi`, resolved by the caller), else one spawn of the
//! Python interpreter asking `importlib.util.find_spec` where the packages are (it never
//! imports vLLM).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::tree::TreeName;

/// One tree found.
#[derive(Debug, Clone, Serialize)]
pub struct Tree {
    pub name: TreeName,
    /// The directory that holds the package directory (e.g. site-packages).
    pub root: PathBuf,
    /// How it was found, for reports (`--root`, `GAUDI_FIXES_ROOT`, `python3`, …).
    pub found_by: String,
    /// The version the tree says it is (`_version.py`, dist-info). Only a hint: fixes are
    /// matched by content.
    pub version: Option<String>,
    /// Found by the interpreter outside the directories it installs packages into (an editable
    /// install, `PYTHONPATH`, a `.pth` file); a note says where.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside_site_packages: bool,
}

/// The trees of one run; either may be absent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Trees {
    pub vllm: Option<Tree>,
    pub vllm_gaudi: Option<Tree>,
    /// Why a tree is absent, when there is something to say (python missing, …).
    pub notes: Vec<String>,
}

impl Trees {
    /// The tree of that name, if found.
    pub fn get(&self, name: TreeName) -> Option<&Tree> {
        match name {
            TreeName::Vllm => self.vllm.as_ref(),
            TreeName::VllmGaudi => self.vllm_gaudi.as_ref(),
        }
    }

    /// The found trees, in report order.
    pub fn all(&self) -> impl Iterator<Item = &Tree> {
        self.vllm.iter().chain(self.vllm_gaudi.iter())
    }
}

/// Where to look for the trees, resolved once from the flags and the environment.
#[derive(Debug, Clone, Default)]
pub struct TreeQuery {
    /// A directory holding `vllm/` and/or `vllm_gaudi/`, with what it came from (`--root` or
    /// `GAUDI_FIXES_ROOT`), for reports and messages.
    pub root: Option<(PathBuf, &'static str)>,
    /// `--vllm`: the directory holding `vllm/` (or that package directory itself).
    pub vllm: Option<PathBuf>,
    /// `--vllm-gaudi`: the directory holding `vllm_gaudi/` (or that package directory itself).
    pub vllm_gaudi: Option<PathBuf>,
    /// Asked where the packages are installed when no directory is given.
    pub python: String,
}

/// Find the trees for this run: the directories given, else what `python` has installed.
pub fn discover(query: &TreeQuery) -> Result<Trees> {
    if query.root.is_none() && query.vllm.is_none() && query.vllm_gaudi.is_none() {
        return from_python(&query.python);
    }
    let mut trees = Trees::default();
    if let Some((root, found_by)) = &query.root {
        let root = existing_dir(root, found_by)?;
        for name in TreeName::ALL {
            if root.join(name.as_str()).is_dir() {
                set(&mut trees, tree(name, root.clone(), found_by));
            }
        }
        if trees.vllm.is_none() && trees.vllm_gaudi.is_none() {
            bail!("{}: holds neither vllm/ nor vllm_gaudi/", spelled(found_by, &root));
        }
    }
    for (name, flag, path) in
        [(TreeName::Vllm, "--vllm", &query.vllm), (TreeName::VllmGaudi, "--vllm-gaudi", &query.vllm_gaudi)]
    {
        if let Some(path) = path {
            set(&mut trees, tree(name, package_root(path, name, flag)?, flag));
        }
    }
    Ok(trees)
}

/// A path as the user gave it: `--root DIR` for a flag, `GAUDI_FIXES_ROOT=DIR` for a variable.
fn spelled(what: &str, path: &Path) -> String {
    if what.starts_with("--") {
        format!("{what} {}", path.display())
    } else {
        format!("{what}={}", path.display())
    }
}

fn set(trees: &mut Trees, t: Tree) {
    match t.name {
        TreeName::Vllm => trees.vllm = Some(t),
        TreeName::VllmGaudi => trees.vllm_gaudi = Some(t),
    }
}

fn tree(name: TreeName, root: PathBuf, found_by: &str) -> Tree {
    let version = version_hint(name, &root);
    Tree { name, root, found_by: found_by.to_string(), version, outside_site_packages: false }
}

/// The directory, canonical: one directory however it is spelled (`T/vllm/..`, symlinks), so
/// it is locked once. A path that is not UTF-8 is refused (paths go into reports and journals).
fn existing_dir(path: &Path, what: &str) -> Result<PathBuf> {
    if !path.is_dir() {
        bail!("{}: no such directory", spelled(what, path));
    }
    let real = std::fs::canonicalize(path).with_context(|| spelled(what, path))?;
    utf8_path(&real, what)?;
    Ok(real)
}

fn utf8_path(path: &Path, what: &str) -> Result<()> {
    if path.to_str().is_none() {
        bail!(
            "{}: the path is not valid UTF-8; gaudi-fixes only works on UTF-8 paths (rename the directory)",
            spelled(what, path)
        );
    }
    Ok(())
}

/// Accept either the directory holding the package or the package directory itself.
fn package_root(path: &Path, name: TreeName, flag: &str) -> Result<PathBuf> {
    let path = existing_dir(path, flag)?;
    if path.join(name.as_str()).is_dir() {
        return Ok(path);
    }
    if path.file_name().is_some_and(|n| n == name.as_str()) {
        if let Some(parent) = path.parent() {
            return Ok(parent.to_path_buf());
        }
    }
    bail!("{}: no {name}/ package there (give the directory that holds it)", spelled(flag, &path))
}

/// Asked of the interpreter: where `vllm` and `vllm_gaudi` would be imported from, and where it
/// installs packages. `-c` puts the working directory first on `sys.path` (as `''`); it is taken
/// off before anything is imported, so a checkout in the directory gaudi-fixes runs from is
/// never what is found (a console script such as `vllm serve` does not search it either).
/// `PYTHONPATH`, `.pth` files and the user site stay: `vllm serve` honours them too.
const FIND_SPEC: &str = r#"
import sys
if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] in ("", "."):
    del sys.path[0]
import importlib.util, json, os, site, sysconfig
MARK = sys.argv[1]
homes = []
def home(path):
    if path:
        path = os.path.realpath(path)
        if path not in homes:
            homes.append(path)
for key in ("purelib", "platlib"):
    home(sysconfig.get_paths().get(key))
try:
    for path in site.getsitepackages():
        home(path)
except Exception:
    pass
if site.ENABLE_USER_SITE:
    try:
        home(site.getusersitepackages())
    except Exception:
        pass
out = {"site_packages": homes}
for name in ("vllm", "vllm_gaudi"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    locs = list(spec.submodule_search_locations or []) if spec else []
    out[name] = locs[0] if locs else None
print("\n" + MARK + json.dumps(out))
"#;

/// What starts the line [`FIND_SPEC`] answers on: a `.pth` file or `sitecustomize` that prints
/// (to stdout, before the answer) is no answer.
const MARK: &str = "gaudi-fixes-find-spec: ";

/// What [`FIND_SPEC`] prints.
#[derive(serde::Deserialize)]
struct Found {
    vllm: Option<String>,
    vllm_gaudi: Option<String>,
    /// Where the interpreter installs packages (purelib, platlib, site and user site), real paths.
    #[serde(default)]
    site_packages: Vec<PathBuf>,
}

/// The interpreter `--python` names, resolved once by one rule for discovery and for every
/// child (conform's probe, suite and shrinker, `conform --setup`, `test`'s pytest), which run
/// from other directories: a path with a `/` made absolute against the working directory, a bare
/// name looked up on `PATH` as the shell would from here (a relative or empty entry read against
/// the working directory). A name found nowhere is left as given (running it then fails, and
/// the error names it). Not canonicalized: a venv's `bin/python` is a symlink whose target
/// would lose the venv.
pub fn resolve_interpreter(python: &str) -> String {
    let Ok(cwd) = std::env::current_dir() else { return python.to_string() };
    let program = if python.contains('/') { std::path::absolute(python).ok() } else { on_path(python, &cwd) };
    program.and_then(|p| p.to_str().map(str::to_string)).unwrap_or_else(|| python.to_string())
}

/// `PYTHONPATH` as Python reads it in the working directory, spelled so it means the same from
/// any other: each entry made absolute against the working directory, an empty entry (`:/opt/x`,
/// `/opt/x:`, `a::b`, what `PYTHONPATH=$PYTHONPATH:/opt/x` gives with it unset) being the
/// working directory itself, as Python reads it. An unset or empty `PYTHONPATH` (which Python
/// ignores) is returned as it is.
pub fn python_path() -> Option<std::ffi::OsString> {
    let path = std::env::var_os("PYTHONPATH")?;
    if path.is_empty() {
        return Some(path);
    }
    let Ok(cwd) = std::env::current_dir() else { return Some(path) };
    let entries: Vec<PathBuf> = std::env::split_paths(&path)
        .map(|p| if p.as_os_str().is_empty() { cwd.clone() } else { cwd.join(p) })
        .collect();
    std::env::join_paths(entries).ok().or(Some(path))
}

/// A command running the interpreter `python` (resolved by [`resolve_interpreter`]) with the
/// environment read as it is here: `PYTHONPATH` by [`python_path`], and pyenv's version picked
/// from `.python-version` in the working directory (its shims read `PYENV_DIR`). Every spawn
/// of `--python` goes through this, so discovery and every child run one interpreter with one
/// reading of `PYTHONPATH`, wherever the child starts.
pub fn interpreter_command(python: &str) -> Command {
    let mut command = Command::new(resolve_interpreter(python));
    if let Some(path) = python_path() {
        command.env("PYTHONPATH", path);
    }
    if std::env::var_os("PYENV_DIR").is_none() {
        if let Ok(cwd) = std::env::current_dir() {
            command.env("PYENV_DIR", cwd);
        }
    }
    command
}

/// The interpreter is run from `/`, not from the directory gaudi-fixes runs in, so nothing there
/// is on its `sys.path` whatever the Python version (what is relative to the working directory
/// is made absolute first by [`interpreter_command`]).
fn python_command(python: &str) -> Command {
    let mut command = interpreter_command(python);
    command.current_dir("/");
    command
}

/// `name` looked up on `PATH` as the shell would from `cwd` (a relative or empty entry is read
/// against it): the child starts elsewhere, where such an entry would name another directory.
fn on_path(name: &str, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?).find_map(|dir| {
        let path = cwd.join(dir).join(name);
        let meta = std::fs::metadata(&path).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(path)
    })
}

fn from_python(python: &str) -> Result<Trees> {
    let mut trees = Trees::default();
    let output = match python_command(python).args(["-c", FIND_SPEC, MARK]).output() {
        Ok(output) => output,
        Err(err) => {
            trees.notes.push(format!(
                "could not run `{python}` to find installed packages ({err}); give --root or --vllm/--vllm-gaudi"
            ));
            return Ok(trees);
        }
    };
    if !output.status.success() {
        trees.notes.push(format!(
            "`{python}` failed while looking for installed packages: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
        return Ok(trees);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = stdout.lines().rev().find_map(|l| l.strip_prefix(MARK));
    let found: Found = answer
        .and_then(|json| serde_json::from_str(json).ok())
        .with_context(|| format!("unexpected output from `{python}`: {stdout}"))?;
    for (name, pkg) in [(TreeName::Vllm, &found.vllm), (TreeName::VllmGaudi, &found.vllm_gaudi)] {
        match pkg {
            Some(pkg) => {
                let root = Path::new(pkg).parent().map(Path::to_path_buf).unwrap_or_default();
                let root = std::fs::canonicalize(&root).unwrap_or(root);
                let mut found_tree = tree(name, root, python);
                if found_tree.version.is_none() {
                    found_tree.version = installed_from(name, &found_tree.root, &found.site_packages);
                }
                if !found.site_packages.is_empty() && !found.site_packages.contains(&found_tree.root) {
                    let note = format!(
                        "`{python}` imports {name} from {}, which is not where it installs packages ({}): an \
                         editable install, PYTHONPATH or a .pth file puts it there; that is the tree patched, \
                         as it is what `vllm serve` imports with this environment",
                        found_tree.root.join(name.as_str()).display(),
                        found.site_packages.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                    );
                    trees.notes.push(note);
                    found_tree.outside_site_packages = true;
                }
                set(&mut trees, found_tree);
            }
            None => trees.notes.push(format!("`{python}` has no `{name}` package installed")),
        }
    }
    Ok(trees)
}

/// `vllm/_version.py`, else a `<pkg>-<version>.dist-info` beside the package.
pub fn version_hint(name: TreeName, root: &Path) -> Option<String> {
    if let Some(text) = read_small_regular(&root.join(name.as_str()).join("_version.py")) {
        let re =
            regex::Regex::new(r#"(?m)^(?:__version__\s*=\s*)?version\s*=\s*['"]([^'"]+)['"]"#).expect("valid regex");
        if let Some(c) = re.captures(&text) {
            return Some(c[1].to_string());
        }
    }
    let prefix = format!("{}-", name.as_str());
    std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
        let file = e.file_name().to_string_lossy().to_string();
        file.strip_prefix(&prefix)?.strip_suffix(".dist-info").map(str::to_string)
    })
}

/// The version of an editable install (`pip install -e CHECKOUT`): its dist-info is in
/// site-packages, not beside the package, and its `direct_url.json` names the checkout
/// (`"url": "file:///…"`) that holds the package directory found.
fn installed_from(name: TreeName, root: &Path, sites: &[PathBuf]) -> Option<String> {
    let prefix = format!("{}-", name.as_str());
    let root = std::fs::canonicalize(root).ok()?;
    sites.iter().find_map(|site| {
        std::fs::read_dir(site).ok()?.flatten().find_map(|e| {
            let file = e.file_name().to_string_lossy().to_string();
            let version = file.strip_prefix(&prefix)?.strip_suffix(".dist-info")?.to_string();
            let text = read_small_regular(&e.path().join("direct_url.json"))?;
            let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
            let url = doc.get("url")?.as_str()?.strip_prefix("file://")?;
            let url = percent_decoded(url);
            (std::fs::canonicalize(&url).ok()? == root).then_some(version)
        })
    })
}

/// `%XX` escapes of a `file://` URL's path decoded (a space is `%20` in `direct_url.json`).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A regular file's text, or `None`: a FIFO, device or directory there is never opened (it
/// would block), a symlink is not followed, and anything over 64 KiB is not a version file.
fn read_small_regular(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 64 * 1024 {
        return None;
    }
    let mut file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.by_ref().take(64 * 1024).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_version_py() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("vllm")).unwrap();
        std::fs::write(dir.path().join("vllm/_version.py"), "__version__ = version = '0.26.0'\n").unwrap();
        assert_eq!(version_hint(TreeName::Vllm, dir.path()).as_deref(), Some("0.26.0"));
        std::fs::create_dir(dir.path().join("vllm_gaudi-0.26.0.dist-info")).unwrap();
        assert_eq!(version_hint(TreeName::VllmGaudi, dir.path()).as_deref(), Some("0.26.0"));
    }
}
