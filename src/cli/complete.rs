//! Shell completion through clap_complete's dynamic engine: the shell's completion function runs
//! `GAUDI_FIXES_COMPLETE=<shell> gaudi-fixes -- <words…>` and prints what this build offers now —
//! fix and profile names from the catalogue the command line names (`--catalog DIR`, else
//! `GAUDI_FIXES_CATALOG`, else the built-in one), release tags, `--format` values, and only the
//! subcommands this build has (no `equiv` / `bench` without the `reference` feature).
//!
//! The static scripts clap_complete generates break on a hyphenated binary name (their `case`
//! arms never match: clap-rs/clap#6421), so `completions SHELL` prints the small registration
//! script instead, which asks the binary.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap_complete::engine::{ArgValueCandidates, ArgValueCompleter, CompletionCandidate};
use clap_complete::env::{EnvCompleter, Shells};

use crate::catalog::Catalog;

/// The environment variable that turns a run into a completion request. Not clap_complete's
/// default `COMPLETE`: a CI job that happens to set that must not turn `apply` into a no-op.
pub const VAR: &str = "GAUDI_FIXES_COMPLETE";

/// Answer a completion request, if this run is one (then exit); otherwise return, whatever
/// [`VAR`] holds.
pub fn answer_if_asked() {
    if is_request(std::env::var_os(VAR), std::env::args_os()) {
        clap_complete::CompleteEnv::with_factory(completion_command).var(VAR).bin("gaudi-fixes").complete();
    }
}

/// A completion request is exactly what the registration scripts send: [`VAR`] set to a shell's
/// name and `gaudi-fixes -- WORDS…` (at least one word: the command's own name). Anything else
/// — the variable leaked into a job's environment as `bash` or `1`, or set by hand — is a normal
/// run: clap_complete alone would print a script and exit 0 for `apply` (nothing applied), or
/// exit 2 for a value that names no shell.
fn is_request(var: Option<OsString>, args: impl Iterator<Item = OsString>) -> bool {
    let Some(shell) = var.and_then(|v| v.into_string().ok()) else { return false };
    if Shells::builtins().completer(&shell).is_none() {
        return false;
    }
    let args: Vec<OsString> = args.skip(1).take(2).collect();
    args.len() == 2 && args[0] == "--"
}

/// `gaudi-fixes completions SHELL`: the registration script, which calls `gaudi-fixes` (from
/// PATH) for each completion.
pub fn registration(shell: clap_complete::Shell, out: &mut dyn Write) -> std::io::Result<()> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer: &dyn EnvCompleter =
        shells.completer(&name).ok_or_else(|| std::io::Error::other(format!("no dynamic completion for {name}")))?;
    completer.write_registration(VAR, "gaudi-fixes", "gaudi-fixes", "gaudi-fixes", out)
}

/// The command line completion sees: [`super::command`] without the subcommands this build
/// cannot run (hidden ones would still be offered when they are the only match: `e<TAB>`).
fn completion_command() -> clap::Command {
    let full = super::command();
    if cfg!(feature = "reference") {
        return full;
    }
    let subcommands: Vec<clap::Command> = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let mut cmd = clap::Command::new(full.get_name().to_string())
        .bin_name("gaudi-fixes")
        .subcommand_required(true)
        .args(full.get_arguments().cloned())
        .subcommands(subcommands);
    if let Some(version) = full.get_version() {
        cmd = cmd.version(version.to_string());
    }
    cmd
}

/// Candidates for a fix name.
pub fn fixes() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        catalog()
            .map(|c| {
                c.fixes
                    .iter()
                    .map(|f| {
                        CompletionCandidate::new(&f.manifest.name)
                            .help(Some(f.manifest.summary.trim().to_string().into()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Candidates for a profile name.
pub fn profiles() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        catalog()
            .map(|c| {
                c.profiles
                    .iter()
                    .map(|p| CompletionCandidate::new(&p.name).help(Some(p.description.trim().to_string().into())))
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Candidates for a release tag: every release the catalogue's variants name or verified.
pub fn releases() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        let Some(catalog) = catalog() else { return Vec::new() };
        let mut tags: Vec<String> = catalog
            .fixes
            .iter()
            .flat_map(|f| f.variants.iter().flat_map(|v| std::iter::once(v.release.clone()).chain(v.verified.clone())))
            .collect();
        tags.sort_by_key(|t| crate::catalog::manifest::release_key(t));
        tags.dedup();
        tags.into_iter().map(CompletionCandidate::new).collect()
    })
}

/// Candidates for `--python`: a path (the word has a `/`) completes to directories and
/// executable files there; a bare word to the `python…` executables on PATH.
pub fn pythons() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &std::ffi::OsStr| {
        let current = current.to_string_lossy();
        let mut out: Vec<String> = match current.rsplit_once('/') {
            Some((dir, prefix)) => {
                let base = if dir.is_empty() { "/" } else { dir };
                entries(std::path::Path::new(base))
                    .filter(|(name, path)| name.starts_with(prefix) && (path.is_dir() || is_executable(path)))
                    .map(|(name, path)| format!("{dir}/{name}{}", if path.is_dir() { "/" } else { "" }))
                    .collect()
            }
            None => std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default()
                .iter()
                .flat_map(|dir| entries(dir))
                .filter(|(name, path)| name.starts_with("python") && name.starts_with(&*current) && is_executable(path))
                .map(|(name, _)| name)
                .collect(),
        };
        out.sort();
        out.dedup();
        out.into_iter().map(CompletionCandidate::new).collect()
    })
}

/// The entries of `dir` (name, path); none when it cannot be read.
fn entries(dir: &std::path::Path) -> impl Iterator<Item = (String, PathBuf)> {
    let read = std::fs::read_dir(dir).into_iter().flatten().flatten();
    read.map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The catalogue the words being completed name: `--catalog DIR` / `--catalog=DIR` among them,
/// else `GAUDI_FIXES_CATALOG`, else the built-in one. None when it does not load (no candidates,
/// never an error in the middle of a shell's line).
fn catalog() -> Option<Catalog> {
    Catalog::load(catalog_dir(std::env::args_os()).as_deref()).ok()
}

fn catalog_dir(args: impl Iterator<Item = OsString>) -> Option<PathBuf> {
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        if a == "--catalog" {
            found = args.get(i + 1).cloned();
        } else if let Some(dir) = a.strip_prefix("--catalog=") {
            found = Some(dir.to_string());
        }
    }
    found
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("GAUDI_FIXES_CATALOG").filter(|v| !v.is_empty()).map(PathBuf::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_scripts_form_is_a_request() {
        let words = |w: &[&str]| w.iter().map(OsString::from).collect::<Vec<_>>().into_iter();
        let var = |v: &str| Some(OsString::from(v));
        assert!(is_request(var("bash"), words(&["gaudi-fixes", "--", "gaudi-fixes", ""])));
        assert!(is_request(var("powershell"), words(&["gaudi-fixes", "--", "gaudi-fixes apply"])));
        assert!(!is_request(var("bash"), words(&["gaudi-fixes", "apply", "--check"])));
        assert!(!is_request(var("bash"), words(&["gaudi-fixes", "--"])));
        assert!(!is_request(var("1"), words(&["gaudi-fixes", "--", "gaudi-fixes", ""])));
        assert!(!is_request(var("/bin/bash"), words(&["gaudi-fixes", "--", "gaudi-fixes", ""])));
        assert!(!is_request(None, words(&["gaudi-fixes", "--", "gaudi-fixes", ""])));
    }

    #[test]
    fn catalog_dir_from_the_words() {
        let words = |w: &[&str]| w.iter().map(OsString::from).collect::<Vec<_>>().into_iter();
        assert_eq!(catalog_dir(words(&["gaudi-fixes", "--catalog", "c", "apply"])), Some(PathBuf::from("c")));
        assert_eq!(catalog_dir(words(&["gaudi-fixes", "--catalog=d", "apply"])), Some(PathBuf::from("d")));
    }
}
