//! Edit a fix.yaml as text, so comments and layout survive: set a variant's `verified:` list,
//! or add/replace a release variant (a new one goes in release order). Block style (as the
//! catalogue writes it) is required; a comment may follow a key (`releases:  # …`); every line
//! keeps its own ending (a CRLF file stays CRLF). Every result is parsed again and checked
//! before it is used.

use anyhow::{bail, Result};

use crate::catalog::manifest::{release_order, same_release, Manifest, PatchEntry};

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// `line` without a trailing comment (` # …`) and without surrounding spaces.
fn content(line: &str) -> &str {
    let t = line.trim();
    if t.starts_with('#') {
        return "";
    }
    let cut = t.char_indices().find(|&(i, c)| c == '#' && t[..i].ends_with([' ', '\t'])).map_or(t.len(), |(i, _)| i);
    t[..cut].trim_end()
}

/// The key of a line holding only `key:` (a comment may follow), unquoted.
fn key(line: &str) -> Option<&str> {
    let k = content(line).strip_suffix(':')?;
    let k = k.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')).unwrap_or(k);
    Some(k.strip_prefix('"').and_then(|k| k.strip_suffix('"')).unwrap_or(k))
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// The lines of `text` (without their endings) and each one's ending (`""` for a last line
/// without one).
fn split(text: &str) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut eols = Vec::new();
    for piece in text.split_inclusive('\n') {
        let body = piece.strip_suffix('\n').map_or(piece, |b| b.strip_suffix('\r').unwrap_or(b));
        eols.push(piece[body.len()..].to_string());
        lines.push(body.to_string());
    }
    (lines, eols)
}

/// The lines joined again, each with its own ending; a new line (ending `None`) takes the
/// file's (its first line's), and every line but the last ends.
fn join(lines: &[String], eols: &[Option<String>]) -> String {
    let default = eols.iter().flatten().find(|e| !e.is_empty()).cloned().unwrap_or_else(|| "\n".into());
    let mut s = String::new();
    for (i, (line, eol)) in lines.iter().zip(eols).enumerate() {
        s.push_str(line);
        match eol.as_deref() {
            Some("") if i + 1 == lines.len() => {}
            Some("") | None => s.push_str(&default),
            Some(e) => s.push_str(e),
        }
    }
    s
}

/// The line index of `releases:` and the range of lines of its block.
fn releases_block(lines: &[String]) -> Result<(usize, usize)> {
    let Some(at) = lines.iter().position(|l| indent(l) == 0 && key(l) == Some("releases")) else {
        bail!(
            "no block-style `releases:` line (a flow mapping `releases: {{…}}` cannot be edited; write it as a block)"
        );
    };
    // A comment at column 0 does not end the block (YAML reads on past it); trailing blank
    // lines and comments belong after it (to the key that follows).
    let mut end = at + 1;
    while end < lines.len() && (lines[end].trim().is_empty() || indent(&lines[end]) > 0 || is_comment(&lines[end])) {
        end += 1;
    }
    while end > at + 1 && (lines[end - 1].trim().is_empty() || is_comment(&lines[end - 1])) {
        end -= 1;
    }
    Ok((at, end))
}

/// The indent of the release keys of the block (2 when it has none).
fn entry_indent(lines: &[String], block: (usize, usize)) -> usize {
    (block.0 + 1..block.1).find(|&i| !content(&lines[i]).is_empty()).map_or(2, |i| indent(&lines[i]))
}

/// The lines [key, end) of release `name` (any spelling) inside the releases block, if present.
fn release_entry(lines: &[String], block: (usize, usize), name: &str) -> Option<(usize, usize, usize)> {
    let ind = entry_indent(lines, block);
    let start = (block.0 + 1..block.1).find(|&i| {
        indent(&lines[i]) == ind && !is_comment(&lines[i]) && key(&lines[i]).is_some_and(|k| same_release(k, name))
    })?;
    let mut end = start + 1;
    while end < block.1 && (lines[end].trim().is_empty() || indent(&lines[end]) > ind || is_comment(&lines[end])) {
        end += 1;
    }
    // Blank lines and comments before the next key are that key's.
    while end > start + 1 && (lines[end - 1].trim().is_empty() || is_comment(&lines[end - 1])) {
        end -= 1;
    }
    Some((start, end, ind))
}

/// Where a new release `name` goes: before the first release that comes after it (and the
/// comment lines right above that one), else at the end of the block.
fn insert_at(lines: &[String], block: (usize, usize), name: &str) -> usize {
    let ind = entry_indent(lines, block);
    let Some(order) = release_order(name) else { return block.1 };
    let later = (block.0 + 1..block.1).find(|&i| {
        indent(&lines[i]) == ind && key(&lines[i]).and_then(release_order).is_some_and(|other| other > order)
    });
    let Some(mut at) = later else { return block.1 };
    while at > block.0 + 1 && is_comment(&lines[at - 1]) {
        at -= 1;
    }
    at
}

/// Set release `name`'s `verified:` list to `releases`.
pub fn set_verified(text: &str, name: &str, releases: &[String]) -> Result<String> {
    let (lines, eols) = split(text);
    let block = releases_block(&lines)?;
    let Some((start, end, ind)) = release_entry(&lines, block, name) else {
        bail!("release `{name}` not found under `releases:`");
    };
    let child = (start + 1..end).find(|&i| !content(&lines[i]).is_empty()).map_or(ind + 2, |i| indent(&lines[i]));
    let mut new_line = format!("{}verified: [{}]", " ".repeat(child), releases.join(", "));
    let mut out = lines.clone();
    let mut out_eols: Vec<Option<String>> = eols.into_iter().map(Some).collect();
    match (start + 1..end).find(|&i| indent(&lines[i]) == child && content(&lines[i]).starts_with("verified:")) {
        Some(i) => {
            if content(&lines[i]).ends_with(':') {
                bail!("release `{name}`: `verified:` is a block list; write it as `verified: [..]` to have it edited");
            }
            // A comment after the list stays.
            let kept = content(&lines[i]).len() + indent(&lines[i]);
            new_line.push_str(&lines[i][kept..]);
            out[i] = new_line;
        }
        None => {
            out.insert(start + 1, new_line);
            out_eols.insert(start + 1, None);
        }
    }
    let result = join(&out, &out_eols);
    let m: Manifest =
        serde_yaml::from_str(&result).map_err(|e| anyhow::anyhow!("edited fix.yaml does not parse: {e}"))?;
    if m.releases.get(name).map(|r| &r.verified) != Some(&releases.to_vec()) {
        bail!("editing verified: of `{name}` did not give the list asked for");
    }
    Ok(result)
}

/// Add release `key` with `patches` and `verified` (replacing an entry of that name in place;
/// a new one goes in release order).
pub fn put_release(text: &str, key: &str, patches: &[PatchEntry], verified: &[String]) -> Result<String> {
    let (lines, eols) = split(text);
    let block = releases_block(&lines)?;
    let ind = entry_indent(&lines, block);
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
    let range = match release_entry(&lines, block, key) {
        Some((start, end, _)) => {
            // A refreshed entry keeps its comments: the one after its key, and the comment
            // lines inside it (placed after the key, their order kept).
            let after_key = lines[start]
                .split_once(':')
                .map(|(_, rest)| rest.to_string())
                .filter(|rest| rest.trim_start().starts_with('#'));
            if let Some(comment) = after_key {
                entry[0].push_str(&comment);
            }
            let kept: Vec<String> = lines[start + 1..end].iter().filter(|l| is_comment(l)).cloned().collect();
            entry.splice(1..1, kept);
            start..end
        }
        None => {
            let at = insert_at(&lines, block, key);
            at..at
        }
    };
    let new_eols = vec![None; entry.len()];
    let mut out = lines.clone();
    let mut out_eols: Vec<Option<String>> = eols.into_iter().map(Some).collect();
    out.splice(range.clone(), entry);
    out_eols.splice(range, new_eols);
    let result = join(&out, &out_eols);
    let m: Manifest =
        serde_yaml::from_str(&result).map_err(|e| anyhow::anyhow!("edited fix.yaml does not parse: {e}"))?;
    let got = m.releases.get(key).map(|r| r.patches.iter().map(|p| (&p.file, &p.patch)).collect::<Vec<_>>());
    let want: Vec<_> = patches.iter().map(|p| (&p.file, &p.patch)).collect();
    if got != Some(want) || m.releases.get(key).map(|r| &r.verified) != Some(&verified.to_vec()) {
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

    #[test]
    fn endings_comments_and_order_are_kept() {
        let p = PatchEntry {
            tree: TreeName::Vllm,
            file: "vllm/a.py".into(),
            patch: "v0.25.0/a.patch".into(),
            pristine_sha256: "bb".into(),
        };
        // CRLF, a comment after `releases:` and after a key, and no final newline.
        let y = Y.replace("releases:\n", "releases:  # per release\n").replace("  v0.26.0:\n", "  v0.26.0:  # first\n");
        let y = y.trim_end().replace('\n', "\r\n");
        let added = put_release(&y, "v0.25.0", std::slice::from_ref(&p), &["v0.25.0".into()]).unwrap();
        let m: Manifest = serde_yaml::from_str(&added).unwrap();
        assert_eq!(m.releases.keys().collect::<Vec<_>>(), ["v0.25.0", "v0.26.0"]);
        assert_eq!(added.matches('\n').count(), added.matches("\r\n").count(), "{added:?}");
        assert!(added.ends_with("tests: [t.py]") && added.contains("releases:  # per release\r\n"), "{added:?}");
        let replaced = put_release(&added, "v0.26.0", std::slice::from_ref(&p), &[]).unwrap();
        assert_eq!(replaced.matches("v0.26.0:").count(), 1, "{replaced:?}");
        let verified = set_verified(&added, "v0.25.0", &["v0.25.0".into(), "v0.26.0".into()]).unwrap();
        assert!(verified.contains("    verified: [v0.25.0, v0.26.0]\r\n"), "{verified:?}");
    }
}
