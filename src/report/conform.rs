//! Output of `conform`: a table per feature (schedules that exercised it, differences, the first
//! one as a sentence), as JSON, or as GitHub annotations (one error per feature that differs).

use std::io::Write;

use anyhow::Result;
use colored::Colorize;
use serde::{Deserialize, Serialize};

use super::json::SCHEMA;
use super::Format;
use crate::exit_status::ExitStatus;

/// What the suite printed (its one JSON line).
#[derive(Debug, Deserialize, Serialize)]
pub struct Conformance {
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub schedules: u32,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub seconds: f64,
    /// By feature, in the suite's order.
    #[serde(default)]
    pub features: Vec<Feature>,
    /// The differential reference the suite drove (vLLM's GPU path), when it drove one.
    #[serde(default)]
    pub reference: Option<String>,
    /// Where HPU and vLLM's GPU path differ but the GPU path disagrees with the request itself:
    /// listed, never counted against HPU.
    #[serde(default)]
    pub gpu_disagrees: Vec<GpuDisagrees>,
    /// Set when the suite cannot run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The pip line that installs a missing module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pip: Option<String>,
}

/// One feature's row.
#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct Feature {
    pub name: String,
    pub schedules: u32,
    pub differences: u32,
    pub first: Option<String>,
}

/// One feature in which vLLM's GPU path disagrees with the request.
#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct GpuDisagrees {
    pub name: String,
    pub count: u32,
    pub first: Option<String>,
}

impl Conformance {
    /// Differences over every feature.
    pub fn differences(&self) -> u32 {
        self.features.iter().map(|f| f.differences).sum()
    }
}

/// Print the result in `format`.
pub fn emit(out: &mut dyn Write, format: Format, python: &str, c: &Conformance, status: ExitStatus) -> Result<()> {
    match format {
        Format::Json => {
            let doc = serde_json::json!({
                "schema": SCHEMA,
                "command": "conform",
                "exit_code": status.code(),
                "python": python,
                "root": c.root,
                "schedules": c.schedules,
                "seed": c.seed,
                "seconds": c.seconds,
                "differences": c.differences(),
                "features": c.features,
                "reference": c.reference,
                "gpu_disagrees": c.gpu_disagrees,
            });
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Github => {
            for f in c.features.iter().filter(|f| f.differences > 0) {
                let first = f.first.as_deref().unwrap_or("");
                writeln!(
                    out,
                    "::error title=conform {}::{} difference(s) in {} schedule(s); first: {first}",
                    f.name, f.differences, f.schedules
                )?;
            }
            if c.differences() == 0 {
                writeln!(out, "::notice::conform: {} schedules, no difference", c.schedules)?;
            }
        }
        Format::Human => {
            let root = c.root.as_deref().unwrap_or("?");
            writeln!(out, "conform: {} schedules (seed {}) on {root}, {:.1}s", c.schedules, c.seed, c.seconds)?;
            let width = c.features.iter().map(|f| f.name.len()).max().unwrap_or(7).max(7);
            writeln!(out, "  {:<width$}  schedules  differences  first difference", "feature")?;
            for f in &c.features {
                let first = f.first.as_deref().unwrap_or("-");
                let diffs = if f.differences > 0 { f.differences.to_string().red().to_string() } else { "0".into() };
                let pad = 11usize.saturating_sub(f.differences.to_string().len());
                writeln!(out, "  {:<width$}  {:>9}  {}{diffs}  {first}", f.name, f.schedules, " ".repeat(pad))?;
            }
            for g in &c.gpu_disagrees {
                let first = g.first.as_deref().unwrap_or("-");
                writeln!(
                    out,
                    "  note: {}: vLLM's GPU path disagrees with the request {} time(s) (not counted); first: {first}",
                    g.name, g.count
                )?;
            }
            let total = c.differences();
            if total == 0 {
                writeln!(out, "conform: no difference")?;
            } else {
                writeln!(
                    out,
                    "conform: {total} difference(s): the HPU sampling path does not do what the requests asked"
                )?;
            }
        }
    }
    Ok(())
}
