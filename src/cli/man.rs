//! Man pages, as git ships them: `gaudi-fixes(1)` and one `gaudi-fixes-<command>(1)` per
//! subcommand this build has. clap_mangen renders the name, description and options; the
//! synopsis (with argument names), EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES and SEE ALSO are
//! written here, so every page a SEE ALSO names is one `man --dir` writes.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::exit_status::ExitStatus;

/// `gaudi-fixes man [--dir DIR]`.
pub fn run(dir: Option<&Path>) -> Result<ExitStatus> {
    let Some(dir) = dir else {
        crate::report::emit(false, |out| Ok(render(&super::command(), None, out)?))?;
        return Ok(ExitStatus::Applied);
    };
    let written = write_all(dir)?;
    crate::report::emit(false, |out| {
        for path in &written {
            writeln!(out, "{path}")?;
        }
        Ok(())
    })?;
    Ok(ExitStatus::Applied)
}

/// Every page into `dir` (created if missing); their paths, main page first. Each page is
/// written to a new temp file in `dir` (`O_EXCL`: never through a planted link) and renamed
/// over the page, so a symlink or hard link there is replaced, not written through. When a
/// page cannot be written, the error says which pages were written before it.
pub fn write_all(dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut main = super::command();
    main.build();
    let mut pages = vec![(page_name(None), render_to_vec(&main, None)?)];
    for sub in subcommands(&main) {
        pages.push((page_name(Some(sub.get_name())), render_to_vec(&main, Some(sub))?));
    }
    let total = pages.len();
    let mut written = Vec::new();
    for (name, bytes) in pages {
        let path = dir.join(format!("{name}.1"));
        if let Err(err) = write_page(dir, &format!("{name}.1"), &bytes) {
            let done = if written.is_empty() {
                "no page was written".to_string()
            } else {
                format!("{} of the {total} pages were written before it: {}", written.len(), written.join(", "))
            };
            return Err(err.context(format!("writing {} failed; {done}", path.display())));
        }
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// `bytes` as `dir/file`: a new temp file beside it, then a rename over it (the temp file is
/// removed when either fails).
fn write_page(dir: &Path, file: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{file}.gaudi-fixes.tmp"));
    // One a killed run left: the entry itself goes (a link is not followed by unlink).
    let _ = std::fs::remove_file(&tmp);
    let made = (|| -> std::io::Result<()> {
        let mut out = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        std::fs::rename(&tmp, dir.join(file))
    })();
    if let Err(err) = made {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.into());
    }
    Ok(())
}

/// The subcommands that get a page: those this build shows (not `equiv` / `bench` without the
/// `reference` feature), never clap's own `help`.
fn subcommands(main: &clap::Command) -> Vec<&clap::Command> {
    let mut subs: Vec<&clap::Command> =
        main.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help").collect();
    // In `--help`'s order (changing a subcommand, as `command()` does apply's, moves it last).
    subs.sort_by_key(|s| s.get_display_order());
    subs
}

fn page_name(sub: Option<&str>) -> String {
    match sub {
        None => "gaudi-fixes".to_string(),
        Some(s) => format!("gaudi-fixes-{s}"),
    }
}

fn render_to_vec(main: &clap::Command, sub: Option<&clap::Command>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    render(main, sub, &mut buf)?;
    Ok(buf)
}

/// One page: the main one (`sub` None) or a subcommand's.
fn render(main: &clap::Command, sub: Option<&clap::Command>, out: &mut dyn Write) -> std::io::Result<()> {
    let mut main = main.clone();
    main.build();
    let version = env!("CARGO_PKG_VERSION");
    let cmd = match sub {
        Some(s) => main.find_subcommand(s.get_name()).expect("a subcommand of main").clone(),
        None => main.clone(),
    };
    let title = page_name(sub.map(|s| s.get_name()));
    // The date is left out on purpose: pages built from one version read the same.
    let man = clap_mangen::Man::new(cmd.clone())
        .title(title.to_uppercase())
        .section("1")
        .source(format!("gaudi-fixes {version}"))
        .manual("gaudi-fixes manual");
    man.render_title(out)?;
    writeln!(out, ".SH NAME")?;
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    writeln!(out, "{} \\- {}", roff(&title), roff(about.trim_end_matches('.')))?;
    writeln!(out, ".SH SYNOPSIS")?;
    synopsis(&cmd, sub.is_some(), out)?;
    if sub.is_none() {
        writeln!(out, ".SH DESCRIPTION")?;
        for para in DESCRIPTION {
            writeln!(out, ".PP\n{}", roff(para))?;
        }
    } else {
        man.render_description_section(out)?;
    }
    man.render_options_section(out)?;
    if sub.is_none() {
        writeln!(out, ".SH COMMANDS")?;
        for s in subcommands(&main) {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            writeln!(out, ".TP\n\\fBgaudi\\-fixes\\-{}\\fR(1)\n{}", roff(s.get_name()), roff(&about))?;
        }
    }
    let name = sub.map(|s| s.get_name());
    writeln!(out, ".SH EXIT STATUS")?;
    for (code, what) in super::exit_codes::codes(name) {
        writeln!(out, ".TP\n.B {code}\n{}", roff(what))?;
    }
    if sub.is_none() {
        writeln!(out, ".SH ENVIRONMENT")?;
        for (var, what) in ENVIRONMENT {
            writeln!(out, ".TP\n.B {}\n{}", roff(var), roff(what))?;
        }
        writeln!(out, ".SH FILES")?;
        for (path, what) in FILES {
            writeln!(out, ".TP\n.I {}\n{}", roff(path), roff(what))?;
        }
    } else {
        writeln!(out, ".SH ENVIRONMENT")?;
        writeln!(
            out,
            "{}",
            roff("GAUDI_FIXES_ROOT, GAUDI_FIXES_CATALOG, NO_COLOR and the others gaudi-fixes(1) lists.")
        )?;
        writeln!(out, ".SH FILES")?;
        writeln!(out, "{}", roff("<root>/.gaudi-fixes/ in each tree written, and the cache; see gaudi-fixes(1)."))?;
    }
    writeln!(out, ".SH EXAMPLES")?;
    for (example, what) in super::examples::examples(name) {
        writeln!(out, ".TP\n.B {}\n{}", roff(example), roff(what))?;
    }
    writeln!(out, ".SH SEE ALSO")?;
    let mut see: Vec<String> = match name {
        None => subcommands(&main).iter().map(|s| format!("gaudi-fixes-{}(1)", s.get_name())).collect(),
        Some(n) => std::iter::once("gaudi-fixes(1)".to_string())
            .chain(related(n).iter().map(|r| format!("gaudi-fixes-{r}(1)")))
            .collect(),
    };
    see.dedup();
    let see: Vec<String> = see.iter().map(|s| format!("\\fB{}\\fR", roff(s))).collect();
    writeln!(out, "{}", see.join(", "))?;
    writeln!(out, ".SH VERSION")?;
    writeln!(out, "{}", roff(&main.get_version().map(|v| v.to_string()).unwrap_or_else(|| version.to_string())))?;
    Ok(())
}

/// `gaudi-fixes [global options] <command> [options] ARGS…`, with every value's name.
fn synopsis(cmd: &clap::Command, is_sub: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let mut line = String::from("\\fBgaudi\\-fixes\\fR");
    if is_sub {
        line.push_str(" [\\fIGLOBAL OPTIONS\\fR] ");
        line.push_str(&format!("\\fB{}\\fR", roff(cmd.get_name())));
    }
    let own = |a: &&clap::Arg| !a.is_hide_set() && (!is_sub || !a.is_global_set());
    for arg in cmd.get_arguments().filter(own).filter(|a| !a.is_positional()) {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let flag = match (arg.get_long(), arg.get_short()) {
            (Some(l), _) => format!("\\-\\-{}", roff(l)),
            (None, Some(s)) => format!("\\-{s}"),
            (None, None) => continue,
        };
        let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
        let value = if takes_value {
            let names = arg.get_value_names().map(|v| v.iter().map(|n| n.to_string()).collect::<Vec<_>>());
            let name = names.map(|n| n.join(" ")).unwrap_or_else(|| id.to_uppercase());
            format!(" \\fI{}\\fR", roff(&name))
        } else {
            String::new()
        };
        line.push_str(&format!(" [\\fB{flag}\\fR{value}]"));
    }
    for arg in cmd.get_positionals().filter(own) {
        let name = arg
            .get_value_names()
            .map(|v| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let dots = if many { "..." } else { "" };
        let (l, r) = if arg.is_required_set() { ("", "") } else { ("[", "]") };
        let last = if arg.is_last_set() { "\\-\\- " } else { "" };
        line.push_str(&format!(" {l}{last}\\fI{}\\fR{dots}{r}", roff(&name)));
    }
    if !is_sub {
        line.push_str(" \\fICOMMAND\\fR [\\fIARGS\\fR]");
    }
    writeln!(out, "{line}")
}

/// Escape text for roff: backslashes, hyphens (so they stay ASCII minus signs), and a leading
/// dot or quote that would read as a request.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    match s.chars().next() {
        Some('.') | Some('\'') => format!("\\&{s}"),
        _ => s,
    }
}

const DESCRIPTION: &[&str] = &[
    "gaudi-fixes carries a catalogue of fixes (patches, with their tests) for the vLLM and vllm_gaudi Python sources and applies them to installed trees: the directories holding vllm/ and vllm_gaudi/, found by --root, --vllm, --vllm-gaudi, GAUDI_FIXES_ROOT or by asking the Python interpreter (--python) where they are installed.",
    "Every hunk is placed by its exact context, never by fuzz. A file that is neither the fix's pristine release nor patched as the fix leaves it is drift: nothing is written and the exit status is 2. Writes are all-or-nothing under a lock per tree; revert gives back the bytes the tree had (plain revert: every fix apply recorded).",
    "Fixes are named one by one or by profile: default (correctness fixes) and performance (default plus the faster sampler). The catalogue is built into the binary; --catalog DIR uses a directory instead.",
];

const ENVIRONMENT: &[(&str, &str)] = &[
    ("GAUDI_FIXES_ROOT", "A directory holding vllm/ and vllm_gaudi/; used when none of --root, --vllm, --vllm-gaudi is given, before asking the Python interpreter."),
    ("GAUDI_FIXES_CATALOG", "A catalogue directory (fixes/ and profiles/) to use instead of the built-in one; the same as --catalog. Set but empty is unset."),
    ("NO_COLOR", "When set (and --color is auto), human output has no colour."),
    ("GAUDI_FIXES_CACHE", "The cache directory (pristine upstream trees for matrix, port, lint --upstream). Default: $XDG_CACHE_HOME/gaudi-fixes, else $HOME/.cache/gaudi-fixes."),
    ("XDG_CACHE_HOME, HOME", "Where the default cache directory is."),
    ("GAUDI_FIXES_VLLM_GAUDI_SRC", "A vllm-gaudi checkout that matrix and port use as every release's vllm_gaudi tree."),
    (
        "GAUDI_FIXES_VLLM_GAUDI_ARCHIVES",
        "The directory of vllm_gaudi-<release>.tar.gz archives matrix and port extract from (set and empty: none); unset, shared/upstream/ beside the current directory or above it.",
    ),
    ("GAUDI_FIXES_COMPLETE", "Set by the completion script (gaudi-fixes completions SHELL) to ask for completions, with -- after the program name; a command run otherwise ignores it."),
    ("GAUDI_FIXES_FAULT, GAUDI_FIXES_FAULT_PAUSE", "For the project's own tests only: make a write fail or pause at a named step."),
];

const FILES: &[(&str, &str)] = &[
    ("<root>/.gaudi-fixes/", "In each tree root written: provenance.json (what was applied, and from which catalogue), and while a write runs the journal and saved copies (txn/) and the bytecode kept for an exact revert (bytecode/). A killed run's transaction is finished by the next run. Removed when empty."),
    ("~/.cache/gaudi-fixes/", "The cache: upstream/<release>/ pristine trees, wheels/ fetched from the package index, scratch/ copies that matrix patches and tests."),
];

/// The pages a subcommand's SEE ALSO names besides gaudi-fixes(1).
fn related(cmd: &str) -> &'static [&'static str] {
    match cmd {
        "apply" => &["revert", "status", "diff"],
        "revert" => &["apply", "status"],
        "status" | "diff" | "show" | "list" => &["apply", "revert"],
        "test" => &["matrix"],
        "matrix" => &["test", "port", "record"],
        "port" | "record" => &["matrix", "lint"],
        "lint" => &["port", "record"],
        _ => &[],
    }
}
