//! Output of `gaudi-fixes bench`: a table of median times and ratios per shape, the targets,
//! or the JSON document (`--format json`, the serialised [`BenchReport`] after a `schema`
//! field).

use std::io::Write;

use anyhow::{Context, Result};
use colored::Colorize;

use super::{Document, Output};
use crate::reference::bench::BenchReport;

pub use super::progress::Progress;

impl Progress {
    /// Shape B × V is being measured.
    pub fn shape(&mut self, batch: i64, vocab: i64) {
        self.draw(&format!("bench: B={batch} V={vocab}"));
    }
}

/// Print the benchmark in the chosen format (nothing with `--quiet`).
pub fn print(output: Output, report: &BenchReport) -> Result<()> {
    super::emit_document(output, &Bench(report))
}

/// `bench`'s document.
struct Bench<'a>(&'a BenchReport);

impl Document for Bench<'_> {
    fn human(&self, mut out: &mut dyn Write) -> Result<()> {
        human(&mut out, self.0)
    }

    fn json(&self, out: &mut dyn Write) -> Result<()> {
        serde_json::to_writer_pretty(&mut *out, &super::equiv::WithSchema::new(self.0))
            .context("writing the JSON report")?;
        writeln!(out)?;
        Ok(())
    }

    /// A warning for each target not met; a notice with each target's value.
    fn github(&self, out: &mut dyn Write) -> Result<()> {
        let r = self.0;
        let mut said = Vec::new();
        for target in &r.targets {
            let value = target.value.map_or("not measured".to_string(), |v| format!("{v:.2}x"));
            if target.met == Some(false) {
                super::github::annotation(
                    out,
                    "warning",
                    None,
                    &format!("gaudi-fixes bench: target not met: {}: {value}", target.name),
                )?;
            }
            said.push(format!("{}: {value}", target.name));
        }
        let message = format!(
            "gaudi-fixes bench: vLLM {} stock vs subset (K={}), {} shape(s), libtorch CPU (HPU speed not measured): {}",
            r.release,
            r.window,
            r.shapes.len(),
            said.join("; ")
        );
        super::github::annotation(out, "notice", None, &message)
    }
}

fn human(out: &mut impl Write, r: &BenchReport) -> Result<()> {
    times(out, r)?;
    writeln!(out)?;
    tie_completion(out, r)?;
    writeln!(out)?;
    targets(out, r)
}

/// The heading and each shape's times and ratios.
fn times(out: &mut impl Write, r: &BenchReport) -> Result<()> {
    writeln!(
        out,
        "{} vLLM {} stock vs subset (K={}), libtorch CPU, {} threads, top_k ≤ {}, top_p {}, median of {}",
        "gaudi-fixes bench:".bold(),
        r.release,
        r.window,
        r.torch_threads,
        r.top_k,
        r.top_p,
        r.repeats
    )?;
    writeln!(
        out,
        "{:>4} {:>7} {:>10} {:>10} {:>11} {:>9} {:>10} {:>10} {:>13} {:>12} {:>9} {:>9}",
        "B",
        "V",
        "stock ms",
        "subset ms",
        "topk(K) ms",
        "amax ms",
        "+sel ms",
        "+supp ms",
        "stock/subset",
        "subset/topk",
        "sel/off",
        "supp/off"
    )?;
    for s in &r.shapes {
        let (t, x) = (&s.median_ms, &s.ratios);
        writeln!(
            out,
            "{:>4} {:>7} {:>10.2} {:>10.2} {:>11.2} {:>9.2} {:>10.2} {:>10.2} {:>12.1}x {:>11.2}x {:>8.2}x {:>8.2}x",
            s.batch,
            s.vocab,
            t.stock,
            t.subset,
            t.topk,
            t.floor_amax,
            t.subset_masks_selected,
            t.subset_masks_support,
            x.stock_over_subset,
            x.subset_over_topk,
            x.masks_selected_over_off,
            x.masks_support_over_off
        )?;
    }
    Ok(())
}

/// Before and after the tie completion: v2 against v1 and the floors.
fn tie_completion(out: &mut impl Write, r: &BenchReport) -> Result<()> {
    writeln!(out, "before and after the tie completion (subset = v2, exact ties; v1 = subset-v1, no tie completion):")?;
    writeln!(
        out,
        "{:>4} {:>7} {:>10} {:>10} {:>13} {:>9} {:>12} {:>9} {:>12} {:>9} {:>10}",
        "B",
        "V",
        "subset ms",
        "v1 ms",
        "stock/subset",
        "stock/v1",
        "subset/topk",
        "v1/topk",
        "subset/amax",
        "v1/amax",
        "subset/v1"
    )?;
    for s in &r.shapes {
        let (t, x) = (&s.median_ms, &s.ratios);
        writeln!(
            out,
            "{:>4} {:>7} {:>10.2} {:>10.2} {:>12.1}x {:>8.1}x {:>11.2}x {:>8.2}x {:>11.2}x {:>8.2}x {:>9.2}x",
            s.batch,
            s.vocab,
            t.subset,
            t.subset_v1,
            x.stock_over_subset,
            x.stock_over_subset_v1,
            x.subset_over_topk,
            x.subset_v1_over_topk,
            x.subset_over_amax,
            x.subset_v1_over_amax,
            x.subset_over_subset_v1
        )?;
    }
    for s in &r.shapes {
        writeln!(
            out,
            "B={} V={}: SAMPLER_V2.md's literal member counting (full [B,V] int32 cumsum, (cs <= j).sum): \
             {:.2} ms, {:.1}x faster than stock, {:.2}x v1 (the subset above counts per block: same numbers)",
            s.batch,
            s.vocab,
            s.median_ms.subset_full_cumsum,
            s.ratios.stock_over_subset_full_cumsum,
            s.ratios.subset_full_cumsum_over_subset_v1
        )?;
    }
    Ok(())
}

/// Each target, met or not, and what the numbers are.
fn targets(out: &mut impl Write, r: &BenchReport) -> Result<()> {
    for target in &r.targets {
        let (value, state) = match (target.value, target.met) {
            (Some(v), Some(true)) => (format!("{v:.2}x"), "met".green()),
            (Some(v), Some(false)) => (format!("{v:.2}x"), "NOT MET".red().bold()),
            _ => ("-".to_string(), "not measured (shape not run)".yellow()),
        };
        writeln!(out, "target: {}: {value} {state}", target.name)?;
    }
    writeln!(
        out,
        "(+sel / +supp: the subset call with sampling masks captured in selected / support mode; \
         without masks nothing is captured. CPU times on this machine; HPU speed is not measured here.)"
    )?;
    Ok(())
}
