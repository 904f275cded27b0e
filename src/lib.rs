//! gaudi-fixes: a catalogue of fixes for vLLM and vllm_gaudi sources, applied to installed trees
//! with exact drift detection, plus (feature `reference`) a tch reference sampler that proves a
//! sampler fix draws from the same distribution as stock.
//!
//! Modules:
//! - [`tree`]: tree names and the `--only-tree` filter; [`exit_status`]: the 0/1/2/3 contract;
//!   [`error`]: errors that carry their file and line; [`schema`]: the JSON documents' version;
//!   [`duration`]: a duration in words; [`advice`]: next steps as data, and errors that give them.
//! - [`catalog`]: fix manifests, profiles, ordering and lint.
//! - [`discover`]: which trees to act on.
//! - [`patch`]: unified-diff parsing, exact hunk location, per-hunk state.
//! - [`plan`]: per-fix state and variant choice across trees; the edits to make.
//! - [`transaction`]: all-or-nothing, crash-safe writes under a lock; [`provenance`]: the
//!   record of what was applied, and where it disagrees with the files.
//! - [`upkeep`]: the upkeep operations (pytest runner, matrix cells, record/port helpers).
//! - [`report`]: every byte of output: human / JSON / GitHub (the only place with colour).
//! - [`commands`]: one thin file per subcommand; commands never call each other.
//! - [`cli`]: flags (the only module that knows clap), turned once, at the top, into
//!   [`settings`]: what every command shares and each command's request.
//! - `reference` (feature `reference`): the tch reference sampler, `equiv` and `bench`.

pub mod advice;
pub mod catalog;
pub mod cli;
pub mod commands;
pub mod discover;
pub mod duration;
pub mod error;
pub mod exit_status;
pub mod hash;
pub mod patch;
pub mod plan;
pub mod provenance;
#[cfg(feature = "reference")]
pub mod reference;
pub mod report;
pub mod schema;
pub mod settings;
pub mod transaction;
pub mod tree;
pub mod upkeep;

pub use exit_status::ExitStatus;

use anyhow::Result;

use cli::{Cli, Command};

/// Run one parsed command line and say how it ended: the flags are resolved once, here, into
/// [`settings::Settings`] and each command's request; nothing below sees the command line.
pub fn run(cli: Cli) -> Result<ExitStatus> {
    let settings = cli.global.settings();
    report::init_color(settings.color);
    transaction::set_lock_timeout(settings.lock_timeout);
    let output = settings.output();
    transaction::set_listener(move |event| report::events::render(output, event));
    let s = &settings;
    match cli.command {
        Command::List => commands::list::run(s),
        Command::Show { fix, readme } => commands::show::run(s, &fix, readme),
        Command::Apply(flags) => commands::apply::run(s, &flags.into()),
        Command::Revert(flags) => commands::revert::run(s, &flags.into()),
        Command::Diff { fix } => commands::diff::run(s, &fix),
        Command::Status => commands::status::run(s),
        Command::Lint(flags) => commands::lint::run(s, &flags.into()),
        Command::Equiv(flags) => commands::equiv::run(s, &flags.into()),
        Command::Bench(flags) => commands::bench::run(s, &flags.into()),
        Command::Test(flags) => commands::test::run(s, &flags.into()),
        Command::Conform(flags) => commands::conform::run(s, &flags.into()),
        Command::Matrix(flags) => commands::matrix::run(s, &flags.into()),
        Command::Port(flags) => commands::port::run(s, &flags.into()),
        Command::Record(flags) => commands::record::run(s, &flags.into()),
        Command::Completions { shell } => cli::print_completions(shell),
        Command::Man(flags) => cli::man::run(flags.dir.as_deref()),
    }
}

/// The exit code of a run that ended in `err`: [`exit_status::ROLLBACK_FAILED`] when a
/// rollback failed (the journal stays), else [`ExitStatus::Error`]'s.
pub fn error_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|c| c.is::<transaction::RollbackFailed>()) {
        exit_status::ROLLBACK_FAILED
    } else if let Some(stopped) = err.chain().find_map(|c| c.downcast_ref::<upkeep::child::Interrupted>()) {
        stopped.exit_code()
    } else {
        ExitStatus::Error.code()
    }
}

/// A closed stdout (`gaudi-fixes list | head`) is not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

#[cfg(test)]
mod layers {
    /// The rooms of `src/`, lowest first (docs/design-and-safety.md, "Layout"): a room may use
    /// its own layer and those before it, never one after it (an arrow up the import graph).
    const LAYERS: &[&[&str]] = &[
        &["error"],
        &["tree", "hash", "exit_status", "schema", "duration", "advice"],
        &["patch"],
        &["catalog"],
        &["discover"],
        &["plan"],
        &["provenance"],
        &["transaction"],
        &["upkeep", "reference"],
        &["report"],
        &["settings"],
        &["commands"],
        &["cli"],
    ];

    fn layer(room: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&room))
    }

    /// Every `.rs` file under `src/`: its path there (`plan/chain.rs`), its room (`plan`) and
    /// its text.
    fn sources() -> Vec<(String, String, String)> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut out = Vec::new();
        let mut stack = vec![src.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(&src).unwrap().to_string_lossy().to_string();
                    let room = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
                    out.push((rel, room, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        out
    }

    /// `text`'s lines, numbered from 1, each cut at its first `//` (comments say what they like).
    fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
        text.lines().enumerate().map(|(n, line)| (n + 1, line.split("//").next().unwrap_or_default()))
    }

    #[test]
    fn no_arrow_runs_up_the_import_graph() {
        let needle = ["crate", "::"].concat();
        let mut up = Vec::new();
        for (rel, room, text) in sources().iter().filter(|(rel, ..)| rel != "lib.rs" && rel != "main.rs") {
            let from = layer(room).unwrap_or_else(|| panic!("src/{rel}: room {room} is in no layer"));
            for (n, code) in code_lines(text) {
                for (at, _) in code.match_indices(&needle) {
                    let to: String = code[at + needle.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if layer(&to).is_some_and(|l| l > from) {
                        up.push(format!("src/{rel}:{n}: {room} -> {to}"));
                    }
                }
            }
        }
        assert!(up.is_empty(), "arrows up the import graph:\n{}", up.join("\n"));
    }

    /// Commands a next step names are written in `report/advice.rs`, from data: below `report/`
    /// no string spells a command line `gaudi-fixes SUBCOMMAND …` or `gaudi-fixes --FLAG …` (the
    /// domain gives [`crate::advice::Advice`]; `report/` adds the run's invocation), and `plan/`
    /// spells no `pip install` either. The program's name in prose ("a killed gaudi-fixes run")
    /// is no command line.
    #[test]
    fn no_command_line_is_built_below_report() {
        let below: Vec<&str> = LAYERS
            .iter()
            .take_while(|layer| !layer.contains(&"report"))
            .flat_map(|layer| layer.iter().copied())
            .collect();
        let subcommands: Vec<String> = <crate::cli::Cli as clap::CommandFactory>::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let starts: Vec<String> =
            subcommands.iter().map(|s| format!("gaudi-fixes {s}")).chain(["gaudi-fixes --".to_string()]).collect();
        let mut found = Vec::new();
        for (rel, room, text) in sources().iter().filter(|(_, room, _)| below.contains(&room.as_str())) {
            for (n, code) in code_lines(text) {
                let command = starts.iter().any(|s| {
                    code.match_indices(s.as_str()).any(|(at, _)| {
                        let next = code[at + s.len()..].chars().next();
                        s.ends_with("--") || next.is_none_or(|c| !(c.is_alphanumeric() || c == '-'))
                    })
                });
                if command || (room == "plan" && code.contains("pip install")) {
                    found.push(format!("src/{rel}:{n}: {}", code.trim()));
                }
            }
        }
        assert!(found.is_empty(), "command lines built below report/ (give them as Advice):\n{}", found.join("\n"));
    }

    /// Nothing writes to stderr with `eprintln!`/`eprint!`: they panic on a closed stderr
    /// (`… 2>&1 | head`, exit 101 instead of the verdict); `report::stderr_line` does not.
    #[test]
    fn nothing_panics_on_a_closed_stderr() {
        let macros = [["eprint", "ln!"].concat(), ["eprint", "!("].concat()];
        let mut found = Vec::new();
        for (rel, _, text) in sources() {
            for (n, code) in code_lines(&text) {
                if macros.iter().any(|m| code.contains(m.as_str())) {
                    found.push(format!("src/{rel}:{n}: {}", code.trim()));
                }
            }
        }
        assert!(found.is_empty(), "stderr written with a macro that panics on EPIPE:\n{}", found.join("\n"));
    }

    /// Only `report/` (and `main.rs`) writes to the terminal: below it and in `commands/` no
    /// line goes to stdout or stderr by itself (`report::stderr_line`, a `print!` macro, a
    /// handle on the process's own stdout). Commands hand `report/` data, and `report/`
    /// writes the words; a writer handed in (`report::emit`'s) is `report/`'s own.
    #[test]
    fn nothing_prints_outside_report_and_main() {
        let needles = [
            ["stderr", "_line("].concat(),
            ["print", "ln!"].concat(),
            ["print", "!("].concat(),
            ["io::std", "out()"].concat(),
            ["stderr()", ".lock()"].concat(),
        ];
        let mut found = Vec::new();
        for (rel, room, text) in sources().iter().filter(|(rel, room, _)| room != "report" && rel != "main.rs") {
            for (n, code) in code_lines(text) {
                if needles.iter().any(|s| code.contains(s.as_str())) {
                    found.push(format!("src/{rel}:{n}: {room}: {}", code.trim()));
                }
            }
        }
        assert!(found.is_empty(), "printed outside report/ (give report/ the data):\n{}", found.join("\n"));
    }

    /// The house's rule: no function over 100 lines (from its `fn` line to its closing brace, as
    /// rustfmt lays it out) outside `reference/`.
    #[test]
    fn no_function_is_over_100_lines_outside_reference() {
        let mut long = Vec::new();
        for (rel, _, text) in sources().iter().filter(|(_, room, _)| room != "reference") {
            for (name, line, length) in functions(text).into_iter().filter(|f| f.2 > 100) {
                long.push(format!("src/{rel}:{line}: {name}: {length} lines"));
            }
        }
        assert!(long.is_empty(), "functions over 100 lines:\n{}", long.join("\n"));
    }

    /// Each function in rustfmt-formatted `text`: its name, 1-based line and length in lines.
    fn functions(text: &str) -> Vec<(String, usize, usize)> {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let indent = line.len() - line.trim_start().len();
            let mut rest = line.trim_start();
            for word in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "] {
                rest = rest.strip_prefix(word).unwrap_or(rest);
            }
            let Some(signature) = rest.strip_prefix("fn ") else { continue };
            let name: String = signature.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let Some(open) = (i..lines.len()).find(|&j| lines[j].trim_end().ends_with(['{', ';'])) else { continue };
            if lines[open].trim_end().ends_with(';') {
                continue;
            }
            let close = format!("{}}}", " ".repeat(indent));
            if let Some(end) = (open + 1..lines.len()).find(|&k| lines[k].starts_with(&close)) {
                out.push((name, i + 1, end - i + 1));
            }
        }
        out
    }

    #[test]
    fn a_functions_length_runs_from_its_fn_line_to_its_closing_brace() {
        let text =
            "fn a() {\n    x();\n}\n\n    pub(crate) fn b(\n        y: u8,\n    ) -> u8 {\n        y\n    }\nfn c();\n";
        assert_eq!(functions(text), [("a".to_string(), 1, 3), ("b".to_string(), 5, 5)]);
    }
}
