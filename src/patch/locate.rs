//! Exact hunk location: an image (a run of lines) is found only where every line is equal.
//! No fuzz, ever. The search starts at the line the hunk header names (shifted by the offset
//! earlier hunks of the file were found at) and moves outwards, so the nearest exact match wins,
//! as GNU patch does without its fuzz.

use std::collections::HashMap;

/// Find `image` in `lines` at or nearest to `expected` (0-based), at or after `min_start`.
pub fn find_exact(lines: &[String], image: &[&str], expected: usize, min_start: usize) -> Option<usize> {
    if image.is_empty() {
        return None;
    }
    if image.len() > lines.len() {
        return None;
    }
    let last = lines.len() - image.len();
    let matches_at = |start: usize| image.iter().enumerate().all(|(i, l)| lines[start + i] == *l);
    let expected = expected.clamp(min_start.min(last), last);
    let span = expected.max(last - expected);
    for delta in 0..=span {
        if let Some(start) = expected.checked_add(delta).filter(|s| *s <= last) {
            if start >= min_start && matches_at(start) {
                return Some(start);
            }
        }
        if delta > 0 {
            if let Some(start) = expected.checked_sub(delta) {
                if start >= min_start && matches_at(start) {
                    return Some(start);
                }
            }
        }
    }
    None
}

/// Where the file looks most like `image`: the alignment where the most lines agree (ties go
/// to the one nearest `expected`). Returns (start, agreeing lines). Used to show a drifted
/// hunk's nearest actual lines.
pub fn nearest(lines: &[String], image: &[&str], expected: usize) -> Option<(usize, usize)> {
    if lines.is_empty() || image.is_empty() {
        return None;
    }
    let mut positions: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        positions.entry(l.as_str()).or_default().push(i);
    }
    let mut votes: HashMap<isize, usize> = HashMap::new();
    for (i, l) in image.iter().enumerate() {
        // Blank and very common lines say little about where a hunk belongs.
        if l.trim().is_empty() {
            continue;
        }
        if let Some(found) = positions.get(l) {
            if found.len() > 64 {
                continue;
            }
            for &j in found {
                *votes.entry(j as isize - i as isize).or_default() += 1;
            }
        }
    }
    let max_start = lines.len().saturating_sub(1) as isize;
    votes
        .into_iter()
        .map(|(start, v)| (start.clamp(0, max_start) as usize, v))
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.abs_diff(expected).cmp(&a.0.abs_diff(expected))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn finds_nearest_exact_match() {
        let l = lines("x a b x a b x");
        assert_eq!(find_exact(&l, &["a", "b"], 0, 0), Some(1));
        assert_eq!(find_exact(&l, &["a", "b"], 4, 0), Some(4));
        assert_eq!(find_exact(&l, &["a", "b"], 6, 0), Some(4));
        assert_eq!(find_exact(&l, &["a", "b"], 0, 2), Some(4));
        assert_eq!(find_exact(&l, &["a", "c"], 0, 0), None);
    }

    #[test]
    fn no_fuzz() {
        let l = lines("a b c d");
        assert_eq!(find_exact(&l, &["a", "B", "c"], 0, 0), None);
        assert_eq!(find_exact(&l, &["a", "b", "c", "d", "e"], 0, 0), None);
    }

    #[test]
    fn nearest_prefers_most_agreeing_lines() {
        let l = lines("q a b c d q");
        assert_eq!(nearest(&l, &["a", "b", "X", "d"], 0), Some((1, 3)));
    }
}
