//! Next steps as data: an [`Advice`] names a command a report or an error suggests, and
//! [`Advised`] is an error whose message suggests some (its `{0}`, `{1}`, … slots). Vocabulary,
//! so every layer can give advice; only `report/` writes one out as a command line, with the
//! run's invocation (`report/advice.rs`).

use std::fmt;

use serde::Serialize;

/// A next step a report or an error suggests, as data. The domain says which; `report/` writes it as a
/// command line (gaudi-fixes' own commands with the flags that chose the run's catalogue and
/// trees), so a command a message suggests works as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "do", rename_all = "kebab-case")]
pub enum Advice {
    /// Apply these fixes together (none: the run's default selection).
    Apply { fixes: Vec<String> },
    /// Revert these fixes together.
    Revert { fixes: Vec<String> },
    /// Show the fix's hunks against the tree.
    Diff { fix: String },
    /// Run the fix's tests on the trees.
    Test { fix: String },
    /// A maintainer records `release` as verified (`matrix --record`).
    RecordRelease { release: String },
    /// A maintainer makes `fix`'s variant for `release` from its `from` variant (`port`).
    Port { fix: String, from: String, release: String },
    /// Reinstall a package from the package index at a version (unknown: `None`).
    Reinstall { package: String, version: Option<String> },
    /// Restore `file` from vllm_gaudi's source at `tag` (it is on no package index).
    RestoreFromSource { file: String, tag: String },
    /// Check the trees (`apply --check`) before clearing by hand what a run left.
    Check,
    /// Fetch `release`'s pristine trees into the cache (`matrix --no-tests`).
    Fetch { release: String },
    /// Run the reference sampler's equivalence suite (`equiv`).
    Equiv,
}

impl Advice {
    /// What the advice does, in a word or two: how an [`Advised`] error reads where it is not
    /// written out by `report/` (nested in another error's message).
    pub fn short(&self) -> &'static str {
        match self {
            Advice::Apply { .. } => "apply",
            Advice::Revert { .. } => "revert",
            Advice::Diff { .. } => "diff",
            Advice::Test { .. } => "test",
            Advice::RecordRelease { .. } => "matrix --record",
            Advice::Port { .. } => "port",
            Advice::Reinstall { .. } => "a reinstall",
            Advice::RestoreFromSource { .. } => "a restore from source",
            Advice::Check => "apply --check",
            Advice::Fetch { .. } => "matrix --no-tests",
            Advice::Equiv => "equiv",
        }
    }
}

/// An error whose message suggests commands: `message`'s `{0}`, `{1}`, … are `advice`, in
/// order. `report/` writes each out with the run's invocation (and lists them in the JSON
/// error); read on its own it names each by [`Advice::short`].
#[derive(Debug)]
pub struct Advised {
    pub message: String,
    pub advice: Vec<Advice>,
    source: Option<anyhow::Error>,
}

impl Advised {
    /// `message`, suggesting `advice` in its slots.
    pub fn new(message: impl Into<String>, advice: Vec<Advice>) -> Advised {
        Advised { message: message.into(), advice, source: None }
    }

    /// The same, caused by `source` (which the printed chain shows after it).
    pub fn caused_by(self, source: impl Into<anyhow::Error>) -> Advised {
        Advised { source: Some(source.into()), ..self }
    }

    /// `message` with each slot written by `write` (`report/` gives the command line).
    pub fn written(&self, write: impl Fn(&Advice) -> String) -> String {
        let mut out = self.message.clone();
        for (i, a) in self.advice.iter().enumerate() {
            out = out.replace(&format!("{{{i}}}"), &write(a));
        }
        out
    }
}

impl fmt::Display for Advised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written(|a| format!("`{}`", a.short())))
    }
}

impl std::error::Error for Advised {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e.as_ref() as &(dyn std::error::Error + 'static))
    }
}
