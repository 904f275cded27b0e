//! Catalogue consistency beyond what loading checks: the `after:` graph is acyclic, so are
//! `requires:` and profile `include:` ([`super::relations`]), no two fixes of one profile touch
//! the same lines, and (with pristine upstream trees) every variant applies to its release, is
//! then found applied, and reverts to the recorded pristine hash.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::catalog::{Catalog, Fix};
use crate::patch::state::{self, FileState};
use crate::patch::SourceText;
use crate::plan::sha256_hex;

/// One lint finding (data, not an error).
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The catalogue file the finding is about.
    pub file: String,
    pub message: String,
}

/// What `lint` found and what it checked.
#[derive(Debug, Default, Serialize)]
pub struct LintReport {
    pub findings: Vec<Finding>,
    /// Things verified, one sentence each (so a clean run says what it proved).
    pub checked: Vec<String>,
    /// Things not checked and why (e.g. a tree missing from --upstream).
    pub skipped: Vec<String>,
}

/// Lint `catalog`; with `upstream`, also check every variant against `<upstream>/<release>/`.
pub fn lint(catalog: &Catalog, upstream: Option<&Path>) -> Result<LintReport> {
    let mut report = LintReport::default();
    let all: Vec<String> = catalog.fixes.iter().map(|f| f.manifest.name.clone()).collect();
    match catalog.order(&all) {
        Ok(_) => report.checked.push(format!("after: graph of {} fix(es) is acyclic", all.len())),
        Err(err) => report.findings.push(Finding { file: catalog.files.origin.clone(), message: format!("{err:#}") }),
    }
    super::relations::lint(catalog, &mut report);
    for profile in &catalog.profiles {
        // With what the profile includes (an include cycle is reported above).
        let names = catalog.profile_fixes(&profile.name).unwrap_or_else(|_| profile.fixes.clone());
        let fixes: Vec<&Fix> = names.iter().filter_map(|n| catalog.fix(n).ok()).collect();
        for (i, a) in fixes.iter().enumerate() {
            for b in &fixes[i + 1..] {
                if a.manifest.conflicts.contains(&b.manifest.name) || b.manifest.conflicts.contains(&a.manifest.name) {
                    report.findings.push(Finding {
                        file: catalog.files.display(Path::new(&format!("profiles/{}.yaml", profile.name))),
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
        }
    }
    Ok(report)
}

fn overlaps(catalog: &Catalog, profile: &str, a: &Fix, b: &Fix, report: &mut LintReport) {
    // A fix ordered after the other is patched on top of it: its line numbers are those of the
    // other's post-image, so compare with where the other's change lies after it is applied.
    let comes_after = |x: &Fix, y: &Fix| {
        x.manifest.after.contains(&y.manifest.name) || x.manifest.requires.contains(&y.manifest.name)
    };
    let range_a = if comes_after(b, a) { changed_lines_after } else { changed_lines };
    let range_b = if comes_after(a, b) { changed_lines_after } else { changed_lines };
    for va in &a.variants {
        let Some(vb) = b.variants.iter().find(|v| v.release == va.release) else { continue };
        for pa in &va.patches {
            for pb in vb.patches.iter().filter(|p| p.tree == pa.tree && p.file == pa.file) {
                for ha in &pa.diff.hunks {
                    for hb in &pb.diff.hunks {
                        let (ra, rb) = (range_a(ha), range_b(hb));
                        if ra.start < rb.end && rb.start < ra.end {
                            report.findings.push(Finding {
                                file: catalog.files.display(&pa.patch_path),
                                message: format!(
                                    "profile `{profile}`: {} and {} touch the same lines of {} in {} (lines {}-{} and {}-{})",
                                    a.manifest.name, b.manifest.name, pa.file, va.release, ra.start, ra.end - 1, rb.start, rb.end - 1
                                ),
                            });
                        }
                    }
                }
            }
        }
    }
}

/// The pre-image lines a hunk removes or inserts before (context excluded), as a range of
/// 1-based line numbers; an insertion occupies the line it goes before.
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

/// The same for the post-image: the lines a hunk adds, or the line its removals close up at.
fn changed_lines_after(hunk: &crate::patch::Hunk) -> std::ops::Range<usize> {
    let (mut line, mut first, mut last) = (hunk.new_start, usize::MAX, 0);
    for l in &hunk.lines {
        match l {
            crate::patch::HunkLine::Context(_) => line += 1,
            crate::patch::HunkLine::Add(_) => {
                first = first.min(line);
                last = last.max(line);
                line += 1;
            }
            crate::patch::HunkLine::Remove(_) => {
                first = first.min(line);
                last = last.max(line);
            }
        }
    }
    first..last + 1
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
            let path = root.join(&vp.file);
            let shown_patch = catalog.files.display(&vp.patch_path);
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
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(err) => {
                    report.findings.push(Finding { file: shown_patch, message: format!("{}: {err}", path.display()) });
                    continue;
                }
            };
            let mut bad = |message: String| report.findings.push(Finding { file: shown_patch.clone(), message });
            let hash = sha256_hex(&bytes);
            if hash != vp.pristine_sha256 {
                bad(format!(
                    "{}: sha256 {hash} is not the recorded pristine_sha256 {} (is {} a pristine {} tree?)",
                    path.display(),
                    vp.pristine_sha256,
                    root.display(),
                    variant.release
                ));
                continue;
            }
            let text = SourceText::decode(&bytes, &path)?;
            // A fix is applied only with what it requires, so its patch meets their edits.
            let (text, required) =
                match super::relations::with_required_applied(catalog, fix, &variant.release, &vp.file, text) {
                    Ok(found) => found,
                    Err(message) => {
                        bad(message);
                        continue;
                    }
                };
            let base = text.encode();
            let eval = state::evaluate(&vp.diff, &text);
            let Some(patched) = state::apply(&vp.diff, &text, &eval) else {
                bad(format!(
                    "{}: does not apply to pristine {} (state {:?})",
                    path.display(),
                    variant.release,
                    eval.state
                ));
                continue;
            };
            let after = state::evaluate(&vp.diff, &patched);
            if after.state != FileState::Applied {
                bad(format!("{}: after applying, the patch is not found applied ({:?})", path.display(), after.state));
                continue;
            }
            let reverted = state::revert(&vp.diff, &patched, &after).map(|t| t.encode());
            if reverted.as_deref() != Some(base.as_slice()) {
                bad(format!("{}: apply then revert does not give back the pristine bytes", path.display()));
                continue;
            }
            let on = if required.is_empty() { String::new() } else { format!(" + {}", required.join(" + ")) };
            report.checked.push(format!(
                "{} {}: {} applies to pristine{on}, is then applied, reverts to sha256 {}…",
                fix.manifest.name,
                variant.release,
                vp.file,
                &sha256_hex(&base)[..12]
            ));
        }
    }
    Ok(())
}
