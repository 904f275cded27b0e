//! Catalogue upkeep: making variants for new releases (`port`, `record`), checking every fix
//! on every release (`matrix`), and the pieces they share: pristine upstream trees in the
//! cache ([`upstream`]), patch writing with anchors ([`diffgen`]), a three-way merge
//! ([`merge`]), and text edits of fix.yaml that keep its layout ([`yaml_edit`]); the runners of the
//! catalogue's Python: a fix's tests ([`pytest`]) and the conformance suite ([`conform`]).

pub mod child;
pub mod conform;
pub mod diffgen;
pub mod matrix;
pub mod merge;
pub mod port;
pub mod pytest;
pub mod upstream;
pub mod yaml_edit;

use std::path::{Path, PathBuf};

use crate::error::FileContext;
use anyhow::{bail, Context, Result};

use crate::catalog::manifest::{same_release, PatchEntry};
use crate::catalog::{Catalog, Fix};
use crate::hash::sha256_hex;
use crate::patch::{parse, state, SourceText};
use crate::tree::TreeName;

/// One file of a variant to write.
#[derive(Debug, Clone)]
pub struct NewFile {
    pub tree: TreeName,
    /// Relative to the tree root (`vllm/…`).
    pub file: String,
    pub pristine: Vec<u8>,
    pub patched: Vec<u8>,
    /// An existing patch (relative to the fix directory) that already turns exactly this
    /// pristine file into exactly these bytes; it is referenced instead of written again.
    pub reuse: Option<String>,
    /// The file the patch is made on when the caller knows it (`port`: the pristine file with
    /// the fixes this one comes after applied); `None`: found from `patched` ([`patch_base`]).
    pub base: Option<Vec<u8>>,
    /// The context width of each change of the patch this file's is ported from
    /// ([`diffgen::context_widths`]): the new patch keeps them. `None`: three lines, widened
    /// until each hunk is found once.
    pub context: Option<Vec<usize>>,
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub release: String,
    pub manifest: PathBuf,
    /// Patch files written (absolute) and reused (relative to the fix directory).
    pub patches: Vec<PathBuf>,
    pub reused: Vec<String>,
    /// Files whose edited copy equals the pristine one (not part of the variant).
    pub unchanged: Vec<String>,
    /// What else the user must know: a shared patch file left alone, what became of `verified:`.
    pub notes: Vec<String>,
}

/// The catalogue directory to write into; the built-in catalogue is refused.
pub fn writable_catalog(dir: Option<&Path>, command: &str) -> Result<PathBuf> {
    match dir {
        Some(dir) => Ok(dir.to_path_buf()),
        None => bail!(
            "`{command}` writes a variant into a catalogue directory, and the built-in catalogue is compiled into \
             this binary (it cannot be changed); give --catalog DIR, e.g. `--catalog .` in a checkout of gaudi-fixes \
             (the directory holding fixes/), then rebuild to ship it"
        ),
    }
}

/// The patch of one file, checked: it applies exactly to `pristine` and gives `patched`'s bytes.
/// With `context`, each change gets the width given ([`diffgen::file_patch_keeping`]).
pub fn checked_patch(file: &str, pristine: &[u8], patched: &[u8], context: Option<&[usize]>) -> Result<Option<String>> {
    let shown = Path::new(file);
    let old = SourceText::decode(pristine, shown)?;
    let new = SourceText::decode(patched, shown)?;
    let made = match context {
        Some(widths) => diffgen::file_patch_keeping(file, &old.lines, &new.lines, widths),
        None => diffgen::file_patch(file, &old.lines, &new.lines),
    };
    let Some(text) = made else {
        if pristine != patched {
            bail!("{file}: the edited file differs from the pristine one only in line endings, which a patch cannot carry");
        }
        return Ok(None);
    };
    let parsed = parse::parse(&text, Path::new(file)).context("parsing the generated patch")?;
    let fp = parsed.files.into_iter().next().context("the generated patch has no file")?;
    let eval = state::evaluate(&fp, &old);
    let applied = state::apply(&fp, &old, &eval).map(|t| t.encode());
    if applied.as_deref() != Some(patched) {
        bail!(
            "{file}: the generated patch does not reproduce the edited bytes exactly (line endings or a missing final \
             newline changed?); nothing was written"
        );
    }
    Ok(Some(text))
}

/// The file a fix's patch for `file` is made on: the pristine file with the patches of the
/// fixes it comes after (`requires:` or `after:`, to the same file, `release`'s variant) applied
/// first — what `apply` and `lint --upstream` give it — when `patched` carries their edits (a
/// tree with the profile applied, then edited by hand); else the pristine file. Without this, `record` put the
/// required fix's edits into this fix's patch, which then no longer applied after it.
fn patch_base(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    file: &str,
    pristine: &[u8],
    patched: &[u8],
) -> Result<Vec<u8>> {
    let shown = Path::new(file);
    let old = SourceText::decode(pristine, shown)?;
    let Ok((base, required)) = crate::catalog::relations::with_predecessors_applied(catalog, fix, release, file, old)
    else {
        return Ok(pristine.to_vec());
    };
    if required.is_empty() {
        return Ok(pristine.to_vec());
    }
    let new = SourceText::decode(patched, shown)?;
    let carries = required.iter().all(|name| {
        let Ok(other) = catalog.fix(name) else { return false };
        other
            .variants
            .iter()
            .filter(|v| same_release(&v.release, release))
            .flat_map(|v| &v.patches)
            .filter(|p| p.file == file)
            .all(|p| state::evaluate(&p.diff, &new).state == crate::patch::FileState::Applied)
    });
    Ok(if carries { base.encode() } else { pristine.to_vec() })
}

/// The patch file name of `file` within the variant directory: `<stem>.patch`, else (taken)
/// the path spelled out, else that with `-2`, `-3`, … .
fn patch_name(file: &str, taken: impl Fn(&str) -> bool) -> String {
    let stem = Path::new(file).file_stem().unwrap_or_default().to_string_lossy().to_string();
    let long = file.trim_end_matches(".py").replace('/', "__");
    let mut names = [stem, long.clone()].into_iter().chain((2..).map(|n| format!("{long}-{n}")));
    names.find(|n| !taken(&format!("{n}.patch"))).map(|n| format!("{n}.patch")).expect("an endless list")
}

/// The patch files (relative to the fix directory) that variants of `fix` other than `release`
/// read, each with those variants: one of them is never rewritten for `release`.
fn read_by_others(fix: &Fix, release: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for v in fix.variants.iter().filter(|v| !same_release(&v.release, release)) {
        for p in &v.patches {
            let rel = p.patch_path.strip_prefix(&fix.dir).unwrap_or(&p.patch_path).display().to_string();
            match out.iter_mut().find(|(r, _)| *r == rel) {
                Some((_, list)) => list.push(v.release.clone()),
                None => out.push((rel, vec![v.release.clone()])),
            }
        }
    }
    out
}

/// What becomes of the `verified:` list of the variant `release` replaces: kept when the new
/// entries are the old ones byte for byte (same files, pristine hashes and patch text), since
/// that is what was verified; else dropped, and a note says so.
fn verified_kept(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    new: &[(PatchEntry, String)],
) -> (Vec<String>, Option<String>) {
    let Some(old) = fix.variants.iter().find(|v| same_release(&v.release, release)) else { return (Vec::new(), None) };
    if old.verified.is_empty() {
        return (Vec::new(), None);
    }
    let same = old.patches.len() == new.len()
        && old.patches.iter().all(|vp| {
            new.iter().any(|(e, text)| {
                e.file == vp.file
                    && e.pristine_sha256 == vp.pristine_sha256
                    && catalog.files.text(&vp.patch_path).is_ok_and(|old_text| old_text == text)
            })
        });
    let list = format!("[{}]", old.verified.join(", "));
    if same {
        let note = format!("verified: {list} kept (the variant is the same, byte for byte)");
        (old.verified.clone(), Some(note))
    } else {
        let note = format!(
            "verified: {list} dropped: the patches changed, so those releases verified another variant; run `matrix --releases {} --fix {} --record` again",
            old.verified.join(","),
            fix.manifest.name
        );
        (Vec::new(), Some(note))
    }
}

/// Write release `release` of `fix` into the catalogue at `dir`: its patch files and its entry
/// in fix.yaml (replacing an entry of that name; its `verified:` is kept only when the variant
/// is the same, byte for byte). A patch file another variant reads is never rewritten: the new
/// patch gets a file of its own (copy-on-write). The catalogue is loaded again afterwards; if it
/// does not load, fix.yaml and the patches are put back.
pub fn write_variant(dir: &Path, catalog: &Catalog, fix: &Fix, release: &str, files: &[NewFile]) -> Result<Written> {
    write_variant_checked(dir, catalog, fix, release, files, &|_| Ok(()))
}

/// [`write_variant`], once `check` accepts the catalogue it would write, built in memory (the
/// new fix.yaml and patches over the loaded files): an error from `check` writes nothing.
pub fn write_variant_checked(
    dir: &Path,
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    files: &[NewFile],
    check: &dyn Fn(&Catalog) -> Result<()>,
) -> Result<Written> {
    let fix_dir = dir.join(&fix.dir);
    let manifest_path = fix_dir.join("fix.yaml");
    let old_manifest = std::fs::read_to_string(&manifest_path)
        .file_context(&manifest_path, || format!("reading {}", manifest_path.display()))?;
    let mut to_write: Vec<(PathBuf, String)> = Vec::new();
    let mut written = Written {
        release: release.to_string(),
        manifest: manifest_path.clone(),
        patches: Vec::new(),
        reused: Vec::new(),
        unchanged: Vec::new(),
        notes: Vec::new(),
    };
    let others = read_by_others(fix, release);
    let mut taken: Vec<String> = Vec::new();
    // Each entry with its patch text, to tell whether the variant changed.
    let mut made: Vec<(PatchEntry, String)> = Vec::new();
    for f in files {
        let pristine_sha256 = sha256_hex(&f.pristine);
        if let Some(reuse) = &f.reuse {
            let text = catalog.files.text(&fix.dir.join(reuse)).unwrap_or_default().to_string();
            made.push((PatchEntry { tree: f.tree, file: f.file.clone(), patch: reuse.clone(), pristine_sha256 }, text));
            written.reused.push(reuse.clone());
            continue;
        }
        let base = match &f.base {
            Some(base) => base.clone(),
            None => patch_base(catalog, fix, release, &f.file, &f.pristine, &f.patched)?,
        };
        let Some(text) = checked_patch(&f.file, &base, &f.patched, f.context.as_deref())? else {
            written.unchanged.push(f.file.clone());
            continue;
        };
        let shared = |rel: &str| others.iter().find(|(r, _)| r == rel).map(|(_, by)| by.join(", "));
        let plain = format!("{release}/{}", patch_name(&f.file, |n| taken.iter().any(|t| t == n)));
        let rel = match shared(&plain) {
            // Another variant reads that file and it already holds this patch: nothing to write.
            Some(_) if catalog.files.text(&fix.dir.join(&plain)).is_ok_and(|t| t == text) => {
                taken.push(plain.strip_prefix(&format!("{release}/")).unwrap_or(&plain).to_string());
                made.push((PatchEntry { tree: f.tree, file: f.file.clone(), patch: plain, pristine_sha256 }, text));
                continue;
            }
            Some(by) => {
                let own = format!(
                    "{release}/{}",
                    patch_name(&f.file, |n| {
                        let rel = format!("{release}/{n}");
                        taken.iter().any(|t| t == n) || shared(&rel).is_some() || fix_dir.join(&rel).exists()
                    })
                );
                written.notes.push(format!(
                    "{plain} is shared with {by}: left as it is (their bytes and verified: stay); {release} now reads {own}"
                ));
                own
            }
            None => plain,
        };
        taken.push(rel.strip_prefix(&format!("{release}/")).unwrap_or(&rel).to_string());
        to_write.push((fix_dir.join(&rel), text.clone()));
        made.push((PatchEntry { tree: f.tree, file: f.file.clone(), patch: rel, pristine_sha256 }, text));
    }
    if made.is_empty() {
        bail!("no file differs from its pristine copy: there is nothing to record for {release}");
    }
    let (verified, note) = verified_kept(catalog, fix, release, &made);
    written.notes.extend(note);
    let entries: Vec<PatchEntry> = made.into_iter().map(|(e, _)| e).collect();
    let new_manifest = yaml_edit::put_release(&old_manifest, release, &entries, &verified)
        .file_context(&manifest_path, || format!("editing {}", manifest_path.display()))?;
    let mut planned = catalog.files.clone();
    for (path, text) in &to_write {
        planned.files.insert(fix.dir.join(path.strip_prefix(&fix_dir).unwrap_or(path)), text.clone().into_bytes());
    }
    planned.files.insert(fix.dir.join("fix.yaml"), new_manifest.clone().into_bytes());
    check(
        &Catalog::from_files(planned)
            .context("the catalogue does not load with the new variant; nothing was written")?,
    )?;
    write_or_put_back(dir, catalog, &to_write, &manifest_path, &old_manifest, &new_manifest)?;
    written.patches = to_write.into_iter().map(|(p, _)| p).collect();
    Ok(written)
}

/// Write the patch files `to_write` and the new fix.yaml (`new_manifest` over `old_manifest`
/// at `manifest_path`), then load the catalogue at `dir` again; when any of it fails, every file
/// is put back as it was (a patch file that did not exist is removed).
fn write_or_put_back(
    dir: &Path,
    catalog: &Catalog,
    to_write: &[(PathBuf, String)],
    manifest_path: &Path,
    old_manifest: &str,
    new_manifest: &str,
) -> Result<()> {
    let mut backups: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
    let result = (|| -> Result<()> {
        for (path, text) in to_write {
            backups.push((path.clone(), std::fs::read(path).ok()));
            std::fs::create_dir_all(path.parent().expect("has a parent"))?;
            upstream::replace_file(path, text.as_bytes())?;
        }
        upstream::replace_file(manifest_path, new_manifest.as_bytes())?;
        Catalog::load(Some(dir)).context("the catalogue does not load with the new variant")?;
        Ok(())
    })();
    if let Err(err) = result {
        let _ = upstream::replace_file(manifest_path, old_manifest.as_bytes());
        for (path, old) in backups {
            match old {
                Some(bytes) => {
                    let _ = upstream::replace_file(&path, &bytes);
                }
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        return Err(err.context(format!("nothing was changed in {}", catalog.files.origin)));
    }
    Ok(())
}

/// Lock the catalogue directory `dir` for a writer (`record`, `port`, `matrix --record`), as a
/// tree is locked: one writer at a time, and a writer that has to wait says who holds it. What
/// the writer changes is read under the lock, so two writers never lose each other's edits.
pub fn lock_catalog(dir: &Path) -> Result<crate::transaction::TreeLocks> {
    crate::transaction::lock(&[dir.to_path_buf()], true)
}

/// Read `file` under the tree root `root` (`what` names it: `--edited`, `--to`), or say which
/// tree lacks it. As `apply` reads a tree: a FIFO, device or directory there, or a symlink
/// leading out of `root`, is refused (a FIFO used to block `record` forever, and an outside
/// symlink put the outside file's text into the patch).
pub fn read_in(root: &Path, file: &str, what: &str) -> Result<Vec<u8>> {
    let within = format!("{what} {}", root.display());
    crate::tree::read_inside(root, file, &within, crate::plan::MAX_FILE_BYTES)?
        .file_context(root.join(file), || format!("{what}: cannot read {}: no such file", root.join(file).display()))
}
