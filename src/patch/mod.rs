//! Unified diffs: parsing ([`parse`]), exact location of hunks in a file ([`locate`]), the
//! per-hunk state that follows ([`state`]), and the source text model ([`text`]).

pub mod locate;
pub mod parse;
pub mod pytoken;
pub mod state;
pub mod text;

pub use parse::{FilePatch, Hunk, HunkLine, Patch};
pub use state::{FileState, HunkReport, HunkState, Side};
pub use text::SourceText;
