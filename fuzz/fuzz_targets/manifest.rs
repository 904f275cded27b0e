//! `Catalog::from_files` on a catalogue whose one fix.yaml (and its patch) are arbitrary bytes:
//! an error or a catalogue, never a panic; and what loads keeps the catalogue's promises.
//!
//! Input: the fix.yaml bytes, optionally followed by `\n%%PATCH%%\n` and the patch bytes (the
//! patch is otherwise a small valid one), so seeds can be written by hand.

#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;

use gaudi_fixes::catalog::manifest::check_relative;
use gaudi_fixes::catalog::source::CatalogFiles;
use gaudi_fixes::catalog::Catalog;
use libfuzzer_sys::fuzz_target;

const SEPARATOR: &[u8] = b"\n%%PATCH%%\n";
const PATCH: &[u8] = b"--- a/vllm/m.py\n+++ b/vllm/m.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";

fuzz_target!(|data: &[u8]| {
    let (yaml, patch) = match data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        Some(at) => (&data[..at], &data[at + SEPARATOR.len()..]),
        None => (data, PATCH),
    };
    let mut files = BTreeMap::new();
    files.insert(PathBuf::from("fixes/f/fix.yaml"), yaml.to_vec());
    files.insert(PathBuf::from("fixes/f/v1/m.patch"), patch.to_vec());
    files.insert(PathBuf::from("profiles/default.yaml"), b"name: default\ndescription: d\nfixes: []\n".to_vec());
    let Ok(catalog) = Catalog::from_files(CatalogFiles { origin: "fuzz".into(), dir: None, files }) else { return };
    for fix in &catalog.fixes {
        assert_eq!(fix.manifest.name, "f");
        assert!(!fix.variants.is_empty());
        for variant in &fix.variants {
            assert!(variant.upstreamed != !variant.patches.is_empty());
            for vp in &variant.patches {
                assert!(check_relative(&vp.file).is_ok(), "{}", vp.file);
                assert!(vp.file.starts_with(&format!("{}/", vp.tree.as_str())), "{}", vp.file);
                assert_eq!(vp.diff.new_path, vp.file);
                assert_eq!(vp.diff.old_path, vp.file);
                assert!(vp.patch_path.starts_with("fixes/f"), "{}", vp.patch_path.display());
                assert!(!vp.diff.hunks.is_empty());
            }
        }
    }
    let names: Vec<String> = catalog.fixes.iter().map(|f| f.manifest.name.clone()).collect();
    let _ = catalog.order(&names);
});
