//! A source file as lines, keeping each line's own ending (LF, CRLF, or none on a last line),
//! so edits preserve mixed line endings and a missing final newline, and a revert gives back
//! identical bytes. How edits assign endings is in [`super::state`].

use std::path::Path;

use anyhow::Result;

use crate::error::bail_at;

/// A text file split into lines; `eols[i]` is line i's ending ("\n", "\r\n" or "" for a last
/// line without newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceText {
    pub lines: Vec<String>,
    pub eols: Vec<&'static str>,
}

impl SourceText {
    /// Decode `bytes` read from `path`. Binary content and invalid UTF-8 are errors naming the
    /// file and line: these are Python sources, and guessing an encoding could corrupt them.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<SourceText> {
        if let Some(pos) = bytes.iter().position(|&b| b == 0) {
            let line = bytes[..pos].iter().filter(|&&b| b == b'\n').count() + 1;
            bail_at!(path, line, "binary file (NUL byte); refusing to patch it");
        }
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(err) => {
                let pos = err.valid_up_to();
                let line = bytes[..pos].iter().filter(|&&b| b == b'\n').count() + 1;
                bail_at!(path, line, "not valid UTF-8 (byte offset {pos}); refusing to patch it");
            }
        };
        let mut lines = Vec::new();
        let mut eols = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find('\n') {
                Some(nl) => {
                    let (line, eol) = match rest[..nl].strip_suffix('\r') {
                        Some(stripped) => (stripped, "\r\n"),
                        None => (&rest[..nl], "\n"),
                    };
                    lines.push(line.to_string());
                    eols.push(eol);
                    rest = &rest[nl + 1..];
                }
                None => {
                    lines.push(rest.to_string());
                    eols.push("");
                    rest = "";
                }
            }
        }
        Ok(SourceText { lines, eols })
    }

    /// The bytes of the file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::with_capacity(self.lines.iter().map(|l| l.len() + 2).sum());
        for (line, eol) in self.lines.iter().zip(&self.eols) {
            out.push_str(line);
            out.push_str(eol);
        }
        out.into_bytes()
    }

    /// The line ending new lines get: CRLF if the file mostly uses it, else LF.
    pub fn dominant_eol(&self) -> &'static str {
        let crlf = self.eols.iter().filter(|e| **e == "\r\n").count();
        // A last line without newline says nothing about the file's style.
        let ended = self.eols.iter().filter(|e| !e.is_empty()).count();
        if crlf * 2 > ended {
            "\r\n"
        } else {
            "\n"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bytes() {
        for s in ["a\nb\n", "a\r\nb\r\n", "a\nb", "", "\n\n", "a\r\nb"] {
            let t = SourceText::decode(s.as_bytes(), Path::new("f")).unwrap();
            assert_eq!(t.encode(), s.as_bytes(), "{s:?}");
        }
    }

    #[test]
    fn rejects_binary_and_bad_utf8_with_line() {
        let e = SourceText::decode(b"a\nb\0", Path::new("f.py")).unwrap_err().to_string();
        assert!(e.starts_with("f.py:2:"), "{e}");
        let e = SourceText::decode(b"a\n\nx\xff", Path::new("f.py")).unwrap_err().to_string();
        assert!(e.starts_with("f.py:3:"), "{e}");
    }
}
