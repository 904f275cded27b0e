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
//! Every command reads its states from [`Chain::judge`], each with its [`Basis`] (which of
//! these judgements gave it, as data); `apply` and `revert` then only make the edits these
//! verdicts call for (`super::plan`, `super::revert`), with the variant each chose, deciding
//! by the basis, and judge again only a fix whose edits do not go onto the run's copy. The
//! tree as it is is judged only where the chain's verdict leaves a question, so where the
//! chain reads every fix clean a run judges each fix once (a test counts it). A fix on its own
//! chain takes its predecessors' verdicts from the pass, and one judged under the fixes made
//! on top of it takes their settled verdicts: each only makes (or takes off) their edits on
//! its copy, so `status` judges each fix once, and a fix read applied only under its
//! successors once more (its files as they are under them).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use anyhow::Result;

use super::evaluate::{edit_variant, evaluate};
use super::verdict::{Advice, Basis, FixReport, FixState, Recorded};
use super::workspace::{OnTrees, Workspace};
use crate::catalog::chain::forward;
use crate::catalog::{Catalog, Fix, Variant};
use crate::discover::Trees;
use crate::tree::{TreeFilter, TreeName};

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

    /// The trees judged.
    pub(super) fn trees(&self) -> &'c Trees {
        self.trees
    }

    /// The trees a run may read (`--only-tree`).
    pub(super) fn only(&self) -> &'c TreeFilter {
        self.only
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
        // Each fix's verdict in the pass so far (on the chain or on its own): what a fix judged
        // on its own chain takes its predecessors' verdicts from.
        let mut known: HashMap<&'c str, Judged<'c>> = HashMap::new();
        let pass = catalog.chain(&names)?;
        let on_chain = forward(&pass, &mut source, |fix, source| {
            let before = self.predecessors(&fix.manifest.name)?.to_vec();
            let name = fix.manifest.name.as_str();
            if edited_by_others(fix, &before, source) || apart.iter().any(|a| before.iter().any(|b| b == a)) {
                // A fix it does not come after edited its files in the pass (or one it comes
                // after is judged apart): its chain is its own.
                apart.push(name);
                let ((mut judged, chosen), missing) = self.own_chain(fix, &before, base, &known)?;
                known.insert(name, (judged.clone(), chosen));
                judged.basis = Basis::OwnChain;
                return Ok(((name, ((judged, chosen), missing)), None));
            }
            let missing = simulated.iter().copied().filter(|n| before.iter().any(|b| b == n)).collect();
            let judged = self.evaluate(fix, source.ws)?;
            known.insert(name, judged.clone());
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
        // Settled latest first, so that a fix judged under the fixes made on top of it takes
        // their settled verdicts (`settled`) instead of judging them again.
        let mut order: Vec<usize> = (0..fixes.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(pass.iter().position(|f| f.manifest.name == fixes[i].manifest.name)));
        let mut settled: HashMap<&'c str, Judged<'c>> = HashMap::new();
        let mut out = vec![None; fixes.len()];
        for i in order {
            let fix = fixes[i];
            let (judged, missing) = on_chain.remove(fix.manifest.name.as_str()).expect("the pass judged the selection");
            let verdict = self.settle(fix, judged, &missing, base, &settled)?;
            settled.insert(fix.manifest.name.as_str(), verdict.clone());
            out[i] = Some(verdict);
        }
        Ok(out.into_iter().map(|v| v.expect("every fix settled")).collect())
    }

    /// `fix` on the tree with only its own predecessors simulated, in order: what the pass
    /// gives when no other fix edits its files. With the predecessors it applied in memory.
    /// Each predecessor's verdict is the pass's (`known`, which judged every one of them):
    /// one not applied has its edits made on this copy, one applied none; a predecessor is
    /// judged again on this copy only when its verdict there was not clean or its edits do
    /// not go on, so a fix on its own chain adds one judgement, its own.
    fn own_chain(
        &mut self,
        fix: &'c Fix,
        before: &[String],
        base: &Workspace,
        known: &HashMap<&'c str, Judged<'c>>,
    ) -> Result<(Judged<'c>, Vec<&'c str>)> {
        let mut ws = base.clone();
        let mut missing = Vec::new();
        for earlier in self.catalog.order(before)? {
            let name = earlier.manifest.name.as_str();
            let from_pass = match known.get(name) {
                Some((FixReport { state: FixState::Applied, .. }, _)) => continue,
                Some((FixReport { state: FixState::NotApplied, .. }, Some(variant))) => Some(*variant),
                _ => None,
            };
            if let Some(variant) = from_pass {
                // A variant that patches several files may fail on a later one: leave the copy
                // as it was, then, and judge.
                let kept = (variant.patches.len() > 1).then(|| ws.clone());
                if edit_variant(variant, self.trees, self.only, &mut ws, true, name).is_ok() {
                    missing.push(name);
                    continue;
                }
                if let Some(kept) = kept {
                    ws = kept;
                }
            }
            if let (FixReport { state: FixState::NotApplied, .. }, Some(variant)) = self.evaluate(earlier, &mut ws)? {
                edit_variant(variant, self.trees, self.only, &mut ws, true, name)?;
                missing.push(name);
            }
        }
        Ok((self.evaluate(fix, &mut ws)?, missing))
    }

    /// The verdict on the chain (`on_chain`, with the predecessors it had applied in memory,
    /// `missing`) when it is clean; the tree as it is when that does not give a clean state;
    /// under the fixes made on top of it; drifted (as the chain sees it) when none does. The
    /// tree as it is is judged only when the chain's verdict leaves a question (drifted there,
    /// or applied over predecessors simulated), so a clean chain judges each fix once.
    fn settle(
        &mut self,
        fix: &'c Fix,
        on_chain: Judged<'c>,
        missing: &[&str],
        base: &mut Workspace,
        settled: &HashMap<&'c str, Judged<'c>>,
    ) -> Result<Judged<'c>> {
        let mut on_chain = on_chain;
        if on_chain.0.state != FixState::Drifted {
            // Its edits are in the tree, but made on top of fixes that are not (undone since):
            // say so, and what mends it (`revert` undoes it over them, in memory; `super::plan`).
            if on_chain.0.state == FixState::Applied
                && !missing.is_empty()
                && self.evaluate(fix, base)?.0.state != FixState::Applied
            {
                on_chain.0.basis = Basis::OnUndone { fixes: missing.iter().map(|m| m.to_string()).collect() };
                on_chain.0.message = None;
                on_chain.0.advice = vec![Advice::Apply { fixes: Vec::new() }];
            }
            return Ok(on_chain);
        }
        let mut alone = self.evaluate(fix, base)?;
        if alone.0.state != FixState::Drifted {
            alone.0.basis = Basis::AsItIs;
            return Ok(alone);
        }
        let (mut under, reverted) = self.under_applied_successors(fix, base, settled)?;
        if under.0.state != FixState::Drifted {
            under.0.basis = Basis::UnderSuccessors { fixes: reverted };
            return Ok(under);
        }
        Ok(on_chain)
    }

    /// The fix judged once the fixes made on top of it (those it comes before) that are applied
    /// are reverted in memory, latest first: a later fix may edit lines of this one's post-image
    /// (its context), and then this one reads applied only underneath it, as `revert` finds it.
    /// With the successors it reverted, in the order reverted.
    /// A successor settled applied (`settled`) has its edits taken off the copy, judged no
    /// further; one not applied is left; any other (or one whose edits do not come off) is
    /// judged on the copy.
    fn under_applied_successors(
        &mut self,
        fix: &'c Fix,
        base: &Workspace,
        settled: &HashMap<&'c str, Judged<'c>>,
    ) -> Result<(Judged<'c>, Vec<String>)> {
        let name = &fix.manifest.name;
        let mut later = Vec::new();
        for other in self.catalog.fixes.iter().filter(|f| f.manifest.name != *name) {
            if self.predecessors(&other.manifest.name)?.contains(name) {
                later.push(other.manifest.name.clone());
            }
        }
        let mut ws = base.clone();
        let mut reverted = Vec::new();
        for successor in self.catalog.order(&later)?.into_iter().rev() {
            let name = successor.manifest.name.as_str();
            match settled.get(name) {
                Some((FixReport { state: FixState::NotApplied, .. }, _)) => continue,
                Some((FixReport { state: FixState::Applied, .. }, Some(variant))) => {
                    let kept = (variant.patches.len() > 1).then(|| ws.clone());
                    if edit_variant(variant, self.trees, self.only, &mut ws, false, name).is_ok() {
                        reverted.push(name.to_string());
                        continue;
                    }
                    if let Some(kept) = kept {
                        ws = kept;
                    }
                }
                _ => {}
            }
            let (report, chosen) = self.evaluate(successor, &mut ws)?;
            if let (FixState::Applied, Some(variant)) = (report.state, chosen) {
                edit_variant(variant, self.trees, self.only, &mut ws, false, &successor.manifest.name)?;
                reverted.push(successor.manifest.name.clone());
            }
        }
        Ok((self.evaluate(fix, &mut ws)?, reverted))
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
    use crate::plan::{plan, Action, Basis, Op};

    const PRISTINE: &str =
        "def sample(x):\n    a = x + 1\n    b = a * 2\n    return b\n\n\ndef other():\n    return 2\n";
    const FIX_A: &str = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -2,3 +2,3 @@ def sample(x):\n     a = x + 1\n-    b = a * 2\n+    b = a * 3\n     return b\n";
    /// Made on top of fix-a (its context is fix-a's line), so judged alone on a pristine
    /// file it would read drifted.
    const FIX_B: &str = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -3,4 +3,5 @@ def sample(x):\n     b = a * 3\n     return b\n+    # fix-b\n \n \n";

    /// A catalogue of fix-a and fix-b (after fix-a, on the same file) and a tree holding
    /// `text` as that file.
    fn two_fixes(text: &str) -> (tempfile::TempDir, Catalog, Trees) {
        fixes_a_b(FIX_B, text)
    }

    /// fix-a and, after it, fix-b with `fix_b` as its patch; `text` as the tree's file.
    fn fixes_a_b(fix_b: &str, text: &str) -> (tempfile::TempDir, Catalog, Trees) {
        let d = tempfile::tempdir().unwrap();
        let sha = crate::hash::sha256_hex(PRISTINE.as_bytes());
        for (name, after, patch) in [("fix-a", "", FIX_A), ("fix-b", "after: [fix-a]\n", fix_b)] {
            let dir = d.path().join("cat/fixes").join(name);
            std::fs::create_dir_all(dir.join("v0.26.0")).unwrap();
            std::fs::write(dir.join("v0.26.0/mod.patch"), patch).unwrap();
            std::fs::write(
                dir.join("fix.yaml"),
                format!(
                    "name: {name}\nsummary: s\nkind: correctness\nupstream: {{status: not-filed}}\n{after}releases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {sha}\n"
                ),
            )
            .unwrap();
        }
        std::fs::create_dir_all(d.path().join("cat/profiles")).unwrap();
        std::fs::write(d.path().join("cat/profiles/default.yaml"), "name: default\ndescription: d\nfixes: [fix-a]\n")
            .unwrap();
        std::fs::create_dir_all(d.path().join("root/vllm")).unwrap();
        std::fs::write(d.path().join("root/vllm/mod.py"), text).unwrap();
        let catalog = Catalog::load(Some(&d.path().join("cat"))).unwrap();
        let tree = Tree {
            name: TreeName::Vllm,
            root: d.path().join("root"),
            found_by: "test".into(),
            version: Some("0.26.0".into()),
            outside_site_packages: false,
        };
        (d, catalog, Trees { vllm: Some(tree), vllm_gaudi: None, notes: Vec::new() })
    }

    /// One verdict per fix: on a tree where the chain reads every fix clean (pristine: both
    /// not applied, fix-b only on top of fix-a in memory; both applied), `status`, `--check`,
    /// `apply` and `revert` judge each fix once, the chain's pass giving the verdicts and the
    /// run only making the edits (a revert takes fix-b off, then fix-a, judging neither again).
    #[test]
    fn a_clean_chain_judges_each_fix_once_per_run() {
        let applied = PRISTINE.replace("    b = a * 2\n    return b\n", "    b = a * 3\n    return b\n    # fix-b\n");
        for (text, want) in [(PRISTINE.to_string(), FixState::NotApplied), (applied, FixState::Applied)] {
            let (_d, catalog, trees) = two_fixes(&text);
            let both: Vec<&Fix> = catalog.fixes.iter().collect();
            for op in [Op::Status, Op::Check, Op::Apply, Op::Revert] {
                let before = judgements();
                let plan = plan(&catalog, &both, &trees, &TreeFilter::all(), &Recorded::new(), op).unwrap();
                let judged = judgements() - before;
                let states: Vec<FixState> = plan.reports.iter().map(|r| r.state).collect();
                assert_eq!(states, [want, want], "{op:?} on {text:?}: {:#?}", plan.reports);
                assert_eq!(judged, both.len(), "{op:?} on {text:?}: 2 fixes judged {judged} times");
                let edited = plan.edits.first().map(|e| std::str::from_utf8(&e.new).unwrap().to_string());
                match (op, want) {
                    (Op::Apply, FixState::NotApplied) => {
                        assert!(edited.unwrap().contains("b = a * 3\n    return b\n    # fix-b\n"))
                    }
                    (Op::Revert, FixState::Applied) => assert_eq!(edited.as_deref(), Some(PRISTINE)),
                    _ => assert_eq!(edited, None, "{op:?} on {text:?}"),
                }
            }
        }
    }

    /// fix-b's line inserted between fix-a's and fix-a's context below it: applied, fix-a
    /// reads applied only once fix-b is reverted (in memory).
    const FIX_B_INSIDE: &str = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -3,2 +3,3 @@ def sample(x):\n     b = a * 3\n+    # fix-b\n     return b\n";

    fn bases(plan: &crate::plan::Plan) -> Vec<(FixState, Basis)> {
        plan.reports.iter().map(|r| (r.state, r.basis.clone())).collect()
    }

    /// The basis says how the verdict was reached, and `plan` decides by it: a fix applied
    /// under one made on top of it reads so; reverted alone, that is drift the run names.
    #[test]
    fn a_fix_under_its_successor_reads_applied_with_the_basis_that_says_so() {
        let applied = PRISTINE.replace("    b = a * 2\n", "    b = a * 3\n    # fix-b\n");
        let (_d, catalog, trees) = fixes_a_b(FIX_B_INSIDE, &applied);
        let both: Vec<&Fix> = catalog.fixes.iter().collect();
        let run = |fixes: &[&Fix], op| plan(&catalog, fixes, &trees, &TreeFilter::all(), &Recorded::new(), op).unwrap();
        let under = Basis::UnderSuccessors { fixes: vec!["fix-b".into()] };
        assert_eq!(bases(&run(&both, Op::Status)), [(FixState::Applied, under), (FixState::Applied, Basis::OnChain)]);
        let reverted = run(&both, Op::Revert);
        assert_eq!(reverted.reports.iter().map(|r| r.action).collect::<Vec<_>>(), [Some(Action::Revert); 2]);
        assert_eq!(std::str::from_utf8(&reverted.edits[0].new).unwrap(), PRISTINE);
        assert_eq!(bases(&run(&both[..1], Op::Revert)), [(FixState::Drifted, Basis::UnderUnselected)]);
    }

    /// A revert of a fix whose tree was not found, nothing of it in the trees found: not
    /// applied, on that basis (not an error that refuses the others).
    #[test]
    fn a_revert_of_a_fix_absent_from_the_trees_found_has_nothing_to_do_on_that_basis() {
        let (_d, catalog, mut trees) = two_fixes(PRISTINE);
        trees.vllm_gaudi = trees.vllm.take().map(|t| Tree { name: TreeName::VllmGaudi, ..t });
        let both: Vec<&Fix> = catalog.fixes.iter().collect();
        let plan = plan(&catalog, &both, &trees, &TreeFilter::all(), &Recorded::new(), Op::Revert).unwrap();
        let absent = (FixState::NotApplied, Basis::AbsentFromFoundTrees);
        assert_eq!(bases(&plan), [absent.clone(), absent]);
        assert!(plan.reports[0].message.as_deref().unwrap().starts_with("needs the vllm tree"), "{:?}", plan.reports);
    }

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

    /// The run judges nothing the chain's pass did not: over the built-in catalogue, on the
    /// files it reads copied from a cached pristine release (skipped when the cache has none),
    /// `apply` judges as many times as `status` does on them, and `revert` as many as `status`
    /// once `apply`'s edits are written; and the revert gives the pristine files back. And
    /// `status` judges each fix once there, and on them with the default profile applied,
    /// but for a fix read applied under its successors (once more).
    #[test]
    fn apply_and_revert_over_the_built_in_catalogue_judge_only_what_status_judges() {
        let catalog = Catalog::load(None).unwrap();
        let Some(cache) = std::env::var_os("HOME")
            .map(|h| std::path::PathBuf::from(h).join(".cache/gaudi-fixes/upstream/v0.30.0"))
            .filter(|c| c.join("vllm_gaudi").is_dir())
        else {
            return;
        };
        let root = tempfile::tempdir().unwrap();
        let mut copied = Vec::new();
        for fix in &catalog.fixes {
            for (_, file) in files_read(fix) {
                let rel = std::path::PathBuf::from(file);
                if cache.join(&rel).is_file() && !copied.contains(&rel) {
                    std::fs::create_dir_all(root.path().join(&rel).parent().unwrap()).unwrap();
                    std::fs::copy(cache.join(&rel), root.path().join(&rel)).unwrap();
                    copied.push(rel);
                }
            }
        }
        let tree = |name: TreeName| {
            Some(Tree {
                name,
                root: root.path().to_path_buf(),
                found_by: "test".into(),
                version: Some("0.30.0".into()),
                outside_site_packages: false,
            })
        };
        let trees = Trees { vllm: tree(TreeName::Vllm), vllm_gaudi: tree(TreeName::VllmGaudi), notes: Vec::new() };
        let names: Vec<String> = catalog.fixes.iter().map(|f| f.manifest.name.clone()).collect();
        let all = catalog.order(&names).unwrap();
        let run = |fixes: &[&Fix], op| {
            let before = judgements();
            let plan = plan(&catalog, fixes, &trees, &TreeFilter::all(), &Recorded::new(), op).unwrap();
            (plan, judgements() - before)
        };
        // `status` judges each fix once (on the chain, or on its own chain over its
        // predecessors' verdicts from the pass), and once more only a fix that reads drifted
        // there and applied under the fixes made on top of it (their settled verdicts taken,
        // their edits taken off a copy): its own files as they are under them, text no other
        // judgement read.
        let once_each = |reports: &[FixReport]| {
            all.len() + reports.iter().filter(|r| matches!(r.basis, Basis::UnderSuccessors { .. })).count()
        };
        // Each plan costs seconds in a debug build: the run that writes, and status, per pass.
        for (pass, op) in [("pristine", Op::Apply), ("applied", Op::Revert)] {
            let (reports, status) = run(&all, Op::Status);
            assert_eq!(status, once_each(&reports.reports), "status on the {pass} files judged {status} times");
            let (plan, judged) = run(&all, op);
            assert_eq!(judged, status, "{op:?} on the {pass} files judged {judged} times, status {status}");
            assert!(!plan.edits.is_empty(), "{pass}: nothing to write");
            for edit in &plan.edits {
                std::fs::write(&edit.path, &edit.new).unwrap();
            }
        }
        for rel in &copied {
            assert!(
                std::fs::read(root.path().join(rel)).unwrap() == std::fs::read(cache.join(rel)).unwrap(),
                "{rel:?}"
            );
        }
        // The default profile applied: fixes made on top of others that edit their lines, so
        // some read applied only under them.
        let default = catalog.order(&catalog.profile_fixes("default").unwrap()).unwrap();
        for edit in &run(&default, Op::Apply).0.edits {
            std::fs::write(&edit.path, &edit.new).unwrap();
        }
        let (plan, status) = run(&all, Op::Status);
        assert!(once_each(&plan.reports) > all.len(), "none read applied under its successors: {:#?}", bases(&plan));
        assert_eq!(status, once_each(&plan.reports), "status on the default profile's files judged {status} times");
    }
}
