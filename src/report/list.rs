//! `list`'s report: the catalogue's fixes (kind, releases, profiles, state) and profiles.

use std::io::Write;

use anyhow::Result;
use colored::Colorize;
use serde::Serialize;

use super::{github, human, json, Document};
use crate::catalog::Catalog;
use crate::discover::Trees;
use crate::plan::FixState;

/// One fix's line: what the catalogue says, and its state when trees were found.
#[derive(Serialize)]
pub struct Row<'a> {
    pub name: &'a str,
    pub kind: String,
    pub summary: &'a str,
    pub releases: Vec<&'a str>,
    /// Profiles selecting the fix, directly or through `include:`.
    pub profiles: Vec<&'a str>,
    pub requires: &'a [String],
    pub after: &'a [String],
    pub state: Option<FixState>,
    pub variant: Option<String>,
}

/// `list`'s document: `catalog`'s fixes (`rows`, in catalogue order) and profiles, on `trees`.
pub struct List<'a> {
    pub catalog: &'a Catalog,
    pub trees: &'a Trees,
    pub rows: &'a [Row<'a>],
}

impl Document for List<'_> {
    fn json(&self, out: &mut dyn Write) -> Result<()> {
        let catalog = self.catalog;
        let profiles: Vec<_> = catalog
            .profiles
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                v["selects"] = serde_json::json!(catalog.profile_fixes(&p.name).ok());
                v
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"schema": json::SCHEMA, "command": "list", "catalog": catalog.files.origin, "fixes": self.rows, "profiles": profiles, "trees": self.trees}),
        )?;
        writeln!(out)?;
        Ok(())
    }

    /// One notice: the catalogue, each fix with its kind (and state, when trees were found), and
    /// the profiles.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let fixes: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let state = r.state.map(|s| format!(" {}", s.words())).unwrap_or_default();
                let variant = r.variant.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default();
                format!("{} ({}){state}{variant}", r.name, r.kind)
            })
            .collect();
        let profiles: Vec<&str> = self.catalog.profiles.iter().map(|p| p.name.as_str()).collect();
        let message = format!(
            "gaudi-fixes list: catalogue {}: {} fix(es): {}; profiles: {}",
            self.catalog.files.origin,
            fixes.len(),
            fixes.join(", "),
            profiles.join(", ")
        );
        github::annotation(out, "notice", None, &message)
    }

    fn human(&self, out: &mut dyn Write) -> Result<()> {
        let (catalog, trees, rows) = (self.catalog, self.trees, self.rows);
        writeln!(out, "catalogue: {}", catalog.files.origin)?;
        human::trees(out, trees)?;
        writeln!(out, "\n{}", "fixes".bold())?;
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(26);
        for row in rows {
            let state = row.state.map_or("-".normal(), human::state_word);
            let variant = row.variant.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default();
            // The column fits the longest name, so a long name never runs into its kind.
            writeln!(out, "  {:<width$} {:<12} {state}{variant}", row.name.bold(), row.kind)?;
            writeln!(out, "      {}", row.summary)?;
            writeln!(
                out,
                "      releases: {}; profiles: {}",
                row.releases.join(", "),
                if row.profiles.is_empty() { "-".into() } else { row.profiles.join(", ") }
            )?;
            let relations: Vec<String> = [("requires", row.requires), ("after", row.after)]
                .iter()
                .filter(|(_, names)| !names.is_empty())
                .map(|(key, names)| format!("{key}: {}", names.join(", ")))
                .collect();
            if !relations.is_empty() {
                writeln!(out, "      {}", relations.join("; "))?;
            }
        }
        writeln!(out, "\n{}", "profiles".bold())?;
        for p in &catalog.profiles {
            let fixes = if p.fixes.is_empty() { "(no fixes)".to_string() } else { p.fixes.join(", ") };
            writeln!(out, "  {:<26} fixes: {fixes}", p.name.bold())?;
            writeln!(out, "      {}", p.description.trim())?;
            if !p.include.is_empty() {
                let selects = catalog.profile_fixes(&p.name).map_or_else(|e| format!("{e:#}"), |f| f.join(", "));
                writeln!(out, "      include: {}; selects: {selects}", p.include.join(", "))?;
            }
        }
        Ok(())
    }
}
