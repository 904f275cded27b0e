//! A fix's one state: judged on the tree as its predecessors leave it. Fixes are made on top
//! of each other (`after:` / `requires:`): judged alone on a pristine file, a later fix's
//! context (an earlier fix's post-image) is missing and it would read drifted.
//!
//! So a selection is judged in one forward pass: the selection with every fix it comes after
//! ([`Catalog::chain`]), in catalogue order, on one in-memory copy of the tree; each fix is
//! judged there, and one found not applied is applied to the copy (as `apply --check` does)
//! before the next. A fix still not clean there is judged on the tree as it is, then under the
//! fixes made on top of it that are applied (reverted in memory, latest first), and only what
//! none of these explains is drift. Judgements are memoised by the text of the files a fix
//! reads, so judging a fix again on text it was judged on (the tree as it is, when the pass
//! left its files alone; `apply`'s own simulation) costs nothing: [`Chain::evaluate`] is the
//! one judge every verdict of a run comes from.
//!
//! Every command reads its states from [`Chain::judge`]; `apply` and `revert` then only plan
//! the edits (in `super::plan`), with these states as the verdicts.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use anyhow::Result;

use super::evaluate::{edit_variant, evaluate};
use super::verdict::{Advice, FixReport, FixState, Recorded};
use super::workspace::{OnTrees, Workspace};
use crate::catalog::chain::forward;
use crate::catalog::{Catalog, Fix, Variant};
use crate::discover::Trees;
use crate::tree::{TreeFilter, TreeName};

/// How the message of a fix applied on top of fixes not applied in the tree begins.
const ON_UNDONE: &str = "applied on top of ";

/// Whether `report` is of a fix applied on top of fixes not applied in the tree (undone since).
pub(super) fn on_undone(report: &FixReport) -> bool {
    report.message.as_deref().is_some_and(|m| m.starts_with(ON_UNDONE))
}

/// A verdict with the variant to edit when it is clean.
pub(super) type Judged<'f> = (FixReport, Option<&'f Variant>);

/// The one judge of a run: the catalogue's relations walked once, every judgement memoised.
pub(super) struct Chain<'c> {
    catalog: &'c Catalog,
    trees: &'c Trees,
    only: &'c TreeFilter,
    recorded: &'c Recorded,
    /// Each fix's predecessors (what it requires or comes after, transitively), walked once.
    before: BTreeMap<String, Vec<String>>,
    /// (fix, the text of the files it reads) → its verdict there.
    memo: HashMap<(String, u64), Judged<'c>>,
}

impl<'c> Chain<'c> {
    pub(super) fn new(catalog: &'c Catalog, trees: &'c Trees, only: &'c TreeFilter, recorded: &'c Recorded) -> Self {
        Chain { catalog, trees, only, recorded, before: BTreeMap::new(), memo: HashMap::new() }
    }

    /// The catalogue judged.
    pub(super) fn catalog(&self) -> &'c Catalog {
        self.catalog
    }

    /// The fixes `name` comes after, transitively, sorted.
    pub(super) fn predecessors(&mut self, name: &str) -> Result<&[String]> {
        if !self.before.contains_key(name) {
            let found = self.catalog.predecessors(name)?;
            self.before.insert(name.to_string(), found);
        }
        Ok(&self.before[name])
    }

    /// `fix` judged on `ws`: once per text of the files it reads.
    pub(super) fn evaluate(&mut self, fix: &'c Fix, ws: &mut Workspace) -> Result<Judged<'c>> {
        let key = (fix.manifest.name.clone(), self.text_key(fix, ws));
        if let Some(known) = self.memo.get(&key) {
            return Ok(known.clone());
        }
        count_judgement();
        let judged = evaluate(self.catalog, fix, self.trees, self.only, self.recorded, ws)?;
        self.memo.insert(key, judged.clone());
        Ok(judged)
    }

    /// A digest of the text `fix` would read in `ws`: every file its variants patch or
    /// detect, as the copy holds it (a file that cannot be read counts as such; judging it
    /// says why).
    fn text_key(&self, fix: &Fix, ws: &mut Workspace) -> u64 {
        let mut hasher = DefaultHasher::new();
        for (tree, file) in files_read(fix) {
            (tree, file).hash(&mut hasher);
            let Some(found) = self.trees.get(tree).filter(|_| self.only.includes(tree)) else {
                0u8.hash(&mut hasher);
                continue;
            };
            match ws.get(found, file) {
                Ok(Some(loaded)) => (1u8, &loaded.path, &loaded.text.lines, &loaded.text.eols).hash(&mut hasher),
                Ok(None) => 2u8.hash(&mut hasher),
                Err(_) => 3u8.hash(&mut hasher),
            }
        }
        hasher.finish()
    }

    /// The state of each of `fixes` (in the order given), each on the tree as its
    /// predecessors leave it, from one forward pass; with the variant to edit when it is clean.
    pub(super) fn judge(&mut self, fixes: &[&'c Fix], base: &mut Workspace) -> Result<Vec<Judged<'c>>> {
        let names: Vec<String> = fixes.iter().map(|f| f.manifest.name.clone()).collect();
        let (catalog, trees, only) = (self.catalog, self.trees, self.only);
        let mut copy = base.clone();
        let mut source = OnTrees { ws: &mut copy, trees, only };
        let mut simulated: Vec<&'c str> = Vec::new();
        // Fixes judged on a chain of their own, left out of the pass (as are, then, the fixes
        // made on top of them).
        let mut apart: Vec<&'c str> = Vec::new();
        let pass = catalog.chain(&names)?;
        let on_chain = forward(&pass, &mut source, |fix, source| {
            let before = self.predecessors(&fix.manifest.name)?.to_vec();
            let name = fix.manifest.name.as_str();
            if edited_by_others(fix, &before, source) || apart.iter().any(|a| before.iter().any(|b| b == a)) {
                // A fix it does not come after edited its files in the pass (or one it comes
                // after is judged apart): its chain is its own.
                apart.push(name);
                return Ok(((name, self.own_chain(fix, &before, base)?), None));
            }
            let missing = simulated.iter().copied().filter(|n| before.iter().any(|b| b == n)).collect();
            let judged = self.evaluate(fix, source.ws)?;
            let simulate = match judged {
                (FixReport { state: FixState::NotApplied, .. }, Some(variant)) => {
                    simulated.push(name);
                    Some(variant)
                }
                _ => None,
            };
            Ok(((name, (judged, missing)), simulate))
        })?;
        let mut on_chain: BTreeMap<&str, (Judged<'c>, Vec<&str>)> = on_chain.into_iter().collect();
        let mut out = Vec::new();
        for fix in fixes {
            let (judged, missing) = on_chain.remove(fix.manifest.name.as_str()).expect("the pass judged the selection");
            out.push(self.settle(fix, judged, &missing, base)?);
        }
        Ok(out)
    }

    /// `fix` on the tree with only its own predecessors simulated, in order: what the pass
    /// gives when no other fix edits its files. With the predecessors it applied in memory.
    fn own_chain(&mut self, fix: &'c Fix, before: &[String], base: &Workspace) -> Result<(Judged<'c>, Vec<&'c str>)> {
        let mut ws = base.clone();
        let mut source = OnTrees { ws: &mut ws, trees: self.trees, only: self.only };
        let mut missing = Vec::new();
        forward(&self.catalog.order(before)?, &mut source, |earlier, source| {
            let judged = self.evaluate(earlier, source.ws)?;
            Ok(match judged {
                (FixReport { state: FixState::NotApplied, .. }, Some(variant)) => {
                    missing.push(earlier.manifest.name.as_str());
                    ((), Some(variant))
                }
                _ => ((), None),
            })
        })?;
        Ok((self.evaluate(fix, &mut ws)?, missing))
    }

    /// The verdict on the chain (`on_chain`, with the predecessors it had applied in memory,
    /// `missing`) when it is clean; the tree as it is when that does not give a clean state;
    /// under the fixes made on top of it; drifted (as the chain sees it) when none does.
    fn settle(
        &mut self,
        fix: &'c Fix,
        on_chain: Judged<'c>,
        missing: &[&str],
        base: &mut Workspace,
    ) -> Result<Judged<'c>> {
        // The tree as it is: the same verdict as on the chain whenever nothing was simulated
        // under it (then a memo hit).
        let alone = self.evaluate(fix, base)?;
        if on_chain.0.state != FixState::Drifted {
            let mut on_chain = on_chain;
            // Its edits are in the tree, but made on top of fixes that are not (undone since):
            // say so, and what mends it (`revert` undoes it over them, in memory; `super::plan`).
            if on_chain.0.state == FixState::Applied && alone.0.state != FixState::Applied && !missing.is_empty() {
                on_chain.0.message = Some(format!(
                    "{ON_UNDONE}{}, which {} not applied in the tree (undone since?): `{{0}}` applies {} under it",
                    missing.join(", "),
                    if missing.len() == 1 { "is" } else { "are" },
                    if missing.len() == 1 { "it" } else { "them" },
                ));
                on_chain.0.advice = vec![Advice::Apply { fixes: Vec::new() }];
            }
            return Ok(on_chain);
        }
        if alone.0.state != FixState::Drifted {
            return Ok(alone);
        }
        let under = self.under_applied_successors(fix, base)?;
        Ok(if under.0.state != FixState::Drifted { under } else { on_chain })
    }

    /// The fix judged once the fixes made on top of it (those it comes before) that are applied
    /// are reverted in memory, latest first: a later fix may edit lines of this one's post-image
    /// (its context), and then this one reads applied only underneath it, as `revert` finds it.
    fn under_applied_successors(&mut self, fix: &'c Fix, base: &Workspace) -> Result<Judged<'c>> {
        let name = &fix.manifest.name;
        let mut later = Vec::new();
        for other in self.catalog.fixes.iter().filter(|f| f.manifest.name != *name) {
            if self.predecessors(&other.manifest.name)?.contains(name) {
                later.push(other.manifest.name.clone());
            }
        }
        let mut ws = base.clone();
        for successor in self.catalog.order(&later)?.into_iter().rev() {
            let (report, chosen) = self.evaluate(successor, &mut ws)?;
            if let (FixState::Applied, Some(variant)) = (report.state, chosen) {
                edit_variant(variant, self.trees, self.only, &mut ws, false, &successor.manifest.name)?;
            }
        }
        self.evaluate(fix, &mut ws)
    }
}

/// Every file `fix` reads when judged: those its variants patch, then those they detect.
fn files_read(fix: &Fix) -> Vec<(TreeName, &str)> {
    let mut out: Vec<(TreeName, &str)> = Vec::new();
    let patched = fix.variants.iter().flat_map(|v| v.patches.iter().map(|p| (p.tree, p.file.as_str())));
    let detected = fix.variants.iter().flat_map(|v| v.detect.iter().map(|d| (d.tree, d.file.as_str())));
    for file in patched.chain(detected) {
        if !out.contains(&file) {
            out.push(file);
        }
    }
    out
}

/// Whether a fix outside `before` (what `fix` comes after) edited, in the pass so far, a file
/// `fix` reads.
fn edited_by_others(fix: &Fix, before: &[String], source: &mut OnTrees<'_>) -> bool {
    files_read(fix).into_iter().any(|(tree, file)| {
        let Some(found) = source.trees.get(tree).filter(|_| source.only.includes(tree)) else { return false };
        let Ok(Some(loaded)) = source.ws.get(found, file) else { return false };
        loaded.edited_by.iter().any(|(editor, _)| !before.contains(editor))
    })
}

thread_local! {
    static JUDGEMENTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_judgement() {
    JUDGEMENTS.with(|n| n.set(n.get() + 1));
}

/// How many fixes this thread has judged (memo misses) so far: what the tests count.
#[cfg(test)]
pub(super) fn judgements() -> usize {
    JUDGEMENTS.with(|n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Tree;
    use crate::plan::{plan, Op};

    /// `status` over the built-in catalogue on a tree holding none of its files (every fix
    /// drifted, the costliest walk: on the chain, alone, and under what is made on top of it),
    /// and on pristine v0.26.0 trees when the cache has them (fixes made on top of others read
    /// on the chain's copy).
    #[test]
    fn status_over_the_built_in_catalogue_judges_each_fix_at_most_twice() {
        let catalog = Catalog::load(None).unwrap();
        let empty = tempfile::tempdir().unwrap();
        for name in TreeName::ALL {
            std::fs::create_dir_all(empty.path().join(name.as_str())).unwrap();
        }
        let cache =
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/gaudi-fixes/upstream/v0.26.0"));
        let roots = std::iter::once(empty.path().to_path_buf()).chain(cache.filter(|c| c.join("vllm_gaudi").is_dir()));
        for root in roots {
            let tree = |name: TreeName| {
                Some(Tree {
                    name,
                    root: root.clone(),
                    found_by: "test".into(),
                    version: Some("0.26.0".into()),
                    outside_site_packages: false,
                })
            };
            let trees = Trees { vllm: tree(TreeName::Vllm), vllm_gaudi: tree(TreeName::VllmGaudi), notes: Vec::new() };
            let all: Vec<&Fix> = catalog.fixes.iter().collect();
            let before = judgements();
            let reports =
                plan(&catalog, &all, &trees, &TreeFilter::all(), &Recorded::new(), Op::Status).unwrap().reports;
            let judged = judgements() - before;
            assert_eq!(reports.len(), all.len());
            assert!(
                judged <= 2 * all.len(),
                "status on {} judged {} fixes {judged} times (more than twice each)",
                root.display(),
                all.len()
            );
        }
    }
}
