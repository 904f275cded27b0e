//! Which catalogue a run used: its origin, how many fixes it holds and a content hash over every
//! file (path and bytes), so `--version` and the provenance record name the exact catalogue, not
//! just the tool version (two builds of one version can embed different catalogues).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Catalog;

/// A catalogue's identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CatalogIdentity {
    /// `<built-in>` or the `--catalog` directory.
    pub origin: String,
    /// Number of fixes.
    pub fixes: usize,
    /// sha256 over each file's path (relative to the catalogue root), length and bytes, in
    /// path order.
    pub sha256: String,
}

impl CatalogIdentity {
    /// The first 12 hex digits of the hash, for one-line displays.
    pub fn short_hash(&self) -> &str {
        &self.sha256[..12.min(self.sha256.len())]
    }
}

impl Catalog {
    /// This catalogue's identity.
    pub fn identity(&self) -> CatalogIdentity {
        let mut hasher = Sha256::new();
        for (path, bytes) in &self.files.files {
            let path = path.to_string_lossy();
            hasher.update((path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        CatalogIdentity { origin: self.files.origin.clone(), fixes: self.fixes.len(), sha256 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_changes_with_any_byte_and_counts_fixes() {
        let catalog = Catalog::load(None).expect("built-in catalogue loads");
        let id = catalog.identity();
        assert_eq!(id.fixes, catalog.fixes.len());
        assert_eq!(id.sha256.len(), 64);
        let mut files = catalog.files.clone();
        let (path, bytes) = files.files.iter_mut().find(|(p, _)| p.ends_with("README.md")).expect("a README");
        bytes.push(b'\n');
        let path = path.clone();
        let changed = Catalog::from_files(files).expect("still loads").identity();
        assert_ne!(changed.sha256, id.sha256, "appending to {} must change the hash", path.display());
    }
}
