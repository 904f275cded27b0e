//! Advice written out: a next step `plan/` gives as data ([`Advice`]) becomes a command line in
//! the sentence that names it (its `{0}`, `{1}`, … slot). gaudi-fixes' own commands carry the
//! run's invocation (the flags that chose its catalogue and trees), so one works as printed;
//! the JSON document keeps the data beside the sentence.

use crate::advice::{Advice, Advised};
use crate::plan::FixReport;
use crate::transaction::RollbackFailed;

/// How the run was invoked, as far as the commands its advice names need: the flags (as shell
/// words) that chose its catalogue, and those that chose its trees. Written out (`Display`) it
/// is `gaudi-fixes` with all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `--catalog DIR`; empty for the built-in catalogue.
    pub catalog: Vec<String>,
    /// `--root DIR`, `--vllm DIR`, `--vllm-gaudi DIR`, `--python PYTHON`, `--only-tree TREE`.
    pub trees: Vec<String>,
}

impl Invocation {
    /// `gaudi-fixes` with the catalogue flags only: for the commands that work on the catalogue
    /// and the release trees in the cache, not on the run's trees (`matrix`, `port`).
    fn catalog_only(&self) -> String {
        std::iter::once("gaudi-fixes").chain(self.catalog.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
    }
}

impl std::fmt::Display for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<&str> =
            std::iter::once("gaudi-fixes").chain(self.catalog.iter().chain(&self.trees).map(String::as_str)).collect();
        f.write_str(&words.join(" "))
    }
}

/// `advice` as the command line that does it, with the run's `invocation`.
pub fn command(advice: &Advice, invocation: &Invocation) -> String {
    let with = |words: &[String]| words.iter().map(|w| format!(" {w}")).collect::<String>();
    // A maintainer's step writes into a directory catalogue: the run's, or one to name.
    let catalog = || {
        let mut words = invocation.catalog_only();
        if invocation.catalog.is_empty() {
            words.push_str(" --catalog CATALOG");
        }
        words
    };
    match advice {
        Advice::Apply { fixes } => format!("{invocation} apply{}", with(fixes)),
        Advice::Revert { fixes } => format!("{invocation} revert{}", with(fixes)),
        Advice::Diff { fix } => format!("{invocation} diff {fix}"),
        Advice::Test { fix } => format!("{invocation} test {fix}"),
        Advice::RecordRelease { release } => format!("{} matrix --releases {release} --record", catalog()),
        Advice::Fetch { release } => format!("{} matrix --releases {release} --no-tests", invocation.catalog_only()),
        Advice::Check => format!("{invocation} apply --check"),
        Advice::Equiv => format!("{} equiv", invocation.catalog_only()),
        Advice::Port { fix, from, release } => {
            format!("{} port {fix} --from {from} --release {release} --to DIR", catalog())
        }
        Advice::Reinstall { package, version } => format!(
            "pip install --force-reinstall --no-deps {package}=={}",
            version.as_deref().unwrap_or("<its version>")
        ),
        Advice::RestoreFromSource { file, tag } => {
            let rel = file.strip_prefix("vllm_gaudi/").unwrap_or(file);
            format!(
                "in a checkout of https://github.com/vllm-project/vllm-gaudi, `git checkout {tag} -- vllm_gaudi/{rel}` \
                 and reinstall it (`pip install --no-deps --force-reinstall .`)"
            )
        }
    }
}

/// `text` with each `{i}` replaced by the command of `advice[i]`.
pub fn fill(text: &str, advice: &[Advice], invocation: &Invocation) -> String {
    let mut out = text.to_string();
    for (i, a) in advice.iter().enumerate() {
        out = out.replace(&format!("{{{i}}}"), &command(a, invocation));
    }
    out
}

/// The advice an error in `err`'s chain gives, if any (a rollback that failed carries its own).
fn advised<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a Advised> {
    cause.downcast_ref::<Advised>().or_else(|| cause.downcast_ref::<RollbackFailed>().map(|r| &r.advised))
}

/// `err`'s chain as one line (as `{err:#}` reads), each command an error in it suggests
/// written out with the run's `invocation`.
pub fn error_text(err: &anyhow::Error, invocation: &Invocation) -> String {
    let causes: Vec<String> = err
        .chain()
        .map(|cause| match advised(cause) {
            Some(a) => a.written(|advice| format!("`{}`", command(advice, invocation))),
            None => cause.to_string(),
        })
        .collect();
    causes.join(": ")
}

/// Every next step the errors in `err`'s chain suggest, outermost first (JSON's
/// `error.advice`).
pub fn error_advice(err: &anyhow::Error) -> Vec<Advice> {
    err.chain().filter_map(advised).flat_map(|a| a.advice.iter().cloned()).collect()
}

/// `reports` with every message and next step written out for a run invoked as `invocation`:
/// the sentence of each fix's basis (see [`super::basis`]) in its message, and the commands.
pub fn written_out(reports: &[FixReport], invocation: &Invocation) -> Vec<FixReport> {
    let mut out = reports.to_vec();
    for report in &mut out {
        if let Some(sentence) = super::basis::sentence(report) {
            report.message = Some(sentence);
        }
        if let Some(message) = &mut report.message {
            *message = fill(message, &report.advice, invocation);
        }
        let reasons = report.reason.iter_mut().chain(report.files.iter_mut().filter_map(|f| f.reason.as_mut()));
        for reason in reasons {
            reason.next_step = fill(&reason.next_step, &reason.advice, invocation);
        }
    }
    out
}
