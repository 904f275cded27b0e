//! `show`'s report: one fix's manifest summary, release variants and README, or its JSON.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use super::{json, Format};
use crate::catalog::{Catalog, Fix};

/// Render `fix` of `catalog` in `format` (GitHub format prints the human text).
pub fn render(out: &mut dyn Write, format: Format, catalog: &Catalog, fix: &Fix) -> Result<()> {
    let name = &fix.manifest.name;
    let readme_path = fix.dir.join("README.md");
    if format == Format::Json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"schema": json::SCHEMA, "command": "show", "manifest": fix.manifest, "required_by": catalog.required_by(name), "profiles": catalog.profiles_selecting(name), "readme": catalog.files.display(&readme_path)}),
        )?;
        writeln!(out)?;
        return Ok(());
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
    Ok(())
}
