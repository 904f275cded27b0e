//! Everything that formats output lives here: human (coloured on a terminal), JSON, GitHub
//! annotations. Other modules return data.

pub mod advice;
pub mod basis;
#[cfg(feature = "reference")]
pub mod bench;
pub mod conform;
#[cfg(feature = "reference")]
pub mod equiv;
pub mod error;
pub mod events;
pub mod github;
pub mod human;
pub mod json;
pub mod lint;
pub mod list;
pub mod outcome;
pub mod progress;
pub mod show;
pub mod upkeep;

use std::io::IsTerminal;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people; coloured on a terminal.
    Human,
    /// A stable, documented JSON document on stdout.
    Json,
    /// GitHub Actions `::error file=…,line=…::` annotations.
    Github,
}

/// Colour policy for human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// What the run was asked to do; the JSON `mode` of [`outcome::RunOutcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Check,
    DryRun,
    Apply,
    Revert,
    Status,
    Diff,
}

/// What the printers and the progress line need to know of the run's output flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    pub format: Format,
    /// `--quiet`: print nothing, the exit code tells.
    pub quiet: bool,
}

/// Decide colour once per run: `--color`, then NO_COLOR, then whether stdout is a terminal.
pub fn init_color(color: ColorChoice) {
    let on = match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
        }
    };
    colored::control::set_override(on);
}

/// Whether progress output (bars, spinners) may be drawn: human format on a terminal, not quiet.
pub fn progress_allowed(output: Output) -> bool {
    output.format == Format::Human && !output.quiet && std::io::stderr().is_terminal()
}

/// Whether stderr is a terminal (pytest's colours, progress lines).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A command's document: it answers every format. A new format is a new method here, and the
/// compiler then names every document that lacks it.
pub trait Document {
    /// For people (coloured on a terminal).
    fn human(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()>;
    /// The JSON document, `schema` first (README, "JSON output").
    fn json(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()>;
    /// GitHub Actions: annotations where something needs a look, and a `::notice` that says
    /// what the run saw; never human text.
    fn github(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()>;
}

/// Write `doc` in `format`.
pub fn render(out: &mut dyn std::io::Write, format: Format, doc: &dyn Document) -> anyhow::Result<()> {
    match format {
        Format::Human => doc.human(out),
        Format::Json => doc.json(out),
        Format::Github => doc.github(out),
    }
}

/// [`emit`] `doc` in `output`'s format.
pub fn emit_document(output: Output, doc: &dyn Document) -> anyhow::Result<()> {
    emit(output.quiet, |out| render(out, output.format, doc))
}

/// Hand `print` the report writer: the locked, closed-pipe-safe [`stdout`], unless `--quiet`
/// says print nothing. Every command prints through here.
pub fn emit(quiet: bool, print: impl FnOnce(&mut dyn std::io::Write) -> anyhow::Result<()>) -> anyhow::Result<()> {
    if quiet {
        return Ok(());
    }
    let stdout = stdout();
    let mut out = stdout.lock();
    print(&mut out)
}

/// Write `line` to stderr, for people (notes, errors, progress). A closed stderr (`… 2>&1 |
/// head`, EPIPE) is ignored like a closed stdout: `eprintln!` would panic (exit 101) and the
/// exit code would no longer be the verdict's.
pub fn stderr_line(line: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Standard output for reports. Once its reader has gone (`gaudi-fixes apply --check | head
/// -0`, EPIPE), the rest of the output is dropped instead of failing the command, so the exit
/// code is still the verdict.
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout())
}

/// See [`stdout`].
pub struct Stdout(std::io::Stdout);

impl Stdout {
    pub fn lock(&self) -> StdoutLock<'static> {
        StdoutLock(self.0.lock())
    }
}

/// A locked [`Stdout`]; writes after a broken pipe succeed and go nowhere.
pub struct StdoutLock<'a>(std::io::StdoutLock<'a>);

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn closed_is_ok<T>(result: std::io::Result<T>, ok: T) -> std::io::Result<T> {
    use std::sync::atomic::Ordering;
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(ok)
        }
        other => other,
    }
}

impl std::io::Write for StdoutLock<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(buf.len());
        }
        closed_is_ok(self.0.write(buf), buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        closed_is_ok(self.0.flush(), ())
    }
}
