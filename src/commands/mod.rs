//! One file per subcommand; each turns flags into a plan, runs it and returns an [`ExitStatus`].
//!
//! [`ExitStatus`]: crate::exit_status::ExitStatus

pub mod apply;
pub mod bench;
pub mod diff;
pub mod equiv;
pub mod lint;
pub mod list;
pub mod matrix;
pub mod port;
pub mod record;
pub mod revert;
pub mod session;
pub mod show;
pub mod status;
pub mod test;

/// The error for `equiv` / `bench` in a build without libtorch.
#[cfg(not(feature = "reference"))]
pub(crate) fn reference_missing(command: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`{command}` needs the reference sampler, which this binary was built without; \
         run `bash scripts/setup-venv.sh` and rebuild with \
         `cargo build --release --features reference` (see README, \"Reference sampler\")"
    )
}
