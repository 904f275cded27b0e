//! Human output: one block per fix, drifted hunks shown as a coloured diff of the expected
//! lines against the nearest actual lines.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use crate::discover::Trees;
use crate::patch::HunkState;
use crate::plan::{Action, FileOutcome, FileReport, FixReport, FixState};
use crate::plan::{Reason, ReasonCode};

/// The trees line(s) at the top of a report.
pub fn trees(out: &mut dyn Write, trees: &Trees) -> Result<()> {
    for tree in trees.all() {
        let version = tree.version.as_deref().map_or_else(
            || format!("version unknown: no {}/_version.py or dist-info beside it", tree.name),
            |v| format!("version {v}"),
        );
        writeln!(
            out,
            "{:<11} {}  ({version}, found by {})",
            tree.name.to_string().bold(),
            tree.root.display(),
            tree.found_by
        )?;
    }
    for note in &trees.notes {
        writeln!(out, "{} {note}", "note:".yellow())?;
    }
    Ok(())
}

/// A state word, coloured.
pub fn state_word(state: FixState) -> colored::ColoredString {
    match state {
        FixState::Applied => "applied".green(),
        FixState::NotApplied => "not applied".yellow(),
        FixState::Drifted => "drifted".red().bold(),
        FixState::Upstreamed => "upstreamed".cyan(),
        FixState::Error => "error".red().bold(),
        FixState::Skipped => "skipped (--only-tree)".dimmed(),
    }
}

fn file_word(state: FileOutcome) -> colored::ColoredString {
    match state {
        FileOutcome::Applied => "applied".green(),
        FileOutcome::NotApplied => "not applied".yellow(),
        FileOutcome::Drifted => "drifted".red(),
        FileOutcome::Missing => "missing".red(),
        FileOutcome::Skipped => "skipped (--only-tree)".dimmed(),
        FileOutcome::NoTree => "not checked (tree not found)".red(),
    }
}

/// One fix's block. `verbose` shows every hunk (for `diff` and drift), not just drifted ones.
pub fn fix(out: &mut dyn Write, report: &FixReport, verbose: bool) -> Result<()> {
    let variant = report.variant.as_deref().map_or(String::new(), |v| format!(" [{v}]"));
    let action = match report.action {
        Some(Action::Apply) => format!("  → {}", "applying".bold()),
        Some(Action::Revert) => format!("  → {}", "reverting".bold()),
        None => String::new(),
    };
    let why = match &report.reason {
        Some(r) if !r.note => format!(": {}", reason_word(r.code)).red().bold().to_string(),
        _ => String::new(),
    };
    writeln!(out, "{}  {}{why}{variant}  ({}){action}", report.name.bold(), state_word(report.state), report.kind)?;
    if let Some(msg) = &report.message {
        writeln!(out, "  {msg}")?;
    }
    if let Some(reason) = &report.reason {
        reason_lines(out, reason, "  ")?;
    }
    for file in &report.files {
        file_block(out, file, verbose || report.state == FixState::Drifted || file.state == FileOutcome::Drifted)?;
    }
    Ok(())
}

/// The words for a reason code, as the state line shows them.
pub fn reason_word(code: ReasonCode) -> &'static str {
    match code {
        ReasonCode::UnsupportedRelease => "unsupported release",
        ReasonCode::LocallyModified => "locally modified",
        ReasonCode::UnverifiedRelease => "unverified release",
        ReasonCode::PartiallyApplied => "partially applied",
        ReasonCode::FileMissing => "file missing",
    }
}

/// `why:` / `note:` and `next:` lines of a reason.
fn reason_lines(out: &mut dyn Write, reason: &Reason, indent: &str) -> Result<()> {
    let label = if reason.note { "note:".yellow() } else { "why:".red().bold() };
    writeln!(out, "{indent}{label} {}", reason.message)?;
    writeln!(out, "{indent}{} {}", "next:".bold(), reason.next_step)?;
    Ok(())
}

fn file_block(out: &mut dyn Write, file: &FileReport, show_drift: bool) -> Result<()> {
    let pristine = if file.pristine { ", pristine" } else { "" };
    let partial = if file.partial { ", partially applied" } else { "" };
    let shown = match &file.tree_root {
        Some(root) => root.join(&file.path).display().to_string(),
        None => file.path.clone(),
    };
    writeln!(out, "  {}: {}{pristine}{partial}", shown, file_word(file.state))?;
    for hunk in &file.hunks {
        match &hunk.state {
            HunkState::Applied { line, offset } | HunkState::NotApplied { line, offset } => {
                if *offset != 0 {
                    writeln!(out, "    hunk {} found at line {line} (offset {offset:+})", hunk.index)?;
                }
            }
            HunkState::Drifted { reason, expected_image, expected_line, expected, nearest_line, nearest }
                if show_drift =>
            {
                writeln!(
                    out,
                    "    {} hunk {} ({}:{}), expected near line {}: {reason}",
                    "drift:".red().bold(),
                    hunk.index,
                    file.patch,
                    hunk.patch_line,
                    expected_line,
                )?;
                writeln!(out, "    (shown against its {expected_image}-image)")?;
                match nearest_line {
                    Some(line) => {
                        writeln!(out, "    nearest lines at {line} ({} expected, {} actual):", "-".red(), "+".green())?
                    }
                    None => writeln!(out, "    no similar lines anywhere in the file; expected:")?,
                }
                diff_lines(out, expected, nearest)?;
            }
            HunkState::Drifted { .. } => {}
        }
    }
    Ok(())
}

/// A line diff of `expected` against `actual`, indented, coloured.
pub fn diff_lines(out: &mut dyn Write, expected: &[String], actual: &[String]) -> Result<()> {
    let old = expected.join("\n") + "\n";
    let new = actual.join("\n") + if actual.is_empty() { "" } else { "\n" };
    let diff = similar::TextDiff::from_lines(&old, &new);
    for change in diff.iter_all_changes() {
        let text = change.value().trim_end_matches('\n');
        match change.tag() {
            similar::ChangeTag::Equal => writeln!(out, "       {text}")?,
            similar::ChangeTag::Delete => writeln!(out, "      {}", format!("-{text}").red())?,
            similar::ChangeTag::Insert => writeln!(out, "      {}", format!("+{text}").green())?,
        }
    }
    Ok(())
}
