//! Output of `conform`: a table per feature (schedules that exercised it, differences, the fixes
//! whose bug shows there, the first difference as a sentence), as JSON, or as GitHub annotations
//! (one error per feature that differs); the failing schedule of `--first`; `--setup`'s and
//! `--requirements`' output.

use std::io::Write;

use super::json::SCHEMA;
use super::Format;
use crate::exit_status::ExitStatus;
pub use crate::upkeep::conform::{Conformance, Feature, GpuDisagrees, Shrunk};
use anyhow::Result;
use colored::Colorize;

/// A run to print: the report, how it ended, and what `conform` adds.
pub struct Shown<'a> {
    pub python: &'a str,
    pub report: &'a Conformance,
    pub status: ExitStatus,
    /// Sentences about the run (pins at other versions, features no fix names…).
    pub notes: &'a [String],
    /// The schedule file replayed, if one was.
    pub replay: Option<&'a str>,
    /// The run's flags, for the replay it suggests.
    pub invocation: &'a super::advice::Invocation,
}

/// One reference error in words: its `first`/`message` when it has one, else its JSON.
fn reference_error(v: &serde_json::Value) -> String {
    let text = ["first", "message", "error"].iter().find_map(|k| v.get(*k).and_then(|t| t.as_str()));
    let text = text.map_or_else(|| v.to_string(), str::to_string);
    match (v.get("name").and_then(|n| n.as_str()), v.get("count").and_then(|c| c.as_u64())) {
        (Some(name), Some(count)) => format!("{name}: {count} time(s); first: {text}"),
        (Some(name), None) => format!("{name}: {text}"),
        _ => text,
    }
}

/// The fixes column: `-` when none names the feature.
/// The fixes a feature's differences point to, or `none` (no fix of the catalogue names the
/// feature: `raised`, an exception on either side, is one).
fn fixes_cell(f: &Feature) -> String {
    if f.fixes.is_empty() {
        "none".to_string()
    } else {
        f.fixes.join(", ")
    }
}

/// The width conform's human report keeps to.
const COLUMNS: usize = 100;

/// `text` (its own lines kept) wrapped at spaces to [`COLUMNS`], each line after the first
/// indented by `indent`; a word longer than a line stays whole.
fn wrapped(first: &str, indent: usize, text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    for (i, part) in text.lines().enumerate() {
        if i > 0 {
            lines.push(std::mem::replace(&mut line, " ".repeat(indent)));
        }
        for word in part.split(' ') {
            let fresh = line.trim().is_empty() || line.ends_with(": ");
            if !fresh && line.chars().count() + 1 + word.chars().count() > COLUMNS {
                lines.push(std::mem::replace(&mut line, " ".repeat(indent)));
            }
            if !(line.ends_with(' ') || line.is_empty()) {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.push(line);
    lines
}

/// Print the result in `format`.
pub fn emit(out: &mut dyn Write, format: Format, shown: &Shown<'_>) -> Result<()> {
    match format {
        Format::Json => json(out, shown),
        Format::Github => github(out, shown),
        Format::Human => human(out, shown),
    }
}

fn json(out: &mut dyn Write, shown: &Shown<'_>) -> Result<()> {
    let c = shown.report;
    let doc = serde_json::json!({
        "schema": SCHEMA,
        "command": "conform",
        "exit_code": shown.status.code(),
        "python": shown.python,
        "root": c.root,
        "schedules": c.schedules,
        "requested": c.requested,
        "complete": c.complete,
        "seed": c.seed,
        "seconds": c.seconds,
        "jobs": c.jobs,
        "schedules_per_minute": c.schedules_per_minute,
        "last_seed": c.last_seed,
        "replay": shown.replay,
        "differences": c.differences(),
        "features": c.features,
        "reference": c.reference,
        "gpu_disagrees": c.gpu_disagrees,
        "reference_errors": c.reference_errors,
        "failing_schedule": c.failing_schedule,
        "notes": shown.notes,
    });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}

fn github(out: &mut dyn Write, shown: &Shown<'_>) -> Result<()> {
    let c = shown.report;
    for f in c.features.iter().filter(|f| f.differences > 0) {
        let first = f.first.as_deref().unwrap_or("");
        let fixes = if f.fixes.is_empty() { String::new() } else { format!(" ({})", f.fixes.join(", ")) };
        super::github::command(
            out,
            "error",
            &[("title", &format!("conform {}{fixes}", f.name))],
            &format!("{} difference(s) in {} schedule(s); first: {first}", f.differences, f.schedules),
        )?;
    }
    for e in &c.reference_errors {
        super::github::command(
            out,
            "warning",
            &[("title", "conform reference")],
            &format!("vLLM's GPU reference failed (not counted): {}", reference_error(e)),
        )?;
    }
    if c.differences() == 0 {
        super::github::command(out, "notice", &[], &format!("conform: {} schedules, no difference", c.schedules))?;
    }
    Ok(())
}

fn human(out: &mut dyn Write, shown: &Shown<'_>) -> Result<()> {
    let c = shown.report;
    let root = c.root.as_deref().unwrap_or("?");
    let replayed = shown.replay.map_or(String::new(), |f| format!(", replaying {f}"));
    let rate = match (c.schedules_per_minute, c.jobs) {
        (Some(rate), Some(jobs)) => {
            format!(" ({rate:.1} schedules a minute, {jobs} worker{})", if jobs == 1 { "" } else { "s" })
        }
        _ => String::new(),
    };
    writeln!(out, "conform: {} schedules (seed {}) on {root}{replayed}, {:.1}s{rate}", c.schedules, c.seed, c.seconds)?;
    let width = c.features.iter().map(|f| f.name.len()).max().unwrap_or(7).max(7);
    // Four narrow columns; a feature's first difference (long, maybe several lines) under its
    // row, wrapped, so the table fits 100 columns.
    writeln!(out, "  {:<width$}  schedules  differences  fix", "feature")?;
    for f in &c.features {
        let diffs = if f.differences > 0 { f.differences.to_string().red().to_string() } else { "0".into() };
        let pad = 11usize.saturating_sub(f.differences.to_string().len());
        let row = format!("  {:<width$}  {:>9}  {}{diffs}  ", f.name, f.schedules, " ".repeat(pad));
        // The row's width as printed (the count may be coloured).
        let indent = width + 28;
        let mut lines = wrapped(&" ".repeat(indent), indent, &fixes_cell(f)).into_iter();
        writeln!(out, "{row}{}", lines.next().unwrap_or_default().trim_start())?;
        for line in lines {
            writeln!(out, "{line}")?;
        }
        if let Some(first) = f.first.as_deref().filter(|_| f.differences > 0) {
            for line in wrapped("      first: ", 13, first) {
                writeln!(out, "{line}")?;
            }
        }
    }
    for g in &c.gpu_disagrees {
        let first = g.first.as_deref().unwrap_or("-");
        writeln!(
            out,
            "  note: {}: vLLM's GPU path disagrees with the request {} time(s) (not counted); first: {first}",
            g.name, g.count
        )?;
    }
    for e in &c.reference_errors {
        writeln!(
            out,
            "  note: vLLM's GPU reference failed (the reference's error, not counted): {}",
            reference_error(e)
        )?;
    }
    for note in shown.notes {
        writeln!(out, "  note: {note}")?;
    }
    let total = c.differences();
    if total == 0 {
        writeln!(out, "conform: no difference")?;
    } else {
        writeln!(out, "conform: {total} difference(s): the HPU sampling path does not do what the requests asked")?;
    }
    if let Some(schedule) = &c.failing_schedule {
        let run = &shown.invocation;
        writeln!(
            out,
            "the failing schedule is the next line; to replay it, save it to a file and run `{run} conform --replay \
             FILE` (e.g. `{run} conform --first | tail -n 1 > schedule.json`):"
        )?;
        writeln!(out, "{}", serde_json::to_string(schedule)?)?;
    }
    Ok(())
}

/// `conform --requirements`: the pinned requirements file as it is built in (human), or its
/// pins as a document.
pub fn requirements(out: &mut dyn Write, format: Format, text: &str, pins: &[String]) -> Result<()> {
    match format {
        Format::Json => {
            let doc = serde_json::json!({"schema": SCHEMA, "command": "conform", "requirements": pins});
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Github => {
            let message = format!("gaudi-fixes conform: {} pinned requirement(s): {}", pins.len(), pins.join(", "));
            super::github::annotation(out, "notice", None, &message)?;
        }
        Format::Human => write!(out, "{text}")?,
    }
    Ok(())
}

/// A step `conform --setup` is about to take, said on stderr as it starts (pip is slow).
pub enum SetupStep<'a> {
    /// Making conform's own venv in `dir`, layered on `python`'s packages.
    Venv { dir: &'a std::path::Path, python: &'a str },
    /// Running pip with these words.
    Pip { words: &'a [String] },
}

/// Say `step` on stderr.
pub fn setup_step(step: &SetupStep<'_>) {
    match step {
        SetupStep::Venv { dir, python } => super::stderr_line(format_args!(
            "conform --setup: conform's own venv {}, on {python}'s packages",
            dir.display()
        )),
        SetupStep::Pip { words } => super::stderr_line(format_args!("conform --setup: running {}", words.join(" "))),
    }
}

/// What `conform --setup` did and found afterwards.
pub struct SetupShown<'a> {
    pub python: &'a str,
    /// The requirements file written, and the pip line run.
    pub file: &'a str,
    pub pip: &'a str,
    pub torch: Option<&'a str>,
    pub pinned: usize,
    /// What is still missing (modules and pins), as words.
    pub missing: Vec<String>,
    /// Pins at another version after the install (name==pin, installed version).
    pub other_versions: Vec<String>,
    pub status: ExitStatus,
    /// The run's flags, for the `conform` it suggests once ready.
    pub invocation: &'a super::advice::Invocation,
}

/// `conform --setup`'s report.
pub fn setup(out: &mut dyn Write, format: Format, s: &SetupShown<'_>) -> Result<()> {
    match format {
        Format::Json => {
            let doc = serde_json::json!({
                "schema": SCHEMA, "command": "conform", "setup": true, "exit_code": s.status.code(),
                "python": s.python, "requirements_file": s.file, "pip": s.pip, "torch": s.torch,
                "pinned": s.pinned, "missing": s.missing, "other_versions": s.other_versions,
            });
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Github => {
            let torch = s.torch.map_or("no torch".to_string(), |v| format!("torch {v}"));
            let have = s.pinned - s.missing.iter().filter(|m| m.contains("==")).count();
            let (level, state) = if s.missing.is_empty() {
                ("notice", "ready".to_string())
            } else {
                ("error", format!("still missing: {}", s.missing.join(", ")))
            };
            let notes: String = s.other_versions.iter().map(|v| format!("; note: {v}")).collect();
            let message = format!(
                "gaudi-fixes conform --setup: {} has {torch}, {have} of {} pinned distributions (ran: {}){notes}; {state}",
                s.python, s.pinned, s.pip
            );
            super::github::annotation(out, level, None, &message)?;
        }
        Format::Human => {
            let torch = s.torch.map_or("no torch".to_string(), |v| format!("torch {v}"));
            let have = s.pinned - s.missing.iter().filter(|m| m.contains("==")).count();
            writeln!(out, "conform --setup: {} has {torch}, {have} of {} pinned distributions", s.python, s.pinned)?;
            writeln!(out, "  ran: {}", s.pip)?;
            for v in &s.other_versions {
                writeln!(out, "  note: {v}")?;
            }
            if s.missing.is_empty() {
                writeln!(out, "conform --setup: ready; run `{} conform`", s.invocation)?;
            } else {
                writeln!(out, "conform --setup: still missing: {}", s.missing.join(", "))?;
            }
        }
    }
    Ok(())
}

/// `conform --shrink`: the feature it still differs in, the sizes before and after, the first
/// difference, and the schedule itself as the last line (what `--replay` takes); JSON: the same
/// under `shrunk`.
pub fn shrunk(out: &mut dyn Write, format: Format, s: &Shrunk) -> Result<()> {
    let sizes = |v: &serde_json::Value| {
        ["requests", "steps", "parameters", "prompt_tokens", "scheduled_tokens", "drafts"]
            .iter()
            .map(|k| format!("{} {}", v.get(*k).and_then(serde_json::Value::as_u64).unwrap_or(0), k.replace('_', " ")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if format == Format::Json {
        let doc = serde_json::json!({ "schema": SCHEMA, "command": "conform --shrink", "shrunk": s });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(out, "still differs in {}: {}", s.feature.bold(), s.first)?;
    writeln!(out, "from {}", sizes(&s.before))?;
    writeln!(out, "to   {} ({} runs of the schedule)", sizes(&s.after), s.runs)?;
    writeln!(out, "the shrunk schedule (save it to a file for --replay):")?;
    writeln!(out, "{}", serde_json::to_string(&s.schedule)?)?;
    Ok(())
}
