//! `show`'s report: one fix's manifest summary, release variants and README, or its JSON.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;

use super::{github, json, Document};
use crate::catalog::{Catalog, Fix};

/// `show`'s document: `fix` of `catalog`.
pub struct Show<'a> {
    pub catalog: &'a Catalog,
    pub fix: &'a Fix,
}

impl Document for Show<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let (catalog, fix) = (self.catalog, self.fix);
        let name = &fix.manifest.name;
        let readme_path = fix.dir.join("README.md");
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"schema": json::SCHEMA, "command": "show", "manifest": fix.manifest, "required_by": catalog.required_by(name), "profiles": catalog.profiles_selecting(name), "readme": catalog.files.display(&readme_path)}),
        )?;
        writeln!(out)?;
        Ok(())
    }

    /// One notice at the fix's manifest: what it is, its releases and profiles.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let (catalog, m) = (self.catalog, &self.fix.manifest);
        let releases: Vec<String> = self
            .fix
            .variants
            .iter()
            .map(|v| if v.upstreamed { format!("{} (upstreamed)", v.release) } else { v.release.clone() })
            .collect();
        let profiles = catalog.profiles_selecting(&m.name);
        let message = format!(
            "gaudi-fixes show: {} ({}): {}; releases: {}; profiles: {}",
            m.name,
            m.kind,
            m.summary.trim(),
            releases.join(", "),
            if profiles.is_empty() { "-".to_string() } else { profiles.join(", ") }
        );
        github::annotation(out, "notice", Some(&catalog.files.display(&self.fix.dir.join("fix.yaml"))), &message)
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        let (catalog, fix) = (self.catalog, self.fix);
        let readme_path = fix.dir.join("README.md");
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
}

/// `show --readme`'s document: the fix's README (`path` as the catalogue names it), as it is.
pub struct Readme<'a> {
    pub fix: &'a str,
    pub path: &'a str,
    pub text: &'a str,
}

impl Document for Readme<'_> {
    fn human(&self, out: &mut dyn Write) -> Result<()> {
        out.write_all(self.text.as_bytes())?;
        Ok(())
    }

    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let doc = serde_json::json!({"schema": json::SCHEMA, "command": "show", "fix": self.fix, "readme": self.path, "text": self.text});
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let title = self.text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().trim_start_matches('#').trim();
        let message =
            format!("gaudi-fixes show: {}'s README ({} line(s)): {title}", self.fix, self.text.lines().count());
        github::annotation(out, "notice", Some(self.path), &message)
    }
}
