//! The `gaudi-fixes` binary: parse, run, print the error chain once, exit with a typed status.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match gaudi_fixes::cli::Cli::parse_or_usage_error() {
        Ok(cli) => cli,
        Err(status) => return status.into(),
    };
    match gaudi_fixes::run(cli) {
        Ok(status) => status.into(),
        Err(err) if gaudi_fixes::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gaudi-fixes: error: {err:#}");
            gaudi_fixes::ExitStatus::Error.into()
        }
    }
}
