//! Property tests of the patch engine (library level, no binary): printing a parsed patch gives
//! back the same patch; a diff of any file and any set of edits applies, reads as applied,
//! and reverts to identical bytes (LF or CRLF, with or without a final newline); and a context
//! line changed under a hunk makes it drifted, never applied.

use std::path::Path;

use gaudi_fixes::patch::parse::{parse, print, without_positions};
use gaudi_fixes::patch::state::{self, FileState};
use gaudi_fixes::patch::{FilePatch, Hunk, HunkLine, Patch, SourceText};
use proptest::prelude::*;

// ---- parse → print → parse ----

fn hunk_line() -> impl Strategy<Value = HunkLine> {
    let text = "[^\n\r]{0,24}";
    prop_oneof![
        3 => text.prop_map(HunkLine::Context),
        2 => text.prop_map(HunkLine::Remove),
        2 => text.prop_map(HunkLine::Add),
    ]
}

fn hunk() -> impl Strategy<Value = Hunk> {
    (0usize..100_000, 0usize..100_000, "[!-~]([ -~]{0,16}[!-~])?|", prop::collection::vec(hunk_line(), 1..14))
        .prop_filter("a hunk changes something", |(_, _, _, lines)| {
            lines.iter().any(|l| !matches!(l, HunkLine::Context(_)))
        })
        .prop_map(|(old_start, new_start, section, lines)| Hunk { old_start, new_start, patch_line: 0, section, lines })
}

fn path() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,7}(/[a-z_][a-z0-9_.]{0,7}){0,3}\\.py"
}

fn patch() -> impl Strategy<Value = Patch> {
    prop::collection::vec((path(), path(), prop::collection::vec(hunk(), 1..4)), 1..4).prop_map(|files| Patch {
        files: files.into_iter().map(|(old_path, new_path, hunks)| FilePatch { old_path, new_path, hunks }).collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn print_then_parse_is_identity(p in patch()) {
        let text = print(&p);
        let back = parse(&text, Path::new("printed.patch")).map_err(|e| TestCaseError::fail(format!("{e:#}\n{text}")))?;
        prop_assert_eq!(without_positions(back.clone()), without_positions(p));
        // And printing is stable: print(parse(print(p))) == print(p).
        prop_assert_eq!(print(&back), text);
    }

    #[test]
    fn print_then_parse_is_identity_with_crlf(p in patch()) {
        let text = print(&p).replace('\n', "\r\n");
        let back = parse(&text, Path::new("printed.patch")).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
        prop_assert_eq!(without_positions(back), without_positions(p));
    }

    /// Arbitrary text never panics the parser; when it parses, printing and re-parsing agrees.
    #[test]
    fn parse_of_arbitrary_text_is_total(text in "(--- a/x\n\\+\\+\\+ b/x\n)?(@@ -[0-9],[0-9] \\+[0-9],[0-9] @@\n)?([ +\\-\\\\@]?[a-z]{0,3}\r?\n){0,12}") {
        if let Ok(p) = parse(&text, Path::new("any.patch")) {
            let again = parse(&print(&p), Path::new("again.patch")).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
            prop_assert_eq!(without_positions(again), without_positions(p));
        }
    }
}

// ---- apply / evaluate / revert on generated files and edits ----

/// A generated case: the original lines, the edited lines, and how the file is written.
#[derive(Debug, Clone)]
struct Case {
    old: Vec<String>,
    new: Vec<String>,
    crlf: bool,
    final_newline: bool,
}

impl Case {
    fn bytes(&self, lines: &[String]) -> Vec<u8> {
        let eol = if self.crlf { "\r\n" } else { "\n" };
        let mut s = lines.join(eol);
        if self.final_newline {
            s.push_str(eol);
        }
        s.into_bytes()
    }

    /// The unified diff of old → new, as `diff -u` would write it for the LF form.
    fn diff(&self) -> String {
        let lf = |lines: &[String]| {
            let mut s = lines.join("\n");
            if self.final_newline {
                s.push('\n');
            }
            s
        };
        let (old, new) = (lf(&self.old), lf(&self.new));
        unified_diff(&old, &new)
    }
}

/// `diff -u` of two LF texts, from similar's grouped ops. (similar 2.7's own unified_diff can
/// write a hunk header that undercounts its lines when an insert follows trailing context, e.g.
/// `@@ -24,4 +23,5 @@` over five old lines; our parser rightly rejects that, so the header
/// here is computed from the ops' full extent.)
fn unified_diff(old: &str, new: &str) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut out = String::from("--- a/vllm/m.py\n+++ b/vllm/m.py\n");
    for group in diff.grouped_ops(3) {
        let old_start = group.iter().map(|op| op.old_range().start).min().unwrap();
        let old_end = group.iter().map(|op| op.old_range().end).max().unwrap();
        let new_start = group.iter().map(|op| op.new_range().start).min().unwrap();
        let new_end = group.iter().map(|op| op.new_range().end).max().unwrap();
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            old_start + 1,
            old_end - old_start,
            new_start + 1,
            new_end - new_start
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                let marker = match change.tag() {
                    similar::ChangeTag::Equal => ' ',
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                };
                out.push(marker);
                out.push_str(change.value());
                if change.missing_newline() {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// What a generated line is: unique in the file (as most lines near a hunk are in real
/// sources), blank, or one of a few common lines. Unique lines get their text from their
/// position, so shrinking cannot make two of them equal.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Unique,
    Blank,
    Common(usize),
}

const COMMON: [&str; 4] = ["    return x", "    pass", "# ----", "def g():"];

fn kind(common: bool) -> BoxedStrategy<Kind> {
    if common {
        prop_oneof![8 => Just(Kind::Unique), 1 => Just(Kind::Blank), 1 => (0..COMMON.len()).prop_map(Kind::Common)]
            .boxed()
    } else {
        Just(Kind::Unique).boxed()
    }
}

fn text_of(kind: Kind, unique: impl FnOnce() -> String) -> String {
    match kind {
        Kind::Unique => unique(),
        Kind::Blank => String::new(),
        Kind::Common(i) => COMMON[i].to_string(),
    }
}

/// A file and a set of non-overlapping edits to it: skip `gap` lines, delete `del`, insert.
/// With `common`, some lines are blank or repeated; without, every line is unique.
fn case_with(common: bool) -> impl Strategy<Value = Case> {
    let edits = prop::collection::vec((0usize..25, 0usize..4, prop::collection::vec(kind(common), 0..4)), 1..6);
    (prop::collection::vec(kind(common), 1..150), edits, any::<bool>(), any::<bool>())
        .prop_map(|(old_kinds, edits, crlf, final_newline)| {
            let old: Vec<String> =
                old_kinds.iter().enumerate().map(|(i, k)| text_of(*k, || format!("    old_{i} = f({i})"))).collect();
            let mut new = Vec::new();
            let mut at = 0;
            for (e, (gap, del, ins)) in edits.into_iter().enumerate() {
                let keep_to = (at + gap).min(old.len());
                new.extend_from_slice(&old[at..keep_to]);
                at = (keep_to + del).min(old.len());
                new.extend(ins.iter().enumerate().map(|(j, k)| text_of(*k, || format!("    new_{e}_{j} = g({j})"))));
            }
            new.extend_from_slice(&old[at..]);
            Case { old, new, crlf, final_newline }
        })
        // Without a final newline, a trailing blank "line" is no line at all (`a\n` + `` is
        // just `a\n`), and a one-line file has no line ending to tell CRLF from LF: such cases
        // would test the generator, not the engine.
        .prop_filter("the edits change something and leave a line", |c| {
            c.old != c.new
                && !c.new.is_empty()
                && (c.final_newline || (!c.old[c.old.len() - 1].is_empty() && !c.new[c.new.len() - 1].is_empty()))
                && (c.final_newline || c.old.len() > 1 || !c.crlf)
        })
}

fn case() -> impl Strategy<Value = Case> {
    case_with(true)
}

/// How many times `image` occurs in `lines`.
fn occurrences(lines: &[String], image: &[&str]) -> usize {
    if image.is_empty() || image.len() > lines.len() {
        return 0;
    }
    lines.windows(image.len()).filter(|w| w.iter().zip(image).all(|(a, b)| a == b)).count()
}

fn decode(bytes: &[u8]) -> SourceText {
    SourceText::decode(bytes, Path::new("vllm/m.py")).expect("generated text decodes")
}

fn file_patch(diff: &str) -> Result<FilePatch, TestCaseError> {
    let mut p = parse(diff, Path::new("m.patch"))
        .map_err(|e| TestCaseError::fail(format!("similar's diff does not parse: {e:#}\n{diff}")))?;
    prop_assert_eq!(p.files.len(), 1);
    Ok(p.files.remove(0))
}

/// A line no generated file contains.
fn mutated_line(n: u32) -> String {
    format!("    mutated_{n} = 'not in any image'")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn apply_then_revert_round_trips(c in case()) {
        let diff = c.diff();
        let fp = file_patch(&diff)?;
        // The parsed diff also survives print → parse.
        let reprinted = parse(&print(&Patch { files: vec![fp.clone()] }), Path::new("re.patch")).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
        prop_assert_eq!(&without_positions(reprinted).files[0], &without_positions(Patch { files: vec![fp.clone()] }).files[0]);

        let original = c.bytes(&c.old);
        let text = decode(&original);
        let eval = state::evaluate(&fp, &text);
        prop_assert_eq!(eval.state, FileState::NotApplied, "original not read as not-applied\n{}", diff);

        let patched = state::apply(&fp, &text, &eval).expect("a not-applied file can be patched");
        let patched_bytes = patched.encode();
        prop_assert_eq!(String::from_utf8(patched_bytes.clone()).unwrap(), String::from_utf8(c.bytes(&c.new)).unwrap(), "patched bytes differ from the edit\n{}", diff);

        let eval = state::evaluate(&fp, &decode(&patched_bytes));
        prop_assert_eq!(eval.state, FileState::Applied, "patched file not read as applied\n{}", diff);
        let reverted = state::revert(&fp, &decode(&patched_bytes), &eval).expect("an applied file can be reverted");
        prop_assert_eq!(reverted.encode(), original, "revert is not byte-identical\n{}", diff);
    }

    /// Lines added above every hunk (another fix, a local change) shift it but change nothing
    /// else: still not applied, and it patches to the edit with the same lines above. (Where a
    /// hunk's pre-image occurs twice, the nearest copy wins by design; such cases are skipped.)
    #[test]
    fn offsets_do_not_change_the_verdict(c in case(), above in prop::collection::vec(kind(true), 1..20)) {
        let fp = file_patch(&c.diff())?;
        let above: Vec<String> = above.iter().enumerate().map(|(i, k)| text_of(*k, || format!("    above_{i} = h({i})"))).collect();
        let shifted = Case { old: [above.clone(), c.old.clone()].concat(), new: [above, c.new.clone()].concat(), ..c.clone() };
        prop_assume!(fp.hunks.iter().all(|h| occurrences(&shifted.old, &h.pre_image()) == 1 && occurrences(&shifted.old, &h.post_image()) == 0));
        let text = decode(&shifted.bytes(&shifted.old));
        let eval = state::evaluate(&fp, &text);
        // A hunk at line 1 without leading context is anchored to the file's start: lines
        // added above it are drift, not an offset.
        let anchored = fp.hunks.iter().any(|h| h.old_start <= 1 && !matches!(h.lines.first(), Some(HunkLine::Context(_))));
        if anchored {
            prop_assert_eq!(eval.state, FileState::Drifted);
            return Ok(());
        }
        prop_assert_eq!(eval.state, FileState::NotApplied);
        let patched = state::apply(&fp, &text, &eval).expect("patchable");
        prop_assert_eq!(patched.encode(), shifted.bytes(&shifted.new));
    }

    /// A context line of some hunk changed in the original (every line unique, so no other
    /// copy of an image can stand in): drifted, never applied, and never patched.
    #[test]
    fn mutated_context_is_drift_never_applied(c in case_with(false), pick in any::<prop::sample::Index>(), n in any::<u32>()) {
        let fp = file_patch(&c.diff())?;
        // Every (line in the original, hunk) of a context line.
        let mut context = Vec::new();
        for (h, hunk) in fp.hunks.iter().enumerate() {
            let mut line = hunk.old_start.saturating_sub(1);
            for l in &hunk.lines {
                match l {
                    HunkLine::Context(_) => {
                        context.push((line, h));
                        line += 1;
                    }
                    HunkLine::Remove(_) => line += 1,
                    HunkLine::Add(_) => {}
                }
            }
        }
        prop_assume!(!context.is_empty());
        let (at, _) = context[pick.index(context.len())];
        let mut old = c.old.clone();
        old[at] = mutated_line(n);
        let text = decode(&c.bytes(&old));
        let eval = state::evaluate(&fp, &text);
        prop_assert_ne!(eval.state, FileState::Applied, "a mutated context line read as applied\n{}", c.diff());
        prop_assert_eq!(eval.state, FileState::Drifted, "a mutated context line (original line {}) not read as drifted\n{}", at + 1, c.diff());
        prop_assert!(state::apply(&fp, &text, &eval).is_none());
    }
}
