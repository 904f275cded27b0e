//! `gaudi-fixes record FIX --release NAME --pristine DIR --edited DIR [--file PATH…]`: make or
//! refresh a variant from a hand-edited tree (patch-package's and quilt's main workflow). For
//! each file (default: those the fix's variants patch), the difference between the pristine
//! and the edited copy becomes the variant's patch, with anchors and unique images, checked to
//! reproduce the edited bytes exactly; the entry goes into the directory catalogue's fix.yaml.

use anyhow::{bail, Result};

use crate::catalog::Catalog;
use crate::exit_status::ExitStatus;
use crate::report::upkeep as upkeep_report;
use crate::settings::{RecordArgs, Settings};
use crate::tree::TreeName;
use crate::upkeep::{self, upstream, NewFile};

/// The files a fix's variants patch, with their trees, in manifest order.
pub fn fix_files(fix: &crate::catalog::Fix) -> Vec<(TreeName, String)> {
    let mut out: Vec<(TreeName, String)> = Vec::new();
    for v in &fix.variants {
        for p in &v.patches {
            if !out.iter().any(|(_, f)| *f == p.file) {
                out.push((p.tree, p.file.clone()));
            }
        }
    }
    out
}

/// Run `record`.
pub fn run(global: &Settings, args: &RecordArgs) -> Result<ExitStatus> {
    let dir = upkeep::writable_catalog(global.catalog.as_deref(), "record")?;
    let _lock = upkeep::lock_catalog(&dir)?;
    let catalog = Catalog::load(Some(&dir))?;
    let fix = catalog.fix(&args.fix)?;
    let release = upstream::release_tag(&args.release)?;
    for (flag, path) in [("--pristine", &args.pristine), ("--edited", &args.edited)] {
        if !path.is_dir() {
            bail!("{flag} {}: no such directory", path.display());
        }
    }
    let files: Vec<(TreeName, String)> = if args.files.is_empty() {
        fix_files(fix)
    } else {
        let mut v = Vec::new();
        for f in &args.files {
            crate::catalog::manifest::check_relative(f).map_err(|e| anyhow::anyhow!("--file: {e}"))?;
            let tree = TreeName::ALL
                .into_iter()
                .find(|t| f.starts_with(&format!("{}/", t.as_str())))
                .ok_or_else(|| anyhow::anyhow!("--file {f}: must start with vllm/ or vllm_gaudi/"))?;
            v.push((tree, f.clone()));
        }
        v
    };
    let mut new_files = Vec::new();
    for (tree, file) in files {
        let in_pristine = args.pristine.join(tree.as_str()).is_dir();
        let in_edited = args.edited.join(tree.as_str()).is_dir();
        if !in_pristine && !in_edited {
            continue; // That tree is not part of these directories: not recorded.
        }
        refuse_larger_than_apply_reads(&args.pristine, &file, "--pristine")?;
        refuse_larger_than_apply_reads(&args.edited, &file, "--edited")?;
        let pristine = upkeep::read_in(&args.pristine, &file, "--pristine")?;
        let patched = upkeep::read_in(&args.edited, &file, "--edited")?;
        new_files.push(NewFile { tree, file, pristine, patched, reuse: None, base: None, context: None });
    }
    if new_files.is_empty() {
        bail!(
            "neither --pristine nor --edited holds a tree (vllm/ or vllm_gaudi/) with a file {} patches",
            fix.manifest.name
        );
    }
    let written = upkeep::write_variant(&dir, &catalog, fix, &release, &new_files)?;
    let doc = upkeep_report::WrittenDoc {
        catalog: global.catalog.as_deref(),
        fix: &fix.manifest.name,
        written: &written,
        command: "record",
        how: &[],
    };
    crate::report::emit_document(global.output(), &doc)?;
    Ok(ExitStatus::Applied)
}

/// A variant `apply` could never use is not recorded: `apply` refuses a source file over
/// [`crate::plan::MAX_FILE_BYTES`] (16 MiB), so `record` refuses it too, before anything is read
/// or written.
fn refuse_larger_than_apply_reads(root: &std::path::Path, file: &str, flag: &str) -> Result<()> {
    let path = root.join(file);
    let Ok(meta) = std::fs::metadata(&path) else { return Ok(()) }; // Reading it says why.
    if meta.len() > crate::plan::MAX_FILE_BYTES {
        bail!(
            "{flag} {}: {} bytes is larger than the {} MiB apply reads of a source file; refusing (nothing was written)",
            path.display(),
            meta.len(),
            crate::plan::MAX_FILE_BYTES >> 20
        );
    }
    Ok(())
}
