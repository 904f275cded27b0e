//! `gaudi-fixes port FIX --to DIR --release NAME [--from VARIANT] [--from-tree DIR]`: carry a
//! variant to a new release. Per file, three-way: the old release's pristine file (from
//! `--from-tree` or the cache), the old patched file (pristine + the variant's patch), and the
//! new release's pristine file (under `--to`). When the old patch applies exactly to the new
//! file it is re-written for it; otherwise the change is merged line by line, and when it
//! touches lines upstream changed too, the conflicting hunks are shown and nothing is written
//! (exit 2): edit a copy by hand and use `record`. Each new hunk keeps the context width of
//! the hunk it is ported from (a deliberately zero-context hunk stays so). Before anything is
//! written, the catalogue with the new variant is checked in memory as `lint --upstream` checks
//! that release on its pristine trees (`--to`, else the cache); a finding the catalogue did not
//! have before refuses the port (exit 3, nothing written) and is shown.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::catalog::manifest::same_release;
use crate::catalog::{Catalog, Fix, Variant, VariantPatch};
use crate::exit_status::ExitStatus;
use crate::hash::sha256_hex;
use crate::patch::{state, FileState, SourceText};
use crate::report::upkeep as upkeep_report;
use crate::settings::{PortArgs, Settings};
use crate::tree::TreeName;
use crate::upkeep::{self, merge, upstream, NewFile};

/// Run `port`.
pub fn run(global: &Settings, args: &PortArgs) -> Result<ExitStatus> {
    let dir = upkeep::writable_catalog(global.catalog.as_deref(), "port")?;
    let _lock = upkeep::lock_catalog(&dir)?;
    let catalog = Catalog::load(Some(&dir))?;
    let fix = catalog.fix(&args.fix)?;
    let release = upstream::release_tag(&args.release)?;
    if !args.to.is_dir() {
        bail!("--to {}: no such directory", args.to.display());
    }
    let from: &Variant = match &args.from {
        Some(name) => {
            fix.variants.iter().find(|v| same_release(&v.release, name) && !v.upstreamed).with_context(|| {
                let known: Vec<&str> =
                    fix.variants.iter().filter(|v| !v.upstreamed).map(|v| v.release.as_str()).collect();
                format!("{} has no variant `{name}` with patches (has: {})", fix.manifest.name, known.join(", "))
            })?
        }
        None => fix.variants.iter().rev().find(|v| !v.upstreamed).context("the fix has no variant with patches")?,
    };
    if same_release(&from.release, &release) {
        bail!(
            "--from {} and --release {release} are the same variant; use `record` to refresh a variant",
            from.release
        );
    }
    let mut new_files = Vec::new();
    let mut conflicts: Vec<(String, Vec<merge::Conflict>)> = Vec::new();
    let mut how: Vec<String> = Vec::new();
    for vp in &from.patches {
        match port_file(&catalog, fix, from, &release, vp, args, &mut how)? {
            Ported::File(file) => new_files.push(file),
            Ported::Conflicts(c) => conflicts.push((vp.file.clone(), c)),
        }
    }
    if !conflicts.is_empty() {
        let doc = upkeep_report::PortConflicts {
            fix: &fix.manifest.name,
            from: &from.release,
            to: &release,
            conflicts: &conflicts,
        };
        crate::report::emit_document(global.output(), &doc)?;
        return Ok(ExitStatus::Drifted);
    }
    let root_of = |tree: TreeName| pristine_root(args, &release, tree);
    let before = crate::catalog::lint::release_findings(&catalog, &release, &root_of)?;
    let check = |planned: &Catalog| -> Result<()> {
        let found = crate::catalog::lint::release_findings(planned, &release, &root_of)?;
        let new: Vec<String> = found
            .iter()
            .filter(|f| !before.iter().any(|b| b.file == f.file && b.message == f.message))
            .map(|f| format!("  {}: {}", f.file, f.message))
            .collect();
        if !new.is_empty() {
            bail!(
                "the ported {release} variant of {} is not what `lint --upstream` accepts on the pristine {release} \
                 trees; nothing was written (edit a copy by hand and use `record`):\n{}",
                fix.manifest.name,
                new.join("\n")
            );
        }
        Ok(())
    };
    let written = upkeep::write_variant_checked(&dir, &catalog, fix, &release, &new_files, &check)?;
    let doc = upkeep_report::WrittenDoc {
        catalog: global.catalog.as_deref(),
        fix: &fix.manifest.name,
        written: &written,
        command: "port",
        how: &how,
    };
    crate::report::emit_document(global.output(), &doc)?;
    Ok(ExitStatus::Applied)
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
    args: &PortArgs,
    how: &mut Vec<String>,
) -> Result<Ported> {
    let new_root = new_root(args, release, vp.tree, &vp.file, &from.release, how)?;
    let old_root = old_root(args, &from.release, vp.tree)?;
    let old_bytes = upkeep::read_in(&old_root, &vp.file, "old pristine tree")?;
    if sha256_hex(&old_bytes) != vp.pristine_sha256 {
        bail!(
            "{}: is not the pristine {} file the variant was made on (sha256 differs); give --from-tree DIR \
             holding the pristine {} trees",
            old_root.join(&vp.file).display(),
            from.release,
            from.release
        );
    }
    let new_bytes = upkeep::read_in(&new_root, &vp.file, "--to")?;
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
    let context = Some(crate::upkeep::diffgen::context_widths(&vp.diff));
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

/// The new release's pristine root for `tree`: `--to`, else (for a tree `--to` lacks) the cache.
fn new_root(
    args: &PortArgs,
    release: &str,
    tree: TreeName,
    file: &str,
    from: &str,
    how: &mut Vec<String>,
) -> Result<PathBuf> {
    if args.to.join(tree.as_str()).is_dir() {
        return Ok(args.to.clone());
    }
    let cached = match tree {
        TreeName::Vllm => upstream::cached_vllm(release)?.map(|r| (r, "cache".to_string())),
        TreeName::VllmGaudi => upstream::gaudi_tree(release)?.map(|g| (g.root, g.source)),
    };
    match cached {
        Some((root, source)) => {
            how.push(format!("{tree}: not under --to; using {} ({source})", root.display()));
            Ok(root)
        }
        None => bail!(
            "--to {}: no {tree}/ tree there or in the cache, and {from} patches {file}; give a directory holding both trees",
            args.to.display()
        ),
    }
}

/// Where `port` finds the new release's pristine `tree` to check its result on, as `lint
/// --upstream` would: `--to`, else the cache; `None` when neither has it.
fn pristine_root(args: &PortArgs, release: &str, tree: TreeName) -> Option<PathBuf> {
    if args.to.join(tree.as_str()).is_dir() {
        return Some(args.to.clone());
    }
    match tree {
        TreeName::Vllm => upstream::cached_vllm(release).ok().flatten(),
        TreeName::VllmGaudi => upstream::gaudi_tree(release).ok().flatten().map(|g| g.root),
    }
}

/// The old release's pristine root for `tree`: `--from-tree`, else the cache.
fn old_root(args: &PortArgs, release: &str, tree: TreeName) -> Result<PathBuf> {
    if let Some(dir) = &args.from_tree {
        if !dir.join(tree.as_str()).is_dir() {
            bail!("--from-tree {}: no {}/ there", dir.display(), tree);
        }
        return Ok(dir.clone());
    }
    let found = match tree {
        TreeName::Vllm => upstream::cached_vllm(release)?,
        TreeName::VllmGaudi => upstream::gaudi_tree(release)?.map(|g| g.root),
    };
    found.with_context(|| {
        format!(
            "no pristine {release} {tree} tree in the cache ({}); give --from-tree DIR, or fetch it with \
             `gaudi-fixes matrix --releases {release} --no-tests` / scripts/fetch-upstream.sh {release}",
            upstream::cache_dir().map(|d| d.display().to_string()).unwrap_or_default()
        )
    })
}
