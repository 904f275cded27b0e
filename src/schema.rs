//! The version of every `--format json` document (README, "JSON output"): what `report/`
//! writes and `matrix --merge` reads back, so it lives below both.

/// Schema version; bumped only on incompatible changes.
pub const JSON: u32 = 1;
