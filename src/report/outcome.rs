//! What the tree-judging commands (`apply`, `revert`, `status`, `diff`) found and did, as data,
//! and its one renderer per format: the JSON document, GitHub annotations, human text.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use colored::Colorize;

pub use super::Mode;
use super::{github, human, json, Format};
use crate::discover::Trees;
use crate::exit_status::ExitStatus;
use crate::plan::pairing::Pairing;
use crate::plan::{FixReport, FixState};

/// One run's findings and writes.
#[derive(Debug)]
pub struct RunOutcome {
    /// The subcommand, for the JSON `command`.
    pub command: &'static str,
    pub mode: Mode,
    pub status: ExitStatus,
    pub trees: Trees,
    pub reports: Vec<FixReport>,
    /// Files this run wrote (absolute paths).
    pub written: Vec<PathBuf>,
    /// How many files a dry run would write.
    pub would_write: usize,
    /// Sentences about recovery, provenance mismatches and the like.
    pub notes: Vec<String>,
    /// The selection was empty (a profile without fixes).
    pub nothing_selected: bool,
    /// `-v`: every fix's block even when a check finds everything applied.
    pub verbose: bool,
    /// `gaudi-fixes` with the flags that chose this run's catalogue and trees: the commands
    /// its advice names are written with it.
    pub invocation: super::advice::Invocation,
    /// Whether the vllm_gaudi found imports on the vLLM found (both found only).
    pub pairing: Option<Pairing>,
    /// Why the run refused before judging a fix (the pairing cannot take the fixes), in one
    /// sentence; the status is then drifted and nothing was written.
    pub refusal: Option<String>,
}

/// What `-q` still says, on stderr, of a run that ended in error: each fix that cannot be
/// judged, with why (its sentence written out, as every format writes it).
pub fn quiet_errors(outcome: &RunOutcome) {
    if outcome.status != ExitStatus::Error {
        return;
    }
    let written = super::advice::written_out(&outcome.reports, &outcome.invocation);
    for r in written.iter().filter(|r| r.state == FixState::Error) {
        super::stderr_line(format_args!(
            "gaudi-fixes: error: {}: {}",
            r.name,
            r.message.as_deref().unwrap_or("it cannot be judged")
        ));
    }
}

/// Render `outcome` in `format`, its advice written out (see [`super::advice`]).
pub fn render(out: &mut dyn Write, format: Format, outcome: &RunOutcome) -> Result<()> {
    let outcome = &RunOutcome {
        trees: outcome.trees.clone(),
        reports: super::advice::written_out(&outcome.reports, &outcome.invocation),
        written: outcome.written.clone(),
        notes: outcome.notes.clone(),
        invocation: outcome.invocation.clone(),
        pairing: outcome.pairing.clone(),
        refusal: outcome.refusal.clone(),
        ..*outcome
    };
    match format {
        Format::Json => json::print(
            out,
            &json::Document {
                schema: json::SCHEMA,
                command: outcome.command,
                mode: outcome.mode,
                exit_code: outcome.status.code(),
                trees: &outcome.trees,
                fixes: &outcome.reports,
                written: outcome.written.clone(),
                notes: &outcome.notes,
                pairing: outcome.pairing.as_ref(),
                refusal: outcome.refusal.as_deref(),
            },
            outcome.status,
        ),
        Format::Github if outcome.refusal.is_some() => {
            github::error(out, &format!("gaudi-fixes: {}", refusal_words(outcome)))
        }
        Format::Github => {
            // A run that passed says its fixes' notes in its one summary; `status` and `diff`
            // report, so each fix's note stays.
            let passed = outcome.status == ExitStatus::Applied && !matches!(outcome.mode, Mode::Status | Mode::Diff);
            github::print(out, &outcome.reports, outcome.mode == Mode::Check, passed, &outcome.invocation)?;
            if outcome.mode == Mode::Check && outcome.status == ExitStatus::NotApplied {
                github::check_failed(out, &outcome.reports, &outcome.invocation)?;
            }
            github::summary(
                out,
                outcome.mode,
                outcome.status,
                &outcome.reports,
                outcome.written.len(),
                outcome.would_write,
            )
        }
        Format::Human => match outcome.mode {
            Mode::Status => human_status(out, outcome),
            Mode::Diff => human_diff(out, outcome),
            _ => human_select(out, outcome),
        },
    }
}

fn notes(out: &mut dyn Write, notes: &[String]) -> Result<()> {
    for note in notes {
        writeln!(out, "{} {note}", "note:".yellow())?;
    }
    Ok(())
}

/// The refusal in words, with what it left undone (only `apply` writes).
fn refusal_words(o: &RunOutcome) -> String {
    let refusal = o.refusal.as_deref().unwrap_or_default();
    match o.mode {
        Mode::Check => format!("refused: {refusal}; the check does not pass"),
        _ => format!("refused: {refusal}; nothing was written"),
    }
}

/// `apply`, `revert`, `--check`, `--dry-run`: every fix's block, then what was done. A check that
/// finds everything applied is one line per tree and the verdict (`-v`: every block, with the
/// hunks found away from their line numbers).
fn human_select(out: &mut dyn Write, o: &RunOutcome) -> Result<()> {
    human::trees(out, &o.trees)?;
    notes(out, &o.notes)?;
    if o.refusal.is_some() {
        writeln!(out, "{}: {}", "error".red().bold(), refusal_words(o))?;
        return Ok(());
    }
    // Nothing to report fix by fix (`-v`: every block): a check that passed, or an apply or
    // revert that found everything in the requested state (an image layer run again).
    let quiet_pass = o.status == ExitStatus::Applied && !o.verbose && !o.nothing_selected;
    let no_op = matches!(o.mode, Mode::Apply | Mode::Revert) && o.written.is_empty() && !o.reports.is_empty();
    // Every selected fix skipped by --only-tree: nothing was judged, so nothing is said applied.
    let all_skipped = !o.reports.is_empty() && o.reports.iter().all(|r| r.state == FixState::Skipped);
    if quiet_pass && (o.mode == Mode::Check || no_op) {
        let head = match o.mode {
            Mode::Check if all_skipped => {
                "check: nothing checked (no selected fix patches a tree --only-tree keeps)".to_string()
            }
            _ if all_skipped => "nothing to do (no selected fix patches a tree --only-tree keeps)".to_string(),
            Mode::Check => format!("check: {}", "everything applied".green()),
            _ => "nothing to do: already in the requested state".to_string(),
        };
        let n = o.reports.len();
        writeln!(out, "{head}: {n} fix{} ({}); -v shows each", if n == 1 { "" } else { "es" }, state_counts(o))?;
        return Ok(());
    }
    if o.nothing_selected {
        writeln!(out, "nothing selected (the profile has no fixes); nothing to do")?;
    }
    // A refused run writes nothing: no fix is shown as "→ applying".
    let refused = matches!(o.mode, Mode::Apply | Mode::Revert) && o.status != ExitStatus::Applied;
    for r in &o.reports {
        if refused && r.action.is_some() {
            human::fix(out, &FixReport { action: None, ..r.clone() }, false)?;
        } else {
            human::fix(out, r, false)?;
        }
    }
    let summary = match (o.mode, o.status) {
        (mode, ExitStatus::Drifted) if mode != Mode::Check => {
            format!("{}: refused because of drift; nothing was written", "error".red().bold())
        }
        (Mode::Check, ExitStatus::Error) => {
            format!("{}: cannot check every selected fix (see above)", "error".red().bold())
        }
        (Mode::DryRun, ExitStatus::Error) => {
            format!("{}: cannot plan every selected fix (see above)", "error".red().bold())
        }
        (_, ExitStatus::Error) => format!("{}: cannot proceed; nothing was written", "error".red().bold()),
        (Mode::Check, s) => format!(
            "check: {}",
            match s {
                ExitStatus::Applied if all_skipped =>
                    "nothing checked (every selected fix is skipped by --only-tree)".normal(),
                ExitStatus::Applied => "everything applied".green(),
                ExitStatus::NotApplied => "not applied".yellow(),
                _ => "drifted".red(),
            }
        ),
        (Mode::DryRun, _) => format!("dry run: {} file(s) would be written", o.would_write),
        _ if o.written.is_empty() => "nothing to do: already in the requested state".to_string(),
        _ => {
            let list: Vec<String> = o.written.iter().map(|p| format!("\n  {}", p.display())).collect();
            format!("wrote {} file(s):{}", o.written.len(), list.concat())
        }
    };
    writeln!(out, "{summary}")?;
    Ok(())
}

/// How many fixes are in each state, in words (`16 applied, 1 upstreamed`), and how many are
/// on a release their variant was not verified on.
fn state_counts(o: &RunOutcome) -> String {
    let count = |state: FixState| o.reports.iter().filter(|r| r.state == state).count();
    let mut states: Vec<String> = [
        (FixState::Applied, "applied"),
        (FixState::NotApplied, "not applied"),
        (FixState::Upstreamed, "upstreamed"),
        (FixState::Skipped, "skipped by --only-tree"),
    ]
    .into_iter()
    .filter(|&(s, _)| count(s) > 0)
    .map(|(s, words)| format!("{} {words}", count(s)))
    .collect();
    let unverified = o.reports.iter().filter(|r| r.reason.as_ref().is_some_and(|x| x.note)).count();
    if unverified > 0 {
        states.push(format!("{unverified} on a release its variant was not verified on"));
    }
    states.join(", ")
}

/// `status`: one line per fix under the trees (their discovery notes are among `notes`).
fn human_status(out: &mut dyn Write, o: &RunOutcome) -> Result<()> {
    let shown = Trees { notes: Vec::new(), ..o.trees.clone() };
    human::trees(out, &shown)?;
    if let Some(pairing) = &o.pairing {
        pairing_line(out, pairing, o.trees.vllm.as_ref())?;
    }
    notes(out, &o.notes)?;
    // Columns as wide as their longest entry (a name of 29 characters pushed the rest right).
    let name_width = o.reports.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let state_width = o.reports.iter().map(|r| human::state_word(r.state).chars().count()).max().unwrap_or(0);
    let variant_width = o.reports.iter().map(|r| r.variant.as_deref().unwrap_or("-").len()).max().unwrap_or(0);
    for r in &o.reports {
        let variant = r.variant.as_deref().unwrap_or("-");
        let why = r.reason.as_ref().map_or(String::new(), |x| format!("  ({})", human::reason_word(x.code)));
        let state = human::state_word(r.state);
        let pad = " ".repeat(state_width - state.chars().count());
        writeln!(out, "  {:<name_width$}  {state}{pad}  {variant:<variant_width$}  {}{why}", r.name, r.kind)?;
    }
    Ok(())
}

/// Whether the trees found import on each other, in a line: all resolve; some names do not (a
/// warning: the lab pairings the tests use are such); the sampling path is missing (the
/// refusal `apply` gives).
fn pairing_line(out: &mut dyn Write, pairing: &Pairing, vllm: Option<&crate::discover::Tree>) -> Result<()> {
    match vllm.and_then(|v| pairing.refusal(v)) {
        Some(refusal) => writeln!(out, "{} {refusal}; `apply` refuses", "pairing:".red().bold())?,
        None if pairing.unresolved.is_empty() => writeln!(out, "{} {}", "pairing:".bold(), pairing.summary)?,
        None => writeln!(
            out,
            "{} {} (this pair does not load as a whole; the fixes still apply: see docs/usage.md, \"Pairings\")",
            "pairing:".yellow(),
            pairing.summary
        )?,
    }
    Ok(())
}

/// `diff`: the fix's block with every hunk (the patch text follows, see [`patch_text`]).
fn human_diff(out: &mut dyn Write, o: &RunOutcome) -> Result<()> {
    if let Some(r) = o.reports.first() {
        human::trees(out, &o.trees)?;
        notes(out, &o.notes)?;
        human::fix(out, r, true)?;
    }
    Ok(())
}

/// `diff`'s output: with `--format json` the outcome document; with `github` the outcome's
/// annotations (a drifted hunk at its file and line); for people the outcome, then each patch
/// shown (`patches`: heading and text).
pub fn render_diff(
    out: &mut dyn Write,
    format: Format,
    outcome: &RunOutcome,
    patches: &[(String, String)],
) -> Result<()> {
    if format != Format::Human {
        return render(out, format, outcome);
    }
    render(out, Format::Human, outcome)?;
    for (heading, text) in patches {
        patch_text(out, heading, text)?;
    }
    Ok(())
}

/// A patch file under its `# release file (patch)` heading, coloured as a diff.
pub fn patch_text(out: &mut dyn Write, heading: &str, text: &str) -> Result<()> {
    writeln!(out, "{}", heading.bold())?;
    for line in text.lines() {
        let shown = if line.starts_with("+++") || line.starts_with("---") {
            line.bold()
        } else if line.starts_with('+') {
            line.green()
        } else if line.starts_with('-') {
            line.red()
        } else if line.starts_with("@@") {
            line.cyan()
        } else {
            line.normal()
        };
        writeln!(out, "{shown}")?;
    }
    Ok(())
}
