//! The catalogue: fix manifests ([`manifest`]), profiles ([`profile`]), and loading, ordering and
//! linting them ([`catalog`], [`lint`]); which catalogue it is ([`identity`]); which
//! conformance features a fix's bug shows in ([`conform_key`]); `requires:` and profile `include:` ([`relations`]); the one
//! chain simulator fixes made on top of each other are judged and applied by ([`chain`]). The
//! shipped catalogue is built into the binary ([`source`]).

#[allow(clippy::module_inception)]
pub mod catalog;
pub mod chain;
pub mod conform_key;
pub mod finding;
pub mod identity;
pub mod lint;
pub mod manifest;
pub mod profile;
pub mod relations;
pub mod source;

pub use catalog::{Catalog, Fix, Variant, VariantPatch, SUPPORT_DIR};
pub use identity::CatalogIdentity;
pub use manifest::{Kind, Manifest};
pub use profile::Profile;
