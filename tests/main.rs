//! The integration tests: one binary (like ripgrep's and ruff's), one module per concern, the
//! shared builders in [`common`] (fixture trees, the command runner that shows command, dir and
//! tree on failure, `assert_same`). Each drives the real `gaudi-fixes` binary.

mod common;

mod bytecode_upgrade;
mod catalog_writes;
mod chain_states;
mod cli;
mod closed_stdout;
mod completion;
mod conform;
mod conform_setup;
mod conventions;
mod discovery;
mod docs;
mod github_format;
mod hangs_and_leaks;
mod hostile;
mod matrix_merge;
mod noop_apply;
mod pairing;
mod placement;
mod promises;
mod properties;
mod pytest_runner;
mod readers;
mod real_trees;
mod reasons;
mod reference;
mod relations;
mod reliability;
mod scripts_heartbeat;
mod shared_cache;
mod snapshots;
mod upkeep;
mod upstream_detect;
