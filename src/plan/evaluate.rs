//! Judging one fix on the trees (each release variant tried, the verdict chosen, explained)
//! and simulating its edits on the workspace.

use anyhow::{Context, Result};

use super::reason;
use super::verdict::*;
use super::workspace::Workspace;
use crate::catalog::{Catalog, Fix, Variant, VariantPatch};
use crate::discover::Trees;
use crate::hash::sha256_hex;
use crate::patch::state::{self, FileEval};
use crate::patch::FileState;
use crate::tree::{TreeFilter, TreeName};

/// Judge one fix on the trees found, explain the verdict, and when a tree it needs is
/// missing, make it an error that still shows what the other tree holds.
pub(super) fn evaluate<'f>(
    catalog: &Catalog,
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    recorded: &Recorded,
    ws: &mut Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let (mut report, chosen) = evaluate_found(catalog, fix, trees, only, recorded.get(&fix.manifest.name), ws)?;
    reason::explain(fix, &mut report, trees);
    let missing: Vec<String> = fix
        .variants
        .iter()
        .flat_map(|v| v.patches.iter().map(|p| p.tree))
        .filter(|t| only.includes(*t) && trees.get(*t).is_none())
        .map(|t| t.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return Ok((report, chosen));
    }
    let checked = report.files.iter().any(|f| !matches!(f.state, FileOutcome::NoTree | FileOutcome::Skipped));
    let mut message = format!(
        "needs the {} tree, which was not found (give --root DIR holding {}/, or --{} DIR; or leave it out with --only-tree)",
        missing.join(" and "),
        missing[0],
        missing[0].replace('_', "-")
    );
    if checked {
        let state = serde_json::to_value(report.state).ok().and_then(|v| v.as_str().map(str::to_string));
        message.push_str(&format!(
            "; the trees found were checked: {}{}",
            state.unwrap_or_default().replace('-', " "),
            report.variant.as_deref().map_or(String::new(), |v| format!(" [{v}]"))
        ));
    }
    report.message = Some(message);
    report.state = FixState::Error;
    Ok((report, None))
}

/// Judge one fix: try each variant, keep the first clean one.
fn evaluate_found<'f>(
    catalog: &Catalog,
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    recorded: Option<&String>,
    ws: &mut Workspace,
) -> Result<(FixReport, Option<&'f Variant>)> {
    let mut report = FixReport {
        name: fix.manifest.name.clone(),
        kind: fix.manifest.kind,
        state: FixState::Error,
        variant: None,
        action: None,
        message: None,
        reason: None,
        files: Vec::new(),
        basis: Basis::OnChain,
        advice: Vec::new(),
    };
    let needed = needed_trees(fix, only);
    if needed.is_empty() && fix.variants.iter().any(|v| !v.patches.is_empty()) {
        report.state = FixState::Skipped;
        report.message = Some("every file of this fix is in a tree left out with --only-tree".into());
        return Ok((report, None));
    }
    // A tree that is missing makes the fix an error (in `evaluate`), but the trees found are
    // still judged, so one missing tree does not hide the other's state.
    if needed.iter().all(|t| trees.get(*t).is_none()) {
        return Ok((report, None));
    }
    let mut candidates = Vec::new();
    for variant in fix.variants.iter().filter(|v| !v.upstreamed) {
        candidates.push(Candidate::judge(variant, trees, only, ws)?);
    }
    // Upstream's own change found in the files (`detect:`): nothing to apply, unless ours is.
    if !candidates.iter().any(|c| c.clean == Some(FixState::Applied)) {
        if let Some((up, message)) = super::detect::detected(fix, trees, only, ws)? {
            report.state = FixState::Upstreamed;
            report.variant = Some(up.release.clone());
            report.message = Some(message);
            return Ok((report, None));
        }
    }
    if let Some(c) = best_clean(&candidates, trees, recorded) {
        return clean_verdict(catalog, fix, c, trees, only, ws, report);
    }
    if let Some(up) =
        fix.variants.iter().find(|v| v.upstreamed && v.detect.is_empty() && hint_matches(trees, &v.release))
    {
        report.state = FixState::Upstreamed;
        report.variant = Some(up.release.clone());
        report.message = Some(format!("release {} has this fix upstream; nothing to apply", up.release));
        return Ok((report, None));
    }
    report.state = FixState::Drifted;
    if let Some(c) = nearest(&candidates, trees) {
        nearest_drifted(c, &mut report);
    }
    Ok((report, None))
}

/// The trees the fix's patches are in, left after `--only-tree`, in order.
fn needed_trees(fix: &Fix, only: &TreeFilter) -> Vec<TreeName> {
    let mut v: Vec<TreeName> =
        fix.variants.iter().flat_map(|v| v.patches.iter().map(|p| p.tree)).filter(|t| only.includes(*t)).collect();
    v.sort();
    v.dedup();
    v
}

/// Whether the vLLM tree says it is `release` (the version hint).
fn hint_matches(trees: &Trees, release: &str) -> bool {
    let want = release.trim_start_matches('v');
    trees.vllm.as_ref().and_then(|t| t.version.as_deref()).is_some_and(|v| v == want)
}

/// One release variant, judged on the trees.
struct Candidate<'f> {
    variant: &'f Variant,
    files: Vec<FileReport>,
    /// Every file read is applied (or every one not applied).
    clean: Option<FixState>,
    /// Every file read is the release's pristine file.
    pristine: bool,
    /// How far from clean (a missing file counts as many drifted hunks).
    drifted_hunks: usize,
}

impl<'f> Candidate<'f> {
    /// Judge each of `variant`'s files, then the variant as a whole.
    fn judge(variant: &'f Variant, trees: &Trees, only: &TreeFilter, ws: &mut Workspace) -> Result<Candidate<'f>> {
        let mut files = Vec::new();
        for vp in &variant.patches {
            files.push(judge_file(vp, trees, only, ws)?);
        }
        let judged: Vec<FileOutcome> = files
            .iter()
            .map(|f| f.state)
            .filter(|s| !matches!(s, FileOutcome::Skipped | FileOutcome::NoTree))
            .collect();
        let clean = if !judged.is_empty() && judged.iter().all(|s| *s == FileOutcome::Applied) {
            Some(FixState::Applied)
        } else if !judged.is_empty() && judged.iter().all(|s| *s == FileOutcome::NotApplied) {
            Some(FixState::NotApplied)
        } else {
            None
        };
        let pristine =
            files.iter().filter(|f| !matches!(f.state, FileOutcome::Skipped | FileOutcome::NoTree)).all(|f| f.pristine);
        let drifted_hunks = files
            .iter()
            .map(|f| match f.state {
                FileOutcome::Missing => 1000,
                _ => f.hunks.iter().filter(|h| matches!(h.state, crate::patch::HunkState::Drifted { .. })).count(),
            })
            .sum();
        Ok(Candidate { variant, files, clean, pristine, drifted_hunks })
    }
}

/// One patched file of a variant: left out, its tree or file missing, or read and placed.
fn judge_file(vp: &VariantPatch, trees: &Trees, only: &TreeFilter, ws: &mut Workspace) -> Result<FileReport> {
    let patch = vp.patch_path.display().to_string();
    if !only.includes(vp.tree) {
        return Ok(FileReport::unread(vp.tree, &vp.file, None, FileOutcome::Skipped, patch));
    }
    let Some(tree) = trees.get(vp.tree) else {
        return Ok(FileReport::unread(vp.tree, &vp.file, None, FileOutcome::NoTree, patch));
    };
    let Some(loaded) = ws.get(tree, &vp.file)? else {
        return Ok(FileReport::unread(vp.tree, &vp.file, Some(tree.root.clone()), FileOutcome::Missing, patch));
    };
    let mut eval: FileEval = state::evaluate(&vp.diff, &loaded.text);
    reason::align_excerpts(&loaded.text, &mut eval.hunks);
    // The file as the tree holds it (not as earlier fixes of this run left it in memory): the
    // evidence of which release it is, the same whatever is simulated before it.
    let sha256 = sha256_hex(&loaded.original);
    let pristine = sha256 == vp.pristine_sha256;
    let state = match eval.state {
        FileState::Applied => FileOutcome::Applied,
        FileState::NotApplied => FileOutcome::NotApplied,
        FileState::Drifted => FileOutcome::Drifted,
    };
    Ok(FileReport {
        tree: vp.tree,
        path: vp.file.clone(),
        tree_root: Some(tree.root.clone()),
        state,
        pristine,
        partial: eval.partial,
        patch,
        hunks: eval.hunks,
        sha256: Some(sha256),
        reason: None,
    })
}

/// A pristine tree is the strongest evidence; then a variant that is applied (once the file
/// is edited, another variant's older context may still be there, not applied: picking it
/// would report the fix not applied and let a second apply write it on top), the one the
/// provenance record names (`recorded`: what apply wrote) first; then any clean variant, the
/// version hint first, in manifest order.
fn best_clean<'c, 'f>(
    candidates: &'c [Candidate<'f>],
    trees: &Trees,
    recorded: Option<&String>,
) -> Option<&'c Candidate<'f>> {
    let best = candidates.iter().enumerate().filter(|(_, c)| c.clean.is_some()).min_by_key(|(i, c)| {
        let applied = c.clean == Some(FixState::Applied);
        let as_recorded = applied && recorded == Some(&c.variant.release);
        (!c.pristine, !applied, !as_recorded, !hint_matches(trees, &c.variant.release), *i)
    });
    best.map(|(_, c)| c)
}

/// The verdict when variant `c` is clean: its state, unless a second variant's edits are in
/// the same file too.
fn clean_verdict<'f>(
    catalog: &Catalog,
    fix: &'f Fix,
    c: &Candidate<'f>,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
    mut report: FixReport,
) -> Result<(FixReport, Option<&'f Variant>)> {
    report.variant = Some(c.variant.release.clone());
    report.files = c.files.clone();
    if c.clean == Some(FixState::Applied) {
        if let Some((file, other)) = second_variant_applied(fix, c.variant, trees, only, ws)? {
            report.state = FixState::Drifted;
            report.message = Some(format!(
                "{file} carries the edits of two variants of this fix ({} and {other}): revert one by hand, or restore the pristine file and apply again",
                c.variant.release,
            ));
            return Ok((report, None));
        }
    }
    report.state = c.clean.expect("a clean candidate");
    let offsets = c.files.iter().flat_map(|f| &f.hunks).any(|h| match h.state {
        crate::patch::HunkState::Applied { offset, .. } | crate::patch::HunkState::NotApplied { offset, .. } => {
            offset != 0
        }
        _ => false,
    });
    if offsets {
        // Why: once applied, other fixes on the same file move its lines; not applied (a
        // pristine tree), a patch made on top of the fixes it comes after counts their lines in
        // its header; else the file differs from the variant's. (Another release: reason.rs.)
        // Applied, the fixes it comes after are blamed only when nothing else is in the file: with
        // its hunks reverted, the file is the pristine one (else, say what else may be there).
        let applied = c.clean == Some(FixState::Applied);
        let alone = applied && only_this_fix_in_its_files(c.variant, trees, only, ws)?;
        if applied && !alone && catalogue_fixes_explain(catalog, c.variant, trees, only, ws)? {
            // The catalogue's own fixes moved its lines (an `apply` run again): nothing to say.
            return Ok((report, Some(c.variant)));
        }
        let after = fix.manifest.after.as_slice();
        let why = match (applied, after) {
            (true, _) if !alone => format!(
                "the file differs above them from the one the {} variant was made on (other fixes applied to it, \
                 changes by hand, or another release)",
                c.variant.release
            ),
            (true, [one]) => {
                format!("its patch is made on top of {one}, which is not applied here (applied, it adds lines above)")
            }
            (true, []) => {
                format!("the lines above them differ from the file the {} variant was made on", c.variant.release)
            }
            (true, after) => format!(
                "its patch is made on top of {}, which are not applied here (applied, they add lines above)",
                after.join(", ")
            ),
            (false, [one]) => format!("its patch is made on top of {one}, which adds lines above when applied"),
            (false, []) => {
                format!("the lines above them differ from the file the {} variant was made on", c.variant.release)
            }
            (false, after) => {
                format!("its patch is made on top of {}, which add lines above when applied", after.join(", "))
            }
        };
        report.message = Some(format!(
            "some hunks were found away from their patch's line numbers: {why}; each hunk is still placed by its exact context"
        ));
    }
    Ok((report, Some(c.variant)))
}

/// Whether each file `variant` patches holds only its edits: with its hunks reverted in memory,
/// the file is the pristine one the variant names. Then no other fix (and no hand) changed it.
fn only_this_fix_in_its_files(variant: &Variant, trees: &Trees, only: &TreeFilter, ws: &mut Workspace) -> Result<bool> {
    for vp in variant.patches.iter().filter(|vp| only.includes(vp.tree)) {
        let Some(tree) = trees.get(vp.tree) else { continue };
        let Some(loaded) = ws.get(tree, &vp.file)? else { continue };
        let eval = state::evaluate(&vp.diff, &loaded.text);
        let Some(reverted) = state::revert(&vp.diff, &loaded.text, &eval) else { return Ok(false) };
        if sha256_hex(&reverted.encode()) != vp.pristine_sha256 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the catalogue's fixes explain what else is in the files `variant` patches (applied,
/// its hunks found away from their line numbers): with every fix that reads applied there, this
/// one included, reverted in memory in the reverse of the order `apply` applies them (a fix
/// made on top of another comes off first), each file is the pristine one the variant names.
fn catalogue_fixes_explain(
    catalog: &Catalog,
    variant: &Variant,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<bool> {
    let names: Vec<String> = catalog.fixes.iter().map(|f| f.manifest.name.clone()).collect();
    let order = catalog.chain(&names)?;
    for vp in variant.patches.iter().filter(|vp| only.includes(vp.tree)) {
        let Some(tree) = trees.get(vp.tree) else { continue };
        let Some(loaded) = ws.get(tree, &vp.file)? else { continue };
        let mut text = loaded.text.clone();
        for fix in order.iter().rev() {
            let patches = fix.variants.iter().flat_map(|v| &v.patches);
            let reverted = patches.filter(|p| p.tree == vp.tree && p.file == vp.file).find_map(|p| {
                let eval = state::evaluate(&p.diff, &text);
                state::revert(&p.diff, &text, &eval)
            });
            if let Some(reverted) = reverted {
                text = reverted;
            }
        }
        if sha256_hex(&text.encode()) != vp.pristine_sha256 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The variant nearest to the tree when none is clean: the version hint first, then the
/// fewest drifted hunks, in manifest order.
fn nearest<'c, 'f>(candidates: &'c [Candidate<'f>], trees: &Trees) -> Option<&'c Candidate<'f>> {
    let nearest = candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (!hint_matches(trees, &c.variant.release), c.drifted_hunks, *i));
    nearest.map(|(_, c)| c)
}

/// Show the drifted fix as variant `c` sees it, and say how it drifted.
fn nearest_drifted(c: &Candidate<'_>, report: &mut FixReport) {
    report.variant = Some(c.variant.release.clone());
    report.files = c.files.clone();
    let partial = c.files.iter().any(|f| f.partial)
        || (c.files.iter().any(|f| f.state == FileOutcome::Applied)
            && c.files.iter().any(|f| f.state == FileOutcome::NotApplied));
    report.message = Some(if partial {
        "partially applied: some hunks are applied and others are not".into()
    } else if c.files.iter().any(|f| f.state == FileOutcome::Missing) {
        "a file this fix patches is missing from the tree".into()
    } else {
        format!("no release variant applies exactly to this tree; showing the nearest ({})", c.variant.release)
    });
}

/// Whether a file that `applied` is applied to also carries another variant's edits (what a
/// second apply wrote on top, choosing the other variant): that variant's post-image is still
/// found once `applied`'s hunks are reverted. A variant whose patch for the file is the same
/// (or whose post-image is only `applied`'s own lines) is not found then. Returns the first
/// such file and the other variant's release.
fn second_variant_applied(
    fix: &Fix,
    applied: &Variant,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<Option<(String, String)>> {
    for vp in applied.patches.iter().filter(|vp| only.includes(vp.tree)) {
        let Some(tree) = trees.get(vp.tree) else { continue };
        let Some(loaded) = ws.get(tree, &vp.file)? else { continue };
        let text = loaded.text.clone();
        let eval = state::evaluate(&vp.diff, &text);
        let Some(reverted) = state::revert(&vp.diff, &text, &eval) else { continue };
        for other in fix.variants.iter().filter(|v| !v.upstreamed && v.release != applied.release) {
            for op in other.patches.iter().filter(|op| op.tree == vp.tree && op.file == vp.file && op.diff != vp.diff) {
                if state::evaluate(&op.diff, &text).state == FileState::Applied
                    && state::evaluate(&op.diff, &reverted).state == FileState::Applied
                {
                    return Ok(Some((vp.file.clone(), other.release.clone())));
                }
            }
        }
    }
    Ok(None)
}

/// When a drifted fix patches a file an earlier fix of this run already edited (under this
/// name or another), the two conflict: [`Basis::Conflict`], naming both.
pub(super) fn shared_file_conflict<'a>(
    fix: &Fix,
    drifted: impl Iterator<Item = (TreeName, &'a str)>,
    trees: &Trees,
    ws: &mut Workspace,
) -> Result<Option<Basis>> {
    for (tree, path) in drifted {
        let Some(tree) = trees.get(tree) else { continue };
        let Some(loaded) = ws.get(tree, path)? else { continue };
        let with: Vec<Editor> = loaded
            .edited_by
            .iter()
            .filter(|(name, _)| *name != fix.manifest.name)
            .map(|(name, rel)| Editor { fix: name.clone(), path: rel.clone() })
            .collect();
        if !with.is_empty() {
            return Ok(Some(Basis::Conflict { file: path.to_string(), with }));
        }
    }
    Ok(None)
}

/// Apply (`forward`) or revert a variant's patches to the in-memory copies (the chain
/// simulator's one edit, on the workspace as its text source).
pub(super) fn edit_variant(
    variant: &Variant,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
    forward: bool,
    fix: &str,
) -> Result<()> {
    let mut source = super::workspace::OnTrees { ws, trees, only };
    crate::catalog::chain::edit(&mut source, variant, forward, fix).context("state changed while planning")
}
