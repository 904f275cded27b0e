//! Errors that carry their place: a [`Located`] error names a file, and the line (and column)
//! in it when there is one, as data — the error printer reads the place from it (JSON's
//! `error.file`/`error.line`, GitHub's `::error file=…,line=…::`) instead of from the text.

use std::fmt;
use std::path::{Path, PathBuf};

/// An error at a place in a file. Displays as `file:line:column: message` (the line and column
/// only when known), the shape compilers and editors jump to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The file as the user should see it (a catalogue path may read `<built-in>/…`).
    pub file: PathBuf,
    /// 1-based line, when the error is at one.
    pub line: Option<usize>,
    /// 1-based column on that line, when the parser that found the error gave one.
    pub column: Option<usize>,
    pub message: String,
}

impl Located {
    /// An error about `file` as a whole.
    pub fn in_file(file: impl Into<PathBuf>, message: impl Into<String>) -> Located {
        Located { file: file.into(), line: None, column: None, message: message.into() }
    }

    /// An error at `line` (1-based) of `file`.
    pub fn at(file: impl Into<PathBuf>, line: usize, message: impl Into<String>) -> Located {
        Located { line: Some(line), ..Located::in_file(file, message) }
    }

    /// The same error at `column` (1-based) of its line.
    pub fn column(self, column: usize) -> Located {
        Located { column: Some(column), ..self }
    }

    /// The outermost located error in `err`'s chain: the place the printed message names first.
    pub fn find(err: &anyhow::Error) -> Option<&Located> {
        err.chain().find_map(|cause| {
            cause.downcast_ref::<Located>().or_else(|| cause.downcast_ref::<AtFile>().map(|at| &at.place))
        })
    }
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Located {}

/// An I/O error about a file, carrying the file as a [`Located`] place for the printers while
/// it reads as its message did (`reading /x: No such file or directory`): made by
/// [`FileContext::file_context`], found by [`Located::find`].
#[derive(Debug)]
struct AtFile {
    place: Located,
    source: Option<anyhow::Error>,
}

impl fmt::Display for AtFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.place.message)
    }
}

impl std::error::Error for AtFile {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// `.with_context(|| …)` for an operation on a file: the same message, with the file set as
/// the error's place (JSON's `error.file`, GitHub's `::error file=…`).
pub trait FileContext<T> {
    fn file_context(self, file: impl AsRef<Path>, message: impl FnOnce() -> String) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> FileContext<T> for Result<T, E> {
    fn file_context(self, file: impl AsRef<Path>, message: impl FnOnce() -> String) -> anyhow::Result<T> {
        self.map_err(|e| {
            let place = Located::in_file(file.as_ref(), message());
            anyhow::Error::new(AtFile { place, source: Some(e.into()) })
        })
    }
}

/// For a value that is not there (a file that vanished): the message is the whole error.
impl<T> FileContext<T> for Option<T> {
    fn file_context(self, file: impl AsRef<Path>, message: impl FnOnce() -> String) -> anyhow::Result<T> {
        self.ok_or_else(|| {
            anyhow::Error::new(AtFile { place: Located::in_file(file.as_ref(), message()), source: None })
        })
    }
}

/// `return Err(Located::at(file, line, format!(…)).into())`.
macro_rules! bail_at {
    ($file:expr, $line:expr, $($fmt:tt)+) => {
        return Err($crate::error::Located::at($file, $line, format!($($fmt)+)).into())
    };
}

/// `return Err(Located::in_file(file, format!(…)).into())`.
macro_rules! bail_in {
    ($file:expr, $($fmt:tt)+) => {
        return Err($crate::error::Located::in_file($file, format!($($fmt)+)).into())
    };
}

pub(crate) use {bail_at, bail_in};

#[cfg(test)]
mod tests {
    use super::Located;

    #[test]
    fn displays_as_file_line_column_message() {
        assert_eq!(Located::at("a/fix.yaml", 7, "unknown field").to_string(), "a/fix.yaml:7: unknown field");
        assert_eq!(Located::at("a/fix.yaml", 2, "bad").column(10).to_string(), "a/fix.yaml:2:10: bad");
        assert_eq!(Located::in_file("x.patch", "not a diff").to_string(), "x.patch: not a diff");
    }

    #[test]
    fn find_walks_the_chain_to_the_outermost() {
        let inner = anyhow::Error::from(Located::at("inner.yaml", 3, "dup"));
        let err = inner.context("loading the catalogue");
        assert_eq!(Located::find(&err).map(|l| (l.file.clone(), l.line)), Some(("inner.yaml".into(), Some(3))));
        assert!(Located::find(&anyhow::anyhow!("no place")).is_none());
    }

    #[test]
    fn a_file_context_reads_as_its_message_and_carries_the_file() {
        use super::FileContext;
        let io: Result<(), std::io::Error> = Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let err = io.file_context("/x/y.py", || "reading /x/y.py".to_string()).unwrap_err();
        let err = err.context("loading the tree");
        assert_eq!(format!("{err:#}"), "loading the tree: reading /x/y.py: entity not found");
        assert_eq!(Located::find(&err).map(|l| l.file.clone()), Some("/x/y.py".into()));
    }
}
