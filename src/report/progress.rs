//! A one-line progress indicator on stderr for long runs (`equiv`, `bench`, `matrix`), drawn only
//! where [`super::progress_allowed`]: human format, not quiet, stderr a terminal; with
//! [`Progress::or_lines`] (`matrix`) each step is a plain line elsewhere.

use std::io::Write;

/// The indicator; each command adds its own "what now" methods on top of [`Progress::draw`].
pub struct Progress {
    enabled: bool,
    drawn: bool,
    /// Off a terminal: print each new step as a plain line instead (for logs of long runs).
    lines: bool,
    last: String,
}

impl Progress {
    /// Progress for this run's output settings: drawn on a terminal, nothing elsewhere.
    pub fn new(output: impl Into<super::Output>) -> Progress {
        Progress { enabled: super::progress_allowed(output.into()), drawn: false, lines: false, last: String::new() }
    }

    /// Like [`Progress::new`], but off a terminal (human format, not quiet) each new step is
    /// printed on stderr as a line of its own, so a CI log of a long run is never silent.
    pub fn or_lines(output: impl Into<super::Output>) -> Progress {
        let output = output.into();
        let enabled = super::progress_allowed(output);
        let lines = !enabled && output.format == super::Format::Human && !output.quiet;
        Progress { enabled, drawn: false, lines, last: String::new() }
    }

    /// Replace the line with `line`.
    pub fn draw(&mut self, line: &str) {
        if self.lines && line != self.last {
            eprintln!("{line}");
            self.last = line.to_string();
        }
        if self.enabled {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{line}");
            let _ = err.flush();
            self.drawn = true;
        }
    }

    /// Erase the line before the report is printed.
    pub fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}
