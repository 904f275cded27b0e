//! Edit a fix.yaml as text, so comments and layout survive: set a variant's `verified:` list,
//! or add/replace a release variant. Block style (as the catalogue writes it) is required;
//! every result is parsed again and checked before it is used.

use anyhow::{bail, Result};

use crate::catalog::manifest::{Manifest, PatchEntry};

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The line index of `releases:` and the range of lines of its block.
fn releases_block(lines: &[&str]) -> Result<(usize, usize)> {
    let Some(at) = lines.iter().position(|l| l.trim_end() == "releases:") else {
        bail!(
            "no block-style `releases:` line (a flow mapping `releases: {{…}}` cannot be edited; write it as a block)"
        );
    };
    let mut end = at + 1;
    while end < lines.len() && (lines[end].trim().is_empty() || indent(lines[end]) > 0) {
        end += 1;
    }
    // Trailing blank lines belong after the block.
    while end > at + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    Ok((at, end))
}

/// The lines [key, end) of release `key` inside the releases block, if present.
fn release_entry(lines: &[&str], block: (usize, usize), key: &str) -> Option<(usize, usize, usize)> {
    let start = (block.0 + 1..block.1).find(|&i| {
        let t = lines[i].trim();
        t == format!("{key}:") || t == format!("'{key}':") || t == format!("\"{key}\":")
    })?;
    let ind = indent(lines[start]);
    let mut end = start + 1;
    while end < block.1 && (lines[end].trim().is_empty() || indent(lines[end]) > ind) {
        end += 1;
    }
    while end > start + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    Some((start, end, ind))
}

fn join(lines: &[String], trailing_newline: bool) -> String {
    let mut s = lines.join("\n");
    if trailing_newline {
        s.push('\n');
    }
    s
}

/// Set release `key`'s `verified:` list to `releases`.
pub fn set_verified(text: &str, key: &str, releases: &[String]) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let block = releases_block(&lines)?;
    let Some((start, end, ind)) = release_entry(&lines, block, key) else {
        bail!("release `{key}` not found under `releases:`");
    };
    let child = (start + 1..end).find(|&i| !lines[i].trim().is_empty()).map_or(ind + 2, |i| indent(lines[i]));
    let new_line = format!("{}verified: [{}]", " ".repeat(child), releases.join(", "));
    let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    match (start + 1..end).find(|&i| indent(lines[i]) == child && lines[i].trim_start().starts_with("verified:")) {
        Some(i) => {
            if lines[i].trim_end().ends_with(':') {
                bail!("release `{key}`: `verified:` is a block list; write it as `verified: [..]` to have it edited");
            }
            out[i] = new_line;
        }
        None => out.insert(start + 1, new_line),
    }
    let result = join(&out, text.ends_with('\n'));
    let m: Manifest =
        serde_yaml::from_str(&result).map_err(|e| anyhow::anyhow!("edited fix.yaml does not parse: {e}"))?;
    if m.releases.get(key).map(|r| &r.verified) != Some(&releases.to_vec()) {
        bail!("editing verified: of `{key}` did not give the list asked for");
    }
    Ok(result)
}

/// Add release `key` with `patches` (replacing an entry of that name, keeping its
/// `verified:` only when `keep_verified`).
pub fn put_release(text: &str, key: &str, patches: &[PatchEntry], verified: &[String]) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let block = releases_block(&lines)?;
    let ind = (block.0 + 1..block.1).find(|&i| !lines[i].trim().is_empty()).map_or(2, |i| indent(lines[i]));
    let pad = |n: usize| " ".repeat(n);
    let mut entry = vec![format!("{}{key}:", pad(ind))];
    if !verified.is_empty() {
        entry.push(format!("{}verified: [{}]", pad(ind + 2), verified.join(", ")));
    }
    entry.push(format!("{}patches:", pad(ind + 2)));
    for p in patches {
        entry.push(format!("{}- tree: {}", pad(ind + 4), p.tree));
        entry.push(format!("{}file: {}", pad(ind + 6), p.file));
        entry.push(format!("{}patch: {}", pad(ind + 6), p.patch));
        entry.push(format!("{}pristine_sha256: {}", pad(ind + 6), p.pristine_sha256));
    }
    let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    match release_entry(&lines, block, key) {
        Some((start, end, _)) => {
            out.splice(start..end, entry);
        }
        None => {
            out.splice(block.1..block.1, entry);
        }
    }
    let result = join(&out, text.ends_with('\n') || text.is_empty());
    let m: Manifest =
        serde_yaml::from_str(&result).map_err(|e| anyhow::anyhow!("edited fix.yaml does not parse: {e}"))?;
    let got = m.releases.get(key).map(|r| r.patches.iter().map(|p| (&p.file, &p.patch)).collect::<Vec<_>>());
    let want: Vec<_> = patches.iter().map(|p| (&p.file, &p.patch)).collect();
    if got != Some(want) {
        bail!("adding release `{key}` to fix.yaml did not give the entry asked for");
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::TreeName;

    const Y: &str = "name: x\nsummary: s\nkind: performance\nupstream: {status: not-filed}\nreleases:\n  v0.26.0:\n    # a comment that must survive\n    patches:\n      - tree: vllm\n        file: vllm/a.py\n        patch: v0.26.0/a.patch\n        pristine_sha256: aa\ntests: [t.py]\n";

    #[test]
    fn verified_is_inserted_then_replaced() {
        let once = set_verified(Y, "v0.26.0", &["v0.26.0".into()]).unwrap();
        assert!(once.contains("  v0.26.0:\n    verified: [v0.26.0]\n    # a comment"), "{once}");
        let twice = set_verified(&once, "v0.26.0", &["v0.26.0".into(), "v0.27.0".into()]).unwrap();
        assert_eq!(twice.matches("verified:").count(), 1, "{twice}");
        assert!(twice.contains("verified: [v0.26.0, v0.27.0]"), "{twice}");
        assert!(set_verified(Y, "v9", &[]).is_err());
    }

    #[test]
    fn a_release_is_added_inside_the_block_and_replaced_in_place() {
        let p = PatchEntry {
            tree: TreeName::Vllm,
            file: "vllm/a.py".into(),
            patch: "v0.33.0/a.patch".into(),
            pristine_sha256: "bb".into(),
        };
        let added = put_release(Y, "v0.33.0", std::slice::from_ref(&p), &[]).unwrap();
        let m: Manifest = serde_yaml::from_str(&added).unwrap();
        assert_eq!(m.releases.keys().collect::<Vec<_>>(), ["v0.26.0", "v0.33.0"]);
        assert_eq!(m.tests, ["t.py"]);
        let again = put_release(&added, "v0.33.0", &[PatchEntry { pristine_sha256: "cc".into(), ..p }], &[]).unwrap();
        assert_eq!(again.matches("v0.33.0:").count(), 1, "{again}");
        assert!(again.contains("pristine_sha256: cc") && !again.contains("pristine_sha256: bb"), "{again}");
        assert!(again.contains("# a comment that must survive"));
    }
}
