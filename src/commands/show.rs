//! `gaudi-fixes show FIX [--readme]`: the manifest summary, release variants and README.

use std::io::Write;

use anyhow::{Context, Result};
use colored::Colorize;

use crate::catalog::Catalog;
use crate::cli::{Format, GlobalArgs};
use crate::exit_status::ExitStatus;

/// Run `show`.
pub fn run(global: &GlobalArgs, name: &str, readme: bool) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    let fix = catalog.fix(name)?;
    let readme_path = fix.dir.join("README.md");
    if global.quiet {
        return Ok(ExitStatus::Applied);
    }
    let stdout = crate::report::stdout();
    let mut out = stdout.lock();
    if readme {
        let text = catalog.files.text(&readme_path).with_context(|| format!("fix `{name}` has no README.md"))?;
        out.write_all(text.as_bytes())?;
        return Ok(ExitStatus::Applied);
    }
    if global.format == Format::Json {
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({"schema": crate::report::json::SCHEMA, "command": "show", "manifest": fix.manifest, "required_by": catalog.required_by(name), "profiles": catalog.profiles_selecting(name), "readme": catalog.files.display(&readme_path)}),
        )?;
        writeln!(out)?;
        return Ok(ExitStatus::Applied);
    }
    let m = &fix.manifest;
    writeln!(out, "{}  ({})", m.name.bold(), m.kind)?;
    writeln!(out, "  {}", m.summary)?;
    let upstream = serde_json::to_value(m.upstream.status)?.as_str().unwrap_or_default().to_string();
    let url = m.upstream.url.as_deref().map(|u| format!(" {u}")).unwrap_or_default();
    let rel = m.upstream.release.as_deref().map(|r| format!(" in {r}")).unwrap_or_default();
    writeln!(out, "  upstream: {upstream}{url}{rel}")?;
    if !m.requires.is_empty() {
        writeln!(out, "  requires: {} (selected with it, applied first)", m.requires.join(", "))?;
    }
    let required_by = catalog.required_by(&m.name);
    if !required_by.is_empty() {
        writeln!(out, "  required by: {} (not reverted while they are applied)", required_by.join(", "))?;
    }
    if !m.after.is_empty() {
        writeln!(out, "  after: {}", m.after.join(", "))?;
    }
    if !m.conflicts.is_empty() {
        writeln!(out, "  conflicts: {}", m.conflicts.join(", "))?;
    }
    writeln!(out, "  releases:")?;
    for v in &fix.variants {
        if v.upstreamed {
            writeln!(out, "    {}: upstreamed (nothing to apply)", v.release.bold())?;
            continue;
        }
        writeln!(out, "    {}:", v.release.bold())?;
        for p in &v.patches {
            let hunks = p.diff.hunks.len();
            writeln!(
                out,
                "      {:<10} {}  ({}, {hunks} hunk(s), pristine sha256 {}…)",
                p.tree.to_string(),
                p.file,
                p.patch_path.display(),
                &p.pristine_sha256[..12]
            )?;
        }
    }
    if !m.tests.is_empty() {
        writeln!(
            out,
            "  tests: {}",
            m.tests.iter().map(|t| fix.dir.join(t).display().to_string()).collect::<Vec<_>>().join(", ")
        )?;
    }
    let builtin = if catalog.files.dir.is_none() { " (built in; print it with --readme)" } else { "" };
    writeln!(out, "  README: {}{builtin}", catalog.files.display(&readme_path))?;
    Ok(ExitStatus::Applied)
}
