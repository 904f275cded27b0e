//! One file per subcommand; each turns its request into a plan, runs it and returns an
//! [`ExitStatus`]. Commands never call each other: the steps two share live in [`session`] and
//! [`select`] here, or in the layers below (`upkeep`, `plan`, `reference`).
//!
//! [`ExitStatus`]: crate::exit_status::ExitStatus

pub mod apply;
pub mod bench;
pub mod conform;
pub mod diff;
pub mod equiv;
pub mod lint;
pub mod list;
pub mod matrix;
pub mod port;
pub mod record;
pub mod revert;
pub mod select;
pub mod session;
pub mod show;
pub mod status;
pub mod test;

/// The error for `equiv` / `bench` in a build without libtorch.
#[cfg(not(feature = "reference"))]
pub(crate) fn reference_missing(command: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`{command}` needs the reference sampler, which this binary was built without; \
         rebuild from a checkout with libtorch 2.13.0 from the torch venv: \
         `VENV=$(bash scripts/setup-venv.sh | tail -n 1) && PATH=\"$VENV/bin:$PATH\" \
         LIBTORCH_USE_PYTORCH=1 cargo install --locked --path . --features reference` \
         (see README, \"Reference sampler\")"
    )
}
