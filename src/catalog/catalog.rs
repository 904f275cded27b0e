//! Load a catalogue (manifests, profiles, patches) into validated data, and order a selection
//! of fixes by `after:`. Every problem found here is broken input: an error naming the file and
//! line, exit 3, before any tree is looked at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::manifest::{check_relative, line_of, Manifest, Release, UpstreamStatus};
use super::profile::Profile;
use super::source::CatalogFiles;
use crate::error::{bail_at, bail_in, Located};
use crate::patch::{parse, FilePatch};
use crate::tree::TreeName;

/// The catalogue's test-support folder: no fix, its files are written beside every fix's tests.
pub const SUPPORT_DIR: &str = "fixes/_support";

/// A loaded, validated catalogue.
#[derive(Debug)]
pub struct Catalog {
    pub files: CatalogFiles,
    /// Sorted by name.
    pub fixes: Vec<Fix>,
    /// Sorted by name.
    pub profiles: Vec<Profile>,
}

/// One fix with its parsed patches.
#[derive(Debug)]
pub struct Fix {
    pub manifest: Manifest,
    /// `fixes/<name>`, relative to the catalogue root.
    pub dir: PathBuf,
    /// Release variants in manifest order.
    pub variants: Vec<Variant>,
}

/// One release variant of a fix.
#[derive(Debug)]
pub struct Variant {
    /// The release key, e.g. `v0.26.0`.
    pub release: String,
    pub upstreamed: bool,
    pub patches: Vec<VariantPatch>,
    /// Releases this variant was verified on (applied, tests passed).
    pub verified: Vec<String>,
    /// For an upstreamed release: upstream's post-image text that marks a tree carrying the fix.
    pub detect: Vec<super::manifest::DetectEntry>,
}

/// One file patch of a variant.
#[derive(Debug)]
pub struct VariantPatch {
    pub tree: TreeName,
    /// Relative to the tree root, e.g. `vllm/v1/sample/ops/topk_topp_sampler.py`.
    pub file: String,
    /// The patch file, relative to the catalogue root.
    pub patch_path: PathBuf,
    pub pristine_sha256: String,
    pub diff: FilePatch,
}

impl Catalog {
    /// Load the built-in catalogue, or the directory given.
    pub fn load(dir: Option<&Path>) -> Result<Catalog> {
        let files = match dir {
            Some(dir) => CatalogFiles::from_dir(dir)?,
            None => CatalogFiles::builtin(),
        };
        Catalog::from_files(files)
    }

    /// Validate and parse every manifest, patch and profile.
    pub fn from_files(files: CatalogFiles) -> Result<Catalog> {
        let mut fixes = Vec::new();
        let manifests: Vec<PathBuf> = files
            .files
            .keys()
            .filter(|p| p.starts_with("fixes") && p.file_name().is_some_and(|n| n == "fix.yaml"))
            .cloned()
            .collect();
        for path in &manifests {
            fixes.push(load_fix(&files, path)?);
        }
        // A fix directory without a manifest is almost always a typo'd file name.
        let dirs: BTreeSet<PathBuf> = files
            .files
            .keys()
            .filter_map(|p| {
                let mut c = p.components();
                match (c.next(), c.next(), c.next()) {
                    (Some(a), Some(b), Some(_)) if a.as_os_str() == "fixes" => {
                        Some(Path::new("fixes").join(b.as_os_str()))
                    }
                    _ => None,
                }
            })
            .collect();
        for dir in dirs.into_iter().filter(|d| d != Path::new(SUPPORT_DIR)) {
            if !files.files.contains_key(&dir.join("fix.yaml")) {
                bail_in!(files.display(&dir), "fix directory without fix.yaml");
            }
        }
        fixes.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));

        let mut profiles = Vec::new();
        for (path, _) in files.files.iter().filter(|(p, _)| p.starts_with("profiles")) {
            let shown = files.display(path);
            if path.extension().is_none_or(|e| e != "yaml") {
                bail_in!(&shown, "profiles must be `profiles/<name>.yaml`");
            }
            let text = files.text(path)?;
            let profile: Profile = serde_yaml::from_str(text).map_err(|e| yaml_error(&shown, &e))?;
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            if profile.name != stem {
                bail_at!(&shown, line_of(text, "name:"), "name `{}` must equal the file name `{stem}`", profile.name);
            }
            profiles.push((profile, shown, text.to_string()));
        }
        let names: BTreeSet<&str> = fixes.iter().map(|f| f.manifest.name.as_str()).collect();
        for fix in &fixes {
            let shown = files.display(&fix.dir.join("fix.yaml"));
            let text = files.text(&fix.dir.join("fix.yaml"))?;
            for other in fix.manifest.after.iter().chain(&fix.manifest.requires).chain(&fix.manifest.conflicts) {
                if !names.contains(other.as_str()) {
                    bail_at!(&shown, line_of(text, other), "`{other}` is not a fix in this catalogue");
                }
                if *other == fix.manifest.name {
                    bail_at!(&shown, line_of(text, other), "a fix cannot name itself in after:/requires:/conflicts:");
                }
            }
        }
        let profile_names: BTreeSet<&str> = profiles.iter().map(|(p, _, _)| p.name.as_str()).collect();
        for (profile, shown, text) in &profiles {
            for name in &profile.include {
                if !profile_names.contains(name.as_str()) || *name == profile.name {
                    // The name's line at or after `include:` (a description may mention it).
                    let start = line_of(text, "include:");
                    let line = text
                        .lines()
                        .skip(start - 1)
                        .position(|l| l.contains(name.as_str()))
                        .map_or(start, |i| start + i);
                    bail_at!(shown, line, "include: `{name}` is not another profile in this catalogue");
                }
            }
            for name in &profile.fixes {
                if !names.contains(name.as_str()) {
                    bail_at!(
                        shown,
                        line_of(text, name),
                        "profile names `{name}`, which is not a fix in this catalogue"
                    );
                }
            }
        }
        let mut profiles: Vec<Profile> = profiles.into_iter().map(|(p, _, _)| p).collect();
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Catalog { files, fixes, profiles })
    }

    /// A fix by name, or an error listing the known ones.
    pub fn fix(&self, name: &str) -> Result<&Fix> {
        self.fixes.iter().find(|f| f.manifest.name == name).with_context(|| {
            let known: Vec<&str> = self.fixes.iter().map(|f| f.manifest.name.as_str()).collect();
            format!("no fix named `{name}` in catalogue {} (known: {})", self.files.origin, known.join(", "))
        })
    }

    /// A profile by name, or an error listing the known ones.
    pub fn profile(&self, name: &str) -> Result<&Profile> {
        self.profiles.iter().find(|p| p.name == name).with_context(|| {
            let known: Vec<&str> = self.profiles.iter().map(|p| p.name.as_str()).collect();
            format!("no profile named `{name}` in catalogue {} (known: {})", self.files.origin, known.join(", "))
        })
    }

    /// The fixes named, in an order where every fix comes after those in its `after:` and
    /// `requires:` (ties by name). Conflicting fixes selected together, or a cycle, are errors.
    pub fn order<'a>(&'a self, names: &[String]) -> Result<Vec<&'a Fix>> {
        let mut selected: BTreeMap<&str, &Fix> = BTreeMap::new();
        for name in names {
            let fix = self.fix(name)?;
            selected.insert(fix.manifest.name.as_str(), fix);
        }
        for fix in selected.values() {
            for other in &fix.manifest.conflicts {
                if selected.contains_key(other.as_str()) {
                    bail!(
                        "fixes `{}` and `{other}` conflict (see {}); select one of them",
                        fix.manifest.name,
                        self.files.display(&fix.dir.join("fix.yaml"))
                    );
                }
            }
        }
        sorted(selected)
    }

    /// `names` and every fix they come after (`requires:`, `after:`, transitively), in the
    /// order of [`Catalog::order`]: the chain a selection is judged on. Conflicting fixes are
    /// not an error here (judging is not applying); a cycle is.
    pub fn chain<'a>(&'a self, names: &[String]) -> Result<Vec<&'a Fix>> {
        let mut selected: BTreeMap<&str, &Fix> = BTreeMap::new();
        for name in names {
            let fix = self.fix(name)?;
            selected.insert(fix.manifest.name.as_str(), fix);
            for before in self.predecessors(name)? {
                let fix = self.fix(&before)?;
                selected.insert(fix.manifest.name.as_str(), fix);
            }
        }
        sorted(selected)
    }
}

/// `selected` in an order where every fix comes after those of them in its `after:` and
/// `requires:`, ties by name; a cycle is an error.
fn sorted<'a>(selected: BTreeMap<&'a str, &'a Fix>) -> Result<Vec<&'a Fix>> {
    let mut done: Vec<&Fix> = Vec::new();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    while placed.len() < selected.len() {
        let ready = selected.values().find(|f| {
            !placed.contains(f.manifest.name.as_str())
                && f.manifest
                    .after
                    .iter()
                    .chain(&f.manifest.requires)
                    .all(|a| placed.contains(a.as_str()) || !selected.contains_key(a.as_str()))
        });
        match ready {
            Some(fix) => {
                placed.insert(fix.manifest.name.as_str());
                done.push(fix);
            }
            None => {
                let stuck: Vec<&str> = selected.keys().filter(|n| !placed.contains(*n)).copied().collect();
                bail!("the `after:`/`requires:` relations of {} form a cycle", stuck.join(", "));
            }
        }
    }
    Ok(done)
}

/// Turn a serde_yaml error into one naming the file and line.
pub(crate) fn yaml_error(shown: &str, err: &serde_yaml::Error) -> anyhow::Error {
    match err.location() {
        Some(loc) => Located::at(shown, loc.line(), err.to_string()).column(loc.column()).into(),
        // Syntax errors (an unclosed quote, a tab in the indentation) and errors under a key
        // carry their position only in the text; lift the first one into `file:line:col:`.
        None => {
            static AT: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
            let at = AT.get_or_init(|| regex::Regex::new(r" at line (\d+) column (\d+)").expect("valid regex"));
            let text = err.to_string();
            match at.captures(&text) {
                Some(c) => {
                    Located::at(shown, c[1].parse().unwrap_or(1), text.clone()).column(c[2].parse().unwrap_or(1)).into()
                }
                None => Located::in_file(shown, text).into(),
            }
        }
    }
}

fn load_fix(files: &CatalogFiles, manifest_path: &Path) -> Result<Fix> {
    let shown = files.display(manifest_path);
    let text = files.text(manifest_path)?;
    let manifest: Manifest = serde_yaml::from_str(text).map_err(|e| yaml_error(&shown, &e))?;
    let dir = manifest_path.parent().expect("fix.yaml has a directory").to_path_buf();
    let dir_name = dir.file_name().unwrap_or_default().to_string_lossy().to_string();
    let at = |needle: &str| line_of(text, needle);
    if dir.parent() != Some(Path::new("fixes")) {
        bail_in!(&shown, "manifests live at fixes/<name>/fix.yaml");
    }
    if manifest.name != dir_name {
        bail_at!(&shown, at("name:"), "name `{}` must equal the directory name `{dir_name}`", manifest.name);
    }
    match (&manifest.upstream.status, &manifest.upstream.url, &manifest.upstream.release) {
        (UpstreamStatus::Filed, None, _) => bail_at!(&shown, at("upstream"), "upstream status `filed` needs a url"),
        (UpstreamStatus::Merged, None, _) | (UpstreamStatus::Merged, _, None) => {
            bail_at!(&shown, at("upstream"), "upstream status `merged` needs a url and a release")
        }
        _ => {}
    }
    if manifest.releases.is_empty() {
        bail_at!(&shown, at("releases"), "`releases:` is empty");
    }
    for test in &manifest.tests {
        check_relative(test).map_err(|e| Located::at(&shown, at(test), format!("tests: {e}")))?;
        if !files.files.contains_key(&dir.join(test)) {
            bail_at!(&shown, at(test), "test file `{test}` does not exist");
        }
    }
    let mut variants = Vec::new();
    for (release, body) in &manifest.releases {
        variants.push(load_variant(files, &dir, &shown, text, release, body)?);
    }
    Ok(Fix { manifest, dir, variants })
}

fn load_variant(
    files: &CatalogFiles,
    dir: &Path,
    shown: &str,
    text: &str,
    release: &str,
    body: &Release,
) -> Result<Variant> {
    let rel_line = line_of(text, &format!("{release}:"));
    match (body.upstreamed, body.patches.is_empty()) {
        (true, false) => {
            bail_at!(shown, rel_line, "release {release}: `upstreamed: true` and `patches:` exclude each other")
        }
        (false, true) => bail_at!(shown, rel_line, "release {release}: needs `patches:` or `upstreamed: true`"),
        _ => {}
    }
    for v in &body.verified {
        if !super::manifest::is_release_name(v) {
            bail_at!(shown, line_of(text, v), "release {release}: verified: `{v}` is not a release tag like v0.26.0");
        }
    }
    let mut patches = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in &body.patches {
        let at = |needle: &str| line_of(text, needle);
        check_relative(&entry.file).map_err(|e| Located::at(shown, at(&entry.file), format!("file: {e}")))?;
        let pkg = format!("{}/", entry.tree.as_str());
        if !entry.file.starts_with(&pkg) {
            bail_at!(shown, at(&entry.file), "file `{}` of tree `{}` must be inside `{pkg}`", entry.file, entry.tree);
        }
        if !seen.insert((entry.tree, entry.file.clone())) {
            bail_at!(
                shown,
                at(&entry.file),
                "release {release} patches `{}` twice; use one patch per file",
                entry.file
            );
        }
        check_relative(&entry.patch).map_err(|e| Located::at(shown, at(&entry.patch), format!("patch: {e}")))?;
        if entry.pristine_sha256.len() != 64
            || !entry.pristine_sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            bail_at!(shown, at(&entry.pristine_sha256), "pristine_sha256 must be 64 lowercase hex digits");
        }
        let patch_path = dir.join(&entry.patch);
        if !files.files.contains_key(&patch_path) {
            bail_at!(
                shown,
                at(&entry.patch),
                "patch `{}` does not exist ({})",
                entry.patch,
                files.display(&patch_path)
            );
        }
        let patch_text = files.text(&patch_path)?;
        let parsed = parse::parse(patch_text, Path::new(&files.display(&patch_path)))?;
        if parsed.files.len() != 1 {
            bail_in!(
                files.display(&patch_path),
                "a patch must touch exactly one file (its entry's `{}`); it touches {}",
                entry.file,
                parsed.files.len()
            );
        }
        let diff = parsed.files.into_iter().next().expect("one file");
        if diff.old_path != entry.file || diff.new_path != entry.file {
            let line = line_of(patch_text, "--- ");
            bail_at!(
                files.display(&patch_path),
                line,
                "patch touches `{}`, but its entry in {shown} declares `{}`",
                diff.new_path,
                entry.file
            );
        }
        patches.push(VariantPatch {
            tree: entry.tree,
            file: entry.file.clone(),
            patch_path,
            pristine_sha256: entry.pristine_sha256.clone(),
            diff,
        });
    }
    check_detect(shown, text, release, body)?;
    Ok(Variant {
        release: release.to_string(),
        upstreamed: body.upstreamed,
        patches,
        verified: body.verified.clone(),
        detect: body.detect.clone(),
    })
}

/// `detect:` belongs to an `upstreamed: true` release; each entry names a file inside its
/// tree's package and some text.
fn check_detect(shown: &str, text: &str, release: &str, body: &Release) -> Result<()> {
    if !body.detect.is_empty() && !body.upstreamed {
        bail_at!(shown, line_of(text, "detect:"), "release {release}: `detect:` needs `upstreamed: true`");
    }
    for entry in &body.detect {
        let at = line_of(text, &entry.file);
        check_relative(&entry.file).map_err(|e| Located::at(shown, at, format!("detect file: {e}")))?;
        let pkg = format!("{}/", entry.tree.as_str());
        if !entry.file.starts_with(&pkg) {
            bail_at!(shown, at, "detect file `{}` of tree `{}` must be inside `{pkg}`", entry.file, entry.tree);
        }
        if entry.text.trim().is_empty() {
            bail_at!(shown, at, "release {release}: detect text for `{}` is empty", entry.file);
        }
    }
    Ok(())
}
