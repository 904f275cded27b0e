//! The state of one file against one file patch: per hunk applied / not applied / drifted,
//! then the file's verdict, and the edited text when the verdict allows an edit.
//!
//! One position per hunk, decided once, in order. A hunk is placed where its pre-image (not
//! applied) or its post-image (applied) is found exactly, and only if that place is the one
//! place: counted over the whole file, pre- and post-images together (both at one position
//! is ambiguous too), among the places inside the definition the hunk header names when it
//! names one (`@@ … @@ def forward_native(`: the enclosing `def`/`class`, see
//! [`super::locate::anchors_at`]), and after the previous hunk of the file. The offset from
//! the header line is reported. Anything else is drifted, with the reason in words
//! ("ambiguous: found at lines 140 and 193", "found only inside `forward_cpu` (line 185); the
//! fix targets `forward_native`"). Finally a verdict must survive its own edit: a not-applied
//! file is applied in memory and must then read as applied at the same places and revert to
//! identical bytes; an applied file is reverted in memory and must read as not applied. So
//! `--check`, `apply`, a second `apply` and `revert` always agree.

use serde::Serialize;

use super::locate::{anchor_matches, definition_name, enclosing_name, nearest, occurrences, Image};
use super::parse::{FilePatch, Hunk, HunkLine};
use super::text::SourceText;

/// Which side of a hunk a drifted file is compared against: the lines before the fix
/// (`pre`) or after it (`post`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Pre,
    Post,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Pre => "pre",
            Side::Post => "post",
        })
    }
}

/// What one hunk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum HunkState {
    /// The post-image is there exactly.
    Applied { line: usize, offset: isize },
    /// The pre-image is there exactly.
    NotApplied { line: usize, offset: isize },
    /// The hunk has no one place: `reason` says why in words. `nearest` is where the file
    /// looks most like the pre- (or post-) image, with those lines, so a maintainer sees it.
    Drifted {
        reason: String,
        expected_image: Side,
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

impl HunkReport {
    /// The drift reason, if drifted.
    pub fn reason(&self) -> Option<&str> {
        match &self.state {
            HunkState::Drifted { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// The file's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileState {
    Applied,
    NotApplied,
    /// Some hunk has no one place, or some hunks are applied and others not.
    Drifted,
}

impl FileState {
    /// The words human text uses.
    pub fn words(self) -> &'static str {
        match self {
            FileState::Applied => "applied",
            FileState::NotApplied => "not applied",
            FileState::Drifted => "drifted",
        }
    }
}

/// The evaluation of one file patch against one text.
#[derive(Debug, Clone)]
pub struct FileEval {
    pub state: FileState,
    pub hunks: Vec<HunkReport>,
    /// True when every hunk is found but they disagree (some applied, some not).
    pub partial: bool,
}

/// Evaluate `patch` against `text`: place every hunk, then check that the verdict survives
/// its own edit.
pub fn evaluate(patch: &FilePatch, text: &SourceText) -> FileEval {
    let mut eval = place(patch, text);
    match eval.state {
        FileState::NotApplied => {
            if let Err((hunk, reason)) = verify(patch, text, &eval, Direction::Apply) {
                drift(&mut eval, patch, text, hunk, reason);
            }
        }
        FileState::Applied => {
            if let Err((hunk, reason)) = verify(patch, text, &eval, Direction::Revert) {
                drift(&mut eval, patch, text, hunk, reason);
            }
        }
        FileState::Drifted => {}
    }
    eval
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
        match report.state {
            HunkState::NotApplied { line, .. } => replace(&mut out, line - 1, hunk, true),
            HunkState::Applied { line, .. } => replace(&mut out, line - 1, hunk, false),
            HunkState::Drifted { .. } => return None,
        }
    }
    Some(out)
}

/// Replace the hunk's `from` image at `start` with its other image. Context lines keep their
/// own bytes; an added line takes the ending of the removed line it stands in for (the k-th
/// added line of a change for its k-th removed line), else of the line before it; a hunk that
/// reaches the end of the file leaves it ending as the target image says when the hunk changes
/// the final newline, and as it was otherwise.
fn replace(text: &mut SourceText, start: usize, hunk: &Hunk, forward: bool) {
    let (to_no_eol, body): (bool, Vec<HunkLine>) =
        if forward { (hunk.post_no_eol, hunk.lines.clone()) } else { (hunk.pre_no_eol, hunk.reversed().lines) };
    let from_len = body.iter().filter(|l| !matches!(l, HunkLine::Add(_))).count();
    let ends_file = start + from_len == text.lines.len();
    let region_eol = text.eols[start..start + from_len].iter().copied().find(|e| !e.is_empty());
    let fallback = region_eol.unwrap_or_else(|| text.dominant_eol());
    let mut prev = if start > 0 { Some(text.eols[start - 1]) } else { None }.filter(|e| !e.is_empty());
    let mut new: Vec<(String, &'static str)> = Vec::with_capacity(body.len());
    let mut cursor = start;
    let mut i = 0;
    while i < body.len() {
        if let HunkLine::Context(t) = &body[i] {
            let e = text.eols[cursor];
            new.push((t.clone(), e));
            prev = Some(e).filter(|e| !e.is_empty()).or(prev);
            cursor += 1;
            i += 1;
            continue;
        }
        // One change: a run of removed and added lines.
        let mut removed = Vec::new();
        let mut added = Vec::new();
        while i < body.len() && !matches!(body[i], HunkLine::Context(_)) {
            match &body[i] {
                HunkLine::Remove(_) => {
                    removed.push(text.eols[cursor]);
                    cursor += 1;
                }
                HunkLine::Add(t) => added.push(t.clone()),
                HunkLine::Context(_) => unreachable!(),
            }
            i += 1;
        }
        for (k, t) in added.into_iter().enumerate() {
            let e = removed.get(k).copied().filter(|e| !e.is_empty()).or(prev).unwrap_or(fallback);
            new.push((t, e));
            prev = Some(e);
        }
    }
    // Only the file's last line may lack an ending: a line that ended the file and now has
    // lines after it (an addition at the end of a file without a final newline) takes the
    // ending of the line before it, else the file's, so it is never joined onto the next.
    let last = new.len().saturating_sub(1);
    let mut before: Option<&'static str> = if start > 0 { Some(text.eols[start - 1]) } else { None };
    for (i, line) in new.iter_mut().enumerate() {
        if line.1.is_empty() && (i < last || !ends_file) {
            line.1 = before.filter(|e| !e.is_empty()).unwrap_or(fallback);
        }
        before = Some(line.1);
    }
    // The final newline is the hunk's to change only when its images disagree about it;
    // otherwise the file keeps what it has.
    let to_no_eol = if hunk.pre_no_eol != hunk.post_no_eol { to_no_eol } else { text.eols.last() == Some(&"") };
    if ends_file {
        if let Some(last) = new.last_mut() {
            last.1 = if to_no_eol {
                ""
            } else if last.1.is_empty() {
                prev.unwrap_or(fallback)
            } else {
                last.1
            };
        }
    }
    let (lines, eols): (Vec<String>, Vec<&'static str>) = new.into_iter().unzip();
    text.lines.splice(start..start + from_len, lines);
    text.eols.splice(start..start + from_len, eols);
}

/// Which edit [`verify`] makes in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Apply,
    Revert,
}

impl Direction {
    /// The edit, done: "once applied".
    fn done(self) -> &'static str {
        match self {
            Direction::Apply => "applied",
            Direction::Revert => "reverted",
        }
    }

    /// How each hunk must read before the edit, and after it.
    fn states(self) -> (&'static str, &'static str) {
        match self {
            Direction::Apply => ("not applied", "applied"),
            Direction::Revert => ("applied", "not applied"),
        }
    }
}

/// Apply (or revert) in memory; the result must read as applied (not applied) at the same
/// places, and an applied result must revert to the original bytes. The error names the hunk
/// (0-based) and says why.
fn verify(patch: &FilePatch, text: &SourceText, eval: &FileEval, direction: Direction) -> Result<(), (usize, String)> {
    let edited = match direction {
        Direction::Apply => apply(patch, text, eval),
        Direction::Revert => revert(patch, text, eval),
    };
    let done = direction.done();
    let edited = edited.ok_or_else(|| (0, format!("cannot be {done}")))?;
    // What would be written must read back as these lines (no line joined onto the next).
    let written = SourceText::decode(&edited.encode(), std::path::Path::new(""));
    if let Some(line) = match &written {
        Ok(w) if *w == edited => None,
        Ok(w) => Some(w.lines.iter().zip(&edited.lines).position(|(a, b)| a != b).unwrap_or(w.lines.len())),
        Err(_) => Some(0),
    } {
        return Err((
            hunk_at(patch, eval, line),
            format!("once {done}, line {} would be joined onto the next (it has no line ending)", line + 1),
        ));
    }
    let again = place(patch, &edited);
    let (was, becomes) = direction.states();
    let mut shift: isize = 0;
    for (i, (hunk, (before, after))) in patch.hunks.iter().zip(eval.hunks.iter().zip(&again.hunks)).enumerate() {
        let (HunkState::NotApplied { line, .. } | HunkState::Applied { line, .. }) = before.state else {
            unreachable!("a file that is not drifted")
        };
        let want = (line as isize + shift) as usize;
        let (got, reads_as_wanted) = match &after.state {
            HunkState::Applied { line: got, .. } => (*got, direction == Direction::Apply),
            HunkState::NotApplied { line: got, .. } => (*got, direction == Direction::Revert),
            HunkState::Drifted { reason, .. } => {
                let found = if direction == Direction::Apply { "found applied" } else { "found" };
                return Err((i, format!("once {done} at line {line}, it would not be {found} ({reason})")));
            }
        };
        if !reads_as_wanted {
            return Err((i, format!("once {done} at line {line}, it would still read as {was}")));
        }
        if got != want {
            return Err((i, format!("once {done}, it would read as {becomes} at line {got}, not line {want}")));
        }
        let (pre, post) = (hunk.pre_image().len() as isize, hunk.post_image().len() as isize);
        shift += if direction == Direction::Apply { post - pre } else { pre - post };
    }
    if direction == Direction::Apply {
        reverts_exactly(patch, text, eval, &edited, &again)?;
    }
    Ok(())
}

/// `patched` (`text` with `patch` applied, placed as `again`) reverts to `text`'s bytes.
fn reverts_exactly(
    patch: &FilePatch,
    text: &SourceText,
    eval: &FileEval,
    patched: &SourceText,
    again: &FileEval,
) -> Result<(), (usize, String)> {
    let reverted = revert(patch, patched, again).ok_or((0, "once applied, it could not be reverted".to_string()))?;
    if reverted != *text {
        let line =
            reverted.lines.iter().zip(&reverted.eols).zip(text.lines.iter().zip(&text.eols)).position(|(a, b)| a != b);
        let line = line.unwrap_or(text.lines.len().min(reverted.lines.len()));
        let hunk = hunk_at(patch, eval, line);
        return Err((
            hunk,
            format!(
                "line {}'s ending differs from its neighbours': a revert could not restore its bytes exactly",
                line + 1
            ),
        ));
    }
    Ok(())
}

/// The hunk (0-based) whose found image covers or follows `line` (0-based).
fn hunk_at(patch: &FilePatch, eval: &FileEval, line: usize) -> usize {
    for (i, (hunk, report)) in patch.hunks.iter().zip(&eval.hunks).enumerate() {
        if let HunkState::NotApplied { line: at, .. } | HunkState::Applied { line: at, .. } = report.state {
            if line < at - 1 + hunk.pre_image().len().max(hunk.post_image().len()) {
                return i;
            }
        }
    }
    patch.hunks.len().saturating_sub(1)
}

fn drift(eval: &mut FileEval, patch: &FilePatch, text: &SourceText, hunk: usize, reason: String) {
    eval.hunks[hunk].state = drifted(&patch.hunks[hunk], text, reason);
    eval.state = FileState::Drifted;
    eval.partial = false;
}

/// Where one hunk was placed.
enum Placed {
    Found { start: usize, applied: bool },
    Drift(String),
}

/// Place each hunk in order (see the module docs) and give the file's verdict.
fn place(patch: &FilePatch, text: &SourceText) -> FileEval {
    // Where the last found hunk's changes ended in the file: the next one must start there or
    // after.
    let mut prev_end = 0usize;
    let mut hunks = Vec::with_capacity(patch.hunks.len());
    for (i, hunk) in patch.hunks.iter().enumerate() {
        let pre = Image::of(hunk, false);
        let post = Image::of(hunk, true);
        let state = match locate(hunk, text, &pre, &post, prev_end, i) {
            Placed::Found { start, applied } => {
                // Hunks may share context lines, not changed ones.
                prev_end = start + if applied { post.len() } else { pre.len() } - hunk.context_edges().1;
                let line = start + 1;
                if applied {
                    HunkState::Applied { line, offset: offset(start, hunk.new_start) }
                } else {
                    HunkState::NotApplied { line, offset: offset(start, hunk.old_start) }
                }
            }
            Placed::Drift(reason) => drifted(hunk, text, reason),
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

/// One hunk's one place: where its pre- or post-image is found exactly once in the whole file
/// (pre and post counted together, both at one position included), among the places inside
/// the definition its header names when it names one, and after the previous hunk.
fn locate(hunk: &Hunk, text: &SourceText, pre: &Image, post: &Image, min_start: usize, index: usize) -> Placed {
    let mut found: Vec<(usize, bool)> = occurrences(text, pre).into_iter().map(|s| (s, false)).collect();
    found.extend(occurrences(text, post).into_iter().map(|s| (s, true)));
    found.sort_unstable();
    if found.is_empty() {
        // Say so when only the edge rule stands in the way (a hand-made hunk with uneven context).
        let (loose_pre, loose_post) = (
            Image { at_start: false, at_end: false, ..pre.clone() },
            Image { at_start: false, at_end: false, ..post.clone() },
        );
        if let Some(at) = occurrences(text, &loose_pre).into_iter().chain(occurrences(text, &loose_post)).min() {
            let edge = if pre.at_start { "start" } else { "end" };
            return Placed::Drift(format!(
                "found at line {}, but it has less context on one side, which a diff writes only at the {edge} of a file, and line {} is not there",
                at + 1,
                at + 1
            ));
        }
        return Placed::Drift("not found: its lines are not in the file as the fix expects them or leaves them".into());
    }
    let lines_list = |places: &[(usize, bool)]| {
        let mut v: Vec<String> = places.iter().map(|(s, _)| (s + 1).to_string()).collect();
        v.dedup();
        if v.len() > 6 {
            let more = v.len() - 5;
            v.truncate(5);
            v.push(format!("{more} more places"));
        }
        match v.len() {
            1 => v.remove(0),
            _ => {
                let last = v.pop().expect("two or more");
                format!("{} and {last}", v.join(", "))
            }
        }
    };
    let candidates: Vec<(usize, bool)> = match hunk.anchor() {
        Some(anchor) => found.iter().copied().filter(|(s, _)| anchor_matches(anchor, &text.lines, *s)).collect(),
        None => found.clone(),
    };
    match candidates.as_slice() {
        [] => {
            let anchor = hunk.anchor().map(definition_name).unwrap_or_default();
            let mut inside: Vec<String> = found
                .iter()
                .map(|(s, _)| match enclosing_name(&text.lines, *s) {
                    Some(name) => format!("inside `{name}`"),
                    None => "at module level".to_string(),
                })
                .collect();
            inside.dedup();
            Placed::Drift(format!(
                "found only {} (line {}); the fix targets `{anchor}`",
                inside.join(" and "),
                lines_list(&found)
            ))
        }
        [(start, applied)] if *start >= min_start => Placed::Found { start: *start, applied: *applied },
        [(start, _)] => Placed::Drift(format!(
            "found only at line {}, above where hunk {} was found: out of order",
            start + 1,
            index
        )),
        [(a, _), (b, _)] if a == b => {
            Placed::Drift(format!("ambiguous: at line {} the file reads both as applied and as not applied", a + 1))
        }
        many => Placed::Drift(format!("ambiguous: found at lines {}", lines_list(many))),
    }
}

fn offset(start: usize, header: usize) -> isize {
    start as isize - header.saturating_sub(1) as isize
}

fn drifted(hunk: &Hunk, text: &SourceText, reason: String) -> HunkState {
    let pre = hunk.pre_image();
    let post = hunk.post_image();
    let expected_at = hunk.old_start.saturating_sub(1);
    let near_pre = nearest(&text.lines, &pre, expected_at);
    let near_post = nearest(&text.lines, &post, hunk.new_start.saturating_sub(1));
    // Show against whichever image the file resembles more (a half-applied hunk shows as post).
    let (label, image, near, expected_line) = match (near_pre, near_post) {
        (Some(a), Some(b)) if b.1 > a.1 => (Side::Post, post, Some(b), hunk.new_start),
        (a, _) => (Side::Pre, pre, a, hunk.old_start),
    };
    let (nearest_line, nearest_lines) = match near {
        Some((start, _)) => {
            let end = (start + image.len()).min(text.lines.len());
            (Some(start + 1), text.lines[start..end].to_vec())
        }
        None => (None, Vec::new()),
    };
    HunkState::Drifted {
        reason,
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

    const PATCH: &str =
        "--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n@@ -8,4 +8,5 @@\n h\n i\n+I\n j\n k\n";

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

    /// A hunk with less trailing than leading context sits at the end of the file: the
    /// pre-image being a prefix of the post-image must not make an applied file ambiguous.
    #[test]
    fn appending_at_the_end_of_the_file_reads_applied() {
        let fp =
            parse("--- a/m.py\n+++ b/m.py\n@@ -9,3 +9,4 @@\n i\n j\n k\n+l\n", Path::new("p")).unwrap().files.remove(0);
        let t = text(PRISTINE);
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::NotApplied);
        let patched = apply(&fp, &t, &e).unwrap();
        let e2 = evaluate(&fp, &patched);
        assert_eq!(e2.state, FileState::Applied, "{:?}", e2.hunks);
        assert_eq!(revert(&fp, &patched, &e2).unwrap().encode(), PRISTINE.as_bytes());
    }

    #[test]
    fn two_places_are_ambiguous_and_say_where() {
        let fp =
            parse("--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n", Path::new("p")).unwrap().files.remove(0);
        let t = text("a\nb\nc\nd\nx\nb\nc\nd\n");
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::Drifted);
        assert_eq!(e.hunks[0].reason(), Some("ambiguous: found at lines 2 and 6"));
        assert!(apply(&fp, &t, &e).is_none());
    }

    #[test]
    fn a_hunk_found_only_above_the_previous_one_is_out_of_order() {
        let fp = parse(
            "--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n@@ -8,3 +8,3 @@\n h\n-i\n+I\n j\n",
            Path::new("p"),
        )
        .unwrap()
        .files
        .remove(0);
        // The second hunk's lines moved above the first's.
        let t = text("h\ni\nj\nx\nb\nc\nd\n");
        let e = evaluate(&fp, &t);
        assert_eq!(e.state, FileState::Drifted);
        assert_eq!(e.hunks[1].reason(), Some("found only at line 1, above where hunk 1 was found: out of order"));
    }

    #[test]
    fn uneven_context_away_from_the_edge_says_why() {
        // Two lines of leading context, one trailing: a diff writes that only at the end.
        let fp =
            parse("--- a/m.py\n+++ b/m.py\n@@ -8,3 +8,4 @@\n h\n i\n+I\n j\n", Path::new("p")).unwrap().files.remove(0);
        let e = evaluate(&fp, &text(PRISTINE));
        assert_eq!(e.state, FileState::Drifted);
        assert!(
            e.hunks[0].reason().unwrap().starts_with("found at line 8, but it has less context on one side"),
            "{:?}",
            e.hunks
        );
    }
}
