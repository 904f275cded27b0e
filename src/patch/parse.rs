//! Parse a unified diff (plain `diff -u` or git-style `a/` `b/` headers) into hunks.
//!
//! Strict on purpose: a hunk whose line counts disagree with its header, a truncated hunk, a
//! file header without hunks, or any text we do not understand is an error naming the patch
//! file and line — a patch that means something other than what it says is worse than none.

use std::path::Path;

use anyhow::{bail, Result};

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

/// Parse `text`, read from `origin` (used only in error messages).
pub fn parse(text: &str, origin: &Path) -> Result<Patch> {
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    // `split` yields a final "" after a trailing newline; it is not a line.
    let count = if text.ends_with('\n') { lines.len() - 1 } else { lines.len() };
    let at = |i: usize| format!("{}:{}", origin.display(), i + 1);

    let mut files = Vec::new();
    let mut i = 0;
    while i < count {
        let line = lines[i];
        if let Some(old) = line.strip_prefix("--- ") {
            let Some(new) = lines.get(i + 1).filter(|_| i + 1 < count).and_then(|l| l.strip_prefix("+++ ")) else {
                bail!("{}: `---` header not followed by a `+++` header", at(i));
            };
            let old_path = header_path(old, 'a');
            let new_path = header_path(new, 'b');
            if old_path == "/dev/null" || new_path == "/dev/null" {
                bail!("{}: patches that create or delete files are not supported", at(i));
            }
            i += 2;
            let mut hunks = Vec::new();
            while i < count && lines[i].starts_with("@@") {
                let (hunk, next) = parse_hunk(&lines, count, i, origin)?;
                hunks.push(hunk);
                i = next;
            }
            if hunks.is_empty() {
                bail!("{}: file header for `{new_path}` has no hunks", at(i.min(count.saturating_sub(1))));
            }
            files.push(FilePatch { old_path, new_path, hunks });
        } else if line.starts_with("@@") {
            bail!("{}: hunk before any `---`/`+++` file header", at(i));
        } else if line.starts_with('+') || line.starts_with('-') || line.starts_with(' ') && !files.is_empty() {
            bail!("{}: line outside any hunk (is a hunk's line count too small?)", at(i));
        } else {
            // git's `diff --git`, `index …` and free text before/between files.
            i += 1;
        }
    }
    if files.is_empty() {
        bail!("{}: no file headers (`---`/`+++`) found; not a unified diff", origin.display());
    }
    Ok(Patch { files })
}

/// Strip git's `a/`/`b/` prefix and any tab-separated timestamp from a header path.
fn header_path(raw: &str, prefix: char) -> String {
    let path = raw.split('\t').next().unwrap_or(raw).trim_end();
    let with_slash = format!("{prefix}/");
    path.strip_prefix(&with_slash).unwrap_or(path).to_string()
}

/// Parse `@@ -a[,b] +c[,d] @@ section` and its body starting at `start`; return the hunk and
/// the index of the first line after it.
fn parse_hunk(lines: &[&str], count: usize, start: usize, origin: &Path) -> Result<(Hunk, usize)> {
    let at = |i: usize| format!("{}:{}", origin.display(), i + 1);
    let header = lines[start];
    let re = regex_hunk_header();
    let Some(caps) = re.captures(header) else {
        bail!("{}: malformed hunk header `{header}`", at(start));
    };
    let num = |idx: usize, default: usize| -> Result<usize> {
        match caps.get(idx) {
            None => Ok(default),
            // Far above any source we patch, and low enough that offsets computed from it
            // cannot overflow.
            Some(m) => m
                .as_str()
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_LINE_NUMBER)
                .ok_or_else(|| anyhow::anyhow!("{}: number out of range in `{header}`", at(start))),
        }
    };
    let old_start = num(1, 0)?;
    let old_len = num(2, 1)?;
    let new_start = num(3, 0)?;
    let new_len = num(4, 1)?;
    let section = caps.get(5).map_or("", |m| m.as_str()).trim().to_string();

    let (mut seen_old, mut seen_new) = (0, 0);
    let mut body = Vec::new();
    let (mut pre_no_eol, mut post_no_eol) = (false, false);
    let mut i = start + 1;
    loop {
        // A `\ No newline at end of file` marker speaks of the line just before it.
        if i < count && lines[i].starts_with('\\') {
            let (pre_last, post_last) = match body.last() {
                Some(HunkLine::Context(_)) => (true, true),
                Some(HunkLine::Remove(_)) => (true, false),
                Some(HunkLine::Add(_)) => (false, true),
                None => bail!("{}: `\\` marker before any line of the hunk", at(i)),
            };
            if (pre_last && pre_no_eol) || (post_last && post_no_eol) {
                bail!("{}: second `\\ No newline at end of file` for the same image", at(i));
            }
            pre_no_eol |= pre_last;
            post_no_eol |= post_last;
            i += 1;
            continue;
        }
        if seen_old >= old_len && seen_new >= new_len {
            break;
        }
        if i >= count {
            bail!(
                "{}: hunk truncated: header says -{old_len} +{new_len} lines, found -{seen_old} +{seen_new} before end of file",
                at(start)
            );
        }
        let line = lines[i];
        let (kind, text) = match line.chars().next() {
            Some(' ') => ('c', &line[1..]),
            // Some tools drop the single space of an empty context line.
            None => ('c', ""),
            Some('-') => ('-', &line[1..]),
            Some('+') => ('+', &line[1..]),
            _ => bail!(
                "{}: unexpected line in hunk (header says -{old_len} +{new_len}, found -{seen_old} +{seen_new} so far)",
                at(i)
            ),
        };
        // After a `\` marker its image has ended: more of it means the marker lied.
        if (pre_no_eol && kind != '+') || (post_no_eol && kind != '-') {
            bail!("{}: line after `\\ No newline at end of file` in the same image", at(i));
        }
        match kind {
            'c' => {
                seen_old += 1;
                seen_new += 1;
                body.push(HunkLine::Context(text.to_string()));
            }
            '-' => {
                seen_old += 1;
                body.push(HunkLine::Remove(text.to_string()));
            }
            _ => {
                seen_new += 1;
                body.push(HunkLine::Add(text.to_string()));
            }
        }
        if seen_old > old_len || seen_new > new_len {
            bail!("{}: hunk has more lines than its header (-{old_len} +{new_len}) says", at(i));
        }
        i += 1;
    }
    if body.iter().all(|l| matches!(l, HunkLine::Context(_))) && pre_no_eol == post_no_eol {
        bail!("{}: hunk changes nothing", at(start));
    }
    let hunk = Hunk { old_start, new_start, patch_line: start + 1, section, lines: body, pre_no_eol, post_no_eol };
    // An image of no lines is found everywhere and nowhere: a zero-context hunk that only adds
    // (or only removes) lines could never tell applied from not applied, nor where it goes.
    if hunk.pre_image().is_empty() {
        bail!(
            "{}: hunk only adds lines and has no context: where it goes, and whether it is applied, cannot be told from the file; make the patch with context (diff -U1 or more)",
            at(start)
        );
    }
    if hunk.post_image().is_empty() {
        bail!(
            "{}: hunk only removes lines and has no context: once applied nothing in the file shows it, so every apply would remove more; make the patch with context (diff -U1 or more)",
            at(start)
        );
    }
    Ok((hunk, i))
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
