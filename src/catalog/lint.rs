//! Catalogue consistency beyond what loading checks: the `after:` graph is acyclic, so are
//! `requires:` and profile `include:` ([`super::relations`]), no two fixes of one profile touch
//! the same lines, and (with pristine upstream trees) every variant applies to its release, is
//! then found applied, and reverts to the recorded pristine hash.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::catalog::{Catalog, Fix};
use super::chain::{edit, forward, release_variant, PristineFile};
pub use super::finding::{Code, Finding, LintReport};
use crate::hash::sha256_hex;
use crate::patch::locate::{anchor_matches, anchors_at, occurrences, Image};
use crate::patch::state::{self, FileEval, FileState, HunkState};
use crate::patch::SourceText;
use crate::patch::{FilePatch, Hunk};

/// Lint `catalog`; with `upstream`, also check every variant against `<upstream>/<release>/`.
pub fn lint(catalog: &Catalog, upstream: Option<&Path>) -> Result<LintReport> {
    let mut report = LintReport::default();
    let all: Vec<String> = catalog.fixes.iter().map(|f| f.manifest.name.clone()).collect();
    match catalog.order(&all) {
        Ok(_) => report.checked.push(format!("after: graph of {} fix(es) is acyclic", all.len())),
        Err(err) => report.findings.push(Finding {
            file: catalog.files.origin.clone(),
            code: Code::OrderCycle,
            message: format!("{err:#}"),
        }),
    }
    super::relations::lint(catalog, &mut report);
    release_keys(catalog, &mut report);
    super::conform_key::lint(catalog, &mut report);
    for fix in &catalog.fixes {
        detect_covers_the_fix(catalog, fix, &mut report);
    }
    for profile in &catalog.profiles {
        // With what the profile includes (an include cycle is reported above).
        let names = catalog.profile_fixes(&profile.name).unwrap_or_else(|_| profile.fixes.clone());
        let fixes: Vec<&Fix> = names.iter().filter_map(|n| catalog.fix(n).ok()).collect();
        for (i, a) in fixes.iter().enumerate() {
            for b in &fixes[i + 1..] {
                if a.manifest.conflicts.contains(&b.manifest.name) || b.manifest.conflicts.contains(&a.manifest.name) {
                    report.findings.push(Finding {
                        file: catalog.files.display(Path::new(&format!("profiles/{}.yaml", profile.name))),
                        code: Code::ProfileConflict,
                        message: format!(
                            "profile `{}` selects conflicting fixes {} and {}",
                            profile.name, a.manifest.name, b.manifest.name
                        ),
                    });
                }
                overlaps(catalog, &profile.name, a, b, &mut report);
            }
        }
        report.checked.push(format!("profile `{}`: {} fix(es), no overlapping hunks", profile.name, fixes.len()));
    }
    if let Some(dir) = upstream {
        for fix in &catalog.fixes {
            against_upstream(catalog, fix, dir, &mut report)?;
            detect_against_upstream(catalog, fix, dir, &mut report)?;
        }
        for profile in &catalog.profiles {
            profile_against_upstream(catalog, &profile.name, dir, &mut report)?;
        }
    }
    Ok(report)
}

/// Every fix.yaml names its releases as `record`, `port` and `matrix` do (`v0.34.0`, never
/// `v0.34` or `0.34.0`: an alias would be a second variant of one release) and lists them in
/// release order, oldest first (what `record` and `port` keep when they add one); so are the
/// releases of its `verified:` lists.
fn release_keys(catalog: &Catalog, report: &mut LintReport) {
    let mut clean = true;
    for fix in &catalog.fixes {
        let manifest = fix.dir.join("fix.yaml");
        let text = catalog.files.text(&manifest).unwrap_or_default();
        let at = |key: &str| {
            format!("{}:{}", catalog.files.display(&manifest), super::manifest::line_of(text, &format!("{key}:")))
        };
        let mut previous: Option<(&str, super::manifest::ReleaseOrder)> = None;
        for key in fix.manifest.releases.keys() {
            let message = match super::manifest::canonical_release(key) {
                None => format!("release `{key}` is not a release name like v0.26.0"),
                Some(tag) if tag != *key => format!(
                    "release `{key}` is not written as {tag}: record, port and matrix name it {tag}, so it would become a second variant; rename it"
                ),
                Some(_) => String::new(),
            };
            if !message.is_empty() {
                clean = false;
                report.findings.push(Finding { file: at(key), code: Code::ReleaseName, message });
            }
            let Some(order) = super::manifest::release_order(key) else { continue };
            if let Some((before, before_order)) = &previous {
                if order < *before_order {
                    clean = false;
                    report.findings.push(Finding {
                        file: at(key),
                        code: Code::ReleaseOrder,
                        message: format!(
                            "releases are not in release order: {key} comes after {before}; list them oldest first"
                        ),
                    });
                }
            }
            if previous.as_ref().is_none_or(|(_, o)| order > *o) {
                previous = Some((key, order));
            }
        }
        for (key, release) in &fix.manifest.releases {
            for v in &release.verified {
                if let Some(tag) = super::manifest::canonical_release(v).filter(|t| t != v) {
                    clean = false;
                    report.findings.push(Finding {
                        file: at(key),
                        code: Code::ReleaseName,
                        message: format!("release {key}: verified: `{v}` is not written as {tag}; rename it"),
                    });
                }
            }
        }
    }
    if clean {
        report.checked.push(format!("releases of {} fix(es) are named vX.Y.Z, in release order", catalog.fixes.len()));
    }
}

/// With every fix of a profile applied in order to a pristine file, each one's patch must still
/// read as applied as `status` judges it — on the tree as it is, or under the fixes made on top
/// of it (reverted in memory): a later fix that is not ordered after it but edits its lines
/// leaves it drifted right after a successful `apply`.
fn profile_against_upstream(catalog: &Catalog, profile: &str, dir: &Path, report: &mut LintReport) -> Result<()> {
    let names = catalog.profile_fixes(profile).unwrap_or_default();
    let Ok(fixes) = catalog.order(&names) else { return Ok(()) };
    let mut releases: Vec<&str> = fixes.iter().flat_map(|f| f.variants.iter().map(|v| v.release.as_str())).collect();
    releases.sort_by_key(|r| super::manifest::release_key(r));
    releases.dedup();
    for release in releases {
        let candidates = [dir.join(release), dir.join(release.trim_start_matches('v'))];
        let Some(root) = candidates.iter().find(|p| p.is_dir()) else { continue };
        profile_on_release(catalog, profile, &fixes, release, &|_| Some(root.clone()), report)?;
    }
    Ok(())
}

/// [`profile_against_upstream`] for one release, each tree's pristine root given by `root_of`.
fn profile_on_release(
    catalog: &Catalog,
    profile: &str,
    fixes: &[&Fix],
    release: &str,
    root_of: &dyn Fn(crate::tree::TreeName) -> Option<PathBuf>,
    report: &mut LintReport,
) -> Result<()> {
    // (file, patches in apply order with their fix's name)
    let mut files: Vec<(&str, Vec<(&Fix, &crate::catalog::VariantPatch)>)> = Vec::new();
    for fix in fixes {
        let Some(variant) = release_variant(fix, release) else { continue };
        for vp in &variant.patches {
            match files.iter_mut().find(|(f, _)| *f == vp.file) {
                Some((_, list)) => list.push((fix, vp)),
                None => files.push((vp.file.as_str(), vec![(fix, vp)])),
            }
        }
    }
    for (file, patches) in files.iter().filter(|(_, p)| p.len() > 1) {
        let Some(root) = root_of(patches[0].1.tree) else { continue };
        let root = root.as_path();
        let path = root.join(file);
        let Some(bytes) = read_upstream(root, file)? else { continue };
        let Ok(text) = SourceText::decode(&bytes, &path) else { continue };
        let mut all = PristineFile { file: file.to_string(), text };
        let here: Vec<&Fix> = patches.iter().map(|(fix, _)| *fix).collect();
        if forward(&here, &mut all, |fix, _| Ok(((), release_variant(fix, release)))).is_err() {
            continue; // against_upstream reports the patch that does not apply
        }
        for (i, (fix, vp)) in patches.iter().enumerate() {
            let later = &patches[i + 1..];
            if reads_applied_under(catalog, fix, vp, later, release, &all) {
                continue;
            }
            let editors: Vec<&str> = later
                .iter()
                .filter(|(l, _)| !comes_before(catalog, fix, l))
                .map(|(l, _)| l.manifest.name.as_str())
                .collect();
            let why = match editors.as_slice() {
                [] => "the fixes made on top of it do not revert from it".to_string(),
                [one] => format!(
                    "{one} (applied after it, not ordered after it) edits its lines; order it after {}",
                    fix.manifest.name
                ),
                many => format!(
                    "{} (applied after it, not ordered after it) edit its lines; order them after {}",
                    many.join(", "),
                    fix.manifest.name
                ),
            };
            report.findings.push(Finding {
                file: catalog.files.display(&vp.patch_path),
                code: Code::EditsEarlierFix,
                message: format!(
                    "profile `{profile}` on {release}: with all its fixes applied, {}'s patch to {file} no longer reads applied, \
                     not even with the fixes made on top of it reverted, so `status` and `apply --check` call it drifted right \
                     after `apply`: {why}, or keep the patches off each other's lines",
                    fix.manifest.name,
                ),
            });
        }
    }
    Ok(())
}

/// Whether `vp` (of `fix`) reads applied on `all` (the file with every fix applied) as `status`
/// judges it: as it is, or once the `later` fixes made on top of it that read applied are
/// reverted, latest first.
fn reads_applied_under(
    catalog: &Catalog,
    fix: &Fix,
    vp: &crate::catalog::VariantPatch,
    later: &[(&Fix, &crate::catalog::VariantPatch)],
    release: &str,
    all: &PristineFile,
) -> bool {
    let mut under = PristineFile { file: all.file.clone(), text: all.text.clone() };
    for (successor, svp) in later.iter().rev().filter(|(l, _)| comes_before(catalog, fix, l)) {
        if state::evaluate(&svp.diff, &under.text).state == FileState::Applied {
            if let Some(variant) = release_variant(successor, release) {
                if edit(&mut under, variant, false, &successor.manifest.name).is_err() {
                    return false;
                }
            }
        }
    }
    state::evaluate(&vp.diff, &under.text).state == FileState::Applied
}

/// What `lint --upstream` finds on release `release` alone, with each tree's pristine root
/// given by `root_of` (a tree it gives none for is not checked): every fix's variant for it
/// on its pristine files (with the fixes it comes after applied first), its `detect:` text
/// found there, and every profile's fixes applied in order. `port` checks the catalogue it would write with it, in memory.
pub fn release_findings(
    catalog: &Catalog,
    release: &str,
    root_of: &dyn Fn(crate::tree::TreeName) -> Option<PathBuf>,
) -> Result<Vec<Finding>> {
    let mut report = LintReport::default();
    for fix in &catalog.fixes {
        let same = |v: &&super::Variant| super::manifest::same_release(&v.release, release) && !v.upstreamed;
        if fix.variants.iter().any(|v| same(&v)) {
            detect_on_release(catalog, fix, release, root_of, &mut report)?;
        }
        for variant in fix.variants.iter().filter(same) {
            for vp in &variant.patches {
                if let Some(root) = root_of(vp.tree).filter(|r| r.join(vp.tree.as_str()).is_dir()) {
                    patch_against_upstream(catalog, fix, variant, &root, vp, &mut report)?;
                }
            }
        }
    }
    for profile in &catalog.profiles {
        let names = catalog.profile_fixes(&profile.name).unwrap_or_default();
        let Ok(fixes) = catalog.order(&names) else { continue };
        profile_on_release(catalog, &profile.name, &fixes, release, root_of, &mut report)?;
    }
    Ok(report.findings)
}

fn overlaps(catalog: &Catalog, profile: &str, a: &Fix, b: &Fix, report: &mut LintReport) {
    // A fix ordered after others is patched on top of them: its line numbers are those of the
    // file with every fix it comes after applied. So the earlier fix's change is read where it
    // lies in that file: its post-image lines, moved by each fix between the two in the chain.
    let (first, second) = match (comes_before(catalog, a, b), comes_before(catalog, b, a)) {
        (true, _) => (a, b),
        (_, true) => (b, a),
        _ => (a, b),
    };
    let chained = comes_before(catalog, first, second);
    let between: Vec<&Fix> = if chained {
        let before_second = catalog.predecessors(&second.manifest.name).unwrap_or_default();
        catalog
            .order(&before_second)
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f.manifest.name != first.manifest.name && comes_before(catalog, first, f))
            .collect()
    } else {
        Vec::new()
    };
    for va in &first.variants {
        let Some(vb) = second.variants.iter().find(|v| v.release == va.release) else { continue };
        for pa in &va.patches {
            for pb in vb.patches.iter().filter(|p| p.tree == pa.tree && p.file == pa.file) {
                // The patches of the fixes in between, to this file, in order.
                let moves: Vec<&crate::patch::FilePatch> = between
                    .iter()
                    .filter_map(|f| f.variants.iter().find(|v| v.release == va.release))
                    .flat_map(|v| v.patches.iter().filter(|p| p.tree == pa.tree && p.file == pa.file))
                    .map(|p| &p.diff)
                    .collect();
                for ha in &pa.diff.hunks {
                    let ra = if chained {
                        let r = changed_lines(&ha.reversed());
                        let (start, end) = moves.iter().fold((r.start, r.end), |(s, e), d| (moved(d, s), moved(d, e)));
                        start..end
                    } else {
                        changed_lines(ha)
                    };
                    for hb in &pb.diff.hunks {
                        let rb = changed_lines(hb);
                        if ra.start < rb.end && rb.start < ra.end {
                            report.findings.push(Finding {
                                file: catalog.files.display(&pb.patch_path),
                                code: Code::Overlap,
                                message: format!(
                                    "profile `{profile}`: {} and {} touch the same lines of {} in {} (lines {}-{} and {}-{})",
                                    second.manifest.name,
                                    first.manifest.name,
                                    pa.file,
                                    va.release,
                                    rb.start,
                                    rb.end - 1,
                                    ra.start,
                                    ra.end - 1
                                ),
                            });
                        }
                    }
                }
            }
        }
    }
}

/// `x` comes before `y`: `y` requires it or is ordered after it, directly or through others.
fn comes_before(catalog: &Catalog, x: &Fix, y: &Fix) -> bool {
    catalog.predecessors(&y.manifest.name).is_ok_and(|p| p.contains(&x.manifest.name))
}

/// Where line `line` of the file `diff` is made on lies once `diff` is applied (a line inside a
/// hunk's changed lines stays at the hunk's start, shifted by the hunks above it).
fn moved(diff: &crate::patch::FilePatch, line: usize) -> usize {
    let mut shift: isize = 0;
    for hunk in &diff.hunks {
        let old_len = hunk.lines.iter().filter(|l| !matches!(l, crate::patch::HunkLine::Add(_))).count();
        let new_len = hunk.lines.iter().filter(|l| !matches!(l, crate::patch::HunkLine::Remove(_))).count();
        if hunk.old_start + old_len <= line {
            shift += new_len as isize - old_len as isize;
        }
    }
    (line as isize + shift).max(1) as usize
}

/// The pre-image lines a hunk removes or inserts before (context excluded), as a range of
/// 1-based line numbers; an insertion occupies the line it goes before. Of the reversed hunk:
/// the post-image lines it adds, or the line its removals close up at.
fn changed_lines(hunk: &crate::patch::Hunk) -> std::ops::Range<usize> {
    let (mut line, mut first, mut last) = (hunk.old_start, usize::MAX, 0);
    for l in &hunk.lines {
        match l {
            crate::patch::HunkLine::Context(_) => line += 1,
            crate::patch::HunkLine::Remove(_) => {
                first = first.min(line);
                last = last.max(line);
                line += 1;
            }
            crate::patch::HunkLine::Add(_) => {
                first = first.min(line);
                last = last.max(line);
            }
        }
    }
    first..last + 1
}

/// A `detect:` must recognise upstream's change where this fix would go: an entry in each file
/// the fix's variants patch (else half of upstream's change, or a line elsewhere, turns the fix
/// off while the file it patches stays unfixed), each one detection can find (text with no
/// code — only comments, strings, blank lines — never matches).
fn detect_covers_the_fix(catalog: &Catalog, fix: &Fix, report: &mut LintReport) {
    let patched: Vec<&str> = {
        let mut v: Vec<&str> = fix
            .variants
            .iter()
            .filter(|v| !v.upstreamed)
            .flat_map(|v| v.patches.iter().map(|p| p.file.as_str()))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let file = catalog.files.display(&fix.dir.join("fix.yaml"));
    let mut clean = true;
    for variant in fix.variants.iter().filter(|v| !v.detect.is_empty()) {
        for missing in patched.iter().filter(|f| !variant.detect.iter().any(|e| e.file == **f)) {
            clean = false;
            report.findings.push(Finding {
                file: file.clone(),
                code: Code::DetectCoverage,
                message: format!(
                    "release {}: `detect:` names no text in {missing}, which {} patches: upstream's change must be \
                     recognised where this fix would go (add an entry for it, or drop `detect:`)",
                    variant.release, fix.manifest.name
                ),
            });
        }
        for entry in &variant.detect {
            // Detection's own test, on a file holding exactly the text: what fails there can
            // never match anywhere.
            let itself: Vec<String> = entry.text.lines().map(str::to_string).collect();
            if !crate::patch::locate::contains_code(&itself, &entry.text) {
                clean = false;
                report.findings.push(Finding {
                    file: file.clone(),
                    code: Code::DetectCoverage,
                    message: format!(
                        "release {}: the detect text for {} has no line of code (comments and strings never match)",
                        variant.release, entry.file
                    ),
                });
            }
        }
    }
    if clean && fix.variants.iter().any(|v| !v.detect.is_empty()) {
        report.checked.push(format!("{}: detect: names text in every file it patches", fix.manifest.name));
    }
}

/// With pristine trees: a `detect:` whose text is all found (as code) in a pristine release
/// the fix has a patch variant for would report the fix upstreamed there, and it would never
/// be applied where it is needed.
fn detect_against_upstream(catalog: &Catalog, fix: &Fix, dir: &Path, report: &mut LintReport) -> Result<()> {
    for variant in fix.variants.iter().filter(|v| !v.upstreamed) {
        let candidates: [PathBuf; 2] = [dir.join(&variant.release), dir.join(variant.release.trim_start_matches('v'))];
        let Some(root) = candidates.iter().find(|p| p.is_dir()) else { continue };
        detect_on_release(catalog, fix, &variant.release, &|_| Some(root.clone()), report)?;
    }
    Ok(())
}

/// [`detect_against_upstream`] for the pristine trees of one release the fix has a patch
/// variant for, each tree's root given by `root_of`.
fn detect_on_release(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    root_of: &dyn Fn(crate::tree::TreeName) -> Option<PathBuf>,
    report: &mut LintReport,
) -> Result<()> {
    for up in fix.variants.iter().filter(|v| !v.detect.is_empty()) {
        let mut all_found = true;
        let mut roots: Vec<String> = Vec::new();
        for entry in &up.detect {
            let Some(root) = root_of(entry.tree) else {
                all_found = false;
                continue;
            };
            let found = match read_upstream(&root, &entry.file)? {
                Some(bytes) => {
                    let text = SourceText::decode(&bytes, &root.join(&entry.file))?;
                    crate::patch::locate::contains_code(&text.lines, &entry.text)
                }
                None => false,
            };
            all_found &= found;
            let shown = root.display().to_string();
            if !roots.contains(&shown) {
                roots.push(shown);
            }
        }
        if all_found {
            report.findings.push(Finding {
                file: catalog.files.display(&fix.dir.join("fix.yaml")),
                code: Code::DetectInPristine,
                message: format!(
                    "release {}: its detect text is in pristine {release} ({}), which this fix has a variant for: \
                     the fix would read upstreamed there and never be applied; make the text upstream's change only",
                    up.release,
                    roots.join(", ")
                ),
            });
        }
    }
    Ok(())
}

fn against_upstream(catalog: &Catalog, fix: &Fix, dir: &Path, report: &mut LintReport) -> Result<()> {
    for variant in fix.variants.iter().filter(|v| !v.upstreamed) {
        let candidates: [PathBuf; 2] = [dir.join(&variant.release), dir.join(variant.release.trim_start_matches('v'))];
        let Some(root) = candidates.iter().find(|p| p.is_dir()) else {
            report
                .skipped
                .push(format!("{} {}: no {}/ under --upstream", fix.manifest.name, variant.release, variant.release));
            continue;
        };
        for vp in &variant.patches {
            if !root.join(vp.tree.as_str()).is_dir() {
                report.skipped.push(format!(
                    "{} {}: no {}/ tree in {}",
                    fix.manifest.name,
                    variant.release,
                    vp.tree,
                    root.display()
                ));
                continue;
            }
            patch_against_upstream(catalog, fix, variant, root, vp, report)?;
        }
    }
    Ok(())
}

/// `file` of the release tree `root`, read as `apply` reads a tree: a FIFO there (which used to
/// block lint forever), a device, or a symlink leading out of the release tree is an error.
fn read_upstream(root: &Path, file: &str) -> Result<Option<Vec<u8>>> {
    let within = format!("the upstream tree {}", root.display());
    crate::tree::read_inside(root, file, &within, crate::tree::MAX_FILE_BYTES)
}

/// One patch of `variant` on its pristine file under `root` (with the fixes it comes after
/// applied first): it applies, reads as applied, is anchored and found once, reverts to the
/// same bytes, and needs no fix it does not require.
fn patch_against_upstream(
    catalog: &Catalog,
    fix: &Fix,
    variant: &super::Variant,
    root: &Path,
    vp: &super::VariantPatch,
    report: &mut LintReport,
) -> Result<()> {
    let path = root.join(&vp.file);
    let shown_patch = catalog.files.display(&vp.patch_path);
    let Some(bytes) = read_upstream(root, &vp.file)? else {
        report.findings.push(Finding {
            file: shown_patch,
            code: Code::PristineFileMissing,
            message: format!("{}: no such file", path.display()),
        });
        return Ok(());
    };
    let mut bad =
        |code: Code, message: String| report.findings.push(Finding { file: shown_patch.clone(), code, message });
    let hash = sha256_hex(&bytes);
    if hash != vp.pristine_sha256 {
        bad(
            Code::PristineHash,
            format!(
                "{}: sha256 {hash} is not the recorded pristine_sha256 {} (is {} a pristine {} tree?)",
                path.display(),
                vp.pristine_sha256,
                root.display(),
                variant.release
            ),
        );
        return Ok(());
    }
    let pristine = SourceText::decode(&bytes, &path)?;
    // A fix's patch is made on top of the fixes it comes after (requires: or after:).
    let (text, required) =
        match super::relations::with_predecessors_applied(catalog, fix, &variant.release, &vp.file, pristine.clone()) {
            Ok(found) => found,
            Err(message) => {
                bad(Code::PredecessorDoesNotApply, message);
                return Ok(());
            }
        };
    let base = text.encode();
    let eval = state::evaluate(&vp.diff, &text);
    let Some(patched) = state::apply(&vp.diff, &text, &eval) else {
        why_it_does_not_apply(vp, &text, &eval, &path, &variant.release, &mut bad);
        return Ok(());
    };
    if !round_trip(vp, &text, &eval, &patched, &path, &mut bad) {
        return Ok(());
    }
    if let Some(finding) = needs_unrequired(catalog, fix, &variant.release, &vp.file, pristine, &required, vp) {
        bad(Code::NeedsRequires, format!("{}: {finding}", path.display()));
        return Ok(());
    }
    let on = if required.is_empty() { String::new() } else { format!(" + {}", required.join(" + ")) };
    report.checked.push(format!(
        "{} {}: {} applies to pristine{on}, is then applied, reverts to sha256 {}…; every hunk anchored and found once",
        fix.manifest.name,
        variant.release,
        vp.file,
        &sha256_hex(&base)[..12]
    ));
    Ok(())
}

/// Once `text` is `patched`: the patch reads as applied, each hunk is found once, and a revert
/// gives back `text`'s bytes. False (with findings) when any of it fails.
fn round_trip(
    vp: &super::VariantPatch,
    text: &SourceText,
    eval: &FileEval,
    patched: &SourceText,
    path: &Path,
    bad: &mut impl FnMut(Code, String),
) -> bool {
    let after = state::evaluate(&vp.diff, patched);
    if after.state != FileState::Applied {
        bad(
            Code::RoundTrip,
            format!("{}: after applying, the patch is not found applied ({})", path.display(), after.state.words()),
        );
        return false;
    }
    let not_unique = uniqueness(&vp.diff, text, eval, patched, &after);
    let unique = not_unique.is_empty();
    for finding in not_unique {
        bad(Code::NotUnique, format!("{}: {finding}", path.display()));
    }
    let reverted = state::revert(&vp.diff, patched, &after).map(|t| t.encode());
    if reverted.as_deref() != Some(text.encode().as_slice()) {
        bad(Code::RoundTrip, format!("{}: apply then revert does not give back the pristine bytes", path.display()));
        return false;
    }
    unique
}

/// Findings for a patch that does not apply to `text`: its state, each hunk's reason, and
/// each hunk whose header does not anchor it as the rule asks.
fn why_it_does_not_apply(
    vp: &super::VariantPatch,
    text: &SourceText,
    eval: &FileEval,
    path: &Path,
    release: &str,
    bad: &mut impl FnMut(Code, String),
) {
    bad(
        Code::DoesNotApply,
        format!("{}: does not apply to pristine {release} (it reads {})", path.display(), eval.state.words()),
    );
    for h in &eval.hunks {
        if let Some(reason) = h.reason() {
            bad(
                Code::DoesNotApply,
                format!("{}: hunk {} (patch line {}): {reason}", path.display(), h.index, h.patch_line),
            );
        }
    }
    // Where the hunks say they are: is each anchored as the rule asks?
    for (i, hunk) in vp.diff.hunks.iter().enumerate() {
        let at = match eval.hunks[i].state {
            HunkState::NotApplied { line, .. } | HunkState::Applied { line, .. } => line - 1,
            HunkState::Drifted { .. } => hunk.old_start.saturating_sub(1),
        };
        if let Some(finding) = anchor_finding(i + 1, hunk, text, at) {
            bad(Code::Anchor, format!("{}: {finding}", path.display()));
        }
    }
}

/// Selected alone, a fix brings what it requires but not what it is only ordered `after:`: a
/// patch that does not apply without such a fix's edits needs `requires:` instead. `applied`
/// names the fixes the patch was checked on top of.
fn needs_unrequired(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    file: &str,
    pristine: SourceText,
    applied: &[String],
    vp: &crate::catalog::VariantPatch,
) -> Option<String> {
    let (alone, required) = super::relations::with_required_applied(catalog, fix, release, file, pristine).ok()?;
    let ordered_only: Vec<&str> = applied.iter().filter(|n| !required.contains(n)).map(String::as_str).collect();
    if ordered_only.is_empty() || state::evaluate(&vp.diff, &alone).state == FileState::NotApplied {
        return None;
    }
    Some(format!(
        "applies only on top of {}, which {} is ordered after but does not require: selected alone it is \
         drifted; make it `requires:` {}",
        ordered_only.join(" + "),
        fix.manifest.name,
        ordered_only.join(", ")
    ))
}

/// The uniqueness rule: each hunk's pre-image occurs once in the pristine file and its
/// post-image once in the patched file — or once among the places inside the definition its
/// header names — and that anchor is a definition enclosing it (git's Python diff driver
/// writes it); a hunk inside a definition must name one; and in the pristine file each hunk is
/// found at the line its header names.
fn uniqueness(
    diff: &FilePatch,
    pristine: &SourceText,
    before: &FileEval,
    patched: &SourceText,
    after: &FileEval,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, hunk) in diff.hunks.iter().enumerate() {
        let n = i + 1;
        let (HunkState::NotApplied { line: pre_at, .. }, HunkState::Applied { line: post_at, .. }) =
            (&before.hunks[i].state, &after.hunks[i].state)
        else {
            continue;
        };
        if let Some(finding) = anchor_finding(n, hunk, pristine, pre_at - 1) {
            out.push(finding);
        }
        // In the file it was made from, a hunk sits where its header says.
        if *pre_at != hunk.old_start.max(1) {
            out.push(format!(
                "hunk {n} (patch line {}): found at line {pre_at} of the file the patch is made on, but its header says line {}",
                hunk.patch_line, hunk.old_start
            ));
        }
        for (text, post, image_name, file_name) in
            [(pristine, false, "pre-image", "pristine file"), (patched, true, "post-image", "patched file")]
        {
            let image = Image::of(hunk, post);
            let mut places = occurrences(text, &image);
            if let Some(anchor) = hunk.anchor() {
                places.retain(|s| anchor_matches(anchor, &text.lines, *s));
            }
            if places.len() != 1 {
                let lines: Vec<String> = places.iter().map(|s| (s + 1).to_string()).collect();
                let at = if post { *post_at } else { *pre_at };
                out.push(format!(
                    "hunk {n} (patch line {}): its {image_name} occurs {} times in the {file_name}{} (lines {}); widen its context (diff -U5 …) until it is found once (expected at line {at})",
                    hunk.patch_line,
                    places.len(),
                    if hunk.anchor().is_some() { " inside its anchor" } else { "" },
                    lines.join(", ")
                ));
            }
        }
    }
    out
}

/// Whether hunk `n`, placed at `at` (0-based) in the pristine file, carries the anchor the rule
/// asks for: a definition enclosing it, and one whenever it lies inside a definition.
fn anchor_finding(n: usize, hunk: &Hunk, pristine: &SourceText, at: usize) -> Option<String> {
    match hunk.anchor() {
        Some(anchor) if !anchor_matches(anchor, &pristine.lines, at) => Some(format!(
            "hunk {n} (patch line {}): its header's anchor `{anchor}` is not a definition enclosing line {}",
            hunk.patch_line,
            at + 1
        )),
        None => anchors_at(&pristine.lines, at).first().map(|def| {
            format!(
                "hunk {n} (patch line {}): the header names no anchor, but the hunk lies in `{def}`; make the patch with git's Python diff driver (see fixes/README.md)",
                hunk.patch_line
            )
        }),
        Some(_) => None,
    }
}
