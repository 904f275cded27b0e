//! Everything that formats output lives here: human (coloured on a terminal), JSON, GitHub
//! annotations. Other modules return data.

#[cfg(feature = "reference")]
pub mod bench;
#[cfg(feature = "reference")]
pub mod equiv;
pub mod github;
pub mod human;
pub mod json;
pub mod progress;

use std::io::IsTerminal;

use crate::cli::{ColorChoice, GlobalArgs};

/// Decide colour once per run: `--color`, then NO_COLOR, then whether stdout is a terminal.
pub fn init_color(global: &GlobalArgs) {
    let on = match global.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
        }
    };
    colored::control::set_override(on);
}

/// Whether progress output (bars, spinners) may be drawn: human format on a terminal, not quiet.
pub fn progress_allowed(global: &GlobalArgs) -> bool {
    global.format == crate::cli::Format::Human && !global.quiet && std::io::stderr().is_terminal()
}

/// Stdout for reports: once its reader has gone (`| head -0`, `| true`), output ends quietly
/// and every later write "succeeds", so a command still returns its own exit status.
pub struct Out<W: std::io::Write> {
    inner: W,
    closed: bool,
}

impl<W: std::io::Write> Out<W> {
    pub fn new(inner: W) -> Out<W> {
        Out { inner, closed: false }
    }
}

impl<W: std::io::Write> std::io::Write for Out<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.inner.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}
