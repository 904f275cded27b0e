//! Property tests of the patch engine (library level, no binary).
//!
//! - Printing a parsed patch gives back the same patch.
//! - Placement (`placement_is_exact`): Python-like files built from repeated blocks (twin
//!   functions, a small alphabet of body lines), random edits, the diff at -U0 … -U3 with
//!   git-style `def` anchors, mixed line endings, with or without a final newline; then the
//!   file as it was, as the edit left it, and with other changes on top (renamed copies of a
//!   function, foreign lines, deleted lines, changed lines, changed endings). Every line carries
//!   where it came from, so a hunk placed anywhere but on the lines it was made from is caught.
//!   Invariants: a hunk is never placed (applied or not applied) on the wrong lines; a patch
//!   never changes a line outside the region it was made from; apply then revert restores
//!   every byte; a second apply changes nothing; `evaluate` (what `--check` reports) agrees
//!   with what `apply` and `revert` do. The counts are printed (`--nocapture`).

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
    (
        0usize..100_000,
        0usize..100_000,
        "[!-~]([ -~]{0,16}[!-~])?|",
        prop::collection::vec(hunk_line(), 1..14),
        any::<(bool, bool)>(),
    )
        .prop_filter("a hunk changes something", |(_, _, _, lines, _)| {
            lines.iter().any(|l| !matches!(l, HunkLine::Context(_)))
        })
        // An image of no lines is refused by the parser (a zero-context pure insertion or
        // deletion), so generated hunks have both.
        .prop_filter("both images have lines", |(_, _, _, lines, _)| {
            lines.iter().any(|l| !matches!(l, HunkLine::Add(_)))
                && lines.iter().any(|l| !matches!(l, HunkLine::Remove(_)))
        })
        // A context line ends both images or neither: a `\` marker after it speaks for both.
        .prop_filter("a shared last line has one ending", |(_, _, _, lines, (a, b))| {
            let last_pre = lines.iter().rposition(|l| !matches!(l, HunkLine::Add(_)));
            let last_post = lines.iter().rposition(|l| !matches!(l, HunkLine::Remove(_)));
            let fine = |flag: bool, last: Option<usize>| {
                !flag
                    || !matches!(last.map(|i| &lines[i]), Some(HunkLine::Context(_)))
                    || (a == b && last == Some(lines.len() - 1))
            };
            fine(*a, last_pre) && fine(*b, last_post) && (!matches!(lines.last(), Some(HunkLine::Context(_))) || a == b)
        })
        .prop_map(|(old_start, new_start, section, lines, (pre_no_eol, post_no_eol))| Hunk {
            old_start,
            new_start,
            patch_line: 0,
            section,
            lines,
            pre_no_eol,
            post_no_eol,
        })
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

// ---- placement on files built from repeated blocks ----

use std::cell::RefCell;

use gaudi_fixes::patch::HunkState;
use proptest::test_runner::{Config, TestRunner};
use similar::{capture_diff_slices, group_diff_ops, Algorithm, DiffOp};

/// Body lines shared by every function: files are full of repeats.
const BODY: [&str; 8] =
    ["    x = x + 1", "    sync()", "    return x", "    y = g(x)", "", "    # note", "    if x:", "        x -= 1"];

/// Where a line of a test file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Line i of the file the patch was made from.
    Old(usize),
    /// Line j of the file the edit made.
    New(usize),
    /// A copy, a foreign line or a changed line: never part of any hunk's region.
    Other,
}

type Line = (String, &'static str, Origin);

#[derive(Debug, Clone)]
enum Mutation {
    /// Insert a renamed copy of function `func` before function `before` (or at the end).
    Copy { func: prop::sample::Index, before: prop::sample::Index },
    /// Insert `n` foreign lines at `at`.
    Foreign { at: prop::sample::Index, n: usize },
    /// Delete the function at `at` (one without a line of any hunk's region).
    Delete { at: prop::sample::Index },
    /// Change the text of the line at `at`.
    Change { at: prop::sample::Index },
    /// Flip the line ending of the line at `at`.
    Ending { at: prop::sample::Index },
}

#[derive(Debug, Clone)]
struct Placement {
    /// Function bodies: `Some(i)`: BODY[i], `None`: a line of its own; a `Some(j)` twin copies
    /// function j's body.
    funcs: Vec<(Vec<Option<usize>>, Option<prop::sample::Index>)>,
    /// Edits: skip `gap` lines, delete `del`, insert (Some(i): BODY[i]; None: a new line).
    edits: Vec<(usize, usize, Vec<Option<usize>>)>,
    context: usize,
    /// Per function: CRLF? (mixed files); the first entry is the file's style otherwise.
    crlf: Vec<bool>,
    mixed: bool,
    final_newline: bool,
    /// Judge the file as the edit left it, plus mutations; else the original plus mutations.
    base_new: bool,
    mutations: Vec<Mutation>,
}

fn placement() -> impl Strategy<Value = Placement> {
    let index = any::<prop::sample::Index>;
    let func = (
        prop::collection::vec(prop::option::weighted(0.7, 0..BODY.len()), 1..7),
        prop::option::weighted(0.35, index()),
    );
    let insert = prop::collection::vec(prop::option::weighted(0.6, 0..BODY.len()), 0..3);
    let mutation = prop_oneof![
        2 => (index(), index()).prop_map(|(func, before)| Mutation::Copy { func, before }),
        2 => (index(), 1usize..4).prop_map(|(at, n)| Mutation::Foreign { at, n }),
        1 => index().prop_map(|at| Mutation::Delete { at }),
        1 => index().prop_map(|at| Mutation::Change { at }),
        1 => index().prop_map(|at| Mutation::Ending { at }),
    ];
    (
        prop::collection::vec(func, 2..9),
        prop::collection::vec((0usize..12, 0usize..3, insert), 1..4),
        0usize..4,
        prop::collection::vec(any::<bool>(), 10),
        any::<(bool, bool, bool)>(),
        prop::collection::vec(mutation, 0..4),
    )
        .prop_map(|(funcs, edits, context, crlf, (mixed, final_newline, base_new), mutations)| Placement {
            funcs,
            edits,
            context,
            crlf,
            mixed,
            final_newline,
            base_new,
            mutations,
        })
}

/// The file the patch is made from: a prelude of unique lines, then functions.
fn original(p: &Placement) -> Vec<Line> {
    let style = |crlf: bool| if crlf { "\r\n" } else { "\n" };
    let file_eol = style(p.crlf[0]);
    let mut lines: Vec<Line> =
        vec![("import os".into(), file_eol, Origin::Other), ("PRELUDE = 1".into(), file_eol, Origin::Other)];
    let mut bodies: Vec<Vec<String>> = Vec::new();
    for (k, (body, twin)) in p.funcs.iter().enumerate() {
        let body = match twin {
            Some(j) if k > 0 => bodies[j.index(k)].clone(),
            _ => body
                .iter()
                .enumerate()
                .map(|(i, b)| b.map_or_else(|| format!("    v{k}_{i} = {i}"), |b| BODY[b].to_string()))
                .collect(),
        };
        let eol = if p.mixed { style(p.crlf[k % p.crlf.len()]) } else { file_eol };
        lines.push((format!("def f{k}(x):"), eol, Origin::Other));
        lines.extend(body.iter().map(|b| (b.clone(), eol, Origin::Other)));
        bodies.push(body);
    }
    if !p.final_newline {
        lines.last_mut().expect("lines").1 = "";
    }
    for (i, l) in lines.iter_mut().enumerate() {
        l.2 = Origin::Old(i);
    }
    lines
}

/// The edited file, its lines' origins in the original (`None`: added by the edit).
fn edited(p: &Placement, old: &[Line]) -> Vec<(String, Option<usize>)> {
    let mut new = Vec::new();
    let mut at = 0;
    for (e, (gap, del, ins)) in p.edits.iter().enumerate() {
        let keep_to = (at + gap).min(old.len());
        new.extend((at..keep_to).map(|i| (old[i].0.clone(), Some(i))));
        at = (keep_to + del).min(old.len());
        new.extend(ins.iter().enumerate().map(|(j, b)| match b {
            Some(b) => (BODY[*b].to_string(), None),
            None => (format!("    new_{e}_{j}()"), None),
        }));
    }
    new.extend((at..old.len()).map(|i| (old[i].0.clone(), Some(i))));
    new
}

/// The edited file's lines: kept lines keep their ending, added lines take the one before
/// them, and the last line ends as the original's does.
fn edited_lines(p: &Placement, old: &[Line], new: &[(String, Option<usize>)]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for (j, (text, from)) in new.iter().enumerate() {
        let eol = match from {
            Some(i) if !old[*i].1.is_empty() => old[*i].1,
            _ => out.last().map_or(old[0].1, |l| l.1),
        };
        let eol = if eol.is_empty() { "\n" } else { eol };
        out.push((text.clone(), eol, Origin::New(j)));
    }
    if let Some(last) = out.last_mut() {
        last.1 = if p.final_newline {
            if last.1.is_empty() {
                "\n"
            } else {
                last.1
            }
        } else {
            ""
        };
    }
    out
}

/// `git diff -U<context>` of the two texts, with git's Python-driver section (the nearest
/// preceding `def`/`class` line) on each hunk header and `\ No newline` markers.
fn git_diff(p: &Placement, old: &[Line], new: &[Line]) -> String {
    let key = |l: &Line, last: bool| (l.0.clone(), last && !p.final_newline);
    let ok: Vec<(String, bool)> = old.iter().enumerate().map(|(i, l)| key(l, i + 1 == old.len())).collect();
    let nk: Vec<(String, bool)> = new.iter().enumerate().map(|(i, l)| key(l, i + 1 == new.len())).collect();
    let ops = positioned(capture_diff_slices(Algorithm::Myers, &ok, &nk));
    let mut out = String::from("--- a/vllm/m.py\n+++ b/vllm/m.py\n");
    for group in group_diff_ops(ops, p.context) {
        let group: Vec<DiffOp> =
            group.into_iter().filter(|op| op.old_range().len() + op.new_range().len() > 0).collect();
        if group.is_empty() {
            continue;
        }
        let old_start = group.iter().map(|op| op.old_range().start).min().unwrap();
        let old_end = group.iter().map(|op| op.old_range().end).max().unwrap();
        let new_start = group.iter().map(|op| op.new_range().start).min().unwrap();
        let new_end = group.iter().map(|op| op.new_range().end).max().unwrap();
        let start = |s: usize, len: usize| if len == 0 { s } else { s + 1 };
        let section = old[..old_start]
            .iter()
            .rev()
            .map(|l| l.0.trim())
            .find(|t| t.starts_with("def ") || t.starts_with("class "))
            .map_or(String::new(), |t| format!(" {t}"));
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@{section}\n",
            start(old_start, old_end - old_start),
            old_end - old_start,
            start(new_start, new_end - new_start),
            new_end - new_start
        ));
        for op in &group {
            let mut emit = |marker: char, k: &(String, bool)| {
                out.push(marker);
                out.push_str(&k.0);
                out.push('\n');
                if k.1 {
                    out.push_str("\\ No newline at end of file\n");
                }
            };
            for i in op.old_range() {
                if !matches!(op, DiffOp::Insert { .. }) {
                    let marker = if matches!(op, DiffOp::Equal { .. }) { ' ' } else { '-' };
                    emit(marker, &ok[i]);
                }
            }
            if !matches!(op, DiffOp::Equal { .. } | DiffOp::Delete { .. }) {
                for j in op.new_range() {
                    emit('+', &nk[j]);
                }
            }
        }
    }
    out
}

/// The ops with the position of each pure deletion in the new file and of each pure insertion
/// in the old file recomputed from the ops before it. similar 2.7.0's Myers can report a
/// `Delete` whose `new_index` lies past where it sits (seen with PROPTEST_RNG_SEED=35:
/// `Equal{0,0,len 11}, Delete{old 11, len 1, new_index 13}, Equal{old 12, new 11, len 3}`;
/// its `conquer` passes on the start of an empty new range, which need not be the cursor).
/// The lines of every op are right; only that empty side is not, and the hunk bounds in
/// `git_diff` take min/max over every op's ranges, so such a `Delete` stretched the header
/// past the lines written (`-3 +3` over 3 old and 2 new lines: an unexpected parse error).
fn positioned(ops: Vec<DiffOp>) -> Vec<DiffOp> {
    let (mut o, mut n) = (0, 0);
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let op = match op {
            DiffOp::Delete { old_index, old_len, .. } => DiffOp::Delete { old_index, old_len, new_index: n },
            DiffOp::Insert { new_index, new_len, .. } => DiffOp::Insert { old_index: o, new_index, new_len },
            op => op,
        };
        assert_eq!((op.old_range().start, op.new_range().start), (o, n), "ops out of order: {op:?}");
        o = op.old_range().end;
        n = op.new_range().end;
        out.push(op);
    }
    out
}

fn bytes(lines: &[Line]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{}{}", l.0, l.1).into_bytes()).collect()
}

/// Per pre-image line: its line in the original, and in the edited file if it is context.
type PreRegion = Vec<(usize, Option<usize>)>;
/// Per post-image line: its line in the original if it is context, and in the edited file.
type PostRegion = Vec<(Option<usize>, usize)>;

/// The origins a hunk's pre- and post-image lines may have.
fn regions(fp: &FilePatch) -> Vec<(PreRegion, PostRegion)> {
    fp.hunks
        .iter()
        .map(|h| {
            let (mut o, mut n) = (h.old_start - 1, h.new_start - 1);
            let (mut pre, mut post) = (Vec::new(), Vec::new());
            for l in &h.lines {
                match l {
                    HunkLine::Context(_) => {
                        pre.push((o, Some(n)));
                        post.push((Some(o), n));
                        o += 1;
                        n += 1;
                    }
                    HunkLine::Remove(_) => {
                        pre.push((o, None));
                        o += 1;
                    }
                    HunkLine::Add(_) => {
                        post.push((None, n));
                        n += 1;
                    }
                }
            }
            (pre, post)
        })
        .collect()
}

/// Apply the mutations to `base`. None of them can make a new exact copy of a hunk's image
/// inside the definition it names: inserted and changed lines are foreign (a window holding
/// one matches no image; `def` lines are not changed), copies of a function are renamed, and only functions without a
/// line of any hunk's region are deleted. They can break a region, shift it, and put renamed
/// twins anywhere.
fn mutate(p: &Placement, base: Vec<Line>, keep: &dyn Fn(Origin) -> bool) -> Vec<Line> {
    let mut t = base;
    let mut foreign = 0;
    for m in &p.mutations {
        match m {
            Mutation::Copy { func, before } => {
                let defs: Vec<usize> = (0..t.len()).filter(|&i| t[i].0.starts_with("def ")).collect();
                if defs.is_empty() {
                    continue;
                }
                let k = func.index(defs.len());
                let end = defs.get(k + 1).copied().unwrap_or(t.len());
                let mut copy: Vec<Line> = t[defs[k]..end]
                    .iter()
                    .map(|l| (l.0.clone(), if l.1.is_empty() { "\n" } else { l.1 }, Origin::Other))
                    .collect();
                foreign += 1;
                copy[0].0 = copy[0].0.replacen("(x)", &format!("_copy{foreign}(x)"), 1);
                let at = before.index(defs.len() + 1);
                let at = defs.get(at).copied().unwrap_or(t.len());
                splice_lines(&mut t, at, copy);
            }
            Mutation::Foreign { at, n } => {
                let at = at.index(t.len() + 1);
                let eol = t.get(at).or(t.last()).map_or("\n", |l| if l.1.is_empty() { "\n" } else { l.1 });
                let lines = (0..*n)
                    .map(|_| {
                        foreign += 1;
                        (format!("    foreign_{foreign}()"), eol, Origin::Other)
                    })
                    .collect();
                splice_lines(&mut t, at, lines);
            }
            Mutation::Delete { at } => {
                let defs: Vec<usize> = (0..t.len()).filter(|&i| t[i].0.starts_with("def ")).collect();
                if defs.is_empty() {
                    continue;
                }
                let k = at.index(defs.len());
                let end = defs.get(k + 1).copied().unwrap_or(t.len());
                if t[defs[k]..end].iter().any(|l| keep(l.2)) {
                    continue;
                }
                let eol = t[end - 1].1;
                t.drain(defs[k]..end);
                if end == t.len() + (end - defs[k]) {
                    if let Some(last) = t.last_mut() {
                        last.1 = eol;
                    }
                }
            }
            Mutation::Change { at } => {
                let at = at.index(t.len());
                // A changed `def` line would move a renamed copy's lines into the function above.
                if t[at].0.starts_with("def ") {
                    continue;
                }
                foreign += 1;
                t[at] = (format!("    changed_{foreign}()"), t[at].1, Origin::Other);
            }
            Mutation::Ending { at } => {
                let at = at.index(t.len());
                t[at].1 = match t[at].1 {
                    "\n" => "\r\n",
                    "\r\n" => "\n",
                    e => e,
                };
            }
        }
    }
    t
}

/// Insert lines at `at`, keeping a missing final newline at the end of the file.
fn splice_lines(t: &mut Vec<Line>, at: usize, lines: Vec<Line>) {
    if lines.is_empty() {
        return;
    }
    if at == t.len() && t.last().is_some_and(|l| l.1.is_empty()) {
        let last = t.len() - 1;
        t[last].1 = "\n";
        let n = t.len();
        t.splice(at..at, lines);
        let end = t.len() - 1;
        t[end].1 = "";
        let _ = n;
    } else {
        t.splice(at..at, lines);
    }
}

#[derive(Debug, Default)]
struct Counts {
    cases: usize,
    refused_at_load: usize,
    pristine_not_applied: usize,
    pristine_refused: usize,
    not_lint_clean: usize,
    edited_applied: usize,
    edited_refused: usize,
    changed_not_applied: usize,
    changed_applied: usize,
    changed_refused: usize,
    wrong_place: usize,
    /// Refusals because a revert could not restore a line's ending.
    refused_for_endings: usize,
    by_context: [usize; 4],
}

fn decode(bytes: &[u8]) -> SourceText {
    SourceText::decode(bytes, Path::new("vllm/m.py")).expect("generated text decodes")
}

/// Check one file against the patch: every placed hunk sits on lines with the right origins;
/// `evaluate` agrees with `apply`/`revert`; applying changes the regions only, reads applied,
/// a second apply does nothing, and revert restores every byte (and the reverse). Returns the
/// verdict.
fn judge(fp: &FilePatch, t: &[Line], counts: &RefCell<Counts>) -> Result<FileState, TestCaseError> {
    let original = bytes(t);
    let text = decode(&original);
    prop_assert_eq!(text.lines.len(), t.len());
    let eval = state::evaluate(fp, &text);
    if eval.hunks.iter().any(|h| h.reason().is_some_and(|r| r.contains("ending"))) {
        counts.borrow_mut().refused_for_endings += 1;
    }
    let regions = regions(fp);
    // Where each hunk's image sits, and whether it sits on the lines it was made from.
    let mut windows = Vec::new();
    for (k, (report, (pre, post))) in eval.hunks.iter().zip(&regions).enumerate() {
        let (line, ok): (usize, Box<dyn Fn(usize, Origin) -> bool>) = match report.state {
            HunkState::NotApplied { line, .. } => (
                line,
                Box::new(|i: usize, o: Origin| match o {
                    Origin::Old(x) => x == pre[i].0,
                    Origin::New(y) => pre[i].1 == Some(y),
                    Origin::Other => false,
                }),
            ),
            HunkState::Applied { line, .. } => (
                line,
                Box::new(|i: usize, o: Origin| match o {
                    Origin::New(y) => y == post[i].1,
                    Origin::Old(x) => post[i].0 == Some(x),
                    Origin::Other => false,
                }),
            ),
            HunkState::Drifted { .. } => continue,
        };
        let len = if matches!(report.state, HunkState::Applied { .. }) { post.len() } else { pre.len() };
        let right = (0..len).all(|i| ok(i, t[line - 1 + i].2));
        if !right {
            counts.borrow_mut().wrong_place += 1;
        }
        prop_assert!(
            right,
            "hunk {} placed on the wrong lines at line {}: {:?}\nfile:\n{}",
            k + 1,
            line,
            report.state,
            t.iter().enumerate().map(|(i, l)| format!("{:3} {:?} {:?}\n", i + 1, l.2, l.0)).collect::<String>()
        );
        windows.push((line - 1, len));
    }
    // evaluate agrees with apply and revert.
    let applied = state::apply(fp, &text, &eval);
    let reverted = state::revert(fp, &text, &eval);
    prop_assert_eq!(applied.is_some(), eval.state == FileState::NotApplied);
    prop_assert_eq!(reverted.is_some(), eval.state == FileState::Applied);
    let (edited, forward) = match (applied, reverted) {
        (Some(e), _) => (e, true),
        (_, Some(e)) => (e, false),
        _ => return Ok(eval.state),
    };
    // Only the regions change: every line outside them keeps its text and ending, in order.
    let mut expect: Vec<(String, Option<&str>)> = Vec::new();
    let mut at = 0;
    for ((start, len), hunk) in windows.iter().zip(&fp.hunks) {
        expect.extend(t[at..*start].iter().map(|l| (l.0.clone(), Some(l.1))));
        let image = if forward { hunk.post_image() } else { hunk.pre_image() };
        expect.extend(image.iter().map(|s| (s.to_string(), None)));
        at = start + len;
    }
    expect.extend(t[at..].iter().map(|l| (l.0.clone(), Some(l.1))));
    prop_assert_eq!(edited.lines.len(), expect.len());
    for (i, (text, eol)) in expect.iter().enumerate() {
        prop_assert_eq!(&edited.lines[i], text, "line {} changed outside the regions", i + 1);
        // The last line's ending may be the hunk's to decide (a final newline added/removed).
        if let Some(eol) = eol {
            if i + 1 < expect.len() {
                prop_assert_eq!(edited.eols[i], *eol, "line {}'s ending changed outside the regions", i + 1);
            }
        }
    }
    // Without a final newline, a blank last line is no line at all once written (`a\n` + `` is
    // `a\n`): a mutation that leaves a hunk's region at the end of such a file can make the
    // edit end in one, and the written file then cannot read back (neither image is there).
    if edited.lines.last().is_some_and(|l| l.is_empty()) && edited.eols.last().is_some_and(|e| e.is_empty()) {
        return Ok(eval.state);
    }
    // It now reads the other way; doing it again changes nothing; undoing restores every byte.
    let edited_bytes = edited.encode();
    let again = state::evaluate(fp, &decode(&edited_bytes));
    let want = if forward { FileState::Applied } else { FileState::NotApplied };
    prop_assert_eq!(again.state, want, "after the edit the file does not read as {:?}", want);
    if forward {
        prop_assert!(state::apply(fp, &decode(&edited_bytes), &again).is_none(), "a second apply would change it");
        let back = state::revert(fp, &decode(&edited_bytes), &again).expect("an applied file reverts");
        prop_assert_eq!(back.encode(), original, "apply then revert is not byte-identical");
    } else {
        prop_assert!(state::revert(fp, &decode(&edited_bytes), &again).is_none(), "a second revert would change it");
        let forth = state::apply(fp, &decode(&edited_bytes), &again).expect("a reverted file applies");
        prop_assert_eq!(forth.lines, text.lines, "revert then apply does not give the lines back");
    }
    Ok(eval.state)
}

/// Cases of `placement_is_exact` per run: about 10,900 of them make a change (the rest are
/// skipped as no-ops; the test checks that at least 10,000 did), each judged on up to three files.
const PLACEMENT_CASES: u32 = 12_000;

#[test]
fn placement_is_exact() {
    let counts = RefCell::new(Counts::default());
    // A fixed seed, so that a CI run is reproducible; PROPTEST_RNG_SEED=N (or =random via
    // GAUDI_FIXES_PROPTEST_RANDOM=1) explores others.
    let mut config = Config { cases: PLACEMENT_CASES, failure_persistence: None, ..Config::default() };
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() && std::env::var_os("GAUDI_FIXES_PROPTEST_RANDOM").is_none() {
        config.rng_seed = proptest::test_runner::RngSeed::Fixed(20261130);
    }
    let mut runner = TestRunner::new(config);
    let result = runner.run(&placement(), |p| {
        let old = original(&p);
        let new_origin = edited(&p, &old);
        if new_origin.is_empty() || new_origin.iter().map(|l| &l.0).eq(old.iter().map(|l| &l.0)) {
            return Ok(());
        }
        let new = edited_lines(&p, &old, &new_origin);
        // Without a final newline, a last blank "line" is no line at all (`a\n` + `` is `a\n`).
        let representable = |t: &[Line]| t.last().is_some_and(|l| !(l.0.is_empty() && l.1.is_empty()));
        if !representable(&old) || !representable(&new) {
            return Ok(());
        }
        let diff = git_diff(&p, &old, &new);
        counts.borrow_mut().cases += 1;
        counts.borrow_mut().by_context[p.context] += 1;
        let fp = match parse(&diff, Path::new("m.patch")) {
            Ok(mut patch) => patch.files.remove(0),
            Err(e) => {
                let e = format!("{e:#}");
                // Only zero-context pure insertions and deletions are refused.
                prop_assert!(p.context == 0 && e.contains("has no context"), "unexpected parse error: {}\n{}", e, diff);
                counts.borrow_mut().refused_at_load += 1;
                return Ok(());
            }
        };
        // The file the patch was made from: not applied, or refused, never applied.
        let pristine = judge(&fp, &old, &counts)?;
        match pristine {
            FileState::NotApplied => counts.borrow_mut().pristine_not_applied += 1,
            FileState::Drifted => counts.borrow_mut().pristine_refused += 1,
            FileState::Applied => prop_assert!(false, "the original reads as applied\n{}", diff),
        }
        // The file the edit made: applied, or refused.
        let edited = judge(&fp, &new, &counts)?;
        match edited {
            FileState::Applied => counts.borrow_mut().edited_applied += 1,
            FileState::Drifted => counts.borrow_mut().edited_refused += 1,
            FileState::NotApplied => prop_assert!(false, "the edited file reads as not applied\n{}", diff),
        }
        // Either, with other changes on top — for patches that keep the catalogue's rule (each
        // hunk found once in the file it was made from and once in the file it makes; `lint
        // --upstream` checks it): for others, a broken region and a fresh copy of its image
        // elsewhere are the same file.
        if !(pristine == FileState::NotApplied && edited == FileState::Applied) {
            counts.borrow_mut().not_lint_clean += 1;
            return Ok(());
        }
        let regions = regions(&fp);
        let keep = |o: Origin| {
            regions.iter().any(|(pre, post)| match o {
                Origin::Old(x) => pre.iter().any(|r| r.0 == x),
                Origin::New(y) => post.iter().any(|r| r.1 == y),
                Origin::Other => false,
            })
        };
        let base = if p.base_new { new.clone() } else { old.clone() };
        let t = mutate(&p, base, &keep);
        if !representable(&t) {
            return Ok(());
        }
        let verdict = judge(&fp, &t, &counts).map_err(|e| TestCaseError::fail(format!("{e}\n{diff}")))?;
        let mut c = counts.borrow_mut();
        match verdict {
            FileState::NotApplied => c.changed_not_applied += 1,
            FileState::Applied => c.changed_applied += 1,
            FileState::Drifted => c.changed_refused += 1,
        }
        Ok(())
    });
    let c = counts.into_inner();
    eprintln!("placement_is_exact: {c:?}");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(c.wrong_place, 0);
    // Issue 8 asks for at least 10,000 cases per run; about 9 in 10 generated ones change the file.
    assert!(c.cases >= 10_000, "only {} cases changed something: raise PLACEMENT_CASES", c.cases);
    // Not vacuous: most original files read as not applied, most edited ones as applied, and
    // most changed ones are still placed.
    let parsed = c.cases - c.refused_at_load;
    assert!(c.pristine_not_applied * 10 >= parsed * 8, "{c:?}");
    assert!(c.edited_applied * 10 >= parsed * 8, "{c:?}");
    assert!((c.changed_not_applied + c.changed_applied) * 10 >= parsed * 5, "{c:?}");
}
