//! Where Python's tokenizer stands at the start of each line: in code, after a backslash
//! continuation, or inside a string — with the rules of Python's own tokenizer for string
//! prefixes (`r`, `b`, `u`, `f`, `t` and their pairs, any case), triple quotes, a backslash
//! continuing a one-quote string onto the next line, comments (`#` outside a string, to the
//! end of the line), and f-/t-strings' replacement fields (PEP 701: a field is code, and may
//! hold strings with the same quotes, comments and format specs with fields of their own).
//!
//! How `detect:` text is told from a mention of it in a comment or a string, and which lines
//! can open a definition (see [`super::locate`]).

/// Where a line starts, as the tokenizer reads the file from its first line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStart {
    /// Outside any string, not continued: a new logical line when the bracket depth is 0.
    Code,
    /// The line before ended with a backslash outside a string.
    Continued,
    /// Inside a string literal (a triple-quoted one, a one-quote string continued with a
    /// backslash, or an f-string's field spanning lines).
    InString,
}

/// One line as the tokenizer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineToken {
    pub start: LineStart,
    /// Open brackets outside strings at the line's start.
    pub depth: usize,
    /// The line holds code: something other than whitespace, comments and string literals.
    pub has_code: bool,
}

/// What the tokenizer is inside of.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Str {
        quote: char,
        triple: bool,
        fields: bool,
    },
    /// An f-string's replacement field: code, with its own bracket depth.
    Field {
        depth: usize,
    },
    /// A field's format spec (after `:`): literal text with fields of its own, ended by `}`.
    Spec,
}

/// The tokenizer's view of each of `lines` (without their line endings), read in order.
pub fn tokenize<S: AsRef<str>>(lines: &[S]) -> Vec<LineToken> {
    let mut out = Vec::with_capacity(lines.len());
    let mut stack: Vec<Ctx> = Vec::new();
    let mut depth = 0usize;
    let mut continued = false;
    for line in lines {
        let start = if !stack.is_empty() {
            LineStart::InString
        } else if continued {
            LineStart::Continued
        } else {
            LineStart::Code
        };
        continued = false;
        let start_depth = depth;
        let chars: Vec<char> = line.as_ref().chars().collect();
        let mut code = 0usize;
        // A backslash ended the line inside a one-quote string: the string goes on.
        let mut string_continued = false;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let last = i + 1 == chars.len();
            match stack.last().copied() {
                Some(Ctx::Str { quote, triple, fields }) => {
                    i += in_string(&chars, i, (quote, triple, fields), &mut stack, &mut string_continued);
                }
                Some(Ctx::Spec) => {
                    match c {
                        '\\' => i += 1,
                        '{' => stack.push(Ctx::Field { depth: 0 }),
                        '}' => {
                            stack.pop();
                        }
                        _ => {}
                    }
                    i += 1;
                }
                top => {
                    let in_field = matches!(top, Some(Ctx::Field { .. }));
                    let field_depth = match top {
                        Some(Ctx::Field { depth }) => Some(depth),
                        _ => None,
                    };
                    let nest = |stack: &mut Vec<Ctx>, depth: &mut usize, up: bool| match stack.last_mut() {
                        Some(Ctx::Field { depth: d }) => *d = if up { *d + 1 } else { d.saturating_sub(1) },
                        _ => *depth = if up { *depth + 1 } else { depth.saturating_sub(1) },
                    };
                    match c {
                        '#' => break,
                        '"' | '\'' => {
                            let prefix = string_prefix(&chars[..i]);
                            if !in_field {
                                code = code.saturating_sub(prefix.map_or(0, |p| p.0));
                            }
                            let triple = chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c);
                            let fields = prefix.is_some_and(|p| p.1);
                            stack.push(Ctx::Str { quote: c, triple, fields });
                            i += if triple { 3 } else { 1 };
                            continue;
                        }
                        '(' | '[' | '{' => nest(&mut stack, &mut depth, true),
                        '}' if field_depth == Some(0) => {
                            stack.pop();
                        }
                        ')' | ']' | '}' => nest(&mut stack, &mut depth, false),
                        ':' if field_depth == Some(0) => {
                            stack.pop();
                            stack.push(Ctx::Spec);
                        }
                        '\\' if last && !in_field => continued = true,
                        _ => {}
                    }
                    if !in_field && !c.is_whitespace() {
                        code += 1;
                    }
                    i += 1;
                }
            }
        }
        // A one-quote string not continued ends with its line (unterminated: Python would
        // refuse the file; read on as code, as its tokenizer recovers).
        if !string_continued {
            if let Some(at) = stack.iter().position(|c| matches!(c, Ctx::Str { triple: false, .. })) {
                stack.truncate(at);
            }
        }
        out.push(LineToken { start, depth: start_depth, has_code: code > 0 });
    }
    out
}

/// One character at `i` inside a string (its `quote`, whether `triple`, whether an f-/t-string
/// with `fields`): an escape (`continued` says whether a backslash ended the line), the closing
/// quote (the string is popped), or a replacement field's opening (pushed); how far to move on.
fn in_string(
    chars: &[char],
    i: usize,
    (quote, triple, fields): (char, bool, bool),
    stack: &mut Vec<Ctx>,
    continued: &mut bool,
) -> usize {
    let c = chars[i];
    if c == '\\' {
        *continued = i + 1 == chars.len();
        return 2;
    }
    let n = if triple { 3 } else { 1 };
    if c == quote && chars.get(i..i + n).is_some_and(|q| q.iter().all(|&x| x == quote)) {
        stack.pop();
        return n;
    }
    if fields && (c == '{' || c == '}') {
        if chars.get(i + 1) == Some(&c) {
            return 2;
        }
        if c == '{' {
            stack.push(Ctx::Field { depth: 0 });
        }
    }
    1
}

/// The string prefix that ends `before` (the characters before a quote), as (its length,
/// whether it makes an f-/t-string); `None` when the quote has no prefix. A prefix is one of
/// Python's (`r`, `u`, `b`, `f`, `t`, `br`, `rb`, `fr`, `rf`, `tr`, `rt`, any case) and is
/// not the tail of a longer name.
fn string_prefix(before: &[char]) -> Option<(usize, bool)> {
    let word: String = before.iter().rev().take_while(|c| c.is_alphanumeric() || **c == '_').collect();
    let word: String = word.chars().rev().collect::<String>().to_ascii_lowercase();
    const PREFIXES: [&str; 11] = ["r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"];
    PREFIXES.contains(&word.as_str()).then(|| (word.len(), word.contains('f') || word.contains('t')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(src: &str) -> Vec<LineStart> {
        let lines: Vec<&str> = src.lines().collect();
        tokenize(&lines).iter().map(|t| t.start).collect()
    }

    use LineStart::{Code, Continued, InString};

    #[test]
    fn backslash_continues_a_one_quote_string_and_a_line_of_code() {
        assert_eq!(starts("a = 'x \\\ny = 1'\nz = 2"), [Code, InString, Code]);
        assert_eq!(starts("a = 1 + \\\n  2\nb"), [Code, Continued, Code]);
        // A backslash in a comment continues nothing; an unterminated string ends at its line.
        assert_eq!(starts("a = 1  # \\\nb\nc = 'x\nd"), [Code, Code, Code, Code]);
    }

    #[test]
    fn triple_quotes_and_prefixes() {
        assert_eq!(starts("s = rb'''\nx\n''' + 'y'\nz"), [Code, InString, InString, Code]);
        assert_eq!(starts("s = \"\"\"a \\\"\"\"\nstill\n\"\"\""), [Code, InString, InString]);
        // PEP 701: a field's string may use the f-string's own quotes.
        assert_eq!(starts("s = f\"\"\"{'\"\"\"'}\nx\n\"\"\"\ny"), [Code, InString, InString, Code]);
        assert_eq!(starts("s = f'{x:{w}}' '#'\ny"), [Code, Code]);
        assert_eq!(starts("s = F\"{{\" '''\nx'''\ny"), [Code, InString, Code]);
        // `elif'` is no prefix, `br` is one.
        assert_eq!(string_prefix(&"x = elif".chars().collect::<Vec<_>>()), None);
        assert_eq!(string_prefix(&"x = Br".chars().collect::<Vec<_>>()), Some((2, false)));
        assert_eq!(string_prefix(&"(rt".chars().collect::<Vec<_>>()), Some((2, true)));
    }

    #[test]
    fn code_is_what_is_neither_string_nor_comment() {
        let lines = ["\"\"\"doc\"\"\"", "# note", "f'x'", "x = 'y'", "   ", ")"];
        let code: Vec<bool> = tokenize(&lines).iter().map(|t| t.has_code).collect();
        assert_eq!(code, [false, false, false, true, false, true]);
        let depth: Vec<usize> = tokenize(&["f(a,", "  [b,", "  c])", "d"]).iter().map(|t| t.depth).collect();
        assert_eq!(depth, [0, 1, 2, 0]);
    }
}
