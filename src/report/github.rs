//! GitHub Actions annotations (`::error file=…,line=…::…`), so drift shows on the PR.

use std::io::Write;

use anyhow::Result;

use super::Mode;
use crate::error::Located;
use crate::patch::HunkState;
use crate::plan::{Advice, FileOutcome, FixReport, FixState};

/// Annotations for every finding in `reports`; `check` makes not-applied a warning. The
/// commands they name are written with `invocation` (the run's catalogue and tree flags).
pub fn print(
    out: &mut dyn Write,
    reports: &[FixReport],
    check: bool,
    passed: bool,
    invocation: &super::advice::Invocation,
) -> Result<()> {
    for r in reports {
        // The reason first, with its next step: on a PR it says why before the details. A
        // run that passed says its notes in its one summary notice.
        if let Some(reason) = r.reason.as_ref().filter(|reason| !(passed && reason.note)) {
            let level = if reason.note { "notice" } else { "error" };
            let file = r
                .files
                .iter()
                .find(|f| f.reason.is_some())
                .and_then(|f| f.tree_root.as_ref().map(|root| root.join(&f.path).display().to_string()));
            let at = file.map_or(String::new(), |f| format!(" file={}", escape_prop(&f)));
            writeln!(
                out,
                "::{level}{at}::{}",
                escape(&format!("{}: {}. Next: {}", r.name, reason.message.trim_end_matches('.'), reason.next_step))
            )?;
        }
        match r.state {
            FixState::Drifted => {
                for f in &r.files {
                    let file =
                        f.tree_root.as_ref().map_or(f.path.clone(), |root| root.join(&f.path).display().to_string());
                    if f.state == FileOutcome::Missing {
                        writeln!(
                            out,
                            "::error file={}::{}: file missing from the tree",
                            escape_prop(&file),
                            escape(&r.name)
                        )?;
                    }
                    for h in &f.hunks {
                        if let HunkState::Drifted { nearest_line, reason, .. } = &h.state {
                            let line = nearest_line.unwrap_or(h.header_line);
                            writeln!(
                                out,
                                "::error file={},line={line}::{}",
                                escape_prop(&file),
                                escape(&format!(
                                    "{}: hunk {} ({}:{}) drifted: {reason}; run `{}`",
                                    r.name,
                                    h.index,
                                    f.patch,
                                    h.patch_line,
                                    super::advice::command(&Advice::Diff { fix: r.name.clone() }, invocation)
                                ))
                            )?;
                        }
                    }
                }
            }
            FixState::Error => {
                writeln!(
                    out,
                    "::error::{}",
                    escape(&format!("{}: {}", r.name, r.message.as_deref().unwrap_or("error")))
                )?;
            }
            FixState::NotApplied if check => {
                writeln!(out, "::warning::{}", escape(&format!("{}: not applied", r.name)))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// One line when the run ended well, so a green step still says what it saw (the findings
/// above carry everything else), in the words of what the run did: only `apply` and `revert`
/// write, and a fix that is not applied after the run is never part of a pass notice (a
/// reader's summary that names one is a warning).
pub fn summary(
    out: &mut dyn Write,
    mode: Mode,
    status: crate::exit_status::ExitStatus,
    reports: &[FixReport],
    written: usize,
    would_write: usize,
) -> Result<()> {
    if status != crate::exit_status::ExitStatus::Applied {
        return Ok(());
    }
    // Nothing selected (a revert with nothing applied, an empty profile): one notice still says
    // so, as the other formats' one-line no-op does.
    if reports.is_empty() {
        let what = match mode {
            Mode::Check => "check passed: no fix selected",
            Mode::Apply | Mode::Revert | Mode::DryRun => "nothing to do: already in the requested state",
            Mode::Status | Mode::Diff => return Ok(()),
        };
        let command = match mode {
            Mode::Revert => "revert",
            Mode::DryRun => "dry run",
            Mode::Check => "apply --check",
            _ => "apply",
        };
        writeln!(out, "::notice::{}", escape(&format!("gaudi-fixes: {command}: {what}")))?;
        return Ok(());
    }
    let all_skipped = reports.iter().all(|r| r.state == FixState::Skipped);
    // Each fix as the run leaves it: an apply that passed applied what was not applied yet.
    let word = |state: FixState| match (mode, state) {
        (Mode::Apply, FixState::NotApplied) => "applied now",
        (Mode::Apply, FixState::Applied) => "already applied",
        (Mode::Revert, FixState::Applied) => "reverted now",
        (Mode::Revert, FixState::NotApplied) => "already not applied",
        (Mode::DryRun, FixState::NotApplied) => "would be applied",
        (_, state) => state.words(),
    };
    let names: Vec<String> = reports.iter().map(|r| format!("{} {}", r.name, word(r.state))).collect();
    let unverified = reports.iter().filter(|r| r.reason.as_ref().is_some_and(|x| x.note)).count();
    let unverified = if unverified == 0 || matches!(mode, Mode::Status | Mode::Diff) {
        String::new()
    } else {
        format!(" ({unverified} on a release its variant was not verified on: `-v` or the human report says which)")
    };
    let (kind, what) = match mode {
        Mode::Check if all_skipped => {
            ("notice", "nothing checked: every selected fix is skipped by --only-tree".to_string())
        }
        Mode::Check => ("notice", "check passed".to_string()),
        Mode::Apply => ("notice", format!("apply: {written} file(s) written")),
        Mode::Revert => ("notice", format!("revert: {written} file(s) written")),
        Mode::DryRun => ("notice", format!("dry run: {would_write} file(s) would be written")),
        Mode::Status | Mode::Diff => {
            let all_in = reports.iter().all(|r| !matches!(r.state, FixState::NotApplied));
            let command = if mode == Mode::Status { "status" } else { "diff" };
            (if all_in { "notice" } else { "warning" }, command.to_string())
        }
    };
    writeln!(out, "::{kind}::{}", escape(&format!("gaudi-fixes: {what}: {}{unverified}", names.join(", "))))?;
    Ok(())
}

/// A check that failed because fixes are not applied: one error saying what to run (the
/// per-fix warnings above say which).
pub fn check_failed(out: &mut dyn Write, reports: &[FixReport], invocation: &super::advice::Invocation) -> Result<()> {
    let missing: Vec<String> =
        reports.iter().filter(|r| r.state == FixState::NotApplied).map(|r| r.name.clone()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let run = super::advice::command(&Advice::Apply { fixes: missing.clone() }, invocation);
    let message = format!("gaudi-fixes: check failed: {} fix(es) not applied; run `{run}`", missing.len());
    command(out, "error", &[], &message)
}

/// The error that ended the run (`message`: its chain written out), as an annotation at the
/// file and line a [`Located`] error in its chain names (if any).
pub fn run_error(out: &mut dyn Write, err: &anyhow::Error, message: &str) -> Result<()> {
    let mut at = String::new();
    if let Some(place) = Located::find(err) {
        at.push_str(&format!(" file={}", escape_prop(&place.file.display().to_string())));
        if let Some(line) = place.line {
            at.push_str(&format!(",line={line}"));
        }
    }
    writeln!(out, "::error{at}::{}", escape(&format!("gaudi-fixes: {message}")))?;
    Ok(())
}

/// An error that ended the run, as an annotation.
pub fn error(out: &mut dyn Write, message: &str) -> Result<()> {
    writeln!(out, "::error::{}", escape(message))?;
    Ok(())
}

/// One annotation: `level` (`notice`, `warning`, `error`), at `file` when given.
pub fn annotation(out: &mut dyn Write, level: &str, file: Option<&str>, message: &str) -> Result<()> {
    let props: Vec<(&str, &str)> = file.map(|f| ("file", f)).into_iter().collect();
    command(out, level, &props, message)
}

/// One workflow command `::level key=value,…::message`, escaped as GitHub's rules require:
/// `%`, CR and LF in the message and the values, `:` and `,` in the values too (a message of
/// several lines stays one annotation).
pub fn command(out: &mut dyn Write, level: &str, props: &[(&str, &str)], message: &str) -> Result<()> {
    let props: Vec<String> = props.iter().map(|(k, v)| format!("{k}={}", escape_prop(v))).collect();
    let at = if props.is_empty() { String::new() } else { format!(" {}", props.join(",")) };
    writeln!(out, "::{level}{at}::{}", escape(message))?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_prop(s: &str) -> String {
    escape(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_escapes_its_message_and_properties_as_githubs_rules_require() {
        let mut out = Vec::new();
        command(&mut out, "error", &[("title", "conform min_p (a, b): x"), ("file", "f")], "100% off\r\nsecond: line")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "::error title=conform min_p (a%2C b)%3A x,file=f::100%25 off%0D%0Asecond: line\n"
        );
    }
}
