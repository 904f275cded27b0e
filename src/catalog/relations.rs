//! The relations beyond `after:`: a fix's `requires:` (selecting it selects what it requires,
//! which is applied first; a required fix is not reverted while a fix that requires it is
//! applied) and a profile's `include:` (its set is its own fixes plus those of the profiles it
//! includes). Unknown names are load errors ([`super::catalog`]); cycles and profiles that
//! leave out a requirement are lint findings ([`lint`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Result};

use super::catalog::{Catalog, Fix};
use super::chain::{forward, NotTaken, PristineFile};
use super::finding::{Code, Finding, LintReport};
use super::manifest::Kind;
use crate::patch::SourceText;

/// A selection grown by `requires:`.
#[derive(Debug, Default)]
pub struct Closure {
    /// Every fix selected, sorted, each once.
    pub names: Vec<String>,
    /// (fix added, the selected fix that requires it), in the order they were found.
    pub added: Vec<(String, String)>,
}

impl Catalog {
    /// The fixes profile `name` selects: its own, then those of the profiles it includes,
    /// transitively, each once. An `include:` cycle is an error that names it.
    pub fn profile_fixes(&self, name: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.expand_profile(name, &mut Vec::new(), &mut BTreeSet::new(), &mut out)?;
        Ok(out)
    }

    fn expand_profile(
        &self,
        name: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) -> Result<()> {
        if path.iter().any(|p| p == name) {
            path.push(name.to_string());
            bail!(
                "profiles include each other in a cycle: {} (see {})",
                path.join(" → "),
                self.files.display(Path::new(&format!("profiles/{name}.yaml")))
            );
        }
        if !done.insert(name.to_string()) {
            return Ok(());
        }
        let profile = self.profile(name)?;
        for fix in &profile.fixes {
            if !out.contains(fix) {
                out.push(fix.clone());
            }
        }
        path.push(name.to_string());
        for included in &profile.include {
            self.expand_profile(included, path, done, out)?;
        }
        path.pop();
        Ok(())
    }

    /// `names` and every fix they require, transitively.
    pub fn with_requirements(&self, names: &[String]) -> Result<Closure> {
        let mut all: BTreeSet<String> = names.iter().cloned().collect();
        let mut added = Vec::new();
        let mut queue: Vec<String> = names.to_vec();
        while let Some(name) = queue.pop() {
            for required in &self.fix(&name)?.manifest.requires {
                if all.insert(required.clone()) {
                    added.push((required.clone(), name.clone()));
                    queue.push(required.clone());
                }
            }
        }
        Ok(Closure { names: all.into_iter().collect(), added })
    }

    /// Every fix that comes before `name`: those it requires or is ordered `after:`, and
    /// theirs, transitively (`name` itself excluded), sorted.
    pub fn predecessors(&self, name: &str) -> Result<Vec<String>> {
        let mut all: BTreeSet<String> = BTreeSet::new();
        let mut queue = vec![name.to_string()];
        while let Some(next) = queue.pop() {
            let manifest = &self.fix(&next)?.manifest;
            for before in manifest.requires.iter().chain(&manifest.after) {
                if before != name && all.insert(before.clone()) {
                    queue.push(before.clone());
                }
            }
        }
        Ok(all.into_iter().collect())
    }

    /// The fixes outside `names` that require one of `names`, directly or through other
    /// fixes, each with the fix of `names` it needs.
    pub fn dependants(&self, names: &[String]) -> Vec<(&Fix, String)> {
        let mut out = Vec::new();
        for fix in self.fixes.iter().filter(|f| !names.contains(&f.manifest.name)) {
            let Ok(closure) = self.with_requirements(std::slice::from_ref(&fix.manifest.name)) else { continue };
            if let Some(needed) = closure.names.iter().find(|n| names.contains(n)) {
                out.push((fix, needed.clone()));
            }
        }
        out
    }

    /// The fixes that require `name` directly.
    pub fn required_by(&self, name: &str) -> Vec<&str> {
        self.fixes
            .iter()
            .filter(|f| f.manifest.requires.iter().any(|r| r == name))
            .map(|f| f.manifest.name.as_str())
            .collect()
    }

    /// The profiles that select `fix`, directly or through `include:`.
    pub fn profiles_selecting(&self, fix: &str) -> Vec<&str> {
        self.profiles
            .iter()
            .filter(|p| self.profile_fixes(&p.name).is_ok_and(|fixes| fixes.iter().any(|f| f == fix)))
            .map(|p| p.name.as_str())
            .collect()
    }
}

/// `text` (a pristine file of `release`) with the patches to the same file of every fix that
/// comes before `fix` — what it requires and what it is ordered `after:`, transitively —
/// applied first, in order: the file `fix`'s patch is made on (fixes/README.md: "the later
/// fix's patch is made on top of X's"), so what `lint --upstream` checks it against and what
/// `record` makes it on. The names of the fixes applied, or why one did not apply.
pub fn with_predecessors_applied(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    file: &str,
    text: SourceText,
) -> Result<(SourceText, Vec<String>), String> {
    let before = catalog.predecessors(&fix.manifest.name).map_err(|e| format!("{e:#}"))?;
    applied_in_order(catalog, fix, &before, release, file, text)
}

/// `text` with only the patches of the fixes `fix` requires (transitively) applied first: what
/// its patch meets when it is selected alone, since selecting it selects those.
pub fn with_required_applied(
    catalog: &Catalog,
    fix: &Fix,
    release: &str,
    file: &str,
    text: SourceText,
) -> Result<(SourceText, Vec<String>), String> {
    let closure = catalog.with_requirements(std::slice::from_ref(&fix.manifest.name)).map_err(|e| format!("{e:#}"))?;
    let required: Vec<String> = closure.names.into_iter().filter(|n| *n != fix.manifest.name).collect();
    applied_in_order(catalog, fix, &required, release, file, text)
}

/// `text` with the `release` variants of `names` (the fixes `fix` is made on) applied in order:
/// the chain simulator on one pristine file. The fixes whose patches edited it, in order.
fn applied_in_order(
    catalog: &Catalog,
    fix: &Fix,
    names: &[String],
    release: &str,
    file: &str,
    text: SourceText,
) -> Result<(SourceText, Vec<String>), String> {
    let order = catalog.order(names).map_err(|e| format!("{e:#}"))?;
    let mut source = PristineFile { file: file.to_string(), text };
    let applied = forward(&order, &mut source, |other, _| {
        let variant = other.variants.iter().find(|v| super::manifest::same_release(&v.release, release));
        let edits = variant.filter(|v| v.patches.iter().any(|p| p.file == file));
        Ok((edits.map(|_| other.manifest.name.clone()), edits))
    })
    .map_err(|e| match e.downcast_ref::<NotTaken>() {
        Some(not) => format!(
            "{file}: {} (which {} comes after) does not apply to pristine {release}",
            not.fix, fix.manifest.name
        ),
        None => format!("{e:#}"),
    })?;
    Ok((source.text, applied.into_iter().flatten().collect()))
}

/// A cycle in the graph `edges` (node → successors), as the path that closes it.
pub fn find_cycle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// Lint both graphs and what profiles make of them: `requires:` and `include:` are acyclic, a
/// fix does not conflict with what it requires, every profile holds what its fixes require,
/// and `default` holds correctness fixes only.
pub fn lint(catalog: &Catalog, report: &mut LintReport) {
    let fix_file = |fix: &Fix| catalog.files.display(&fix.dir.join("fix.yaml"));
    let profile_file = |name: &str| catalog.files.display(Path::new(&format!("profiles/{name}.yaml")));

    let requires: BTreeMap<String, Vec<String>> =
        catalog.fixes.iter().map(|f| (f.manifest.name.clone(), f.manifest.requires.clone())).collect();
    match find_cycle(&requires) {
        Some(cycle) => report.findings.push(Finding {
            file: catalog.fix(&cycle[0]).map(fix_file).unwrap_or_default(),
            code: Code::RequiresCycle,
            message: format!("`requires:` cycle: {}", cycle.join(" → ")),
        }),
        None => report.checked.push(format!("requires: graph of {} fix(es) is acyclic", catalog.fixes.len())),
    }
    let include: BTreeMap<String, Vec<String>> =
        catalog.profiles.iter().map(|p| (p.name.clone(), p.include.clone())).collect();
    let include_cycle = find_cycle(&include);
    match &include_cycle {
        Some(cycle) => report.findings.push(Finding {
            file: profile_file(&cycle[0]),
            code: Code::IncludeCycle,
            message: format!("`include:` cycle: {}", cycle.join(" → ")),
        }),
        None => report.checked.push(format!("include: graph of {} profile(s) is acyclic", catalog.profiles.len())),
    }
    for fix in &catalog.fixes {
        for required in fix.manifest.requires.iter().filter(|r| fix.manifest.conflicts.contains(r)) {
            report.findings.push(Finding {
                file: fix_file(fix),
                code: Code::RequiresConflict,
                message: format!("{} both requires and conflicts with {required}", fix.manifest.name),
            });
        }
    }
    if include_cycle.is_some() {
        return;
    }
    for profile in &catalog.profiles {
        let Ok(fixes) = catalog.profile_fixes(&profile.name) else { continue };
        let mut clean = true;
        for name in &fixes {
            let Ok(closure) = catalog.with_requirements(std::slice::from_ref(name)) else { continue };
            for (required, by) in closure.added.iter().filter(|(r, _)| !fixes.contains(r)) {
                clean = false;
                report.findings.push(Finding {
                    file: profile_file(&profile.name),
                    code: Code::ProfileMissesRequirement,
                    message: format!(
                        "profile `{}` selects {name}, which needs {required} (required by {by}); add it, or include a profile that has it",
                        profile.name
                    ),
                });
            }
        }
        if profile.name == "default" {
            for fix in fixes.iter().filter_map(|n| catalog.fix(n).ok()).filter(|f| f.manifest.kind != Kind::Correctness)
            {
                clean = false;
                report.findings.push(Finding {
                    file: profile_file(&profile.name),
                    code: Code::DefaultKind,
                    message: format!(
                        "profile `default` holds correctness fixes only; {} is a {} fix",
                        fix.manifest.name, fix.manifest.kind
                    ),
                });
            }
        }
        if clean {
            report.checked.push(format!(
                "profile `{}`: {} fix(es) with include:, everything they require is in it",
                profile.name,
                fixes.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn cycles_are_found_with_their_path() {
        assert_eq!(find_cycle(&graph(&[("a", &["b"]), ("b", &["c"]), ("c", &[])])), None);
        // A diamond is not a cycle.
        assert_eq!(find_cycle(&graph(&[("a", &["b", "c"]), ("b", &["d"]), ("c", &["d"]), ("d", &[])])), None);
        assert_eq!(find_cycle(&graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])])).unwrap(), ["b", "c", "b"]);
        assert_eq!(find_cycle(&graph(&[("a", &["a"])])).unwrap(), ["a", "a"]);
    }
}
