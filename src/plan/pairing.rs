//! Whether the vllm_gaudi found imports on the vLLM found, read statically (nothing is
//! imported): the `from vllm… import …` and `import vllm…` lines of the vllm_gaudi modules the
//! catalogue patches and of its plugin entry points (`vllm_gaudi/__init__.py` and the
//! vllm_gaudi modules it imports), each name looked up in the vLLM tree's files.
//!
//! vllm_gaudi pins a vLLM commit, not a release, so a user's image may hold a pair that does
//! not load. Two findings come out of it: names that do not resolve (a warning: the lab
//! pairings the tests use, vLLM 0.30.0/0.33.0 + vllm_gaudi main, leave some), and the V1
//! sampling path the catalogue's fixes plug into missing from vLLM (vLLM 0.34.0 removed it):
//! then the fixes cannot take effect, and `apply`, `test` and `conform` refuse.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::discover::{Tree, Trees};
use crate::tree::TreeName;

/// The modules of vLLM's V1 sampling path that vllm_gaudi's sampler and runner import and the
/// catalogue's fixes plug into (vLLM 0.34.0 removed all three with the V1 GPU model runner).
pub const SAMPLING_PATH: [&str; 3] =
    ["vllm.v1.sample.sampler", "vllm.v1.sample.metadata", "vllm.v1.sample.rejection_sampler"];

/// Source files larger than this are not read (no vLLM or vllm_gaudi module comes near it).
const MAX_MODULE_BYTES: u64 = 8 << 20;

/// What the check found.
#[derive(Debug, Clone, Serialize)]
pub struct Pairing {
    /// vllm_gaudi files read (relative to its tree).
    pub files_read: Vec<String>,
    /// Names imported from vLLM that this vLLM does not provide, in file and line order.
    pub unresolved: Vec<Unresolved>,
    /// The modules of [`SAMPLING_PATH`] vllm_gaudi imports and this vLLM lacks, as files
    /// (`vllm/v1/sample/sampler.py`); not empty: the catalogue's fixes cannot take effect.
    pub missing_sampling_path: Vec<String>,
    /// The finding in one sentence (the first unresolved name in words), or that all resolve.
    pub summary: String,
}

/// One name a vllm_gaudi file imports from vLLM that does not resolve.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Unresolved {
    /// The vllm_gaudi file (relative to its tree) and the line of the import.
    pub file: String,
    pub line: usize,
    /// The vLLM module imported from (`vllm.v1.sample.sampler`).
    pub module: String,
    /// The name asked for (the module itself for `import vllm.x`).
    pub name: String,
    /// The module itself is absent from the vLLM tree.
    pub module_missing: bool,
}

impl Pairing {
    /// The refusal's sentence when the sampling path is missing.
    pub fn refusal(&self, vllm: &Tree) -> Option<String> {
        if self.missing_sampling_path.is_empty() {
            return None;
        }
        let version = vllm.version.as_deref().map_or(String::new(), |v| format!(" {v}"));
        Some(format!(
            "the vLLM{version} at {} lacks {} (the V1 sampling path vllm_gaudi imports and the catalogue's fixes \
             plug into; vLLM 0.34.0 removed it), so the fixes cannot take effect: pair vllm_gaudi with the vLLM it was \
             built for",
            vllm.root.display(),
            self.missing_sampling_path.join(", ")
        ))
    }
}

/// Check the pairing of the trees found; `None` unless both were found.
pub fn check(catalog: &Catalog, trees: &Trees) -> Result<Option<Pairing>> {
    let (Some(vllm), Some(gaudi)) = (&trees.vllm, &trees.vllm_gaudi) else { return Ok(None) };
    // The files the catalogue patches first: the first name in words is one of theirs.
    let mut files: Vec<String> = catalog
        .fixes
        .iter()
        .flat_map(|f| &f.variants)
        .flat_map(|v| &v.patches)
        .filter(|p| p.tree == TreeName::VllmGaudi)
        .map(|p| p.file.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for file in entry_points(&gaudi.root)? {
        if !files.contains(&file) {
            files.push(file);
        }
    }
    let mut modules = Modules { root: &vllm.root, texts: BTreeMap::new() };
    let mut files_read = Vec::new();
    let mut unresolved = Vec::new();
    for file in &files {
        let Some(text) = read(&gaudi.root, file)? else { continue };
        files_read.push(file.clone());
        for import in imports(&text).into_iter().filter(|i| i.module == "vllm" || i.module.starts_with("vllm.")) {
            for name in &import.names {
                if let Some(missing) = modules.resolves(&import.module, name)? {
                    unresolved.push(Unresolved {
                        file: file.clone(),
                        line: import.line,
                        module: import.module.clone(),
                        name: name.clone(),
                        module_missing: missing,
                    });
                }
            }
        }
    }
    let missing_sampling_path: Vec<String> = SAMPLING_PATH
        .iter()
        .filter(|m| unresolved.iter().any(|u| u.module_missing && u.module == **m))
        .map(|m| format!("{}.py", m.replace('.', "/")))
        .collect();
    let summary = match unresolved.first() {
        None => format!("vllm_gaudi's imports from vLLM all resolve ({} files read)", files_read.len()),
        Some(first) => {
            let what = if first.module_missing {
                format!("{}, a module this vLLM does not have", first.module)
            } else {
                format!("{}, which does not define it", first.module)
            };
            format!(
                "{} name(s) vllm_gaudi imports from vLLM do not resolve; the first: {}:{} imports {} from {what}",
                unresolved.len(),
                first.file,
                first.line,
                first.name
            )
        }
    };
    Ok(Some(Pairing { files_read, unresolved, missing_sampling_path, summary }))
}

/// The plugin entry points: `vllm_gaudi/__init__.py` (vLLM's plugin loader calls its
/// `register*` functions) and the vllm_gaudi modules it imports.
fn entry_points(root: &Path) -> Result<Vec<String>> {
    let init = "vllm_gaudi/__init__.py".to_string();
    let Some(text) = read(root, &init)? else { return Ok(Vec::new()) };
    let mut out = vec![init];
    for import in imports(&text) {
        let base = match import.module.strip_prefix('.') {
            Some("") => "vllm_gaudi".to_string(),
            Some(rel) => format!("vllm_gaudi.{rel}"),
            None if import.module == "vllm_gaudi" || import.module.starts_with("vllm_gaudi.") => import.module.clone(),
            None => continue,
        };
        let candidates = import.names.iter().map(|n| format!("{base}.{n}")).chain([base.clone()]);
        for module in candidates {
            if let Some(file) = module_file(root, &module)? {
                out.push(file);
            }
        }
    }
    Ok(out)
}

/// The file of `module` under `root` (`a/b.py`, else `a/b/__init__.py`), if there is one.
fn module_file(root: &Path, module: &str) -> Result<Option<String>> {
    let base = module.replace('.', "/");
    for file in [format!("{base}.py"), format!("{base}/__init__.py")] {
        if crate::tree::resolve_inside(root, &file, "the tree")?.is_some() {
            return Ok(Some(file));
        }
    }
    Ok(None)
}

fn read(root: &Path, rel: &str) -> Result<Option<String>> {
    let bytes = crate::tree::read_inside(root, rel, "the tree", MAX_MODULE_BYTES)?;
    Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// vLLM's modules, each read once: the names it binds at any indentation.
struct Modules<'a> {
    root: &'a Path,
    texts: BTreeMap<String, Option<Bound>>,
}

impl Modules<'_> {
    /// `None` when `name` resolves in `module`, else whether the module itself is missing.
    fn resolves(&mut self, module: &str, name: &str) -> Result<Option<bool>> {
        if !self.texts.contains_key(module) {
            let bound = match module_file(self.root, module)? {
                Some(file) => read(self.root, &file)?.map(|text| bound_names(&text)),
                None => None,
            };
            self.texts.insert(module.to_string(), bound);
        }
        let Some(bound) = &self.texts[module] else { return Ok(Some(true)) };
        if name == module || bound.open || bound.names.contains(name) {
            return Ok(None);
        }
        let submodule = module_file(self.root, &format!("{module}.{name}"))?;
        Ok(if submodule.is_some() { None } else { Some(false) })
    }
}

/// The names a module binds, and whether it may bind names we cannot see (`from x import *`,
/// a module `__getattr__`).
#[derive(Debug, Default)]
struct Bound {
    names: BTreeSet<String>,
    open: bool,
}

/// One `from MODULE import NAMES` (or `import MODULE`, with the module as its one name).
#[derive(Debug, PartialEq, Eq)]
struct Import {
    line: usize,
    module: String,
    names: Vec<String>,
    /// The names bound in the importing module (aliases where given).
    bound: Vec<String>,
}

/// Python's logical lines, roughly: comments cut, triple-quoted strings skipped, lines joined
/// while a bracket is open or a line ends in `\`; each with its first line's number. Lines
/// under `if TYPE_CHECKING:` are left out (what only a type checker imports is not imported).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut type_checking: Option<usize> = None;
    for (line, indent, code) in indented_lines(text) {
        match type_checking {
            Some(at) if indent > at || (indent == at && code.starts_with("else")) => continue,
            _ => type_checking = None,
        }
        if code == "if TYPE_CHECKING:" || code == "if typing.TYPE_CHECKING:" {
            type_checking = Some(indent);
            continue;
        }
        out.push((line, code));
    }
    out
}

/// [`logical_lines`] with each line's indentation, the `TYPE_CHECKING` blocks kept.
fn indented_lines(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut in_string: Option<&str> = None;
    let mut current: Option<(usize, usize, String)> = None;
    let mut depth: i32 = 0;
    for (n, raw) in text.lines().enumerate() {
        let mut line = raw;
        if let Some(quote) = in_string {
            match line.find(quote) {
                Some(at) => {
                    in_string = None;
                    line = &line[at + 3..];
                }
                None => continue,
            }
        }
        for quote in ["\"\"\"", "'''"] {
            if line.matches(quote).count() % 2 == 1 {
                in_string = Some(quote);
                line = &line[..line.find(quote).unwrap_or(line.len())];
            }
        }
        let code = line.split('#').next().unwrap_or_default();
        if current.is_none() && code.trim().is_empty() {
            continue;
        }
        let indent = code.len() - code.trim_start().len();
        let (start, indent, mut joined) = current.take().unwrap_or((n + 1, indent, String::new()));
        joined.push(' ');
        joined.push_str(code.trim_end().trim_end_matches('\\'));
        depth += code.matches(['(', '[', '{']).count() as i32 - code.matches([')', ']', '}']).count() as i32;
        if depth > 0 || code.trim_end().ends_with('\\') {
            current = Some((start, indent, joined));
        } else {
            depth = 0;
            out.push((start, indent, joined.trim().to_string()));
        }
    }
    out
}

/// The import statements of `text`, at any indentation.
fn imports(text: &str) -> Vec<Import> {
    let mut out = Vec::new();
    for (line, code) in logical_lines(text) {
        if let Some(rest) = code.strip_prefix("from ") {
            let Some((module, names)) = rest.split_once(" import ") else { continue };
            let pairs: Vec<(String, String)> = names
                .trim()
                .trim_matches(|c| c == '(' || c == ')')
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| match n.split_once(" as ") {
                    Some((name, alias)) => (name.trim().to_string(), alias.trim().to_string()),
                    None => (n.to_string(), n.to_string()),
                })
                .collect();
            out.push(Import {
                line,
                module: module.trim().to_string(),
                names: pairs.iter().map(|p| p.0.clone()).collect(),
                bound: pairs.into_iter().map(|p| p.1).collect(),
            });
        } else if let Some(rest) = code.strip_prefix("import ") {
            for item in rest.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let (module, alias) = match item.split_once(" as ") {
                    Some((m, a)) => (m.trim(), a.trim()),
                    None => (item, item.split('.').next().unwrap_or(item)),
                };
                out.push(Import {
                    line,
                    module: module.to_string(),
                    names: vec![module.to_string()],
                    bound: vec![alias.to_string()],
                });
            }
        }
    }
    out
}

const KEYWORDS: [&str; 12] =
    ["else", "try", "finally", "if", "elif", "while", "for", "with", "return", "match", "case", "lambda"];

/// The names `text` binds: `def`/`class`, assignments and annotations (tuples too), imports.
fn bound_names(text: &str) -> Bound {
    let mut bound = Bound::default();
    for import in imports(text) {
        bound.open |= import.names.iter().any(|n| n == "*");
        bound.names.extend(import.bound);
    }
    let ident = |s: &str| -> Option<String> {
        let s = s.trim();
        let ok = !s.is_empty()
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit());
        ok.then(|| s.to_string())
    };
    for (_, code) in logical_lines(text) {
        let mut rest = code.as_str();
        for word in ["async ", "type "] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        if let Some(def) = rest.strip_prefix("def ").or_else(|| rest.strip_prefix("class ")) {
            let name: String = def.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            bound.open |= name == "__getattr__";
            bound.names.insert(name);
            continue;
        }
        // `NAME = …`, `A, B = …`, `NAME: T = …` (not `==`, not a keyword's colon).
        let target = match (rest.find('='), rest.find(':')) {
            (Some(eq), colon) if !rest[eq..].starts_with("==") && colon.is_none_or(|c| c > eq) => &rest[..eq],
            (_, Some(colon)) => &rest[..colon],
            _ => continue,
        };
        let target = target.trim_end_matches(['+', '-', '*', '/', '|', '&', '<', '>', '!']);
        for part in target.trim().trim_matches(|c| c == '(' || c == ')').split(',') {
            if let Some(name) = ident(part).filter(|n| !KEYWORDS.contains(&n.as_str())) {
                bound.names.insert(name);
            }
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_read_across_brackets_with_aliases_and_at_any_indentation() {
        let text = "import os\nfrom vllm.a import (\n    b,  # why\n    c as d,\n)\n\"\"\"\nfrom vllm.z import q\n\"\"\"\n\
                    def f():\n    from vllm.e import g\nif TYPE_CHECKING:\n    from vllm.t import u\nelse:\n    u = 1\n";
        let found = imports(text);
        let names: Vec<(usize, &str, Vec<String>)> =
            found.iter().map(|i| (i.line, i.module.as_str(), i.names.clone())).collect();
        assert_eq!(
            names,
            [
                (1, "os", vec!["os".to_string()]),
                (2, "vllm.a", vec!["b".to_string(), "c".to_string()]),
                (10, "vllm.e", vec!["g".to_string()]),
            ]
        );
        assert_eq!(found[1].bound, ["b", "d"]);
    }

    #[test]
    fn a_module_binds_defs_classes_assignments_annotations_and_imports() {
        let text = "from x import y as z\nclass C(Base):\n    pass\nasync def f():\n    pass\nA, B = 1, 2\n\
                    T: int = 3\nif x == 1:\n    U = 4\nx.attr = 5\n";
        let bound = bound_names(text);
        for name in ["z", "C", "f", "A", "B", "T", "U"] {
            assert!(bound.names.contains(name), "{name} not bound in {:?}", bound.names);
        }
        assert!(!bound.names.contains("if") && !bound.names.contains("x.attr") && !bound.open);
        assert!(bound_names("from m import *\n").open);
        assert!(bound_names("def __getattr__(name):\n    pass\n").open);
    }
}
