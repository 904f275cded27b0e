//! Write a file patch the way the catalogue wants it: a unified diff whose hunk headers carry
//! the enclosing `def` / `class` as `git diff` writes them with the python diff driver
//! (`@@ -159,6 +188,9 @@ def forward_native(`), with enough context that every hunk's
//! pre-image occurs once in the pristine file and its post-image once in the patched file.

use similar::{capture_diff_slices, Algorithm, DiffOp};

/// git's python funcname pattern (userdiff.c): `^[ \t]*((class|(async[ \t]+)?def)[ \t].*)$`.
fn funcname(line: &str) -> Option<&str> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    let is = trimmed.starts_with("class ")
        || trimmed.starts_with("class\t")
        || trimmed.starts_with("def ")
        || trimmed.starts_with("def\t")
        || trimmed.strip_prefix("async").is_some_and(|r| {
            let r2 = r.trim_start_matches([' ', '\t']);
            r2.len() < r.len() && (r2.starts_with("def ") || r2.starts_with("def\t"))
        });
    is.then_some(trimmed)
}

/// The anchor git writes for a hunk whose pre-image starts at 0-based `start` of `old`: the
/// nearest line above it matching the funcname pattern, trailing space trimmed, at most 80
/// bytes (git's limit, cut at a character boundary).
pub fn anchor(old: &[String], start: usize) -> Option<String> {
    let line = old[..start.min(old.len())].iter().rev().find_map(|l| funcname(l))?;
    let mut s = line.trim_end().to_string();
    if s.len() > 80 {
        let mut cut = 80;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    Some(s)
}

/// One hunk: ranges in old and new (0-based, half-open) and its lines.
struct Hunk {
    old: (usize, usize),
    new: (usize, usize),
    lines: Vec<(char, String)>,
}

fn hunks(old: &[String], new: &[String], context: usize) -> Vec<Hunk> {
    let ops = capture_diff_slices(Algorithm::Myers, old, new);
    let mut out = Vec::new();
    for group in similar::group_diff_ops(ops, context) {
        let (first, last) = (group.first().expect("non-empty group"), group.last().expect("non-empty group"));
        let old_range = (first.old_range().start, last.old_range().end);
        let new_range = (first.new_range().start, last.new_range().end);
        let mut lines = Vec::new();
        for op in &group {
            match *op {
                DiffOp::Equal { old_index, len, .. } => {
                    lines.extend(old[old_index..old_index + len].iter().map(|l| (' ', l.clone())))
                }
                DiffOp::Delete { old_index, old_len, .. } => {
                    lines.extend(old[old_index..old_index + old_len].iter().map(|l| ('-', l.clone())))
                }
                DiffOp::Insert { new_index, new_len, .. } => {
                    lines.extend(new[new_index..new_index + new_len].iter().map(|l| ('+', l.clone())))
                }
                DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                    lines.extend(old[old_index..old_index + old_len].iter().map(|l| ('-', l.clone())));
                    lines.extend(new[new_index..new_index + new_len].iter().map(|l| ('+', l.clone())));
                }
            }
        }
        out.push(Hunk { old: old_range, new: new_range, lines });
    }
    out
}

fn occurrences(haystack: &[String], needle: &[&str]) -> usize {
    places(haystack, needle).len() + usize::from(needle.is_empty())
}

/// Where (0-based) `needle` starts in `haystack`.
fn places(haystack: &[String], needle: &[&str]) -> Vec<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return Vec::new();
    }
    (0..=haystack.len() - needle.len())
        .filter(|&s| haystack[s..s + needle.len()].iter().zip(needle).all(|(a, b)| a == b))
        .collect()
}

fn unique(h: &Hunk, old: &[String], new: &[String]) -> bool {
    let pre: Vec<&str> = h.lines.iter().filter(|(c, _)| *c != '+').map(|(_, l)| l.as_str()).collect();
    let post: Vec<&str> = h.lines.iter().filter(|(c, _)| *c != '-').map(|(_, l)| l.as_str()).collect();
    // An empty image (a hunk at an empty file's edge) is placed by its header alone.
    (pre.is_empty() || occurrences(old, &pre) == 1) && (post.is_empty() || occurrences(new, &post) == 1)
}

/// [`unique`] as `lint --upstream` reads it: an image found once in the file, or once among
/// the places inside the definition the hunk's header names.
fn unique_in_anchor(h: &Hunk, old: &[String], new: &[String]) -> bool {
    let header = anchor(old, h.old.0);
    let once = |text: &[String], image: Vec<&str>| {
        let mut at = places(text, &image);
        if let Some(a) = &header {
            at.retain(|&s| crate::patch::locate::anchor_matches(a, text, s));
        }
        image.is_empty() || at.len() == 1
    };
    once(old, h.lines.iter().filter(|(c, _)| *c != '+').map(|(_, l)| l.as_str()).collect())
        && once(new, h.lines.iter().filter(|(c, _)| *c != '-').map(|(_, l)| l.as_str()).collect())
}

fn range(start: usize, end: usize) -> String {
    let len = end - start;
    // git: a zero-length range names the line before it; a length of 1 is written without ",1".
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// The patch of `path` from `old` to `new` (lines without endings; the file ends with a
/// newline), or `None` when they are equal. Context starts at 3 lines and widens until every
/// hunk's images are unique.
pub fn file_patch(path: &str, old: &[String], new: &[String]) -> Option<String> {
    if old == new {
        return None;
    }
    let mut chosen = None;
    for context in [3, 5, 8, 12, 20, 40] {
        let hs = hunks(old, new, context);
        let ok = hs.iter().all(|h| unique(h, old, new));
        chosen = Some(hs);
        if ok {
            break;
        }
    }
    let hs = chosen.expect("at least one try");
    Some(write(path, old, &hs))
}

/// The context width of each change (a run of removed and added lines) of `patch`, in order:
/// each hunk's width (its longer run of leading or trailing context) for every change in it.
/// What [`file_patch_keeping`] is given to write a ported patch with the widths its author
/// chose (a deliberately zero-context hunk stays zero-context).
pub fn context_widths(patch: &crate::patch::FilePatch) -> Vec<usize> {
    use crate::patch::HunkLine;
    let mut out = Vec::new();
    for h in &patch.hunks {
        let lead = h.lines.iter().take_while(|l| matches!(l, HunkLine::Context(_))).count();
        let trail = h.lines.iter().rev().take_while(|l| matches!(l, HunkLine::Context(_))).count();
        let changes = h
            .lines
            .iter()
            .zip(std::iter::once(None).chain(h.lines.iter().map(Some)))
            .filter(|(l, prev)| {
                !matches!(l, HunkLine::Context(_)) && prev.is_none_or(|p| matches!(p, HunkLine::Context(_)))
            })
            .count();
        out.extend(std::iter::repeat_n(lead.max(trail), changes));
    }
    out
}

/// One line of a whole-file diff: its mark, text, and the old and new line counts before it.
struct Line {
    mark: char,
    text: String,
    old: usize,
    new: usize,
}

fn diff_lines(old: &[String], new: &[String]) -> Vec<Line> {
    let mut out = Vec::new();
    let (mut o, mut n) = (0, 0);
    for op in capture_diff_slices(Algorithm::Myers, old, new) {
        for change in op.iter_changes(old, new) {
            let mark = match change.tag() {
                similar::ChangeTag::Equal => ' ',
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
            };
            out.push(Line { mark, text: change.value().clone(), old: o, new: n });
            match mark {
                ' ' => (o, n) = (o + 1, n + 1),
                '-' => o += 1,
                _ => n += 1,
            }
        }
    }
    out
}

/// The hunks of `lines` when change `k` gets `widths[k]` lines of context on each side; two
/// changes share a hunk when their contexts meet. Each hunk with the changes it holds.
fn hunks_widths(lines: &[Line], old_len: usize, new_len: usize, widths: &[usize]) -> Vec<(Hunk, Vec<usize>)> {
    // The changes, as [start, end) in `lines`.
    let mut changes: Vec<(usize, usize)> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.mark == ' ' {
            continue;
        }
        match changes.last_mut() {
            Some((_, end)) if *end == i => *end = i + 1,
            _ => changes.push((i, i + 1)),
        }
    }
    let mut out: Vec<(Hunk, Vec<usize>)> = Vec::new();
    let mut k = 0;
    while k < changes.len() {
        let first = k;
        while k + 1 < changes.len() && changes[k + 1].0 - changes[k].1 <= widths[k] + widths[k + 1] {
            k += 1;
        }
        let start = changes[first].0.saturating_sub(widths[first]);
        let end = (changes[k].1 + widths[k]).min(lines.len());
        let body = &lines[start..end];
        let pos = |i: usize| lines.get(i).map_or((old_len, new_len), |l| (l.old, l.new));
        let ((o0, n0), (o1, n1)) = (pos(start), pos(end));
        let hunk =
            Hunk { old: (o0, o1), new: (n0, n1), lines: body.iter().map(|l| (l.mark, l.text.clone())).collect() };
        out.push((hunk, (first..=k).collect()));
        k += 1;
    }
    out
}

/// As [`file_patch`], but change `k` of the diff gets `widths[k]` lines of context (those of
/// the patch being ported, [`context_widths`]) instead of three; a hunk whose images are not
/// unique with its width (as `lint --upstream` reads it: once in the file, or once inside the definition
/// its header names) is widened alone (3, 5, 8, … lines). When the diff does not have one
/// change per width (the port changed how the edit falls), every change gets the widths' one
/// value if they agree, else [`file_patch`]'s widening from three.
pub fn file_patch_keeping(path: &str, old: &[String], new: &[String], widths: &[usize]) -> Option<String> {
    if old == new {
        return None;
    }
    let lines = diff_lines(old, new);
    let count = (0..lines.len()).filter(|&i| lines[i].mark != ' ' && (i == 0 || lines[i - 1].mark == ' ')).count();
    let mut widths: Vec<usize> = if widths.len() == count {
        widths.to_vec()
    } else if let Some(&w) = widths.first().filter(|&&w| widths.iter().all(|x| *x == w)) {
        vec![w; count]
    } else {
        return file_patch(path, old, new);
    };
    let mut hs = hunks_widths(&lines, old.len(), new.len(), &widths);
    for _ in 0..8 {
        let narrow: Vec<usize> = hs
            .iter()
            .filter(|(h, _)| !unique_in_anchor(h, old, new))
            .flat_map(|(_, changes)| changes.clone())
            .collect();
        if narrow.is_empty() {
            break;
        }
        for k in narrow {
            widths[k] = [3, 5, 8, 12, 20, 40].into_iter().find(|&c| c > widths[k]).unwrap_or(widths[k]);
        }
        hs = hunks_widths(&lines, old.len(), new.len(), &widths);
    }
    let hs: Vec<Hunk> = hs.into_iter().map(|(h, _)| h).collect();
    Some(write(path, old, &hs))
}

fn write(path: &str, old: &[String], hs: &[Hunk]) -> String {
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    for h in hs {
        let section = anchor(old, h.old.0).map_or(String::new(), |a| format!(" {a}"));
        out.push_str(&format!("@@ -{} +{} @@{section}\n", range(h.old.0, h.old.1), range(h.new.0, h.new.1)));
        for (c, l) in &h.lines {
            out.push(*c);
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Whether every hunk of a generated patch has unique images (after the widening tries).
pub fn all_unique(old: &[String], new: &[String]) -> bool {
    [3, 5, 8, 12, 20, 40].iter().any(|&c| hunks(old, new, c).iter().all(|h| unique(h, old, new)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn headers_carry_the_enclosing_def_like_git() {
        // What `git diff` prints for these two files with `*.py diff=python`: the anchor is the
        // nearest def/class above the hunk's first line (here the hunk starts below `class A:`
        // and above `def f`).
        let text = "import os\n\n\nclass A:\n    x = 0\n\n    def f(self):\n        a = 1\n        b = 2\n        c = 3\n        return a\n";
        let old = lines(text);
        let new = lines(&text.replace("b = 2", "b = 20"));
        let p = file_patch("pkg/m.py", &old, &new).unwrap();
        assert!(p.contains("@@ -6,6 +6,6 @@ class A:\n"), "{p}");
        // The nearest one wins, not the first (git prints `def f(self):` here).
        let deep = "class A:\n    x = 0\n\n    def f(self):\n        a = 1\n        b = 2\n        c = 3\n        d = 4\n        e = 5\n        return a\n";
        let p = file_patch("pkg/m.py", &lines(deep), &lines(&deep.replace("e = 5", "e = 50"))).unwrap();
        assert!(p.contains("@@ -6,5 +6,5 @@ def f(self):\n"), "{p}");
        // Above the first def/class there is no anchor.
        let new2 = lines(&text.replace("import os", "import sys"));
        let p = file_patch("pkg/m.py", &old, &new2).unwrap();
        assert!(p.contains("@@ -1,4 +1,4 @@\n"), "{p}");
    }

    #[test]
    fn context_widens_until_the_images_are_unique() {
        // A line appended after a block that occurs twice: with three lines of context the
        // pre-image (blank, blank, `y`) is ambiguous; five reach the unique `q`.
        let old = lines("a\nx = 1\n\n\ny\nq\nx = 1\n\n\ny\n");
        let new = lines("a\nx = 1\n\n\ny\nq\nx = 1\n\n\ny\nw\n");
        let p = file_patch("m.py", &old, &new).unwrap();
        assert!(p.contains("\n q\n"), "the context reaches the unique line: {p}");
        assert!(all_unique(&old, &new));
    }

    #[test]
    fn a_ported_patch_keeps_each_hunks_width() {
        // Hunk 1 has three lines of context, hunk 2 none (as bad-words-rows' second hunk).
        let text = "import os\n\n\ndef f():\n    a = 1\n    b = 2\n    c = 3\n    d = 4\n    e = 5\n    g = 6\n    h = 7\n    i = 8\n    j = 9\n";
        let old = lines(text);
        let new = lines(&text.replace("b = 2", "b = 20").replace("i = 8", "i = 80"));
        let mixed = "--- a/m.py\n+++ b/m.py\n@@ -3,7 +3,7 @@\n \n def f():\n     a = 1\n-    b = 2\n+    b = 20\n     c = 3\n     d = 4\n     e = 5\n@@ -12 +12 @@ def f():\n-    i = 8\n+    i = 80\n";
        let fp = crate::patch::parse::parse(mixed, std::path::Path::new("m.py")).unwrap().files.remove(0);
        assert_eq!(context_widths(&fp), [3, 0]);
        // The same change one line lower (upstream added a line on top): the same widths.
        let (old2, new2) =
            ([vec!["import sys".to_string()], old].concat(), [vec!["import sys".to_string()], new].concat());
        let p = file_patch_keeping("m.py", &old2, &new2, &[3, 0]).unwrap();
        assert_eq!(p, mixed.replace("@@ -3,7 +3,7 @@", "@@ -4,7 +4,7 @@").replace("@@ -12 +12 @@", "@@ -13 +13 @@"));
        // Without widths, both get three lines.
        assert!(file_patch("m.py", &old2, &new2).unwrap().contains("\n     h = 7\n-    i = 8\n"));
    }
}
