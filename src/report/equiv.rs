//! Output of `gaudi-fixes equiv`: a readable summary (checks, ties, calibration, mutants,
//! per-case table), the JSON document (`--format json`, the serialised
//! [`SuiteReport`] after a `schema` field), GitHub annotations for failures, and the progress line on stderr.

use std::io::Write;

use anyhow::{Context, Result};
use colored::Colorize;
use serde::Serialize;

use super::{Document, Output};
use crate::reference::statistical::BiasDirection;
use crate::reference::suite::{Step, SuiteReport, Verdict};
use crate::reference::vectors::Emitted;

pub use super::progress::Progress;

impl Progress {
    /// Show where the suite is: every case, every tenth calibration and power run.
    pub fn step(&mut self, step: Step<'_>) {
        match step {
            Step::Case { index, total, name } => self.draw(&format!("equiv: case {}/{total} {name}", index + 1)),
            Step::Power { run, runs } if run.is_multiple_of(10) => {
                self.draw(&format!("equiv: measuring the gate's power, run {}/{runs}", run + 1));
            }
            Step::Calibration { run, runs } if run.is_multiple_of(10) => {
                self.draw(&format!("equiv: calibrating the statistical gate, run {}/{runs}", run + 1));
            }
            Step::Speculative { index, total } => {
                self.draw(&format!("equiv: speculative steps, sampler {}/{total}", index + 1));
            }
            Step::Power { .. } | Step::Calibration { .. } => {}
        }
    }
}

/// A report as a JSON document: `schema` (README, "JSON output"), then the report's fields.
#[derive(Serialize)]
pub(super) struct WithSchema<'a, T: Serialize> {
    schema: u32,
    #[serde(flatten)]
    report: &'a T,
}

impl<'a, T: Serialize> WithSchema<'a, T> {
    pub(super) fn new(report: &'a T) -> WithSchema<'a, T> {
        WithSchema { schema: super::json::SCHEMA, report }
    }
}

/// Print the suite's report in the chosen format (nothing with `--quiet`).
pub fn print(output: Output, report: &SuiteReport) -> Result<()> {
    super::emit_document(output, &Suite(report))
}

/// `equiv`'s document.
struct Suite<'a>(&'a SuiteReport);

impl Document for Suite<'_> {
    fn human(&self, mut out: &mut dyn Write) -> Result<()> {
        human(&mut out, self.0)
    }

    fn json(&self, out: &mut dyn Write) -> Result<()> {
        serde_json::to_writer_pretty(&mut *out, &WithSchema::new(self.0)).context("writing the JSON report")?;
        writeln!(out)?;
        Ok(())
    }

    /// An error for each failed check (and a broken suite); a notice with the verdict.
    fn github(&self, mut out: &mut dyn Write) -> Result<()> {
        annotations(&mut out, self.0)?;
        let verdict = match self.0.verdict {
            Verdict::Equivalent => "equivalent",
            Verdict::NotEquivalent => "NOT equivalent",
            Verdict::SuiteBroken => "suite broken (no verdict)",
        };
        let message = format!("gaudi-fixes equiv: the subset sampler is {verdict}");
        super::github::annotation(out, "notice", None, &message)
    }
}

/// Say where the test vectors went.
pub fn print_emitted(output: Output, emitted: &Emitted) -> Result<()> {
    super::emit_document(output, &Vectors(emitted))
}

/// `equiv --emit-vectors`'s document.
struct Vectors<'a>(&'a Emitted);

impl Vectors<'_> {
    fn said(&self) -> String {
        let e = self.0;
        format!("wrote {} cases ({:.1} MB) to {} (see manifest.json)", e.cases, e.bytes as f64 / 1e6, e.dir.display())
    }
}

impl Document for Vectors<'_> {
    fn human(&self, out: &mut dyn Write) -> Result<()> {
        writeln!(out, "{}", self.said())?;
        Ok(())
    }

    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let e = self.0;
        let doc = serde_json::json!({
            "schema": super::json::SCHEMA,
            "vectors_dir": e.dir,
            "cases": e.cases,
            "bytes": e.bytes,
            "manifest": e.dir.join("manifest.json"),
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    fn github(&self, out: &mut dyn Write) -> Result<()> {
        super::github::annotation(out, "notice", None, &format!("gaudi-fixes equiv: {}", self.said()))
    }
}

fn pass_fail(passed: bool) -> colored::ColoredString {
    if passed {
        "pass".green()
    } else {
        "FAIL".red().bold()
    }
}

fn human(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    header(out, r)?;
    checks(out, r)?;
    gates(out, r)?;
    mutants(out, r)?;
    speculative(out, r)?;
    cases(out, r)?;
    verdict(out, r)
}

/// The title line and what was run.
fn header(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    writeln!(
        out,
        "{} subset sampler vs stock (vLLM {} apply_top_k_top_p_pytorch + random_sample)",
        "gaudi-fixes equiv:".bold(),
        r.release
    )?;
    writeln!(
        out,
        "{} cases ({} on the subset path, {} handed to stock), {} rows, seed {}, libtorch threads: {}",
        r.cases, r.subset_cases, r.fallback_cases, r.rows_checked, r.seed, r.torch_threads
    )?;
    writeln!(out)?;
    Ok(())
}

/// The four checks on the subset sampler, with the rows that differ.
fn checks(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    let s = &r.subset;
    let verdict = |check: &str| s.verdicts.iter().find(|v| v.check == check).is_some_and(|v| v.passed);
    let e = &s.exact;
    let c = &s.coupled;
    let st = &s.statistical;
    let rows = [
        (
            "exact",
            verdict("exact"),
            format!(
                "{} rows with stock's support (max {} ulps, bound {}); {} explained; {} unexplained; \
                 {} k-th tie cut at the window (must be 0)",
                e.identical, e.max_ulps, r.ulp_bound, e.explained, e.unexplained, e.kth_tie_crosses_window
            ),
        ),
        (
            "coupled",
            verdict("coupled"),
            format!(
                "{} of {} rows pick stock's token under shared Exp(1) noise; excused: {} where stock's \
                 top-p cut splits a tie class and a token is a member of it ({} both), {} top-p rounding",
                c.rows - c.mismatches - c.tie_class_cut - c.rounding,
                c.rows,
                c.tie_class_cut,
                c.tie_class_cut_both_in_class,
                c.rounding
            ),
        ),
        (
            "statistical",
            verdict("statistical"),
            format!(
                "{} cases, {} rows × {} draws; min p {} vs threshold {:.2e} (α {}, Bonferroni); {} draws outside support",
                st.cases,
                st.rows,
                r.statistical.draws_per_row,
                st.min_p_value.map_or("-".to_string(), |p| format!("{p:.3}")),
                r.statistical.threshold,
                r.statistical.alpha,
                st.outside_support_draws
            ),
        ),
        (
            "fallback",
            verdict("fallback"),
            format!("{} of {} cases handed to stock are bit-identical", s.fallback.identical, s.fallback.cases),
        ),
    ];
    writeln!(out, "{:<12} {:<6} {}", "check".bold(), "result".bold(), "detail".bold())?;
    for (name, passed, detail) in rows {
        writeln!(out, "{name:<12} {:<6} {detail}", pass_fail(passed))?;
    }
    for example in e.examples.iter().chain(&c.examples) {
        writeln!(out, "  {} {} row {}", "differs:".red(), example.case, example.row)?;
    }
    for case in &st.failed_cases {
        writeln!(out, "  {} {case}", "statistical failure:".red())?;
    }
    writeln!(out)?;
    Ok(())
}

/// Ties seen, and how far the statistical gate can be trusted: calibration and power.
fn gates(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    let t = &r.ties;
    writeln!(
        out,
        "{:<12} {} rows kept a tie at the k-th value by value, {} of them spilling past K (completed); \
         {} rows with a k-th tie cut at K (must be 0); top-p splits a tie class in {} rows; explained \
         differences: {} top-p boundary tie (same class mass), {} top-p rounding",
        "ties",
        t.kth_ties_kept_by_value,
        t.kth_tie_spills_past_window,
        t.kth_tie_crosses_window,
        t.top_p_cuts_tie_class,
        t.top_p_boundary_tie,
        t.top_p_rounding
    )?;
    let cal = &r.calibration;
    writeln!(
        out,
        "{:<12} {:<6} the gate on stock vs stock ({}): alarmed in {} of {} runs ({:.1}%, limit {:.0}%)",
        "calibration",
        pass_fail(cal.ok),
        cal.method,
        cal.alarms,
        cal.runs,
        cal.false_alarm_rate * 100.0,
        cal.limit * 100.0
    )?;
    let pw = &r.power;
    writeln!(
        out,
        "{:<12} {:<6} the gate against biased samplers ({} runs each, {} draws per row): must catch \
         TVD {} in >= {:.0}% of runs",
        "power",
        pass_fail(pw.ok),
        pw.rows.first().map_or(0, |row| row.runs),
        r.statistical.draws_per_row,
        pw.required_tvd,
        pw.required_power * 100.0
    )?;
    writeln!(out, "  {:>6} {:<10} {:>13} {:>8} {:>7}", "TVD", "mass", "mean row TVD", "alarms", "power")?;
    for row in &pw.rows {
        let direction = match row.direction {
            BiasDirection::FromTop => "from top",
            BiasDirection::ToTop => "to top",
        };
        writeln!(
            out,
            "  {:>6} {:<10} {:>13.4} {:>8} {:>6.1}%",
            row.tvd,
            direction,
            row.mean_row_tvd,
            format!("{}/{}", row.alarms, row.runs),
            row.power * 100.0
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// Each deliberately broken sampler and the check that caught it.
fn mutants(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    writeln!(
        out,
        "{:<20} {:<30} {:<46} {}",
        "mutant".bold(),
        "caught by".bold(),
        "mistake".bold(),
        "first difference".bold()
    )?;
    for m in &r.mutants {
        let caught = if m.caught { m.caught_by.join(", ").green() } else { "SURVIVED".red().bold() };
        let first = m.first_difference.as_ref().map_or("-".to_string(), |d| format!("{} row {}", d.case, d.row));
        writeln!(out, "{:<20} {:<30} {:<46} {first}", m.name, caught, m.description)?;
    }
    writeln!(out)?;
    Ok(())
}

/// Speculative steps: the reference rejection sampler's tests, its gate, its mutants.
fn speculative(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    let s = &r.speculative;
    writeln!(
        out,
        "{} vLLM's rejection sampling vs sampling from the target: {} tests (V = {}), {} requests each, \
         threshold {:.2e}; calibration {}/{} false alarms; power at TVD {}: {:.1}% (all tests), {:.1}% \
         (weakest test alone: {}) ({:.1} s)",
        "speculative steps:".bold(),
        s.tests,
        s.vocab,
        s.draws_per_test,
        s.threshold,
        s.calibration.alarms,
        s.calibration.runs,
        s.power.required_tvd,
        s.power.power_at_required * 100.0,
        s.weakest_test_power * 100.0,
        s.weakest_test,
        s.seconds
    )?;
    writeln!(
        out,
        "{:<38} {:<12} {:>8} {:>8} {}",
        "case".bold(),
        "emitted".bold(),
        "TVD".bold(),
        "p-value".bold(),
        "result".bold()
    )?;
    for t in &s.reference {
        writeln!(
            out,
            "{:<38} {:<12} {:>8.4} {:>8.3} {}",
            t.case,
            speculative_emitted(t.emitted),
            t.observed_tvd,
            t.test.p_value,
            pass_fail(!t.failed)
        )?;
    }
    for m in &s.mutants {
        let shown = match m.caught_by.len() {
            0..=2 => m.caught_by.join(", "),
            n => format!("{} (+{} tests)", m.caught_by[..2].join(", "), n - 2),
        };
        let caught = if m.caught { shown.green() } else { "SURVIVED".red().bold() };
        writeln!(out, "{:<32} {:<46} {caught}", m.name, m.description)?;
    }
    writeln!(out)?;
    Ok(())
}

fn speculative_emitted(emitted: crate::reference::speculative::Emitted) -> &'static str {
    crate::reference::speculative::emitted_name(emitted)
}

/// One row a case.
fn cases(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    writeln!(
        out,
        "{:<40} {:<26} {:>4} {:>5} {:>5} {:>5} {:>4} {:>7} {:>8}",
        "case".bold(),
        "route".bold(),
        "rows".bold(),
        "same".bold(),
        "expl".bold(),
        "diff".bold(),
        "ulps".bold(),
        "coupled".bold(),
        "p-value".bold()
    )?;
    for case in &r.case_results {
        let p = case.statistical.map_or("-".to_string(), |t| format!("{:.3}", t.p_value));
        writeln!(
            out,
            "{:<40} {:<26} {:>4} {:>5} {:>5} {:>5} {:>4} {:>7} {:>8}",
            case.name,
            case.route,
            case.rows,
            case.identical,
            case.explained,
            case.unexplained,
            case.max_ulps,
            case.coupled_mismatches,
            p
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// The verdict line, with the time each part took.
fn verdict(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    let timing = format!(
        "(cases {:.1} s, calibration {:.1} s, power {:.1} s)",
        r.cases_seconds, r.calibration_seconds, r.power_seconds
    );
    match r.verdict {
        Verdict::Equivalent => writeln!(
            out,
            "{} the subset sampler matches stock on every check, speculative steps keep the target's \
             distribution, and the suite rejects all {} mutants {timing}",
            "EQUIVALENT:".green().bold(),
            r.mutants.len() + r.speculative.mutants.len()
        )?,
        Verdict::NotEquivalent => {
            writeln!(out, "{} fails: {} {timing}", "NOT EQUIVALENT:".red().bold(), not_equivalent(r).join(", "))?
        }
        Verdict::SuiteBroken => writeln!(out, "{} {} {timing}", "SUITE BROKEN:".red().bold(), suite_problem(r))?,
    }
    Ok(())
}

/// What failed, in words: the subset sampler's checks, the speculative tests.
fn not_equivalent(r: &SuiteReport) -> Vec<String> {
    let mut failed: Vec<String> = r.subset.failed().iter().map(|c| format!("the subset sampler's {c} check")).collect();
    for t in r.speculative.reference.iter().filter(|t| t.failed) {
        failed.push(format!("speculative {} ({})", t.case, speculative_emitted(t.emitted)));
    }
    failed
}

/// Why the suite cannot be trusted, in words.
fn suite_problem(r: &SuiteReport) -> String {
    let s = &r.speculative;
    let survivors: Vec<&str> = r
        .mutants
        .iter()
        .filter(|m| !m.caught)
        .map(|m| m.name)
        .chain(s.mutants.iter().filter(|m| !m.caught).map(|m| m.name))
        .collect();
    let mut problems = Vec::new();
    if !s.power.ok {
        problems.push(format!(
            "the speculative gate catches a total variation of {} in only {:.1}% of runs (required {:.0}%)",
            s.power.required_tvd,
            s.power.power_at_required * 100.0,
            s.power.required_power * 100.0
        ));
    }
    if s.weakest_test_power < s.power.required_power {
        problems.push(format!(
            "the speculative test {} alone catches a total variation of {} in only {:.1}% of runs",
            s.weakest_test,
            s.power.required_tvd,
            s.weakest_test_power * 100.0
        ));
    }
    if !s.calibration.ok {
        problems.push(format!(
            "the speculative gate alarms on the exact laws in {:.1}% of runs",
            s.calibration.false_alarm_rate * 100.0
        ));
    }
    if !survivors.is_empty() {
        problems.push(format!("mutants survived every check: {}", survivors.join(", ")));
    }
    if !r.power.ok {
        problems.push(format!(
            "the statistical gate catches a total variation of {} in only {:.1}% of runs (required {:.0}%)",
            r.power.required_tvd,
            r.power.power_at_required * 100.0,
            r.power.required_power * 100.0
        ));
    }
    if !r.calibration.ok {
        problems.push(format!(
            "the statistical gate alarms on stock itself in {:.1}% of runs",
            r.calibration.false_alarm_rate * 100.0
        ));
    }
    problems.join("; ")
}

fn annotations(out: &mut impl Write, r: &SuiteReport) -> Result<()> {
    for failed in not_equivalent(r) {
        writeln!(out, "::error title=gaudi-fixes equiv::fails {failed}")?;
    }
    if r.verdict == Verdict::SuiteBroken {
        writeln!(out, "::error title=gaudi-fixes equiv::{}", suite_problem(r))?;
    }
    Ok(())
}
