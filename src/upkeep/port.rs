//! The port operation (`gaudi-fixes port`): carry a variant to a new release, file by file,
//! three-way. Per file: the old release's pristine file (`--from-tree`, else the cache), the old
//! patched file (pristine + the variant's patch), and the new release's pristine file (`--to`,
//! else the cache), each with the fixes it is made on applied first. When the old patch applies
//! exactly to the new file it is re-written for it; otherwise the change is merged line by line,
//! and lines upstream changed too are conflicts. What the command writes and checks:
//! `commands/port.rs`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::advice::{Advice, Advised};

use super::{merge, upstream, NewFile};
use crate::catalog::finding::Finding;
use crate::catalog::manifest::same_release;
use crate::catalog::{Catalog, Fix, Variant, VariantPatch};
use crate::hash::sha256_hex;
use crate::patch::{state, FileState, SourceText};
use crate::tree::TreeName;

/// Where a port reads pristine trees: the new release's (`--to`) and the old one's
/// (`--from-tree`); the cache for a tree neither holds.
pub struct Trees<'a> {
    pub to: &'a Path,
    pub from_tree: Option<&'a Path>,
}

/// The variant of `fix` to carry to `release`: `from` (a release it has patches for), else its
/// newest with patches; never `release`'s own (`record` refreshes that).
pub fn variant_to_port<'f>(fix: &'f Fix, from: Option<&str>, release: &str) -> Result<&'f Variant> {
    let variant = match from {
        Some(name) => {
            fix.variants.iter().find(|v| same_release(&v.release, name) && !v.upstreamed).with_context(|| {
                let known: Vec<&str> =
                    fix.variants.iter().filter(|v| !v.upstreamed).map(|v| v.release.as_str()).collect();
                format!("{} has no variant `{name}` with patches (has: {})", fix.manifest.name, known.join(", "))
            })?
        }
        None => fix.variants.iter().rev().find(|v| !v.upstreamed).context("the fix has no variant with patches")?,
    };
    if same_release(&variant.release, release) {
        bail!(
            "--from {} and --release {release} are the same variant; use `record` to refresh a variant",
            variant.release
        );
    }
    Ok(variant)
}

/// Every file of `from` ported to `release`: the new variant's files, or (`Err`) each file's
/// lines upstream changed too. `how` says what was done to each.
#[allow(clippy::type_complexity)]
pub fn port(
    catalog: &Catalog,
    fix: &Fix,
    from: &Variant,
    release: &str,
    trees: &Trees<'_>,
    how: &mut Vec<String>,
) -> Result<Result<Vec<NewFile>, Vec<(String, Vec<merge::Conflict>)>>> {
    let mut files = Vec::new();
    let mut conflicts = Vec::new();
    for vp in &from.patches {
        match port_file(catalog, fix, from, release, vp, trees, how)? {
            Ported::File(file) => files.push(file),
            Ported::Conflicts(c) => conflicts.push((vp.file.clone(), c)),
        }
    }
    Ok(if conflicts.is_empty() { Ok(files) } else { Err(conflicts) })
}

/// The check a ported catalogue must pass before it is written: what `lint --upstream` finds on
/// `release`'s pristine trees (`--to`, else the cache) brings no finding the catalogue did not
/// have ([`new_findings`]).
pub fn lint_check<'a>(
    catalog: &Catalog,
    fix: &'a Fix,
    release: &'a str,
    trees: &'a Trees<'a>,
) -> Result<impl Fn(&Catalog) -> Result<()> + 'a> {
    let root_of = move |tree: TreeName| pristine_root(trees.to, release, tree);
    let before = crate::catalog::lint::release_findings(catalog, release, &root_of)?;
    Ok(move |planned: &Catalog| -> Result<()> {
        let found = crate::catalog::lint::release_findings(planned, release, &root_of)?;
        let new: Vec<String> =
            new_findings(&before, &found).iter().map(|f| format!("  {}: {}", f.file, f.message)).collect();
        if !new.is_empty() {
            bail!(
                "the ported {release} variant of {} is not what `lint --upstream` accepts on the pristine {release} \
                 trees; nothing was written (edit a copy by hand and use `record`):\n{}",
                fix.manifest.name,
                new.join("\n")
            );
        }
        Ok(())
    })
}

/// What porting one file gave: the new variant's file, or the lines upstream changed too.
enum Ported {
    File(NewFile),
    Conflicts(Vec<merge::Conflict>),
}

/// Port one patch of `from` onto the `release` tree: reuse it where upstream did not change the
/// file, re-write it where it applies at offsets, else merge three-way (or report conflicts).
/// Every file is taken with the fixes it is made on applied first. `how` says what was done.
fn port_file(
    catalog: &Catalog,
    fix: &Fix,
    from: &Variant,
    release: &str,
    vp: &VariantPatch,
    trees: &Trees<'_>,
    how: &mut Vec<String>,
) -> Result<Ported> {
    let new_root = new_root(trees.to, release, vp.tree, &vp.file, &from.release, how)?;
    let old_root = old_root(trees.from_tree, &from.release, vp.tree)?;
    let old_bytes = super::read_in(&old_root, &vp.file, "old pristine tree")?;
    if sha256_hex(&old_bytes) != vp.pristine_sha256 {
        bail!(
            "{}: is not the pristine {} file the variant was made on (sha256 differs); give --from-tree DIR \
             holding the pristine {} trees",
            old_root.join(&vp.file).display(),
            from.release,
            from.release
        );
    }
    let new_bytes = super::read_in(&new_root, &vp.file, "--to")?;
    let shown = std::path::Path::new(&vp.file);
    let (old, new) = on_predecessors(
        catalog,
        fix,
        (&from.release, SourceText::decode(&old_bytes, shown)?),
        (release, SourceText::decode(&new_bytes, shown)?),
        &vp.file,
        how,
    )?;
    if sha256_hex(&new_bytes) == vp.pristine_sha256 && old.encode() == new.encode() {
        // Same file upstream: the variant's patch is reused as it is.
        let rel = vp.patch_path.strip_prefix(&fix.dir).unwrap_or(&vp.patch_path).display().to_string();
        how.push(format!("{}: unchanged upstream, reusing {rel}", vp.file));
        return Ok(Ported::File(NewFile {
            tree: vp.tree,
            file: vp.file.clone(),
            pristine: new_bytes.clone(),
            patched: Vec::new(),
            reuse: Some(rel),
            base: None,
            context: None,
        }));
    }
    let eval = state::evaluate(&vp.diff, &old);
    let old_patched = state::apply(&vp.diff, &old, &eval).with_context(|| {
        format!("{}: the {} patch does not apply to the file it was made on", vp.file, from.release)
    })?;
    let new_eval = state::evaluate(&vp.diff, &new);
    let patched = if new_eval.state == FileState::NotApplied {
        how.push(format!(
            "{}: the {} patch applies to the new file (at offsets); re-written for it",
            vp.file, from.release
        ));
        state::apply(&vp.diff, &new, &new_eval).expect("not applied evaluates to an edit").encode()
    } else {
        match merge::merge3(&old.lines, &old_patched.lines, &new.lines) {
            Ok(lines) => {
                how.push(format!("{}: merged three-way (upstream changed lines near the fix)", vp.file));
                let mut t = new.clone();
                let eol = new.eols.first().copied().unwrap_or("\n");
                t.eols = lines.iter().map(|_| eol).collect();
                if new.eols.last() == Some(&"") {
                    if let Some(last) = t.eols.last_mut() {
                        *last = "";
                    }
                }
                t.lines = lines;
                t.encode()
            }
            Err(c) => return Ok(Ported::Conflicts(c)),
        }
    };
    let base = Some(new.encode());
    // Each hunk keeps the context width of the hunk it is ported from (bad-words-rows' one-line
    // hunk has none on purpose: three lines there are lines a later fix edits).
    let context = Some(super::diffgen::context_widths(&vp.diff));
    Ok(Ported::File(NewFile {
        tree: vp.tree,
        file: vp.file.clone(),
        pristine: new_bytes,
        patched,
        reuse: None,
        base,
        context,
    }))
}

/// The files the fix's patch is made on, in the old and the new release: each pristine file with
/// the patches of the fixes it comes after (`requires:`, `after:`) applied first — as `apply`
/// and `lint --upstream` give it — so the ported patch is made on top of theirs, not on the bare
/// file. A fix this one is made on in the old release but which has no variant for the new
/// one is an error: port it first.
fn on_predecessors(
    catalog: &Catalog,
    fix: &crate::catalog::Fix,
    (from, old): (&str, SourceText),
    (to, new): (&str, SourceText),
    file: &str,
    how: &mut Vec<String>,
) -> Result<(SourceText, SourceText)> {
    use crate::catalog::relations::with_predecessors_applied;
    let (old, old_on) = with_predecessors_applied(catalog, fix, from, file, old).map_err(anyhow::Error::msg)?;
    let (new, new_on) = with_predecessors_applied(catalog, fix, to, file, new).map_err(anyhow::Error::msg)?;
    for name in old_on.iter().filter(|n| !new_on.contains(n)) {
        if catalog.fix(name)?.variants.iter().all(|v| !same_release(&v.release, to)) {
            bail!(
                "{file}: {} comes after {name}, whose {from} patch edits this file (the {from} patch of {} is made \
                 on top of it), and {name} has no {to} variant yet: port {name} to {to} first; nothing was written",
                fix.manifest.name,
                fix.manifest.name
            );
        }
    }
    if !new_on.is_empty() {
        how.push(format!("{file}: made on top of {} ({to})", new_on.join(" + ")));
    }
    Ok((old, new))
}

/// The pristine `tree` of `release`: under `given` when it holds `tree/`, else the cache's; with
/// where the cache's came from (`None` for `given`). `None` when neither has it.
fn release_root(given: Option<&Path>, release: &str, tree: TreeName) -> Result<Option<(PathBuf, Option<String>)>> {
    if let Some(dir) = given.filter(|d| d.join(tree.as_str()).is_dir()) {
        return Ok(Some((dir.to_path_buf(), None)));
    }
    Ok(match tree {
        TreeName::Vllm => upstream::cached_vllm(release)?.map(|r| (r, Some("cache".to_string()))),
        TreeName::VllmGaudi => upstream::gaudi_tree(release)?.map(|g| (g.root, Some(g.source))),
    })
}

/// The new release's pristine root for `tree`: `--to`, else (for a tree `--to` lacks, saying
/// so in `how`) the cache.
fn new_root(
    to: &Path,
    release: &str,
    tree: TreeName,
    file: &str,
    from: &str,
    how: &mut Vec<String>,
) -> Result<PathBuf> {
    match release_root(Some(to), release, tree)? {
        Some((root, None)) => Ok(root),
        Some((root, Some(source))) => {
            how.push(format!("{tree}: not under --to; using {} ({source})", root.display()));
            Ok(root)
        }
        None => bail!(
            "--to {}: no {tree}/ tree there or in the cache, and {from} patches {file}; give a directory holding both trees",
            to.display()
        ),
    }
}

/// Where `port` finds the new release's pristine `tree` to check its result on, as `lint
/// --upstream` would: `--to`, else the cache; `None` when neither has it.
pub fn pristine_root(to: &Path, release: &str, tree: TreeName) -> Option<PathBuf> {
    release_root(Some(to), release, tree).ok().flatten().map(|(root, _)| root)
}

/// The old release's pristine root for `tree`: `--from-tree` (which must hold it), else the cache.
fn old_root(from_tree: Option<&Path>, release: &str, tree: TreeName) -> Result<PathBuf> {
    if let Some(dir) = from_tree.filter(|d| !d.join(tree.as_str()).is_dir()) {
        bail!("--from-tree {}: no {}/ there", dir.display(), tree);
    }
    let found = release_root(from_tree, release, tree)?.map(|(root, _)| root);
    found.ok_or_else(|| {
        let message = format!(
            "no pristine {release} {tree} tree in the cache ({}); give --from-tree DIR, or fetch it with \
             {{0}} / scripts/fetch-upstream.sh {release}",
            upstream::cache_dir().map(|d| d.display().to_string()).unwrap_or_default()
        );
        Advised::new(message, vec![Advice::Fetch { release: release.to_string() }]).into()
    })
}

/// The findings of `found` that `before` did not have: told apart by file and code (a kind of
/// finding more often in a file than before), not by the words of their messages.
pub fn new_findings<'f>(before: &[Finding], found: &'f [Finding]) -> Vec<&'f Finding> {
    let count = |list: &[Finding], f: &Finding| list.iter().filter(|x| x.file == f.file && x.code == f.code).count();
    found.iter().filter(|f| count(found, f) > count(before, f)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::finding::Code;

    #[test]
    fn a_new_finding_is_one_more_of_its_kind_in_its_file_whatever_its_words() {
        let f = |file: &str, code, message: &str| Finding { file: file.into(), code, message: message.into() };
        let before = [f("a.patch", Code::NotUnique, "hunk 1 occurs 2 times (lines 3, 9)")];
        // The same finding, its line numbers moved by the port: not new.
        let moved = [f("a.patch", Code::NotUnique, "hunk 1 occurs 2 times (lines 4, 10)")];
        assert!(new_findings(&before, &moved).is_empty());
        // Another kind in the same file, or one more of the same kind: new.
        let more = [moved[0].clone(), f("a.patch", Code::Anchor, "hunk 2: no anchor")];
        assert_eq!(new_findings(&before, &more).len(), 1);
        let twice = [moved[0].clone(), f("a.patch", Code::NotUnique, "hunk 2 occurs 3 times")];
        assert_eq!(new_findings(&before, &twice).len(), 2);
    }
}
