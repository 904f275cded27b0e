//! The integration tests: one binary (like ripgrep's and ruff's), one module per concern, the
//! shared builders in [`common`] (fixture trees, the command runner that shows command, dir and
//! tree on failure, `assert_same`). Each drives the real `gaudi-fixes` binary.

mod common;

mod catalog_writes;
mod chain_states;
mod cli;
mod closed_stdout;
mod conventions;
mod hangs_and_leaks;
mod hostile;
mod matrix_requires;
mod placement;
mod promises;
mod properties;
mod real_trees;
mod reasons;
mod reasons_only_tree;
mod record_on_top;
mod reference;
mod relations;
mod reliability;
mod snapshots;
mod upkeep;
mod upstream_detect;
