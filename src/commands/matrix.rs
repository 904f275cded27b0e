//! stub
use anyhow::Result;
use crate::exit_status::ExitStatus;
pub fn run(_g: &crate::cli::GlobalArgs, _a: &crate::cli::MatrixArgs) -> Result<ExitStatus> { anyhow::bail!("not yet") }
