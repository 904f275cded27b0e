//! Evaluate / apply / revert of an arbitrary patch on an arbitrary file: never a panic. Where
//! the patch is unambiguous on that file (each hunk's pre-image there exactly once and its
//! post-image not at all, and the reverse after patching), the patched file reads as applied
//! and reverting it gives back identical bytes (for files with one line ending throughout).
//!
//! Input: the file's bytes, `\n%%PATCH%%\n`, the patch text.

#![no_main]

use std::path::Path;

use gaudi_fixes::patch::parse::parse;
use gaudi_fixes::patch::state::{self, FileState};
use gaudi_fixes::patch::{FilePatch, SourceText};
use libfuzzer_sys::fuzz_target;

const SEPARATOR: &[u8] = b"\n%%PATCH%%\n";

fn count(lines: &[String], image: &[&str]) -> usize {
    if image.is_empty() || image.len() > lines.len() {
        return 0;
    }
    lines.windows(image.len()).filter(|w| w.iter().zip(image).all(|(a, b)| a == b)).count()
}

/// Every hunk's `want` image is in `text` exactly once and its other image not at all.
fn unambiguous(fp: &FilePatch, text: &SourceText, applied: bool) -> bool {
    fp.hunks.iter().all(|h| {
        let (want, other) = if applied { (h.post_image(), h.pre_image()) } else { (h.pre_image(), h.post_image()) };
        count(&text.lines, &want) == 1 && count(&text.lines, &other) == 0
    })
}

/// One line ending throughout (a last line without one aside): new and restored lines take the
/// file's dominant ending, so a mixed file cannot promise byte-identical reverts.
fn uniform(text: &SourceText) -> bool {
    let ended: Vec<&&str> = text.eols.iter().filter(|e| !e.is_empty()).collect();
    ended.windows(2).all(|w| w[0] == w[1])
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
        let _ = state::revert(fp, &text, &eval);
        let Some(patched) = state::apply(fp, &text, &eval) else {
            assert_ne!(eval.state, FileState::NotApplied, "not applied, yet apply refused");
            continue;
        };
        let again = state::evaluate(fp, &patched);
        if !(uniform(&text) && unambiguous(fp, &text, false) && unambiguous(fp, &patched, true)) {
            continue;
        }
        assert_eq!(again.state, FileState::Applied, "patched file does not read as applied");
        let reverted = state::revert(fp, &patched, &again).expect("an applied file reverts");
        assert_eq!(reverted.encode(), file, "revert is not byte-identical");
    }
});
