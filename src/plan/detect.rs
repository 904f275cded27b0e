//! Content-based `upstreamed`: an `upstreamed: true` release with `detect:` entries is chosen
//! when the tree holds every entry's text (upstream's post-image) as code — not in a comment or
//! a string ([`contains_code`]) — whatever the version hint says, so a tree that already
//! carries upstream's change is not patched a second time. `lint` makes sure the entries name
//! every file the fix patches, so half of upstream's change is not taken for all of it.
//!
//! [`contains_code`]: crate::patch::locate::contains_code

use anyhow::Result;

use super::workspace::Workspace;
use crate::catalog::{Fix, Variant};
use crate::discover::Trees;
use crate::tree::TreeFilter;

/// The first `upstreamed: true` release of `fix` whose `detect:` text is all found in the
/// trees, with the sentence that says so; `None` when there is none (or a file or tree it
/// names is missing or left out with `--only-tree`).
pub(super) fn detected<'f>(
    fix: &'f Fix,
    trees: &Trees,
    only: &TreeFilter,
    ws: &mut Workspace,
) -> Result<Option<(&'f Variant, String)>> {
    'variants: for variant in fix.variants.iter().filter(|v| v.upstreamed && !v.detect.is_empty()) {
        for entry in &variant.detect {
            if !only.includes(entry.tree) {
                continue 'variants;
            }
            let Some(tree) = trees.get(entry.tree) else { continue 'variants };
            let Some(loaded) = ws.get(tree, &entry.file)? else { continue 'variants };
            if !crate::patch::locate::contains_code(&loaded.text.lines, &entry.text) {
                continue 'variants;
            }
        }
        let files: Vec<&str> = variant.detect.iter().map(|e| e.file.as_str()).collect();
        let message = format!(
            "the tree carries the upstream fix (release {} in the manifest; its text found in {}); nothing to apply",
            variant.release,
            files.join(", ")
        );
        return Ok(Some((variant, message)));
    }
    Ok(None)
}
