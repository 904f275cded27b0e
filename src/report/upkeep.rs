//! Output of the upkeep commands (`record`, `port`, `test`, `matrix`): human, JSON and, where
//! it says something, GitHub annotations. The commands hand over data; every byte is written
//! here.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use colored::Colorize;

use super::json::SCHEMA;
use super::{Document, Format};
use crate::advice::Advice;
use crate::catalog::{CatalogIdentity, Fix};
use crate::exit_status::ExitStatus;
use crate::plan::FixState;
use crate::upkeep::matrix::{Cell, CellState, Job, ReleaseTrees, TestsResult};
use crate::upkeep::merge::Conflict;
use crate::upkeep::pytest::TestRun;
use crate::upkeep::Written;

/// What `record` / `port` wrote (`how`: port's account of each file, for people).
pub struct WrittenDoc<'a> {
    pub catalog: Option<&'a Path>,
    pub fix: &'a str,
    pub written: &'a Written,
    pub command: &'a str,
    pub how: &'a [String],
}

impl WrittenDoc<'_> {
    /// What to run next: lint the catalogue against the release, then record it as verified
    /// (both on the catalogue written, `.` when none was named).
    fn next(&self) -> String {
        let catalog = self.catalog.map_or(".".into(), |p| p.display().to_string());
        let on = super::advice::Invocation { catalog: vec!["--catalog".into(), catalog], trees: Vec::new() };
        let record = Advice::RecordRelease { release: self.written.release.clone() };
        format!("next: `{on} lint --upstream DIR`, then `{}`", super::advice::command(&record, &on))
    }
}

impl Document for WrittenDoc<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let doc = serde_json::json!({ "schema": SCHEMA, "command": self.command, "exit_code": 0, "fix": self.fix, "written": self.written });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    /// One notice at the manifest written: the variant, its patches, and what to run next.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let w = self.written;
        let mut parts: Vec<String> = w.patches.iter().map(|p| format!("patch {}", p.display())).collect();
        parts.extend(w.reused.iter().map(|p| format!("reused {p}")));
        let message = format!(
            "gaudi-fixes {}: {} {}: wrote {}{}{}; {}",
            self.command,
            self.fix,
            w.release,
            w.manifest.display(),
            if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) },
            w.notes.iter().map(|n| format!("; {n}")).collect::<String>(),
            self.next()
        );
        super::github::annotation(out, "notice", Some(&w.manifest.display().to_string()), &message)
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        let (fix, w, command) = (self.fix, self.written, self.command);
        for line in self.how {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "{command}: {fix} {}: wrote {}", w.release, w.manifest.display())?;
        for p in &w.patches {
            writeln!(out, "  patch {}", p.display())?;
        }
        for p in &w.reused {
            writeln!(out, "  reused {p} (the pristine file is the same)")?;
        }
        for f in &w.unchanged {
            writeln!(out, "  {f}: no change, not part of the variant")?;
        }
        for note in &w.notes {
            writeln!(out, "  {note}")?;
        }
        writeln!(out, "{}", self.next())?;
        Ok(())
    }
}

/// `port`'s conflicts: the lines the fix changes that the new release changed too.
pub struct PortConflicts<'a> {
    pub fix: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub conflicts: &'a [(String, Vec<Conflict>)],
    /// The run's `--catalog`, where `record` writes the variant made by hand.
    pub catalog: Option<&'a Path>,
}

impl Document for PortConflicts<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let files: Vec<_> = self
            .conflicts
            .iter()
            .map(|(f, cs)| {
                serde_json::json!({ "file": f, "conflicts": cs.iter().map(|c| serde_json::json!({
                    "base_line": c.base_line, "base": c.base, "ours": c.ours, "theirs": c.theirs })).collect::<Vec<_>>() })
            })
            .collect();
        let doc = serde_json::json!({ "schema": SCHEMA, "command": "port", "exit_code": 2, "fix": self.fix, "from": self.from,
            "release": self.to, "conflicts": files });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    /// One error per conflicting place.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let (fix, from, to) = (self.fix, self.from, self.to);
        for (file, cs) in self.conflicts {
            for c in cs {
                let message = format!(
                    "gaudi-fixes port: {fix} {from} → {to}: near line {} of {file} in {from}, the fix changes lines that {to} changed too; nothing was written (make the change by hand on a copy of the {to} tree and use `record`)",
                    c.base_line
                );
                super::github::annotation(out, "error", None, &message)?;
            }
        }
        Ok(())
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        let (fix, from, to) = (self.fix, self.from, self.to);
        writeln!(
            out,
            "{} {fix} {from} → {to}: the fix changes lines that {to} changed too; nothing was written",
            "port: conflict:".red().bold()
        )?;
        for (file, cs) in self.conflicts {
            for c in cs {
                writeln!(out, "{}", format!("--- {file} near line {} of {from}", c.base_line).bold())?;
                writeln!(out, "  {from} (pristine) → the fix:")?;
                super::human::diff_lines(&mut *out, &c.base, &c.ours)?;
                writeln!(out, "  {from} (pristine) → {to} (pristine):")?;
                super::human::diff_lines(&mut *out, &c.base, &c.theirs)?;
            }
        }
        writeln!(
            out,
            "next: copy the {to} tree, make the fix's change there by hand, and run \
             `gaudi-fixes --catalog {} record {fix} --release {to} --pristine <{to} tree> --edited <copy>`",
            self.catalog.map_or("DIR".into(), |c| c.display().to_string())
        )?;
        Ok(())
    }
}

/// What `test` runs: the fix, its state on the trees, where and with which interpreter.
pub struct TestAbout<'a> {
    pub fix: &'a str,
    pub state: FixState,
    pub variant: Option<&'a str>,
    /// The tree shown (vllm's root, else vllm_gaudi's).
    pub root: &'a Path,
    pub python: &'a str,
    /// `--only-tree` hides a tree that was found.
    pub left_out: bool,
    /// The fix is not applied (nor upstreamed): its tests are expected to fail.
    pub not_applied: bool,
    /// The run's flags, for the `apply` it advises.
    pub invocation: &'a super::advice::Invocation,
}

/// Before pytest runs (for people, on stderr, where pytest's progress follows): what is tested,
/// and when its tests are expected to fail.
pub fn test_start(output: super::Output, about: &TestAbout<'_>) {
    if output.quiet || output.format != Format::Human {
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "gaudi-fixes test: {} ({} [{}]) on {} with {}",
        about.fix,
        about.state.words(),
        about.variant.unwrap_or("-"),
        about.root.display(),
        about.python
    );
    if about.left_out {
        let _ = writeln!(
            err,
            "gaudi-fixes test: --only-tree: the left-out tree is hidden from the tests; its half's tests skip"
        );
    }
    if about.not_applied {
        let _ = writeln!(
            err,
            "gaudi-fixes test: {} is {} on these trees: its tests check the patched code and are expected to fail \
             (`{}` first)",
            about.fix,
            about.state.words(),
            super::advice::command(&Advice::Apply { fixes: vec![about.fix.to_string()] }, about.invocation)
        );
    }
}

/// The result of `test`: the verdict and pytest's summary (and why it failed, when the fix is
/// not applied).
pub fn test_run(
    out: &mut dyn Write,
    format: Format,
    about: &TestAbout<'_>,
    run: &TestRun,
    status: ExitStatus,
) -> Result<()> {
    let why_failed = if !run.passed && about.not_applied {
        let state =
            if about.state == FixState::NotApplied { String::new() } else { format!(": {}", about.state.words()) };
        format!(" — {} is not applied on these trees{state}", run.fix)
    } else {
        String::new()
    };
    match format {
        Format::Json => {
            let doc = serde_json::json!({
                "schema": SCHEMA,
                "command": "test",
                "exit_code": status.code(),
                "fix": run.fix,
                "state": about.state,
                "variant": about.variant,
                "python": run.python,
                "root": run.root,
                "passed": run.passed,
                "pytest_exit": run.pytest_exit,
                "summary": run.summary,
                "skipped": run.skipped,
            });
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Github => {
            if run.passed {
                super::github::command(out, "notice", &[], &format!("{}: tests passed: {}", run.fix, run.summary))?;
            } else {
                let message = format!("{}: tests failed: {}{why_failed}", run.fix, run.summary);
                super::github::command(out, "error", &[], &message)?;
            }
        }
        Format::Human => {
            let verdict = if run.passed { "passed" } else { "FAILED" };
            writeln!(out, "test {}: {verdict} ({}){why_failed}", run.fix, run.summary)?;
            for reason in &run.skipped {
                writeln!(out, "  skipped: {reason}")?;
            }
        }
    }
    Ok(())
}

/// Where pytest's own report goes while `test` runs it: stderr, for people; nowhere (kept for
/// the result only) under `--quiet` or with JSON.
pub fn pytest_echo(output: super::Output) -> Option<std::io::Stderr> {
    (!output.quiet && output.format != Format::Json).then(std::io::stderr)
}

// ---- matrix

#[derive(Debug, serde::Serialize)]
struct MatrixDocument<'a> {
    schema: u32,
    command: &'static str,
    exit_code: u8,
    python: &'a str,
    /// The binary and the catalogue that judged the cells: `matrix --merge` takes only results
    /// of its own version and catalogue.
    gaudi_fixes: String,
    catalogue: &'a CatalogIdentity,
    tests_not_run: Option<&'a str>,
    releases: &'a [ReleaseTrees],
    cells: &'a [Cell],
}

/// What a matrix run was made with, for its report.
pub struct MatrixRun<'a> {
    pub python: &'a str,
    pub catalogue: &'a CatalogIdentity,
    /// Why the fixes' tests did not run, when they did not.
    pub no_tests: Option<&'a str>,
}

/// `matrix --plan`: the jobs, for people, as JSON, or (`--format github`) as the one
/// `matrix=…` line a workflow step appends to $GITHUB_OUTPUT for a `strategy.matrix`.
pub fn matrix_plan(out: &mut dyn Write, format: Format, jobs: &[Job]) -> Result<()> {
    let include = serde_json::json!({ "include": jobs });
    match format {
        Format::Github => writeln!(out, "matrix={}", serde_json::to_string(&include)?)?,
        Format::Json => {
            let doc = serde_json::json!({ "schema": SCHEMA, "command": "matrix", "plan": include });
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Human => {
            writeln!(out, "{} jobs:", jobs.len())?;
            for job in jobs {
                writeln!(out, "  {:<40} gaudi-fixes matrix {} --format json", job.id, job.args)?;
            }
        }
    }
    Ok(())
}

fn state_text(c: &Cell) -> String {
    let mut s = c.state.as_str().to_string();
    if c.offsets {
        s.push_str(" (offsets)");
    }
    if let Some(r) = c.reason {
        s = format!("{s}: {}", super::human::reason_word(r));
    }
    s
}

fn verified_text(c: &Cell) -> &'static str {
    match (c.verified, c.recorded) {
        (true, _) => "yes",
        (false, true) => "recorded",
        _ if c.state == CellState::Applies => "no",
        _ => "-",
    }
}

fn matrix_human(out: &mut dyn Write, releases: &[ReleaseTrees], cells: &[Cell], no_tests: Option<&str>) -> Result<()> {
    for r in releases {
        match (&r.error, &r.vllm_gaudi) {
            (Some(e), _) => writeln!(out, "{}: cannot prepare: {e}", r.release)?,
            (None, Some(g)) => writeln!(out, "{}: vllm_gaudi from {}", r.release, g.source)?,
            (None, None) => writeln!(out, "{}: no vllm_gaudi tree (its half is not checked)", r.release)?,
        }
    }
    if let Some(why) = no_tests {
        writeln!(out, "tests not run: {why}")?;
    }
    let rows: Vec<[String; 6]> = cells
        .iter()
        .map(|c| {
            let tests = match c.tests {
                TestsResult::NotRun => "-".to_string(),
                t => t.as_str().to_string(),
            };
            [
                c.release.clone(),
                c.fix.clone(),
                state_text(c),
                c.variant.clone().unwrap_or_else(|| "-".into()),
                tests,
                verified_text(c).to_string(),
            ]
        })
        .collect();
    let head = ["release", "fix", "state", "variant", "tests", "verified"].map(str::to_string);
    let mut widths = head.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&head).chain(&rows) {
        let line: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    for c in cells.iter().filter(|c| matches!(c.tests, TestsResult::Failed | TestsResult::Error)) {
        writeln!(
            out,
            "{} {}: tests {}: {}",
            c.release,
            c.fix,
            c.tests.as_str(),
            c.tests_summary.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

/// One Markdown table per fix, as the fix pages embed them.
fn markdown(out: &mut dyn Write, fixes: &[&Fix], cells: &[Cell]) -> Result<()> {
    for fix in fixes {
        let name = &fix.manifest.name;
        writeln!(out, "<!-- gaudi-fixes matrix --fix {name} --markdown -->")?;
        writeln!(out, "| vLLM | state | variant | tests | verified |")?;
        writeln!(out, "|---|---|---|---|---|")?;
        for c in cells.iter().filter(|c| &c.fix == name) {
            let tests = match c.tests {
                TestsResult::Passed => "pass",
                TestsResult::Failed => "**fail**",
                TestsResult::Error => "error",
                TestsResult::NotRun => "–",
            };
            let verified = match verified_text(c) {
                "yes" | "recorded" => "✓",
                "no" => "no",
                _ => "–",
            };
            writeln!(
                out,
                "| {} | {} | {} | {tests} | {verified} |",
                c.release.trim_start_matches('v'),
                state_text(c),
                c.variant.as_deref().unwrap_or("–"),
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `matrix`'s result: one Markdown table per fix (`--markdown`), else its [`Matrix`] document
/// in `format`.
#[allow(clippy::too_many_arguments)]
pub fn matrix(
    out: &mut dyn Write,
    format: Format,
    markdown_tables: bool,
    status: ExitStatus,
    run: &MatrixRun,
    fixes: &[&Fix],
    releases: &[ReleaseTrees],
    cells: &[Cell],
) -> Result<()> {
    if markdown_tables {
        return markdown(out, fixes, cells);
    }
    super::render(out, format, &Matrix { status, run, releases, cells })
}

/// `matrix`'s document: each release's trees and every cell (fix × release).
pub struct Matrix<'a> {
    pub status: ExitStatus,
    pub run: &'a MatrixRun<'a>,
    pub releases: &'a [ReleaseTrees],
    pub cells: &'a [Cell],
}

impl Document for Matrix<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let doc = MatrixDocument {
            schema: SCHEMA,
            command: "matrix",
            exit_code: self.status.code(),
            python: self.run.python,
            gaudi_fixes: crate::provenance::tool_version(),
            catalogue: self.run.catalogue,
            tests_not_run: self.run.no_tests,
            releases: self.releases,
            cells: self.cells,
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    /// An error for each release that could not be prepared, each cell drifted or in error and
    /// each whose tests failed; then a notice counting the cells by state.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        use super::github::annotation;
        for r in self.releases {
            if let Some(e) = &r.error {
                annotation(out, "error", None, &format!("gaudi-fixes matrix: {}: cannot prepare: {e}", r.release))?;
            }
        }
        for c in self.cells {
            if matches!(c.state, CellState::Drifted | CellState::Error) {
                let why = c.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                annotation(
                    out,
                    "error",
                    None,
                    &format!("gaudi-fixes matrix: {} {}: {}{why}", c.release, c.fix, state_text(c)),
                )?;
            }
            if matches!(c.tests, TestsResult::Failed | TestsResult::Error) {
                let message = format!(
                    "gaudi-fixes matrix: {} {}: tests {}: {}",
                    c.release,
                    c.fix,
                    c.tests.as_str(),
                    c.tests_summary.as_deref().unwrap_or("")
                );
                annotation(out, "error", None, &message)?;
            }
        }
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for c in self.cells {
            match counts.iter_mut().find(|(s, _)| *s == c.state.as_str()) {
                Some((_, n)) => *n += 1,
                None => counts.push((c.state.as_str(), 1)),
            }
        }
        let counted: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let releases: Vec<&str> = self.releases.iter().map(|r| r.release.as_str()).collect();
        let tests = self.run.no_tests.map(|why| format!("; tests not run: {why}")).unwrap_or_default();
        let message = format!(
            "gaudi-fixes matrix: {} cell(s) on {}: {}{tests}",
            self.cells.len(),
            releases.join(", "),
            counted.join(", ")
        );
        annotation(out, "notice", None, &message)
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        matrix_human(out, self.releases, self.cells, self.run.no_tests)
    }
}

/// Notes a command has for people before its result (on stderr; nothing under `--quiet`).
pub fn notes(output: super::Output, notes: &[String]) {
    if output.quiet {
        return;
    }
    let mut err = std::io::stderr().lock();
    for note in notes {
        let _ = writeln!(err, "gaudi-fixes: {note}");
    }
}
