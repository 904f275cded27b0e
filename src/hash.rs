//! Content hashing: sha256, as manifests, journals and provenance records write it.

use sha2::{Digest, Sha256};

/// sha256 of bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
