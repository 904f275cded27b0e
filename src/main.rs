//! The `gaudi-fixes` binary: parse, run, print the error chain once, exit with a typed status.
//! With `--format json` an error is a JSON document on stdout too (`error`, `exit_code` 3),
//! so every run prints exactly one document.

use std::process::ExitCode;

use gaudi_fixes::cli::{self, Cli};
use gaudi_fixes::report;

fn main() -> ExitCode {
    // A shell's completion function asking (GAUDI_FIXES_COMPLETE set): answer and exit.
    cli::complete::answer_if_asked();
    let cli = match Cli::parse_or_usage_error() {
        Ok(cli) => cli,
        Err(status) => {
            report::error::usage(status, cli::wants_json(std::env::args_os()));
            return status.into();
        }
    };
    let (format, command) = (cli.global.format.into(), cli.command.name());
    // An error's advice is written out with the flags that chose the run's catalogue and trees.
    let invocation = cli.global.settings().invocation();
    match gaudi_fixes::run(cli) {
        Ok(status) => status.into(),
        // Only reached by commands whose result does not depend on their output (list, show).
        Err(err) if gaudi_fixes::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let code = gaudi_fixes::error_code(&err);
            report::error::print(&err, format, command, code, &invocation);
            ExitCode::from(code)
        }
    }
}
