//! Evaluate / apply / revert of an arbitrary patch on an arbitrary file: never a panic, and
//! the verdict always agrees with what the edits do (the engine checks each verdict against its
//! own edit, so this holds for every file, mixed line endings included):
//! - not applied: apply succeeds, revert refuses; the patched file reads as applied at the
//!   same hunks, a second apply changes nothing, and revert gives back identical bytes;
//! - applied: revert succeeds, apply refuses; the reverted file reads as not applied;
//! - drifted: both refuse.
//!
//! And one place per hunk: a placed hunk's image is at the line reported, and is found there
//! exactly once in the file among the places its anchor allows.
//!
//! Input: the file's bytes, `\n%%PATCH%%\n`, the patch text.

#![no_main]

use std::path::Path;

use gaudi_fixes::patch::locate::{anchor_matches, matches_at, occurrences, Image};
use gaudi_fixes::patch::parse::parse;
use gaudi_fixes::patch::state::{self, FileEval, FileState};
use gaudi_fixes::patch::{FilePatch, HunkState, SourceText};
use libfuzzer_sys::fuzz_target;

const SEPARATOR: &[u8] = b"\n%%PATCH%%\n";

/// Every placed hunk sits on its image, and that image is the one place.
fn one_place(fp: &FilePatch, text: &SourceText, eval: &FileEval) {
    for (hunk, report) in fp.hunks.iter().zip(&eval.hunks) {
        let (line, post) = match report.state {
            HunkState::Applied { line, .. } => (line, true),
            HunkState::NotApplied { line, .. } => (line, false),
            HunkState::Drifted { .. } => continue,
        };
        assert!(matches_at(text, &Image::of(hunk, post), line - 1), "hunk {} is not at line {line}", report.index);
        let mut places: Vec<usize> = occurrences(text, &Image::of(hunk, false));
        places.extend(occurrences(text, &Image::of(hunk, true)));
        if let Some(anchor) = hunk.anchor() {
            places.retain(|s| anchor_matches(anchor, &text.lines, *s));
        }
        assert_eq!(places, vec![line - 1], "hunk {} placed where it is not the one place", report.index);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(at) = data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) else { return };
    let (file, patch) = (&data[..at], &data[at + SEPARATOR.len()..]);
    let Ok(patch) = std::str::from_utf8(patch) else { return };
    let Ok(patch) = parse(patch, Path::new("fuzz.patch")) else { return };
    let Ok(text) = SourceText::decode(file, Path::new("fuzz.py")) else { return };
    assert_eq!(text.encode(), file, "decode/encode is not byte-identical");
    for fp in &patch.files {
        let eval = state::evaluate(fp, &text);
        one_place(fp, &text, &eval);
        let applied = state::apply(fp, &text, &eval);
        let reverted = state::revert(fp, &text, &eval);
        match eval.state {
            FileState::NotApplied => {
                assert!(reverted.is_none(), "not applied, yet revert would edit");
                let patched = applied.expect("not applied, yet apply refused");
                let again = state::evaluate(fp, &patched);
                assert_eq!(again.state, FileState::Applied, "patched file does not read as applied");
                one_place(fp, &patched, &again);
                assert!(state::apply(fp, &patched, &again).is_none(), "a second apply would edit");
                let back = state::revert(fp, &patched, &again).expect("an applied file reverts");
                assert_eq!(back.encode(), file, "apply then revert is not byte-identical");
            }
            FileState::Applied => {
                assert!(applied.is_none(), "applied, yet apply would edit");
                let back = reverted.expect("applied, yet revert refused");
                let again = state::evaluate(fp, &back);
                assert_eq!(again.state, FileState::NotApplied, "reverted file does not read as not applied");
                one_place(fp, &back, &again);
            }
            FileState::Drifted => assert!(applied.is_none() && reverted.is_none(), "drifted, yet an edit"),
        }
    }
});
