//! `profiles/<name>.yaml`: a named set of fixes (`default` = correctness fixes only), which may
//! include other profiles' sets.

use serde::{Deserialize, Serialize};

/// A profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Must equal the file's stem.
    pub name: String,
    pub description: String,
    /// Profiles whose fixes this one selects too (`performance` includes `default`).
    #[serde(default)]
    pub include: Vec<String>,
    /// Fix names; applied in `after:` order whatever the order here.
    #[serde(default)]
    pub fixes: Vec<String>,
}
