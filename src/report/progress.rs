//! A one-line progress indicator on stderr for long runs (`equiv`, `bench`), drawn only where
//! [`super::progress_allowed`]: human format, not quiet, stderr a terminal.

use std::io::Write;

/// The indicator; each command adds its own "what now" methods on top of [`Progress::draw`].
pub struct Progress {
    enabled: bool,
    drawn: bool,
}

impl Progress {
    /// Progress for this run's output settings.
    pub fn new(output: impl Into<super::Output>) -> Progress {
        Progress { enabled: super::progress_allowed(output.into()), drawn: false }
    }

    /// Replace the line with `line`.
    pub fn draw(&mut self, line: &str) {
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
