//! Parse a unified diff (plain `diff -u` or git-style `a/` `b/` headers) into hunks.
//!
//! Strict on purpose: a hunk whose line counts disagree with its header, a truncated hunk, a
//! file header without hunks, or any text we do not understand is an error naming the patch
//! file and line — a patch that means something other than what it says is worse than none.

use std::fmt;
use std::path::Path;

use anyhow::Result;

use crate::error::Located;

/// One line of a hunk body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// ` text`: present before and after.
    Context(String),
    /// `-text`: present before only.
    Remove(String),
    /// `+text`: present after only.
    Add(String),
}

impl HunkLine {
    /// The line's text without its marker or line ending.
    pub fn text(&self) -> &str {
        match self {
            HunkLine::Context(t) | HunkLine::Remove(t) | HunkLine::Add(t) => t,
        }
    }
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based start line of the pre-image in the original file, as the header says.
    pub old_start: usize,
    /// 1-based start line of the post-image, as the header says.
    pub new_start: usize,
    /// Where this hunk's `@@` line is in the patch file (1-based), for error messages.
    pub patch_line: usize,
    /// The section text after the closing `@@` (often a function name), for reports.
    pub section: String,
    /// The body, in order.
    pub lines: Vec<HunkLine>,
    /// The pre-image's last line has no line ending (`\ No newline at end of file` after it):
    /// that image can only sit at the very end of a file that ends the same way.
    pub pre_no_eol: bool,
    /// The same for the post-image.
    pub post_no_eol: bool,
}

impl Hunk {
    /// Lines present before the change (context + removed).
    pub fn pre_image(&self) -> Vec<&str> {
        self.lines.iter().filter(|l| !matches!(l, HunkLine::Add(_))).map(HunkLine::text).collect()
    }

    /// Lines present after the change (context + added).
    pub fn post_image(&self) -> Vec<&str> {
        self.lines.iter().filter(|l| !matches!(l, HunkLine::Remove(_))).map(HunkLine::text).collect()
    }

    /// The same hunk with its direction reversed (for revert).
    pub fn reversed(&self) -> Hunk {
        let lines = self
            .lines
            .iter()
            .map(|l| match l {
                HunkLine::Context(t) => HunkLine::Context(t.clone()),
                HunkLine::Remove(t) => HunkLine::Add(t.clone()),
                HunkLine::Add(t) => HunkLine::Remove(t.clone()),
            })
            .collect();
        Hunk {
            old_start: self.new_start,
            new_start: self.old_start,
            lines,
            pre_no_eol: self.post_no_eol,
            post_no_eol: self.pre_no_eol,
            ..self.clone()
        }
    }

    /// Context lines before the first change, and after the last.
    pub fn context_edges(&self) -> (usize, usize) {
        let lead = self.lines.iter().take_while(|l| matches!(l, HunkLine::Context(_))).count();
        let trail = self.lines.iter().rev().take_while(|l| matches!(l, HunkLine::Context(_))).count();
        (lead, trail)
    }

    /// The anchor the header carries (`def forward_native(` in `@@ -1,2 +1,3 @@ def
    /// forward_native(`): the section text when it opens a `def` or `class`, else `None`.
    pub fn anchor(&self) -> Option<&str> {
        let s = self.section.trim();
        let opens = |kw: &str| s.strip_prefix(kw).is_some_and(|r| r.starts_with([' ', '\t']));
        (opens("def") || opens("class") || s.strip_prefix("async").is_some_and(|r| r.trim_start().starts_with("def ")))
            .then_some(s)
    }
}

/// The changes to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// The path from the `---` header, `a/` prefix removed.
    pub old_path: String,
    /// The path from the `+++` header, `b/` prefix removed.
    pub new_path: String,
    /// Hunks in file order.
    pub hunks: Vec<Hunk>,
}

/// A parsed patch file: one or more files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FilePatch>,
}

/// Why a patch does not parse, and where: the 1-based line of the patch, or `None` for the
/// patch as a whole. [`ParseError::in_file`] puts it in its file for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: Option<usize>,
    pub kind: ParseErrorKind,
}

/// The hunk's line counts: as its header says, and as read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub old_len: usize,
    pub new_len: usize,
    pub seen_old: usize,
    pub seen_new: usize,
}

/// What is wrong with a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// A `---` line without a `+++` line after it.
    NoNewHeader,
    /// A header naming `/dev/null`.
    CreatesOrDeletes,
    /// A file header with no `@@` after it.
    NoHunks {
        path: String,
    },
    HunkBeforeHeader,
    LineOutsideHunk,
    /// No `---`/`+++` header anywhere.
    NotADiff,
    MalformedHeader {
        header: String,
    },
    NumberOutOfRange {
        header: String,
    },
    MarkerBeforeLine,
    SecondMarker,
    LineAfterMarker,
    Truncated(Counts),
    UnexpectedLine(Counts),
    TooManyLines(Counts),
    ChangesNothing,
    OnlyAdds,
    OnlyRemoves,
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ParseErrorKind::*;
        match self {
            NoNewHeader => write!(f, "`---` header not followed by a `+++` header"),
            CreatesOrDeletes => write!(f, "patches that create or delete files are not supported"),
            NoHunks { path } => write!(f, "file header for `{path}` has no hunks"),
            HunkBeforeHeader => write!(f, "hunk before any `---`/`+++` file header"),
            LineOutsideHunk => write!(f, "line outside any hunk (is a hunk's line count too small?)"),
            NotADiff => write!(f, "no file headers (`---`/`+++`) found; not a unified diff"),
            MalformedHeader { header } => write!(f, "malformed hunk header `{header}`"),
            NumberOutOfRange { header } => write!(f, "number out of range in `{header}`"),
            MarkerBeforeLine => write!(f, "`\\` marker before any line of the hunk"),
            SecondMarker => write!(f, "second `\\ No newline at end of file` for the same image"),
            LineAfterMarker => write!(f, "line after `\\ No newline at end of file` in the same image"),
            Truncated(Counts { old_len, new_len, seen_old, seen_new }) => write!(
                f,
                "hunk truncated: header says -{old_len} +{new_len} lines, found -{seen_old} +{seen_new} before end of file"
            ),
            UnexpectedLine(Counts { old_len, new_len, seen_old, seen_new }) => write!(
                f,
                "unexpected line in hunk (header says -{old_len} +{new_len}, found -{seen_old} +{seen_new} so far)"
            ),
            TooManyLines(Counts { old_len, new_len, .. }) => {
                write!(f, "hunk has more lines than its header (-{old_len} +{new_len}) says")
            }
            ChangesNothing => write!(f, "hunk changes nothing"),
            OnlyAdds => write!(
                f,
                "hunk only adds lines and has no context: where it goes, and whether it is applied, cannot be told from the file; make the patch with context (diff -U1 or more)"
            ),
            OnlyRemoves => write!(
                f,
                "hunk only removes lines and has no context: once applied nothing in the file shows it, so every apply would remove more; make the patch with context (diff -U1 or more)"
            ),
        }
    }
}

impl ParseError {
    /// At 0-based line `index` of the patch.
    fn at(index: usize, kind: ParseErrorKind) -> ParseError {
        ParseError { line: Some(index + 1), kind }
    }

    /// The error in the patch file `file`, as the user sees it.
    pub fn in_file(self, file: &Path) -> Located {
        let message = self.kind.to_string();
        match self.line {
            Some(line) => Located::at(file, line, message),
            None => Located::in_file(file, message),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.kind),
            None => self.kind.fmt(f),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parse `text`, read from `origin`; an error is [`Located`] in `origin`.
pub fn parse(text: &str, origin: &Path) -> Result<Patch> {
    parse_text(text).map_err(|e| e.in_file(origin).into())
}

/// Parse `text`.
pub fn parse_text(text: &str) -> Result<Patch, ParseError> {
    use ParseErrorKind::*;
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    // `split` yields a final "" after a trailing newline; it is not a line.
    let count = if text.ends_with('\n') { lines.len() - 1 } else { lines.len() };
    let lines = &lines[..count];

    let mut files = Vec::new();
    let mut i = 0;
    while i < count {
        let line = lines[i];
        if let Some(old) = line.strip_prefix("--- ") {
            let Some(new) = lines.get(i + 1).and_then(|l| l.strip_prefix("+++ ")) else {
                return Err(ParseError::at(i, NoNewHeader));
            };
            let old_path = header_path(old, 'a');
            let new_path = header_path(new, 'b');
            if old_path == "/dev/null" || new_path == "/dev/null" {
                return Err(ParseError::at(i, CreatesOrDeletes));
            }
            i += 2;
            let mut hunks = Vec::new();
            while i < count && lines[i].starts_with("@@") {
                let (hunk, next) = parse_hunk(lines, i)?;
                hunks.push(hunk);
                i = next;
            }
            if hunks.is_empty() {
                return Err(ParseError::at(i.min(count.saturating_sub(1)), NoHunks { path: new_path }));
            }
            files.push(FilePatch { old_path, new_path, hunks });
        } else if line.starts_with("@@") {
            return Err(ParseError::at(i, HunkBeforeHeader));
        } else if line.starts_with('+') || line.starts_with('-') || line.starts_with(' ') && !files.is_empty() {
            return Err(ParseError::at(i, LineOutsideHunk));
        } else {
            // git's `diff --git`, `index …` and free text before/between files.
            i += 1;
        }
    }
    if files.is_empty() {
        return Err(ParseError { line: None, kind: NotADiff });
    }
    Ok(Patch { files })
}

/// Strip git's `a/`/`b/` prefix and any tab-separated timestamp from a header path.
fn header_path(raw: &str, prefix: char) -> String {
    let path = raw.split('\t').next().unwrap_or(raw).trim_end();
    let with_slash = format!("{prefix}/");
    path.strip_prefix(&with_slash).unwrap_or(path).to_string()
}

/// Parse the hunk whose `@@` line is `lines[start]` and its body; return the hunk and the
/// index of the first line after it.
fn parse_hunk(lines: &[&str], start: usize) -> Result<(Hunk, usize), ParseError> {
    let header = HunkHeader::parse(lines[start], start)?;
    let mut body = Body::new(&header);
    let mut i = start + 1;
    loop {
        // A `\ No newline at end of file` marker speaks of the line just before it.
        if i < lines.len() && lines[i].starts_with('\\') {
            body.no_eol_marker(i)?;
            i += 1;
            continue;
        }
        if body.complete() {
            break;
        }
        let Some(line) = lines.get(i) else {
            return Err(ParseError::at(start, ParseErrorKind::Truncated(body.counts)));
        };
        body.push(line, i)?;
        i += 1;
    }
    Ok((body.into_hunk(header, start)?, i))
}

/// `@@ -a[,b] +c[,d] @@ section`.
struct HunkHeader {
    old_start: usize,
    old_len: usize,
    new_start: usize,
    new_len: usize,
    section: String,
}

impl HunkHeader {
    /// Parse the header at 0-based patch line `index`.
    fn parse(header: &str, index: usize) -> Result<HunkHeader, ParseError> {
        let malformed = || ParseError::at(index, ParseErrorKind::MalformedHeader { header: header.to_string() });
        let caps = regex_hunk_header().captures(header).ok_or_else(malformed)?;
        let num = |idx: usize, default: usize| -> Result<usize, ParseError> {
            match caps.get(idx) {
                None => Ok(default),
                // Far above any source we patch, and low enough that offsets computed from it
                // cannot overflow.
                Some(m) => m.as_str().parse::<usize>().ok().filter(|n| *n <= MAX_LINE_NUMBER).ok_or_else(|| {
                    ParseError::at(index, ParseErrorKind::NumberOutOfRange { header: header.to_string() })
                }),
            }
        };
        Ok(HunkHeader {
            old_start: num(1, 0)?,
            old_len: num(2, 1)?,
            new_start: num(3, 0)?,
            new_len: num(4, 1)?,
            section: caps.get(5).map_or("", |m| m.as_str()).trim().to_string(),
        })
    }
}

/// A hunk's body as it is read, checked against its header's counts line by line.
struct Body {
    lines: Vec<HunkLine>,
    counts: Counts,
    pre_no_eol: bool,
    post_no_eol: bool,
}

impl Body {
    fn new(header: &HunkHeader) -> Body {
        let counts = Counts { old_len: header.old_len, new_len: header.new_len, seen_old: 0, seen_new: 0 };
        Body { lines: Vec::new(), counts, pre_no_eol: false, post_no_eol: false }
    }

    /// Every line the header promises has been read.
    fn complete(&self) -> bool {
        self.counts.seen_old >= self.counts.old_len && self.counts.seen_new >= self.counts.new_len
    }

    /// A `\` marker at 0-based patch line `index`: the image(s) of the line before it end there.
    fn no_eol_marker(&mut self, index: usize) -> Result<(), ParseError> {
        let (pre_last, post_last) = match self.lines.last() {
            Some(HunkLine::Context(_)) => (true, true),
            Some(HunkLine::Remove(_)) => (true, false),
            Some(HunkLine::Add(_)) => (false, true),
            None => return Err(ParseError::at(index, ParseErrorKind::MarkerBeforeLine)),
        };
        if (pre_last && self.pre_no_eol) || (post_last && self.post_no_eol) {
            return Err(ParseError::at(index, ParseErrorKind::SecondMarker));
        }
        self.pre_no_eol |= pre_last;
        self.post_no_eol |= post_last;
        Ok(())
    }

    /// The body line `line`, at 0-based patch line `index`.
    fn push(&mut self, line: &str, index: usize) -> Result<(), ParseError> {
        let at = |kind| Err(ParseError::at(index, kind));
        let parsed = match line.chars().next() {
            Some(' ') => HunkLine::Context(line[1..].to_string()),
            // Some tools drop the single space of an empty context line.
            None => HunkLine::Context(String::new()),
            Some('-') => HunkLine::Remove(line[1..].to_string()),
            Some('+') => HunkLine::Add(line[1..].to_string()),
            _ => return at(ParseErrorKind::UnexpectedLine(self.counts)),
        };
        // After a `\` marker its image has ended: more of it means the marker lied.
        let (in_pre, in_post) = (!matches!(parsed, HunkLine::Add(_)), !matches!(parsed, HunkLine::Remove(_)));
        if (self.pre_no_eol && in_pre) || (self.post_no_eol && in_post) {
            return at(ParseErrorKind::LineAfterMarker);
        }
        self.counts.seen_old += usize::from(in_pre);
        self.counts.seen_new += usize::from(in_post);
        self.lines.push(parsed);
        if self.counts.seen_old > self.counts.old_len || self.counts.seen_new > self.counts.new_len {
            return at(ParseErrorKind::TooManyLines(self.counts));
        }
        Ok(())
    }

    /// The hunk whose `@@` line is at 0-based patch line `start`, if it means something.
    fn into_hunk(self, header: HunkHeader, start: usize) -> Result<Hunk, ParseError> {
        let at = |kind| Err(ParseError::at(start, kind));
        if self.lines.iter().all(|l| matches!(l, HunkLine::Context(_))) && self.pre_no_eol == self.post_no_eol {
            return at(ParseErrorKind::ChangesNothing);
        }
        let hunk = Hunk {
            old_start: header.old_start,
            new_start: header.new_start,
            patch_line: start + 1,
            section: header.section,
            lines: self.lines,
            pre_no_eol: self.pre_no_eol,
            post_no_eol: self.post_no_eol,
        };
        // An image of no lines is found everywhere and nowhere: a zero-context hunk that only adds
        // (or only removes) lines could never tell applied from not applied, nor where it goes.
        if hunk.pre_image().is_empty() {
            return at(ParseErrorKind::OnlyAdds);
        }
        if hunk.post_image().is_empty() {
            return at(ParseErrorKind::OnlyRemoves);
        }
        Ok(hunk)
    }
}

/// The largest line number or count a hunk header may give.
const MAX_LINE_NUMBER: usize = i32::MAX as usize;

fn regex_hunk_header() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$").expect("valid regex"))
}

/// The patch with each hunk's position in its patch file cleared (for comparing content).
pub fn without_positions(mut patch: Patch) -> Patch {
    for hunk in patch.files.iter_mut().flat_map(|f| f.hunks.iter_mut()) {
        hunk.patch_line = 0;
    }
    patch
}

/// Print a patch back as a unified diff (used by property tests: parse → print → parse).
pub fn print(patch: &Patch) -> String {
    let mut out = String::new();
    for file in &patch.files {
        out.push_str(&format!("--- a/{}\n+++ b/{}\n", file.old_path, file.new_path));
        for hunk in &file.hunks {
            let old_len = hunk.pre_image().len();
            let new_len = hunk.post_image().len();
            let section = if hunk.section.is_empty() { String::new() } else { format!(" {}", hunk.section) };
            out.push_str(&format!("@@ -{},{old_len} +{},{new_len} @@{section}\n", hunk.old_start, hunk.new_start));
            // The `\` marker follows the last line of the image that lacks a line ending.
            let last_pre = hunk.lines.iter().rposition(|l| !matches!(l, HunkLine::Add(_)));
            let last_post = hunk.lines.iter().rposition(|l| !matches!(l, HunkLine::Remove(_)));
            for (i, line) in hunk.lines.iter().enumerate() {
                let (marker, text) = match line {
                    HunkLine::Context(t) => (' ', t),
                    HunkLine::Remove(t) => ('-', t),
                    HunkLine::Add(t) => ('+', t),
                };
                out.push(marker);
                out.push_str(text);
                out.push('\n');
                if (hunk.pre_no_eol && last_pre == Some(i)) || (hunk.post_no_eol && last_post == Some(i)) {
                    out.push_str("\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIT: &str = "diff --git a/pkg/m.py b/pkg/m.py\nindex 1..2 100644\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,3 +1,4 @@ def f():\n a\n-b\n+B\n+C\n c\n";

    #[test]
    fn parses_git_headers_and_counts() {
        let p = parse(GIT, Path::new("x.patch")).unwrap();
        assert_eq!(p.files.len(), 1);
        let f = &p.files[0];
        assert_eq!((f.old_path.as_str(), f.new_path.as_str()), ("pkg/m.py", "pkg/m.py"));
        assert_eq!(f.hunks[0].pre_image(), vec!["a", "b", "c"]);
        assert_eq!(f.hunks[0].post_image(), vec!["a", "B", "C", "c"]);
        assert_eq!(f.hunks[0].section, "def f():");
        assert_eq!(f.hunks[0].patch_line, 5);
    }

    #[test]
    fn crlf_patch_parses_like_lf() {
        let crlf = GIT.replace('\n', "\r\n");
        assert_eq!(parse(&crlf, Path::new("x")).unwrap(), parse(GIT, Path::new("x")).unwrap());
    }

    #[test]
    fn truncated_hunk_names_line() {
        let bad = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n-b\n";
        let err = parse(bad, Path::new("t.patch")).unwrap_err().to_string();
        assert!(err.contains("t.patch:3") && err.contains("truncated"), "{err}");
    }

    #[test]
    fn too_many_lines_is_an_error() {
        let bad = "--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n-a\n+b\n+c\n";
        let err = parse(bad, Path::new("t.patch")).unwrap_err().to_string();
        assert!(err.contains("t.patch:6"), "{err}");
    }

    #[test]
    fn not_a_diff() {
        assert!(parse("hello\n", Path::new("t")).is_err());
        assert!(parse("--- a/x\n+++ b/x\n", Path::new("t")).is_err());
    }

    #[test]
    fn reversed_swaps_images() {
        let p = parse(GIT, Path::new("x")).unwrap();
        let h = &p.files[0].hunks[0];
        assert_eq!(h.reversed().pre_image(), h.post_image());
        assert_eq!(h.reversed().post_image(), h.pre_image());
    }

    #[test]
    fn print_round_trips() {
        let p = parse(GIT, Path::new("x")).unwrap();
        assert_eq!(without_positions(parse(&print(&p), Path::new("y")).unwrap()), without_positions(p));
    }
}
