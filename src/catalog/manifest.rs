//! `fixes/<name>/fix.yaml`: the schema, and the checks serde cannot express. Unknown keys are
//! errors; every error names the file and line. The schema is documented in fixes/README.md.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::tree::TreeName;

/// One fix's manifest.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Must equal the fix's directory name.
    pub name: String,
    /// One line for `list`.
    pub summary: String,
    pub kind: Kind,
    pub upstream: Upstream,
    /// Fixes this one is only sound with: selecting it selects them (applied first), and they
    /// cannot be reverted while it is applied.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Fixes that must be applied first when both are selected.
    #[serde(default)]
    pub after: Vec<String>,
    /// Fixes that must never be selected together with this one.
    #[serde(default)]
    pub conflicts: Vec<String>,
    /// Per upstream release (as named by its tag, e.g. `v0.26.0`), in manifest order.
    pub releases: IndexMap<String, Release>,
    /// Test files of the fix, relative to its directory.
    #[serde(default)]
    pub tests: Vec<String>,
    /// The conformance suite's features (`gaudi-fixes conform`'s rows, e.g. `min_p`) that this
    /// fix's bug shows in: conform's table names the fix beside them. Every fix of the `default`
    /// profile names at least one (`lint`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conform: Vec<String>,
}

/// Why the fix exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Makes something faster; opt-in (not in the default profile).
    Performance,
    /// Makes something right.
    Correctness,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Performance => "performance",
            Kind::Correctness => "correctness",
        })
    }
}

/// Where the fix stands upstream (after DEP-3's `Forwarded:` / `Applied-Upstream:`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub status: UpstreamStatus,
    /// Required for `filed` and `merged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Required for `merged`: the first release that contains the fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

/// Upstream status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamStatus {
    NotFiled,
    Filed,
    Merged,
}

/// One release's variant: patches to apply, or nothing because upstream has the fix.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    #[serde(default)]
    pub patches: Vec<PatchEntry>,
    #[serde(default)]
    pub upstreamed: bool,
    /// Releases (tags, e.g. `v0.26.0`) on which this variant applied and the fix's tests
    /// passed; written by `gaudi-fixes matrix --record`. Applying to a release not listed is a
    /// note ("unverified"), never an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verified: Vec<String>,
    /// With `upstreamed: true`: text that upstream's fix puts in the files (its post-image). A
    /// tree holding every entry carries the fix, whatever its version says; the version hint
    /// is then not used for this release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detect: Vec<DetectEntry>,
}

/// Text that marks upstream's fix in one file (see `Release::detect`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DetectEntry {
    pub tree: TreeName,
    /// The file, relative to the tree root, starting with the package (`vllm_gaudi/…`).
    pub file: String,
    /// Lines found exactly, as one block (line endings aside), somewhere in the file.
    pub text: String,
}

/// Whether `name` looks like a release tag: `v` then dot-separated numbers, optionally a
/// pre/post suffix (`v0.26.0`, `v0.10.1.post1`, `v0.11.0rc2`).
pub fn is_release_name(name: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^v[0-9]+(\.[0-9]+)+((\.post|rc|\.dev)[0-9]+)?$").expect("valid regex"))
        .is_match(name)
}

/// The one spelling of a release name: `v` and at least three numbers without leading zeros,
/// then the suffix if any — `0.34`, `v0.34`, `0.34.0` and `v00.034.0` are all `v0.34.0`. `None`
/// for a name that is not a version.
pub fn canonical_release(name: &str) -> Option<String> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^v?([0-9]+(?:\.[0-9]+)+)(?:(\.post|rc|\.dev)([0-9]+))?$").expect("valid regex")
    });
    let c = re.captures(name)?;
    let mut numbers: Vec<u64> = c[1].split('.').map(|n| n.parse().ok()).collect::<Option<_>>()?;
    while numbers.len() < 3 {
        numbers.push(0);
    }
    let mut tag = format!("v{}", numbers.iter().map(u64::to_string).collect::<Vec<_>>().join("."));
    if let (Some(kind), Some(n)) = (c.get(2), c.get(3)) {
        tag.push_str(&format!("{}{}", kind.as_str(), n.as_str().parse::<u64>().ok()?));
    }
    Some(tag)
}

/// Whether fix.yaml key `key` names release `name`, however either is spelled (`v0.26:`,
/// `0.26.0`, `v0.26.0` are one release): how `record` and `port` find a release.
pub fn same_release(key: &str, name: &str) -> bool {
    key == name || canonical_release(key).is_some_and(|k| Some(k) == canonical_release(name))
}

/// A release's place in [`release_order`]: its numbers, its kind (dev, rc, final, post), its
/// suffix's number.
pub type ReleaseOrder = (Vec<u64>, u8, u64);

/// The order of releases: by number (`v0.9.0` before `v0.10.0`), a `.devN` and `rcN` before
/// its release, a `.postN` after it. `None` for a name that is not a version.
pub fn release_order(name: &str) -> Option<ReleaseOrder> {
    let tag = canonical_release(name)?;
    let bare = &tag[1..];
    let (numbers, rank, n) = match [(".dev", 0), ("rc", 1), (".post", 3)].into_iter().find_map(|(s, r)| {
        let (head, n) = bare.split_once(s)?;
        Some((head, r, n.parse().ok()?))
    }) {
        Some(found) => found,
        None => (bare, 2, 0),
    };
    Some((numbers.split('.').map(|n| n.parse().unwrap_or(0)).collect(), rank, n))
}

/// The one sort key for release names, wherever releases are listed (matrix, completion, lint,
/// verified:): [`release_order`] for a version (`v0.26.0rc1` before `v0.26.0`), names that are
/// not versions first, by text.
pub fn release_key(name: &str) -> (Option<ReleaseOrder>, String) {
    (release_order(name), name.to_string())
}

/// One file a variant patches.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PatchEntry {
    pub tree: TreeName,
    /// The file, relative to the tree root, starting with the package (`vllm/…`).
    pub file: String,
    /// The unified diff, relative to the fix directory.
    pub patch: String,
    /// sha256 of the untouched upstream file.
    pub pristine_sha256: String,
}

/// Check a manifest-relative path: relative, no `..`, no backslashes or empty parts.
pub fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path".into());
    }
    if path.starts_with('/') || path.contains('\\') || path.contains(':') {
        return Err(format!("`{path}` must be a relative path with `/` separators"));
    }
    if path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err(format!("`{path}` must not contain `..`, `.` or empty components"));
    }
    Ok(())
}

/// The 1-based line of the first line of `text` containing `needle` (1 when absent), so a
/// semantic error can still point at the right place.
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).map_or(1, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert!(check_relative("vllm/a.py").is_ok());
        for bad in ["", "/etc/passwd", "vllm/../x", "./vllm", "vllm//a", "C:\\x", "a\\b"] {
            assert!(check_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn release_names_have_one_spelling_and_an_order() {
        for alias in ["0.34", "v0.34", "0.34.0", "v00.034.0", "v0.34.0"] {
            assert_eq!(canonical_release(alias).as_deref(), Some("v0.34.0"), "{alias}");
        }
        assert_eq!(canonical_release("0.11.0rc02").as_deref(), Some("v0.11.0rc2"));
        assert_eq!(canonical_release("v0.10.1.post1").as_deref(), Some("v0.10.1.post1"));
        for bad in ["banana", "v1", "0..26", "v0.26.0.", "latest", "v0.x.1", ""] {
            assert_eq!(canonical_release(bad), None, "{bad}");
        }
        let order = |n: &str| release_order(n).unwrap();
        assert!(order("v0.9.0") < order("v0.10.0"));
        assert!(order("v0.11.0rc2") < order("v0.11.0") && order("v0.11.0") < order("v0.11.0.post1"));
        assert!(order("v0.11.0.dev1") < order("v0.11.0rc1"));
        let mut tags = vec!["v0.26.0", "v0.26.0rc1", "v0.10.0", "v0.26.0.post1", "v0.9.0", "main"];
        tags.sort_by_key(|t| release_key(t));
        assert_eq!(tags, ["main", "v0.9.0", "v0.10.0", "v0.26.0rc1", "v0.26.0", "v0.26.0.post1"]);
    }

    #[test]
    fn unknown_keys_are_errors_with_a_line() {
        let y = "name: x\nsummary: s\nkind: performance\nupstream: {status: not-filed}\nreleases: {}\ncolour: red\n";
        let err = serde_yaml::from_str::<Manifest>(y).unwrap_err();
        assert_eq!(err.location().map(|l| l.line()), Some(6), "{err}");
    }
}
