//! The vocabulary of trees: the two source trees a fix may patch ([`TreeName`]) and which of
//! them a run may touch ([`TreeFilter`], `--only-tree`). Ground floor: knows no flags.

use std::str::FromStr;

/// The two source trees a fix may patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeName {
    /// vLLM core (the directory holding `vllm/`).
    Vllm,
    /// The Gaudi plugin (the directory holding `vllm_gaudi/`).
    VllmGaudi,
}

impl TreeName {
    /// The package directory name inside the tree root, as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            TreeName::Vllm => "vllm",
            TreeName::VllmGaudi => "vllm_gaudi",
        }
    }

    /// Both trees, in report order.
    pub const ALL: [TreeName; 2] = [TreeName::Vllm, TreeName::VllmGaudi];
}

impl std::fmt::Display for TreeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TreeName {
    type Err = String;

    /// The manifest spelling, or `vllm-gaudi` (the flag spelling people type).
    fn from_str(s: &str) -> Result<TreeName, String> {
        match s {
            "vllm" => Ok(TreeName::Vllm),
            "vllm_gaudi" | "vllm-gaudi" => Ok(TreeName::VllmGaudi),
            _ => Err(format!("`{s}` is not a tree (vllm, vllm_gaudi)")),
        }
    }
}

/// Which trees a run may touch or inspect; the others are reported as skipped. Empty (no
/// `--only-tree`) means every tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeFilter(Vec<TreeName>);

impl TreeFilter {
    /// Only these trees; an empty list means all of them.
    pub fn only(trees: Vec<TreeName>) -> TreeFilter {
        TreeFilter(trees)
    }

    /// Every tree.
    pub fn all() -> TreeFilter {
        TreeFilter::default()
    }

    /// Whether the run may touch `tree`.
    pub fn includes(&self, tree: TreeName) -> bool {
        self.0.is_empty() || self.0.contains(&tree)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_filter_includes_every_tree_and_a_list_only_its_own() {
        assert!(TreeName::ALL.iter().all(|&t| TreeFilter::all().includes(t)));
        let only = TreeFilter::only(vec![TreeName::VllmGaudi]);
        assert!(only.includes(TreeName::VllmGaudi));
        assert!(!only.includes(TreeName::Vllm));
    }

    #[test]
    fn names_parse_in_both_spellings_and_print_as_in_manifests() {
        for t in TreeName::ALL {
            assert_eq!(t.as_str().parse::<TreeName>(), Ok(t));
        }
        assert_eq!("vllm-gaudi".parse::<TreeName>(), Ok(TreeName::VllmGaudi));
        assert!("torch".parse::<TreeName>().is_err());
    }
}
