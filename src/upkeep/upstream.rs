//! Pristine upstream trees in the user cache, laid out as scripts/fetch-upstream.sh makes them:
//! - `<cache>/upstream/<release>/vllm/`: the vllm/ package of the vLLM wheel, fetched with
//!   `pip download --no-deps` into `<cache>/wheels/` and extracted once;
//! - `<cache>/gaudi/<name>/vllm_gaudi/`: vllm_gaudi, which is on no package index: from
//!   `GAUDI_FIXES_VLLM_GAUDI_SRC` (a directory holding vllm_gaudi/), else extracted from the
//!   archives `vllm_gaudi-<release>.tar.gz` / `vllm_gaudi-main-*.tar.gz` in
//!   `GAUDI_FIXES_VLLM_GAUDI_ARCHIVES`, else under `shared/upstream/` beside the repository
//!   (found from the current directory up), else absent.
//!
//! `<cache>` is `GAUDI_FIXES_CACHE`, else `$XDG_CACHE_HOME/gaudi-fixes`, else
//! `~/.cache/gaudi-fixes`. Trees there are never modified; users copy them. The cache may be
//! shared by runs in other PID namespaces (containers on one volume): each run's own
//! directories have names no other run has and are locked while it lives; an extraction is
//! checked whole before it is renamed into place, with a manifest the next user checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::FileContext;
use anyhow::{bail, Context, Result};

/// The cache directory.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("GAUDI_FIXES_CACHE").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("gaudi-fixes"));
    }
    let home =
        std::env::var_os("HOME").filter(|v| !v.is_empty()).context("neither GAUDI_FIXES_CACHE nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/gaudi-fixes"))
}

/// A release name as the catalogue writes it: `v0.26.0` from `0.26`, `v0.26`, `0.26.0` or
/// `v00.026.0` (one spelling, so an alias never becomes a second variant); anything else is an
/// error.
pub fn release_tag(name: &str) -> Result<String> {
    // Two or three numbers, as vLLM's releases have (`v1.2.3.4.5` is no release).
    let numbers =
        name.trim_start_matches('v').split(['.', 'r']).take_while(|p| p.bytes().all(|b| b.is_ascii_digit())).count();
    crate::catalog::manifest::canonical_release(name).filter(|_| numbers <= 3).with_context(|| {
        format!("`{name}` is not a release like v0.26.0 (X.Y or X.Y.Z, `v` optional, e.g. 0.34 or v0.34.0)")
    })
}

/// The cached pristine vLLM root for `release` (holding vllm/), if it is there.
pub fn cached_vllm(release: &str) -> Result<Option<PathBuf>> {
    let root = cache_dir()?.join("upstream").join(release);
    if !root.join("vllm").is_dir() {
        return Ok(None);
    }
    check_manifest(&root)?;
    Ok(Some(root))
}

/// The pristine vLLM root for `release`, downloading and extracting the wheel if needed.
pub fn vllm_tree(python: &str, release: &str, mut progress: impl FnMut(&str)) -> Result<PathBuf> {
    if let Some(root) = cached_vllm(release)? {
        return Ok(root);
    }
    let cache = cache_dir()?;
    let version = release.trim_start_matches('v');
    let wheels = cache.join("wheels");
    std::fs::create_dir_all(&wheels).file_context(&wheels, || format!("creating {}", wheels.display()))?;
    let find = || -> Option<PathBuf> {
        let prefix = format!("vllm-{version}-");
        std::fs::read_dir(&wheels).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
    };
    let wheel = match find() {
        Some(w) => w,
        None => {
            progress(&format!("downloading vllm=={version} (pip download --no-deps)"));
            let out = crate::discover::interpreter_command(python)
                .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "--dest"])
                .arg(&wheels)
                .arg(format!("vllm=={version}"))
                .output()
                .with_context(|| format!("running `{python} -m pip download` (give --python with pip)"))?;
            if !out.status.success() {
                bail!(
                    "`{python} -m pip download vllm=={version}` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("")
                );
            }
            find().with_context(|| format!("pip download left no vllm-{version}-*.whl in {}", wheels.display()))?
        }
    };
    progress(&format!("extracting vllm/ from {}", wheel.display()));
    let parent = cache.join("upstream");
    std::fs::create_dir_all(&parent)?;
    let own = OwnDir::new(&parent, &format!(".{release}"))?;
    let tmp = own.path().to_path_buf();
    const EXTRACT: &str = r#"
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        parts = info.filename.split('/')
        if parts[0] != 'vllm' or '..' in parts or os.path.isabs(info.filename):
            continue
        zf.extract(info, out)
        if not info.is_dir():
            got = os.path.join(out, *parts)
            if not os.path.isfile(got) or os.path.getsize(got) != info.file_size:
                sys.exit(wheel + ': ' + info.filename + ' was not extracted whole')
if not os.path.isfile(os.path.join(out, 'vllm', '__init__.py')):
    sys.exit(wheel + ': no vllm/__init__.py in the wheel')
"#;
    let out = crate::discover::interpreter_command(python).arg("-c").arg(EXTRACT).arg(&wheel).arg(&tmp).output()?;
    if !out.status.success() {
        bail!("extracting {}: {}", wheel.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let marker = format!(
        "release: {release}\nwheel: {}\nvllm_gaudi: absent\n",
        wheel.file_name().unwrap_or_default().to_string_lossy()
    );
    std::fs::write(tmp.join(".gaudi-fixes-upstream"), marker)?;
    write_manifest(&tmp)?;
    let dest = parent.join(release);
    own.install(&dest, |d| d.join("vllm").is_dir() && check_manifest(d).is_ok())?;
    Ok(dest)
}

/// Where a vllm_gaudi tree came from, for reports (and read back by `matrix --merge`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GaudiTree {
    /// The directory holding vllm_gaudi/.
    pub root: PathBuf,
    /// `GAUDI_FIXES_VLLM_GAUDI_SRC`, `cache gaudi/<name>`, or the archive's name.
    pub source: String,
}

/// The directory of vllm_gaudi archives: `GAUDI_FIXES_VLLM_GAUDI_ARCHIVES` when it is set (set
/// and empty: none), else `shared/upstream/` beside the repository, searched from the current
/// directory upwards (`<dir>/shared/upstream` or `<dir>/../shared/upstream`).
fn archives_dir() -> Result<Option<PathBuf>> {
    if let Some(dir) = std::env::var_os("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES") {
        if dir.is_empty() {
            return Ok(None);
        }
        let dir = PathBuf::from(dir);
        if !dir.is_dir() {
            bail!("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES={}: not a directory", dir.display());
        }
        return Ok(Some(dir));
    }
    Ok(searched_archives_dir())
}

fn searched_archives_dir() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    for dir in cwd.ancestors() {
        for cand in [dir.join("shared/upstream"), dir.join("../shared/upstream")] {
            if cand.is_dir() {
                return Some(cand);
            }
        }
    }
    None
}

/// The vllm_gaudi tree to pair with vLLM `release`: the env override, the cache, the
/// release's archive, then main's (newest) archive. `None` when there is none.
pub fn gaudi_tree(release: &str) -> Result<Option<GaudiTree>> {
    if let Some(src) = std::env::var_os("GAUDI_FIXES_VLLM_GAUDI_SRC").filter(|v| !v.is_empty()) {
        let root = PathBuf::from(src);
        if !root.join("vllm_gaudi").is_dir() {
            bail!("GAUDI_FIXES_VLLM_GAUDI_SRC={}: no vllm_gaudi/ there", root.display());
        }
        return Ok(Some(GaudiTree { root, source: "GAUDI_FIXES_VLLM_GAUDI_SRC".into() }));
    }
    let cache = cache_dir()?.join("gaudi");
    let archives = archives_dir()?;
    let archive_for = |name: &str| -> Option<PathBuf> {
        let dir = archives.as_ref()?;
        if name == "main" {
            let mut mains: Vec<PathBuf> = std::fs::read_dir(dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("vllm_gaudi-main-") && n.ends_with(".tar.gz"))
                })
                .collect();
            mains.sort();
            mains.pop()
        } else {
            Some(dir.join(format!("vllm_gaudi-{name}.tar.gz"))).filter(|p| p.is_file())
        }
    };
    for name in [release, "main"] {
        let root = cache.join(name);
        if root.join("vllm_gaudi").is_dir() {
            check_manifest(&root)?;
            return Ok(Some(GaudiTree { root, source: format!("cache gaudi/{name}") }));
        }
        if let Some(archive) = archive_for(name) {
            std::fs::create_dir_all(&cache)?;
            let own = OwnDir::new(&cache, &format!(".{name}"))?;
            let tmp = own.path().to_path_buf();
            let st = Command::new("tar")
                .arg("-xzf")
                .arg(&archive)
                .arg("-C")
                .arg(&tmp)
                .status()
                .context("running tar to extract vllm_gaudi")?;
            if !st.success() || !tmp.join("vllm_gaudi").is_dir() {
                bail!("{}: could not extract vllm_gaudi/ from it", archive.display());
            }
            check_extracted(&archive, &tmp)?;
            write_manifest(&tmp)?;
            own.install(&root, |d| d.join("vllm_gaudi").is_dir() && check_manifest(d).is_ok())?;
            let label = archive.file_name().unwrap_or_default().to_string_lossy().to_string();
            return Ok(Some(GaudiTree { root, source: label }));
        }
    }
    Ok(None)
}

/// Every file of an extracted archive is in `dir` (an archive member missing from the tree
/// would give a pristine tree that is not).
fn check_extracted(archive: &Path, dir: &Path) -> Result<()> {
    let out = Command::new("tar").arg("-tzf").arg(archive).output().context("running tar to list an archive")?;
    if !out.status.success() {
        bail!("{}: tar cannot list it", archive.display());
    }
    let names = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&str> =
        names.lines().filter(|n| !n.ends_with('/') && std::fs::symlink_metadata(dir.join(n)).is_err()).collect();
    if let Some(first) = missing.first() {
        bail!("{}: {} member(s) were not extracted (the first: {first})", archive.display(), missing.len());
    }
    Ok(())
}

/// The list of a cached pristine tree's files (size and path, one a line), written when the
/// tree is made and checked by every run that uses it: a tree missing a file, or with one cut
/// short, is refused instead of trusted as pristine. Trees made by hand or by
/// scripts/fetch-upstream.sh have none and are taken as they are.
const MANIFEST: &str = ".gaudi-fixes-manifest";
const MANIFEST_HEADER: &str = "gaudi-fixes manifest 1: <size> <path> of every file";

/// Write the manifest of the tree `dir` (every regular file and symlink under it).
fn write_manifest(dir: &Path) -> Result<()> {
    let mut lines = vec![MANIFEST_HEADER.to_string()];
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.file_context(dir, || format!("listing {}", dir.display()))?;
        if entry.file_type().is_dir() {
            continue;
        }
        let rel = entry.path().strip_prefix(dir).expect("under dir");
        let size = entry.metadata().file_context(entry.path(), || format!("reading {}", entry.path().display()))?.len();
        lines.push(format!("{size} {}", rel.display()));
    }
    let path = dir.join(MANIFEST);
    std::fs::write(&path, lines.join("\n") + "\n").file_context(&path, || format!("writing {}", path.display()))
}

/// Check the tree `dir` against its manifest, when it has one.
pub fn check_manifest(dir: &Path) -> Result<()> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).file_context(&path, || format!("reading {}", path.display())),
    };
    let mut lines = text.lines();
    if lines.next() != Some(MANIFEST_HEADER) {
        bail!("{}: not a gaudi-fixes manifest", path.display());
    }
    let (mut listed, mut wrong) = (0usize, Vec::new());
    for line in lines {
        listed += 1;
        let Some((size, rel)) = line.split_once(' ') else { bail!("{}: bad line `{line}`", path.display()) };
        let ok = std::fs::symlink_metadata(dir.join(rel)).is_ok_and(|m| size.parse() == Ok(m.len()));
        if !ok {
            wrong.push(rel);
        }
    }
    if let Some(first) = wrong.first() {
        bail!(
            "{}: the cached pristine tree is not whole: {} of its {listed} files are missing or changed (the first: \
             {first}); remove it and run again to extract it afresh",
            dir.display(),
            wrong.len()
        );
    }
    Ok(())
}

/// The mark of a directory a run makes in the cache and removes when it is done: a temp
/// extraction in `upstream/` or `gaudi/`, a patched copy in `scratch/`. The PID after it, then
/// a random part, say whose it is: the PID alone is not unique across PID namespaces (two
/// containers sharing one cache volume are both PID 1).
const OWN_MARK: &str = ".gaudi-fixes-";

/// The prefix a directory has while it is made, until its lock is held: [`remove_stale`]
/// never sees a directory of a live run without its lock.
const MAKING: &str = ".making";

/// A directory of this run's own in the cache, `<parent>/<stem>.gaudi-fixes-<pid>-<random>`,
/// locked (flock) while this run lives and removed when it is dropped. A run killed before
/// that leaves it; [`remove_stale`] removes it the next time, once its lock is free.
pub struct OwnDir {
    path: PathBuf,
    /// The open directory holding the lock; the kernel drops it when the run dies.
    _lock: std::fs::File,
    /// Renamed into place: nothing to remove.
    installed: bool,
}

/// 64 random bits, hex (from the kernel; the clock when it has none to give).
fn random_hex() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let from_kernel = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok();
    if !from_kernel {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes = (nanos as u64).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Take `dir`'s lock without waiting; whether it was free.
fn try_lock(dir: &std::fs::File) -> bool {
    // SAFETY: flock(2) on a directory we opened.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(dir), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

impl OwnDir {
    /// Make it afresh, under a name no other run has: made under a `.making` name, locked,
    /// then renamed to its own (the lock stays with the open directory).
    pub fn new(parent: &Path, stem: &str) -> Result<OwnDir> {
        let name = format!("{stem}{OWN_MARK}{}-{}", std::process::id(), random_hex());
        let making = parent.join(format!("{MAKING}{name}"));
        let path = parent.join(&name);
        std::fs::create_dir_all(parent).file_context(parent, || format!("creating {}", parent.display()))?;
        std::fs::create_dir(&making).file_context(&making, || format!("creating {}", making.display()))?;
        let lock = std::fs::File::open(&making).file_context(&making, || format!("opening {}", making.display()))?;
        if !try_lock(&lock) {
            bail!("{}: locked by another process; cannot use it", making.display());
        }
        std::fs::rename(&making, &path).file_context(&path, || format!("naming {}", path.display()))?;
        Ok(OwnDir { path, _lock: lock, installed: false })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make it `dest` (a rename, so that `dest` appears whole or not at all), once `complete`
    /// says it is whole. Another run preparing the same tree may have got there first: when
    /// `dest` is then `complete`, that tree is used and this one dropped (two runs used to
    /// have the second fail with "Directory not empty" and leave its copy in the cache).
    pub fn install(mut self, dest: &Path, complete: impl Fn(&Path) -> bool) -> Result<()> {
        if !complete(&self.path) {
            bail!("{}: the new tree is not whole; not installing it as {}", self.path.display(), dest.display());
        }
        match std::fs::rename(&self.path, dest) {
            Ok(()) => {
                self.installed = true;
                Ok(())
            }
            Err(_) if complete(dest) => Ok(()), // dropped: ours is removed
            Err(e) => Err(e).file_context(dest, || format!("moving the new tree to {}", dest.display())),
        }
    }
}

impl Drop for OwnDir {
    fn drop(&mut self) {
        if !self.installed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Whether process `pid` exists (a zombie or another user's process counts).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Remove what killed runs left in the cache (`cache`): every [`OwnDir`] whose lock nobody
/// holds (the lock, not the PID, says whether its run lives: a PID is another process in
/// another PID namespace) and whose PID is no process here; a sentence each, for stderr. A
/// live run's directories are left alone, and removed only while holding their lock.
pub fn remove_stale(cache: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    for sub in ["upstream", "gaudi", "scratch"] {
        let Ok(entries) = std::fs::read_dir(cache.join(sub)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(MAKING) {
                continue; // Being made: its lock comes before its name.
            }
            let Some(pid) =
                name.rsplit_once(OWN_MARK).and_then(|(_, p)| p.split('-').next()).and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            if pid == std::process::id() || alive(pid) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(dir) = std::fs::File::open(&path) else { continue };
            if !try_lock(&dir) {
                continue; // Held: its run lives (in another PID namespace).
            }
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    notes.push(format!("removed {}, left by a killed gaudi-fixes run (PID {pid})", path.display()))
                }
                Err(e) => {
                    notes.push(format!("cannot remove {}, left by a killed run (PID {pid}): {e}", path.display()))
                }
            }
        }
    }
    notes
}

/// Copy `src` (a package directory) to `dest` as hard links where the file system allows
/// (vLLM's package is ~800 MB), else as a copy. Files written later into `dest` must be
/// replaced (written beside and renamed), never written in place.
pub fn link_copy(src: &Path, dest: &Path) -> Result<()> {
    let ok = Command::new("cp").arg("-al").arg(src).arg(dest).status().is_ok_and(|s| s.success());
    if ok {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dest);
    let st = Command::new("cp").arg("-a").arg(src).arg(dest).status().context("running cp")?;
    if !st.success() {
        bail!("cannot copy {} to {}", src.display(), dest.display());
    }
    Ok(())
}

/// Replace `path` with `bytes` without writing through a hard link.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // A name of this run's own: two writers never share (or remove) each other's temp file.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}-{nanos}.gaudi-fixes-tmp", std::process::id()));
    std::fs::write(&tmp, bytes).file_context(&tmp, || format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).file_context(path, || format!("replacing {}", path.display()))?;
    Ok(())
}
