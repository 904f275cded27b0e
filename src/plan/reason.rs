//! Why a fix is in the state it is on a tree, in words, with the next step.
//!
//! The state (applied / not applied / drifted / …) is decided by content in [`crate::plan`];
//! this module only explains it, from the tree's version hint, the files' pristine hashes and
//! each variant's `verified:` list:
//! - *unsupported release*: a drifted file matches no variant's pristine hash and the tree's
//!   release is not one the fix lists: a maintainer must make a variant (`port`, `record`);
//! - *locally modified*: the release is listed, but the drifted file is not that release's
//!   pristine file: someone changed the install;
//! - *unverified release*: a variant applies exactly to a release not in its `verified:`
//!   list; only a note (the exit code does not change).
//!
//! It also lines up drift excerpts with the file (see [`align_excerpts`]).

use std::collections::HashMap;

use super::verdict::{Advice, FileOutcome, FixReport, FixState, Reason, ReasonCode};
use crate::catalog::{Fix, Kind};
use crate::discover::Trees;
use crate::patch::{HunkReport, HunkState, SourceText};
use crate::tree::TreeName;

/// The release the trees say they are, as a tag (`v0.33.0`): vLLM's version, since variants
/// are keyed by vLLM release (vllm_gaudi follows a pinned vLLM).
pub fn tree_release(trees: &Trees) -> Option<String> {
    trees.vllm.as_ref().and_then(|t| t.version.as_deref()).map(|v| format!("v{}", v.trim_start_matches('v')))
}

/// The releases a fix has a patch variant for, without the `v` (for sentences).
fn covered(fix: &Fix) -> Vec<String> {
    fix.variants.iter().filter(|v| !v.upstreamed).map(|v| v.release.trim_start_matches('v').to_string()).collect()
}

fn bare(release: &str) -> &str {
    release.trim_start_matches('v')
}

/// Fill `reason` on the report and its files, and make the offset note say the right cause.
pub fn explain(fix: &Fix, report: &mut FixReport, trees: &Trees) {
    let release = tree_release(trees);
    let name = fix.manifest.name.clone();
    match report.state {
        FixState::Drifted => {
            let gaudi = trees.vllm_gaudi.as_ref().and_then(|t| t.version.as_deref());
            explain_drift(fix, report, release.as_deref(), gaudi)
        }
        FixState::Applied | FixState::NotApplied => {
            let Some(variant) = report.variant.as_deref().and_then(|r| fix.variants.iter().find(|v| v.release == r))
            else {
                return;
            };
            let Some(release) = release else { return };
            // A vLLM file left out (`--only-tree vllm_gaudi`) was not looked at: nothing can be
            // said about how the fix fits this vLLM release.
            if report.files.iter().any(|f| f.tree == TreeName::Vllm && !judged(f.state)) {
                return;
            }
            let offsets = report.files.iter().flat_map(|f| &f.hunks).any(|h| match h.state {
                HunkState::Applied { offset, .. } | HunkState::NotApplied { offset, .. } => offset != 0,
                HunkState::Drifted { .. } => false,
            });
            if offsets && variant.release != release {
                report.message = Some(format!(
                    "some hunks were found at an offset: this tree is vLLM {}, and the {} variant was made on {}",
                    bare(&release),
                    variant.release,
                    bare(&variant.release)
                ));
            }
            if !variant.verified.contains(&release) {
                let verified = if variant.verified.is_empty() {
                    "none yet".to_string()
                } else {
                    variant.verified.iter().map(|v| bare(v).to_string()).collect::<Vec<_>>().join(", ")
                };
                let reason = Reason {
                    code: ReasonCode::UnverifiedRelease,
                    message: format!(
                        "the {} variant of {name} applies exactly to vLLM {}, a release it was not verified on (verified: {verified})",
                        variant.release,
                        bare(&release)
                    ),
                    next_step: "after applying, run `{0}`; a maintainer records the release with `{1}`".into(),
                    advice: vec![Advice::Test { fix: name.clone() }, Advice::RecordRelease { release: release.clone() }],
                    note: true,
                };
                for file in report.files.iter_mut().filter(|f| judged(f.state)) {
                    file.reason = Some(reason.clone());
                }
                report.reason = Some(reason);
            }
        }
        FixState::Upstreamed | FixState::Skipped | FixState::Error => {}
    }
}

fn judged(state: FileOutcome) -> bool {
    !matches!(state, FileOutcome::Skipped | FileOutcome::NoTree)
}

fn explain_drift(fix: &Fix, report: &mut FixReport, release: Option<&str>, gaudi: Option<&str>) {
    let name = &fix.manifest.name;
    let partial = report.files.iter().any(|f| f.partial)
        || (report.files.iter().any(|f| f.state == FileOutcome::Applied)
            && report.files.iter().any(|f| f.state == FileOutcome::NotApplied));
    if partial {
        report.reason = Some(partially_applied(name, report, release, gaudi));
        return;
    }
    let covers = covered(fix);
    let listed = release.is_some_and(|r| fix.variants.iter().any(|v| !v.upstreamed && v.release == r));
    let mut first: Option<Reason> = None;
    for file in report.files.iter_mut() {
        let reason = match file.state {
            FileOutcome::Missing => Reason {
                code: ReasonCode::FileMissing,
                message: format!("{} is not in the {} tree", file.path, file.tree),
                next_step: format!(
                    "check that the tree is a complete vLLM install; if upstream moved the file, {name} needs a new variant \
                     (`{{0}}`)"
                ),
                advice: vec![port_advice(fix, report.variant.as_deref(), release)],
                note: false,
            },
            FileOutcome::Drifted => {
                let pristine_of: Vec<&str> = fix
                    .variants
                    .iter()
                    .filter(|v| {
                        v.patches.iter().any(|p| p.file == file.path && Some(&p.pristine_sha256) == file.sha256.as_ref())
                    })
                    .map(|v| v.release.as_str())
                    .collect();
                match release {
                    Some(r) if listed => {
                        let hash = file.sha256.as_deref().map_or(String::new(), |h| format!(" (sha256 {}…)", &h[..12]));
                        Reason {
                            code: ReasonCode::LocallyModified,
                            message: format!(
                                "this tree says vLLM {}, a release {name} covers, but {} is not that release's file{hash}: it was changed locally",
                                bare(r),
                                file.path
                            ),
                            next_step: format!(
                                "`{{0}}` shows where; {} or undo the local change, then apply again",
                                restore(file.tree, &file.path, 1)
                            ),
                            advice: vec![
                                Advice::Diff { fix: name.clone() },
                                restore_advice(file.tree, &file.path, Some(r), gaudi),
                            ],
                            note: false,
                        }
                    }
                    _ => {
                        let what = match release {
                            Some(r) => format!("vLLM {}", bare(r)),
                            None => "this tree (its vLLM version is unknown)".to_string(),
                        };
                        let matches = if pristine_of.is_empty() {
                            String::new()
                        } else {
                            format!("; its {} is the pristine file of {}", file.path, pristine_of.join(", "))
                        };
                        let leave = match fix.manifest.kind {
                            Kind::Performance => "or leave this opt-in fix out (drop it from --profile / the command line)",
                            Kind::Correctness => "until then the bug this fix corrects stays; leave the fix out with --only-tree or an explicit list of fixes",
                        };
                        Reason {
                            code: ReasonCode::UnsupportedRelease,
                            message: format!(
                                "{what} is not covered by {name} (covers {}){matches}",
                                covers.join(", ")
                            ),
                            next_step: format!(
                                "a maintainer makes a variant with `{{0}}` (see docs/maintaining.md); {leave}"
                            ),
                            advice: vec![port_advice(fix, report.variant.as_deref(), release)],
                            note: false,
                        }
                    }
                }
            }
            _ => continue,
        };
        if first.is_none() {
            first = Some(reason.clone());
        }
        file.reason = Some(reason);
    }
    report.reason = first;
}

/// Why a fix is half there, and how to restore each file it has edits in (then apply again).
fn partially_applied(name: &str, report: &FixReport, release: Option<&str>, gaudi: Option<&str>) -> Reason {
    let edited: Vec<_> = report.files.iter().filter(|f| f.partial || f.state == FileOutcome::Applied).collect();
    let restore: Vec<String> = edited.iter().enumerate().map(|(i, f)| restore(f.tree, &f.path, i + 1)).collect();
    Reason {
        code: ReasonCode::PartiallyApplied,
        message: format!("{name} is half there: some hunks are applied and others are not"),
        next_step: format!("`{{0}}` shows which; {} (or undo the hand edit), then apply again", restore.join("; ")),
        advice: std::iter::once(Advice::Diff { fix: name.to_string() })
            .chain(edited.iter().map(|f| restore_advice(f.tree, &f.path, release, gaudi)))
            .collect(),
        note: false,
    }
}

/// How to get `file` of `tree` back as its package shipped it, in words around the command
/// that does it (advice `{slot}` of the sentence, from [`restore_advice`]): vLLM is on the
/// package index (`pip`); vllm_gaudi is on none, so its file comes from its source.
fn restore(tree: TreeName, file: &str, slot: usize) -> String {
    match tree {
        TreeName::Vllm => format!("reinstall vLLM (`{{{slot}}}`)"),
        TreeName::VllmGaudi => format!(
            "restore {file} from vllm_gaudi's source (it is on no package index): {{{slot}}}, or copy that file over the installed one"
        ),
    }
}

/// The command [`restore`] names: vLLM reinstalled at the release the tree says it is;
/// vllm_gaudi's file checked out at the tag the install was made from (its version when the
/// tree says it, else the tag that pairs with the vLLM release).
fn restore_advice(tree: TreeName, file: &str, release: Option<&str>, gaudi: Option<&str>) -> Advice {
    match tree {
        TreeName::Vllm => Advice::Reinstall { package: "vllm".into(), version: release.map(|r| bare(r).to_string()) },
        TreeName::VllmGaudi => {
            let tag = match (gaudi, release) {
                (Some(v), _) => format!("v{}", bare(v)),
                (None, Some(r)) => format!("<the tag that pairs with vLLM {}, e.g. v{}>", bare(r), bare(r)),
                (None, None) => "<the tag it was installed from>".to_string(),
            };
            Advice::RestoreFromSource { file: file.to_string(), tag }
        }
    }
}

/// A maintainer's `port` of `fix` from `variant` (the nearest one) to `release` (the tree's).
fn port_advice(fix: &Fix, variant: Option<&str>, release: Option<&str>) -> Advice {
    Advice::Port {
        fix: fix.manifest.name.clone(),
        from: variant.unwrap_or("VARIANT").to_string(),
        release: release.unwrap_or("vX.Y.Z").to_string(),
    }
}

/// Widen each drifted hunk's excerpt so it lines up with the file: the nearest alignment is
/// the offset most image lines agree on, and lines that agree at a nearby offset (a line
/// inserted or deleted inside the hunk shifts the ones after it) would otherwise show as
/// missing although they are there. The excerpt grows to cover every image line found within
/// one image length of that alignment.
pub fn align_excerpts(text: &SourceText, hunks: &mut [HunkReport]) {
    let mut positions: Option<HashMap<&str, Vec<usize>>> = None;
    for report in hunks.iter_mut() {
        let HunkState::Drifted { expected, nearest_line: Some(line), nearest, .. } = &mut report.state else {
            continue;
        };
        let positions = positions.get_or_insert_with(|| {
            let mut map: HashMap<&str, Vec<usize>> = HashMap::new();
            for (i, l) in text.lines.iter().enumerate() {
                map.entry(l.as_str()).or_default().push(i);
            }
            map
        });
        let start = *line - 1;
        let n = expected.len();
        let (mut lo, mut hi) = (start, (start + n).min(text.lines.len()));
        for (i, want) in expected.iter().enumerate() {
            if want.trim().is_empty() {
                continue;
            }
            let Some(found) = positions.get(want.as_str()) else { continue };
            let target = start + i;
            if let Some(&j) = found.iter().min_by_key(|&&j| j.abs_diff(target)) {
                if j.abs_diff(target) <= n {
                    lo = lo.min(j);
                    hi = hi.max(j + 1);
                }
            }
        }
        *line = lo + 1;
        *nearest = text.lines[lo..hi].to_vec();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::patch::parse::parse;
    use crate::patch::state;

    #[test]
    fn excerpt_covers_a_line_shifted_by_an_insertion() {
        // The shape of vLLM 0.33.0 against the v0.30.0 patch: one import added inside the
        // hunk's context. The nearest alignment is that of the lines after the insertion; the
        // header line before it must still be in the excerpt, not shown as missing.
        let patch = "--- a/m.py\n+++ b/m.py\n@@ -2,6 +2,8 @@\n # head\n \n \n+import os\n+\n import torch\n import torch.nn as nn\n \n";
        let fp = parse(patch, Path::new("p")).unwrap().files.remove(0);
        let text = SourceText::decode(
            b"# spdx\n# head\n\nfrom x import y\n\nimport torch\nimport torch.nn as nn\n\nrest\n",
            Path::new("m.py"),
        )
        .unwrap();
        let mut eval = state::evaluate(&fp, &text);
        align_excerpts(&text, &mut eval.hunks);
        match &eval.hunks[0].state {
            HunkState::Drifted { nearest_line, nearest, .. } => {
                assert_eq!(*nearest_line, Some(2));
                assert_eq!(nearest.first().map(String::as_str), Some("# head"));
                assert!(nearest.iter().any(|l| l == "from x import y"));
            }
            other => panic!("{other:?}"),
        }
    }
}
