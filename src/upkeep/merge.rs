//! A line-based three-way merge (diff3): carry the change base → ours onto theirs, where
//! theirs is base changed by upstream. Changes that touch or overlap upstream's changes are
//! conflicts, shown to the maintainer, never guessed.

use similar::{capture_diff_slices, Algorithm, DiffOp};

/// One change of base: replace `base[start..end]` by `lines`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    start: usize,
    end: usize,
    lines: Vec<String>,
}

fn changes(base: &[String], other: &[String]) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, base, other) {
        let (start, end, lines) = match op {
            DiffOp::Equal { .. } => continue,
            DiffOp::Delete { old_index, old_len, .. } => (old_index, old_index + old_len, Vec::new()),
            DiffOp::Insert { old_index, new_index, new_len } => {
                (old_index, old_index, other[new_index..new_index + new_len].to_vec())
            }
            DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                (old_index, old_index + old_len, other[new_index..new_index + new_len].to_vec())
            }
        };
        // Adjacent ops (a delete then an insert) are one change.
        match out.last_mut() {
            Some(last) if last.end == start => {
                last.end = end;
                last.lines.extend(lines);
            }
            _ => out.push(Change { start, end, lines }),
        }
    }
    out
}

/// A region both sides changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// 1-based first line in base.
    pub base_line: usize,
    pub base: Vec<String>,
    pub ours: Vec<String>,
    pub theirs: Vec<String>,
}

/// Merge: `Ok(lines)` or the conflicts.
pub fn merge3(base: &[String], ours: &[String], theirs: &[String]) -> Result<Vec<String>, Vec<Conflict>> {
    let a = changes(base, ours);
    let b = changes(base, theirs);
    // Walk both change lists in base order, grouping changes that overlap or touch.
    let mut all: Vec<(bool, &Change)> = a.iter().map(|c| (true, c)).chain(b.iter().map(|c| (false, c))).collect();
    all.sort_by_key(|(ours, c)| (c.start, c.end, !*ours));
    let mut out = Vec::new();
    let mut conflicts = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while i < all.len() {
        let (mut lo, mut hi) = (all[i].1.start, all[i].1.end);
        let mut j = i + 1;
        // Touching counts (git's rule): a change right next to another may depend on it.
        while j < all.len() && all[j].1.start <= hi {
            hi = hi.max(all[j].1.end);
            lo = lo.min(all[j].1.start);
            j += 1;
        }
        let group = &all[i..j];
        out.extend_from_slice(&base[pos..lo]);
        let has_ours = group.iter().any(|(o, _)| *o);
        let has_theirs = group.iter().any(|(o, _)| !*o);
        // One side's region, rebuilt from base over [lo, hi).
        let side = |want: bool| -> Vec<String> {
            let mut v = Vec::new();
            let mut p = lo;
            for (_, c) in group.iter().filter(|(o, _)| *o == want) {
                v.extend_from_slice(&base[p..c.start]);
                v.extend(c.lines.iter().cloned());
                p = c.end;
            }
            v.extend_from_slice(&base[p..hi]);
            v
        };
        if has_ours && has_theirs {
            let (o, t) = (side(true), side(false));
            if o == t {
                out.extend(o);
            } else {
                conflicts.push(Conflict { base_line: lo + 1, base: base[lo..hi].to_vec(), ours: o, theirs: t });
            }
        } else {
            out.extend(side(has_ours));
        }
        pos = hi;
        i = j;
    }
    out.extend_from_slice(&base[pos..]);
    if conflicts.is_empty() {
        Ok(out)
    } else {
        Err(conflicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Vec<String> {
        s.split(' ').filter(|x| !x.is_empty()).map(str::to_string).collect()
    }

    #[test]
    fn separate_changes_both_land() {
        // Upstream adds an import near the top; the fix edits further down.
        let base = l("a b c d e f g");
        let ours = l("a b c d E f g");
        let theirs = l("a X b c d e f g");
        assert_eq!(merge3(&base, &ours, &theirs), Ok(l("a X b c d E f g")));
    }

    #[test]
    fn overlapping_changes_conflict() {
        let base = l("a b c d");
        let ours = l("a B c d");
        let theirs = l("a b2 c d");
        let err = merge3(&base, &ours, &theirs).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].base_line, 2);
        assert_eq!((err[0].ours.clone(), err[0].theirs.clone()), (l("B"), l("b2")));
    }

    #[test]
    fn adjacent_changes_conflict_like_git() {
        // Changed lines next to each other, or insertions at one place, may depend on each
        // other: shown, not guessed.
        let base = l("a b c d");
        assert!(merge3(&base, &l("a B c d"), &l("a b C d")).is_err());
        assert!(merge3(&base, &l("a b X c d"), &l("a b Y c d")).is_err());
    }

    #[test]
    fn identical_changes_merge_once() {
        let base = l("a b c");
        let both = l("a B c");
        assert_eq!(merge3(&base, &both, &both), Ok(both.clone()));
    }
}
