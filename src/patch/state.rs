//! The state of one file against one file patch: per hunk applied / not applied / drifted,
//! then the file's verdict, and the edited text when the verdict allows an edit.

use serde::Serialize;

use super::locate::{find_exact, nearest};
use super::parse::{FilePatch, Hunk, HunkLine};
use super::text::SourceText;

/// What one hunk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum HunkState {
    /// The post-image is there exactly.
    Applied { line: usize, offset: isize },
    /// The pre-image is there exactly.
    NotApplied { line: usize, offset: isize },
    /// Neither image is there. `nearest` is where the file looks most like the pre- (or post-)
    /// image, with those lines, so a maintainer sees why.
    Drifted {
        expected_image: &'static str,
        /// Where the hunk header says that image starts.
        expected_line: usize,
        expected: Vec<String>,
        nearest_line: Option<usize>,
        nearest: Vec<String>,
    },
}

/// One hunk's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HunkReport {
    /// 1-based index of the hunk in its file patch.
    pub index: usize,
    /// The line the hunk header names for the pre-image.
    pub header_line: usize,
    /// Where the hunk's `@@` is in the patch file.
    pub patch_line: usize,
    #[serde(flatten)]
    pub state: HunkState,
}

/// The file's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileState {
    Applied,
    NotApplied,
    /// Some hunk's context is gone, or some hunks are applied and others not.
    Drifted,
}

/// The evaluation of one file patch against one text.
#[derive(Debug, Clone)]
pub struct FileEval {
    pub state: FileState,
    pub hunks: Vec<HunkReport>,
    /// True when every hunk is found but they disagree (some applied, some not).
    pub partial: bool,
}

/// Evaluate `patch` against `text`.
pub fn evaluate(patch: &FilePatch, text: &SourceText) -> FileEval {
    let pre = locate_all(&patch.hunks, text, Image::Pre);
    let post = locate_all(&patch.hunks, text, Image::Post);
    let mut hunks = Vec::with_capacity(patch.hunks.len());
    for (i, hunk) in patch.hunks.iter().enumerate() {
        let pre_image = hunk.pre_image();
        let post_image = hunk.post_image();
        let state = match (pre[i], post[i]) {
            (Some(p), Some(q)) => {
                // Both present happens when one image contains the other (lines added or
                // removed at a hunk's edge): the longer image is the stronger evidence.
                if post_image.len() > pre_image.len()
                    || (post_image.len() == pre_image.len()
                        && offset(q, hunk.new_start).unsigned_abs() < offset(p, hunk.old_start).unsigned_abs())
                {
                    applied(q, hunk)
                } else {
                    not_applied(p, hunk)
                }
            }
            (Some(p), None) => not_applied(p, hunk),
            (None, Some(q)) => applied(q, hunk),
            (None, None) => drifted(hunk, text),
        };
        hunks.push(HunkReport { index: i + 1, header_line: hunk.old_start, patch_line: hunk.patch_line, state });
    }
    let all = |f: fn(&HunkState) -> bool| hunks.iter().all(|h| f(&h.state));
    let any_drift = hunks.iter().any(|h| matches!(h.state, HunkState::Drifted { .. }));
    let state = if all(|s| matches!(s, HunkState::Applied { .. })) {
        FileState::Applied
    } else if all(|s| matches!(s, HunkState::NotApplied { .. })) {
        FileState::NotApplied
    } else {
        FileState::Drifted
    };
    FileEval { state, partial: state == FileState::Drifted && !any_drift, hunks }
}

/// Apply (pre → post) every hunk of a NotApplied evaluation; `None` if the state disagrees.
pub fn apply(patch: &FilePatch, text: &SourceText, eval: &FileEval) -> Option<SourceText> {
    edit(patch, text, eval, FileState::NotApplied)
}

/// Revert (post → pre) every hunk of an Applied evaluation; `None` if the state disagrees.
pub fn revert(patch: &FilePatch, text: &SourceText, eval: &FileEval) -> Option<SourceText> {
    edit(patch, text, eval, FileState::Applied)
}

fn edit(patch: &FilePatch, text: &SourceText, eval: &FileEval, want: FileState) -> Option<SourceText> {
    if eval.state != want {
        return None;
    }
    let mut out = text.clone();
    // From the bottom up, so earlier line numbers stay valid.
    for (hunk, report) in patch.hunks.iter().zip(&eval.hunks).rev() {
        let (line, from, to) = match report.state {
            HunkState::NotApplied { line, .. } => (line, hunk.pre_image(), hunk.post_image()),
            HunkState::Applied { line, .. } => (line, hunk.post_image(), hunk.pre_image()),
            HunkState::Drifted { .. } => return None,
        };
        out.splice(line - 1, from.len(), &to);
    }
    Some(out)
}

#[derive(Clone, Copy)]
enum Image {
    Pre,
    Post,
}

/// Locate each hunk's image in order, each after the previous one, tracking the offset.
fn locate_all(hunks: &[Hunk], text: &SourceText, which: Image) -> Vec<Option<usize>> {
    let mut found = Vec::with_capacity(hunks.len());
    let mut shift: isize = 0;
    let mut min_start = 0;
    for hunk in hunks {
        let (image, header) = match which {
            Image::Pre => (hunk.pre_image(), hunk.old_start),
            Image::Post => (hunk.post_image(), hunk.new_start),
        };
        let expected = (header.saturating_sub(1) as isize + shift).max(0) as usize;
        let mut at = find_exact(&text.lines, &image, expected, min_start);
        // A hunk at the very start of the file has no leading context to pin it; like GNU
        // patch, it only matches there (else deleting a changed first line reads "applied").
        let anchored = header <= 1 && !matches!(hunk.lines.first(), Some(HunkLine::Context(_)));
        if anchored && at != Some(0) {
            at = find_exact(&text.lines, &image, 0, 0).filter(|s| *s == 0);
        }
        if let Some(start) = at {
            shift = start as isize - header.saturating_sub(1) as isize;
            min_start = start + image.len();
        }
        found.push(at);
    }
    found
}

fn offset(start: usize, header: usize) -> isize {
    start as isize - header.saturating_sub(1) as isize
}

fn applied(start: usize, hunk: &Hunk) -> HunkState {
    HunkState::Applied { line: start + 1, offset: offset(start, hunk.new_start) }
}

fn not_applied(start: usize, hunk: &Hunk) -> HunkState {
    HunkState::NotApplied { line: start + 1, offset: offset(start, hunk.old_start) }
}

fn drifted(hunk: &Hunk, text: &SourceText) -> HunkState {
    let pre = hunk.pre_image();
    let post = hunk.post_image();
    let expected_at = hunk.old_start.saturating_sub(1);
    let near_pre = nearest(&text.lines, &pre, expected_at);
    let near_post = nearest(&text.lines, &post, hunk.new_start.saturating_sub(1));
    // Show against whichever image the file resembles more (a half-applied hunk shows as post).
    let (label, image, near, expected_line) = match (near_pre, near_post) {
        (Some(a), Some(b)) if b.1 > a.1 => ("post", post, Some(b), hunk.new_start),
        (a, _) => ("pre", pre, a, hunk.old_start),
    };
    let (nearest_line, nearest_lines) = match near {
        Some((start, _)) => {
            let end = (start + image.len()).min(text.lines.len());
            (Some(start + 1), text.lines[start..end].to_vec())
        }
        None => (None, Vec::new()),
    };
    HunkState::Drifted {
        expected_image: label,
        expected_line,
        expected: image.iter().map(|s| s.to_string()).collect(),
        nearest_line,
        nearest: nearest_lines,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::patch::parse::parse;

    const PATCH: &str = "--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n@@ -8,3 +8,4 @@\n h\n i\n+I\n j\n";

    fn text(s: &str) -> SourceText {
        SourceText::decode(s.as_bytes(), Path::new("m.py")).unwrap()
    }

    fn file_patch() -> FilePatch {
        parse(PATCH, Path::new("p")).unwrap().files.remove(0)
    }

    const PRISTINE: &str = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";

    #[test]
    fn not_applied_then_applied_then_reverted() {
        let fp = file_patch();
        let t = text(PRISTINE);
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::NotApplied);
        let patched = apply(&fp, &t, &e).unwrap();
        assert_eq!(patched.encode(), b"a\nb\nC\nd\ne\nf\ng\nh\ni\nI\nj\nk\n");
        let e2 = evaluate(&fp, &patched);
        assert_eq!(e2.state, FileState::Applied);
        assert_eq!(revert(&fp, &patched, &e2).unwrap().encode(), PRISTINE.as_bytes());
    }

    #[test]
    fn offsets_are_reported() {
        let fp = file_patch();
        let t = text(&format!("new1\nnew2\n{PRISTINE}"));
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::NotApplied);
        assert_eq!(e.hunks[0].state, HunkState::NotApplied { line: 4, offset: 2 });
    }

    #[test]
    fn partial_is_drift() {
        let fp = file_patch();
        let t = text("a\nb\nC\nd\ne\nf\ng\nh\ni\nj\nk\n");
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::Drifted);
        assert!(e.partial);
        assert!(apply(&fp, &t, &e).is_none());
    }

    #[test]
    fn changed_context_is_drift_with_nearest_lines() {
        let fp = file_patch();
        let t = text("a\nb\nc\nD!\ne\nf\ng\nh\ni\nj\nk\n");
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::Drifted);
        assert!(!e.partial);
        match &e.hunks[0].state {
            HunkState::Drifted { nearest_line, nearest, .. } => {
                assert_eq!(*nearest_line, Some(2));
                assert_eq!(nearest, &vec!["b".to_string(), "c".into(), "D!".into()]);
            }
            other => panic!("{other:?}"),
        }
    }
}
