//! The version of every `--format json` document (README, "JSON output"): what `report/`
//! writes and `matrix --merge` reads back, so it lives below both.

/// Schema version; bumped only on incompatible changes.
pub const JSON: u32 = 1;

#[cfg(test)]
mod tests {
    /// The domain below `report/` reads the schema version here, and the suite's result from
    /// `upkeep/conform.rs`, never from `report/` (an arrow up the import graph).
    #[test]
    fn nothing_below_report_reads_the_schema_from_report() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        for dir in ["upkeep", "plan", "catalog", "transaction", "patch"] {
            for entry in std::fs::read_dir(src.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let text = if path.is_file() { std::fs::read_to_string(&path).unwrap() } else { String::new() };
                if ["report::json", "report::conform"].iter().any(|up| text.contains(up)) {
                    found.push(path.display().to_string());
                }
            }
        }
        assert!(found.is_empty(), "report/'s data read from below report/: {found:?}");
    }
}
