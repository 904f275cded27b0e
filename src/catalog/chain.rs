//! The chain simulator: fixes made on top of each other (`after:`, `requires:`) are judged and
//! applied in one forward pass, in catalogue order ([`Catalog::chain`], [`Catalog::order`]),
//! on the text of a [`TextSource`] — a tree's in-memory copy (`plan`'s workspace: every
//! command's states) or a release's pristine files (`lint --upstream`, `port`, `record`).
//! What a fix reads as on that text is the judge's to say (the full verdict in `plan`, the
//! release's variant here); how a variant's patches go onto the text is this module's, once.
//!
//! [`Catalog::chain`]: super::Catalog::chain
//! [`Catalog::order`]: super::Catalog::order

use anyhow::Result;

use super::catalog::{Fix, Variant};
use crate::patch::state;
use crate::patch::SourceText;
use crate::tree::TreeName;

/// Where a chain reads and edits the text of a fix's files.
pub trait TextSource {
    /// `file` of `tree` as the chain has it so far; `None` when the source does not hold it
    /// (a file of another release, a tree left out).
    fn text(&mut self, tree: TreeName, file: &str) -> Result<Option<&mut SourceText>>;

    /// `fix` has edited `file` (reached as `tree`/`file`) on this source.
    fn edited(&mut self, _tree: TreeName, _file: &str, _fix: &str) {}
}

/// A patch that does not go onto the text it is applied to (or reverted from) in a chain.
#[derive(Debug)]
pub struct NotTaken {
    pub fix: String,
    pub file: String,
    pub forward: bool,
}

impl std::fmt::Display for NotTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.forward { "apply" } else { "revert" };
        write!(f, "{}: the patch of {} does not {how} here", self.file, self.fix)
    }
}

impl std::error::Error for NotTaken {}

/// Apply (`forward`) or revert `variant`'s patches (of `fix`) on the files `source` holds: the
/// one place a chain edits text. A patch that does not go onto its file is a [`NotTaken`].
pub fn edit(source: &mut dyn TextSource, variant: &Variant, forward: bool, fix: &str) -> Result<()> {
    for vp in &variant.patches {
        let Some(text) = source.text(vp.tree, &vp.file)? else { continue };
        let eval = state::evaluate(&vp.diff, text);
        let edited = if forward { state::apply(&vp.diff, text, &eval) } else { state::revert(&vp.diff, text, &eval) };
        *text = edited.ok_or_else(|| NotTaken { fix: fix.to_string(), file: vp.file.clone(), forward })?;
        source.edited(vp.tree, &vp.file, fix);
    }
    Ok(())
}

/// One forward pass over `fixes` (in the order given): each judged on `source` by `judge`,
/// which says its verdict and, when the fix is to be applied in the chain, its variant; that
/// variant is applied on `source` before the next fix is judged. The verdicts, in order.
pub fn forward<'c, S: TextSource, V>(
    fixes: &[&'c Fix],
    source: &mut S,
    mut judge: impl FnMut(&'c Fix, &mut S) -> Result<(V, Option<&'c Variant>)>,
) -> Result<Vec<V>> {
    let mut out = Vec::new();
    for fix in fixes {
        let (verdict, simulate) = judge(fix, source)?;
        if let Some(variant) = simulate {
            edit(source, variant, true, &fix.manifest.name)?;
        }
        out.push(verdict);
    }
    Ok(out)
}

/// One pristine file of a release, as a text source: the other files of the catalogue are not
/// in it.
pub struct PristineFile {
    pub file: String,
    pub text: SourceText,
}

impl TextSource for PristineFile {
    fn text(&mut self, _tree: TreeName, file: &str) -> Result<Option<&mut SourceText>> {
        Ok((file == self.file).then_some(&mut self.text))
    }
}

/// The variant of `fix` for `release` (with patches), when it has one.
pub fn release_variant<'f>(fix: &'f Fix, release: &str) -> Option<&'f Variant> {
    fix.variants.iter().find(|v| super::manifest::same_release(&v.release, release) && !v.upstreamed)
}
