//! Exact hunk images: where a run of lines matches a file exactly (no fuzz, ever), how often,
//! and which definition encloses a position — the evidence [`super::state`] places hunks by.
//!
//! An image matches at a position only if every line is equal and its edges agree with the
//! file's: an image that the diff shows at the start (less leading context than trailing) must
//! start the file, one it shows at the end must end it, and an image whose last line has no line
//! ending (`\ No newline at end of file`) must end the file — and, when the hunk adds or
//! removes that final newline, a file that ends the same way.

use std::collections::HashMap;

use super::parse::Hunk;
use super::pytoken::{tokenize, LineStart};
use super::text::SourceText;

/// One side of a hunk as the file must show it.
#[derive(Debug, Clone)]
pub struct Image<'h> {
    pub lines: Vec<&'h str>,
    /// The last line has no line ending.
    pub no_eol: bool,
    /// The hunk adds or removes the final newline (its images disagree about it): then the
    /// file's last line must end as this image says. Otherwise the hunk keeps whatever the file
    /// has there, and a patch made on a file with a final newline fits one without.
    pub eol_matters: bool,
    /// Must start at the file's first line.
    pub at_start: bool,
    /// Must end at the file's last line.
    pub at_end: bool,
}

impl<'h> Image<'h> {
    /// The pre-image (`post == false`) or post-image of `hunk`.
    pub fn of(hunk: &'h Hunk, post: bool) -> Image<'h> {
        let (lead, trail) = hunk.context_edges();
        let (lines, no_eol) =
            if post { (hunk.post_image(), hunk.post_no_eol) } else { (hunk.pre_image(), hunk.pre_no_eol) };
        // A diff cuts context short only at the file's edges; a hunk with less context on
        // one side than the other sits at that edge (as GNU patch reads it).
        Image {
            lines,
            no_eol,
            eol_matters: hunk.pre_no_eol != hunk.post_no_eol,
            at_start: lead < trail,
            at_end: trail < lead || no_eol,
        }
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Whether `image` matches `text` exactly at `start` (0-based), edges included.
pub fn matches_at(text: &SourceText, image: &Image, start: usize) -> bool {
    let n = text.lines.len();
    let len = image.len();
    if len == 0 || start + len > n {
        return false;
    }
    let ends_file = start + len == n;
    if (image.at_start && start != 0) || ((image.at_end || image.no_eol) && !ends_file) {
        return false;
    }
    if ends_file && image.eol_matters && (text.eols[n - 1].is_empty() != image.no_eol) {
        return false;
    }
    image.lines.iter().enumerate().all(|(i, l)| text.lines[start + i] == *l)
}

/// Every start (0-based) where `image` matches, in order.
pub fn occurrences(text: &SourceText, image: &Image) -> Vec<usize> {
    let n = text.lines.len();
    if image.is_empty() || image.len() > n {
        return Vec::new();
    }
    (0..=n - image.len()).filter(|&s| text.lines[s] == image.lines[0] && matches_at(text, image, s)).collect()
}

/// Whether a line opens a Python definition (`def`, `async def`, `class`).
fn opens_definition(line: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("async").map_or(t, |r| if r.starts_with([' ', '\t']) { r.trim_start() } else { t });
    ["def", "class"].iter().any(|kw| t.strip_prefix(kw).is_some_and(|r| r.starts_with([' ', '\t'])))
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Which of `lines` begin a logical line of code: not inside a string (a docstring's lines),
/// a bracket, or after a backslash continuation. Only such a line can open a definition or
/// say what scope the code is in; a docstring line that reads `def forward_native(` is text.
fn statement_starts(lines: &[String]) -> Vec<bool> {
    tokenize(lines).iter().map(|t| t.start == LineStart::Code && t.depth == 0).collect()
}

/// Whether `text`'s lines are in `lines` as code: consecutive whole lines, each equal to its
/// file line (both trimmed), and the tokenizer (Python's rules, [`super::pytoken`]) at the
/// same place at the start of each — so a line of `text` that is code is code in the file,
/// and a comment line in `text` is a comment there; a mention inside a string (triple-quoted,
/// or continued with a backslash) or a comment is not upstream's change, nor is a longer line
/// that contains it. How upstream's change is recognised (`detect:`). `false` for a text
/// with no code at all (only comments, strings or blank lines): that would match a mention.
pub fn contains_code(lines: &[String], text: &str) -> bool {
    let wanted: Vec<&str> = text.lines().collect();
    let want = tokenize(&wanted);
    if !want.iter().any(|t| t.has_code) {
        return false;
    }
    let have = tokenize(lines);
    let n = wanted.len();
    (0..(lines.len() + 1).saturating_sub(n)).any(|j| {
        wanted
            .iter()
            .zip(&want)
            .enumerate()
            .all(|(i, (w, t))| lines[j + i].trim() == w.trim() && have[j + i].start == t.start)
    })
}

/// The definitions that can anchor a hunk whose image starts at `start`, trimmed: the enclosing
/// ones (the nearest preceding line of smaller indentation than the first non-blank line that
/// opens a `def`/`class`, then its own enclosing ones, outwards), then the nearest preceding
/// `def`/`class` line of any indentation (what `git diff` writes with the Python diff driver).
/// Only lines of code count: not a docstring's or another string's lines, nor comments.
pub fn anchors_at(lines: &[String], start: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let start = start.min(lines.len());
    let code = statement_starts(&lines[..start]);
    let first = lines[start..].iter().find(|l| !l.trim().is_empty());
    let mut bound = first.map_or(usize::MAX, |l| indent(l));
    for (line, _) in lines[..start].iter().zip(&code).rev().filter(|(_, code)| **code) {
        // Blank lines, and the closing bracket of a multi-line signature or call (as deep as
        // its `def`), say nothing about scope.
        if line.trim().is_empty() || line.trim_start().starts_with([')', ']', '}']) {
            continue;
        }
        let ind = indent(line);
        if ind < bound {
            bound = ind;
            if opens_definition(line) {
                out.push(line.trim());
            }
            if ind == 0 {
                break;
            }
        }
    }
    if let Some((line, _)) = lines[..start].iter().zip(&code).rev().find(|(l, code)| **code && opens_definition(l)) {
        out.push(line.trim());
    }
    out
}

/// The innermost enclosing definition at `start`, for messages (`forward_cpu`, or `None` at
/// module level).
pub fn enclosing_name(lines: &[String], start: usize) -> Option<String> {
    anchors_at(lines, start).first().map(|l| definition_name(l))
}

/// `forward_native` from `def forward_native(self, …)`, `class Foo(Base):`, `async def f():`.
pub fn definition_name(line: &str) -> String {
    let t = line.trim();
    let t = t.strip_prefix("async").map_or(t, str::trim_start);
    let t = t.strip_prefix("def").or_else(|| t.strip_prefix("class")).unwrap_or(t).trim_start();
    t.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or(t).to_string()
}

/// Whether the header's anchor names one of the definitions at `start`. git writes the line
/// trimmed and cuts it at 80 bytes, so a long header may be a prefix of the line.
pub fn anchor_matches(anchor: &str, lines: &[String], start: usize) -> bool {
    let anchor = anchor.trim();
    anchors_at(lines, start).iter().any(|l| *l == anchor || (anchor.len() >= 70 && l.starts_with(anchor)))
}

/// Where the file looks most like `image`: the alignment where the most lines agree (ties go
/// to the one nearest `expected`). Returns (start, agreeing lines). Used to show a drifted
/// hunk's nearest actual lines.
pub fn nearest(lines: &[String], image: &[&str], expected: usize) -> Option<(usize, usize)> {
    if lines.is_empty() || image.is_empty() {
        return None;
    }
    let mut positions: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        positions.entry(l.as_str()).or_default().push(i);
    }
    let mut votes: HashMap<isize, usize> = HashMap::new();
    for (i, l) in image.iter().enumerate() {
        // Blank and very common lines say little about where a hunk belongs.
        if l.trim().is_empty() {
            continue;
        }
        if let Some(found) = positions.get(l) {
            if found.len() > 64 {
                continue;
            }
            for &j in found {
                *votes.entry(j as isize - i as isize).or_default() += 1;
            }
        }
    }
    let max_start = lines.len().saturating_sub(1) as isize;
    votes
        .into_iter()
        .map(|(start, v)| (start.clamp(0, max_start) as usize, v))
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.abs_diff(expected).cmp(&a.0.abs_diff(expected))))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn text(s: &str) -> SourceText {
        SourceText::decode(s.replace(' ', "\n").as_bytes(), Path::new("f")).unwrap()
    }

    fn image<'a>(lines: &[&'a str]) -> Image<'a> {
        Image { lines: lines.to_vec(), no_eol: false, eol_matters: true, at_start: false, at_end: false }
    }

    #[test]
    fn finds_every_exact_occurrence() {
        let t = text("x a b x a b x ");
        assert_eq!(occurrences(&t, &image(&["a", "b"])), vec![1, 4]);
        assert_eq!(occurrences(&t, &image(&["a", "c"])), Vec::<usize>::new());
        assert_eq!(occurrences(&t, &image(&["a", "B"])), Vec::<usize>::new());
    }

    #[test]
    fn edges_and_final_newline_are_part_of_the_match() {
        let t = text("a b a b");
        let mut im = image(&["a", "b"]);
        // The last "b" has no line ending: only an image that says so matches there.
        assert_eq!(occurrences(&t, &im), vec![0]);
        im.no_eol = true;
        assert_eq!(occurrences(&t, &im), vec![2]);
        let mut start = image(&["a", "b"]);
        start.at_start = true;
        assert_eq!(occurrences(&text("a b a b "), &start), vec![0]);
    }

    #[test]
    fn anchors_are_the_enclosing_definitions_and_gits_choice() {
        let lines: Vec<String> = [
            "class C:",
            "    def f(self):",
            "        def inner():",
            "            pass",
            "        x = 1",
            "    def g(self):",
            "        y = 2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(anchors_at(&lines, 4), vec!["def f(self):", "class C:", "def inner():"]);
        assert!(anchor_matches("def f(self):", &lines, 4));
        assert!(anchor_matches("def inner():", &lines, 4));
        assert!(!anchor_matches("def g(self):", &lines, 4));
        assert!(anchor_matches("def g(self):", &lines, 6));
        assert_eq!(enclosing_name(&lines, 6).as_deref(), Some("g"));
        assert_eq!(definition_name("async def h(a):"), "h");
        // A multi-line signature's `) -> T:` is not the scope.
        let lines: Vec<String> = ["class C:", "    def f(", "        self,", "    ) -> int:", "        x = 1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(enclosing_name(&lines, 4).as_deref(), Some("f"));
    }

    #[test]
    fn string_and_comment_lines_are_not_definitions() {
        let lines: Vec<String> = [
            "def forward_cpu(x):",
            "    \"\"\"Like",
            "def forward_native(x):",
            "    but on the CPU.\"\"\"",
            "    s = '''x''' + \"#\"  # def no(",
            "    y = (1,",
            "def inside_brackets(",
            "    ))",
            "    return x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(statement_starts(&lines), [true, true, false, false, true, true, false, false, true]);
        assert_eq!(anchors_at(&lines, 8), vec!["def forward_cpu(x):", "def forward_cpu(x):"]);
        assert!(!anchor_matches("def forward_native(x):", &lines, 8));
    }

    #[test]
    fn nearest_prefers_most_agreeing_lines() {
        let l: Vec<String> = "q a b c d q".split(' ').map(str::to_string).collect();
        assert_eq!(nearest(&l, &["a", "b", "X", "d"], 0), Some((1, 3)));
    }
}
