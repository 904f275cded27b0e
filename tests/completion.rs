//! Completion in real shells, and the man pages, as an installed binary gives them: bash (always
//! there) sources `completions bash` and calls its function with COMP_WORDS / COMP_CWORD as
//! readline would; zsh and fish run their scripts when they are installed (skipped, loudly,
//! when not: scripts/test.sh installs them on CI). `man --dir` writes a page for every page any
//! page names, each with EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES; `man -l` renders them
//! without a warning where man is installed.

use std::path::Path;
use std::process::Command;

use crate::common::Dir;

/// The binary's directory, put first on PATH: the scripts call `gaudi-fixes` from PATH.
fn path_with_binary() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_gaudi-fixes")).parent().unwrap().to_path_buf();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

fn have(shell: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {shell}")]).output().is_ok_and(|o| o.status.success())
}

/// What bash's completion offers for the words (the last one is the word being completed).
fn bash(words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"source <(gaudi-fixes completions bash) || exit 9
COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
fn=$(complete -p gaudi-fixes | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
"$fn" gaudi-fixes "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = quoted.join(" ")
    );
    let d = Dir::new();
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .current_dir(d.path())
        .env("PATH", path_with_binary())
        .env_remove("GAUDI_FIXES_CATALOG")
        .output()
        .expect("running bash");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim_end().to_string()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn bash_completes_flags_profiles_fix_names_and_only_this_builds_commands() {
    assert_eq!(bash(&["gaudi-fixes", "apply", "--pro"]), ["--profile"]);
    assert_eq!(bash(&["gaudi-fixes", "apply", "--profile", ""]), ["default", "performance"]);
    let fixes = bash(&["gaudi-fixes", "test", ""]);
    for fix in ["topk-subset-sampler", "bad-words-rows", "swap-states-sampling-params"] {
        assert!(fixes.iter().any(|f| f == fix), "test <TAB> lacks {fix}: {fixes:?}");
    }
    assert_eq!(bash(&["gaudi-fixes", "show", "topk"]), ["topk-subset-sampler"]);
    assert_eq!(bash(&["gaudi-fixes", "--format", ""]), ["human", "json", "github"]);
    let commands = bash(&["gaudi-fixes", ""]);
    assert!(commands.iter().any(|c| c == "apply") && commands.iter().any(|c| c == "matrix"), "{commands:?}");
    if cfg!(feature = "reference") {
        assert_eq!(bash(&["gaudi-fixes", "e"]), ["equiv"]);
    } else {
        assert!(!commands.iter().any(|c| c == "equiv" || c == "bench"), "{commands:?}");
        assert_eq!(bash(&["gaudi-fixes", "e"]), Vec::<String>::new());
    }
    // The words' --catalog: that catalogue's fixes and profiles.
    let d = crate::common::fixture();
    let cat = d.path().join("cat").display().to_string();
    assert_eq!(bash(&["gaudi-fixes", "--catalog", &cat, "diff", ""])[..2], ["fix-a", "fix-b"]);
    assert_eq!(bash(&["gaudi-fixes", "--catalog", &cat, "revert", "--profile", "d"]), ["default"]);
}

#[test]
fn zsh_and_fish_complete_too_where_installed() {
    let path = path_with_binary();
    if have("fish") {
        let out = Command::new("fish")
            .args([
                "--no-config",
                "-c",
                "gaudi-fixes completions fish | source; complete -C 'gaudi-fixes apply --profile '",
            ])
            .env("PATH", &path)
            .output()
            .expect("running fish");
        let got = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = got.lines().map(|l| l.split('\t').next().unwrap_or("")).collect();
        assert_eq!(names, ["default", "performance"], "fish: {got}{}", String::from_utf8_lossy(&out.stderr));
    } else {
        eprintln!("SKIPPED: fish is not installed (scripts/test.sh installs it with apt-get)");
    }
    if have("zsh") {
        // The script's own function, with zsh's $words / $CURRENT as the completion system sets
        // them; `_describe` (what it hands its candidates to) prints them.
        let script = r#"autoload -U compinit && compinit -u -D
source <(gaudi-fixes completions zsh) || exit 9
_describe() { print -rl -- "${(@P)3}" }
words=(gaudi-fixes apply --profile ''); CURRENT=4
_clap_dynamic_completer_gaudi_fixes"#;
        let out = Command::new("zsh")
            .args(["-f", "-c", script])
            .env("PATH", &path)
            .env("HOME", Dir::new().path())
            .output()
            .expect("running zsh");
        let got = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = got.lines().map(|l| l.split(':').next().unwrap_or("")).collect();
        assert_eq!(names, ["default", "performance"], "zsh: {got}{}", String::from_utf8_lossy(&out.stderr));
    } else {
        eprintln!("SKIPPED: zsh is not installed (scripts/test.sh installs it with apt-get)");
    }
}

/// A link planted in DIR under a page's name is replaced, never written through (its target
/// outside DIR keeps its bytes); a page that cannot be written stops the run with exit 3 and
/// says which pages were written before it.
#[test]
fn man_dir_writes_no_page_through_a_link_and_a_failure_names_the_pages_written() {
    let d = Dir::new();
    d.write("outside.txt", "mine\n");
    std::fs::create_dir(d.path().join("man1")).unwrap();
    std::os::unix::fs::symlink("../outside.txt", d.path().join("man1/gaudi-fixes-apply.1")).unwrap();
    d.cmd().args(["man", "--dir", "man1"]).expect(0);
    assert_eq!(d.read_string("outside.txt"), "mine\n", "man --dir wrote through the link in man1/");
    let page = std::fs::symlink_metadata(d.path().join("man1/gaudi-fixes-apply.1")).unwrap();
    assert!(page.is_file(), "the link is still there: {page:?}");

    // A directory where a later page goes: the pages before it were written, and it says so.
    let d = Dir::new();
    d.write("man1/gaudi-fixes-status.1/keep", "");
    let (out, err) = d.cmd().args(["man", "--dir", "man1"]).expect(3);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("writing man1/gaudi-fixes-status.1 failed"), "{err}");
    assert!(err.contains("pages were written before it: man1/gaudi-fixes.1, man1/gaudi-fixes-list.1"), "{err}");
    let left: Vec<String> = std::fs::read_dir(d.path().join("man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!left.iter().any(|f| f.ends_with(".tmp")), "a temp file was left: {left:?}");
}

#[test]
fn man_dir_writes_every_page_any_page_names_with_its_sections() {
    let d = Dir::new();
    let (out, _) = d.cmd().args(["man", "--dir", "man1"]).expect(0);
    assert!(out.lines().count() > 10, "{out}");
    let pages: Vec<String> = std::fs::read_dir(d.path().join("man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in ["gaudi-fixes.1", "gaudi-fixes-apply.1", "gaudi-fixes-revert.1", "gaudi-fixes-matrix.1"] {
        assert!(pages.iter().any(|p| p == want), "{want} not written: {pages:?}");
    }
    assert_eq!(pages.iter().any(|p| p.contains("equiv")), cfg!(feature = "reference"));
    let named = regex::Regex::new(r"gaudi\\-fixes(?:\\-([a-z]+))?\\fR\(1\)").unwrap();
    for page in &pages {
        let text = d.read_string(&format!("man1/{page}"));
        for section in ["SYNOPSIS", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"] {
            assert!(text.contains(&format!(".SH {section}")), "{page} has no {section}");
        }
        for caps in named.captures_iter(&text) {
            let target = caps.get(1).map_or("gaudi-fixes.1".to_string(), |s| format!("gaudi-fixes-{}.1", s.as_str()));
            assert!(pages.contains(&target), "{page} names {target}, which man --dir did not write");
        }
    }
    let main = d.read_string("man1/gaudi-fixes.1");
    for var in [
        "GAUDI_FIXES_ROOT",
        "GAUDI_FIXES_CATALOG",
        "NO_COLOR",
        "GAUDI_FIXES_CACHE",
        "GAUDI_FIXES_VLLM_GAUDI_SRC",
        "GAUDI_FIXES_VLLM_GAUDI_ARCHIVES",
    ] {
        assert!(main.contains(var), "ENVIRONMENT lacks {var}");
    }
    assert!(main.contains("/.gaudi\\-fixes/"), "FILES lacks .gaudi-fixes/");
    // Argument names in the synopsis, not bare flags.
    let apply = d.read_string("man1/gaudi-fixes-apply.1");
    assert!(apply.contains("[\\fB\\-\\-profile\\fR \\fINAME\\fR]") && apply.contains("\\fIFIX\\fR..."), "{apply}");
    let revert = d.read_string("man1/gaudi-fixes-revert.1");
    assert!(!revert.contains("\\-\\-check\\fR]"), "revert's synopsis offers --check");

    if !have("man") {
        eprintln!("SKIPPED: man is not installed; the pages were not rendered (scripts/test.sh installs man-db)");
        return;
    }
    for page in &pages {
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(d.path().join("man1").join(page))
            .env("MANWIDTH", "80")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .expect("running man");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.trim().is_empty(), "man -l {page}: {err}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("EXIT STATUS"), "{page}");
    }
}

/// `GAUDI_FIXES_COMPLETE` left in a job's environment (`docker run -e`, an env file, an
/// interrupted PowerShell completer) changes no command: only `GAUDI_FIXES_COMPLETE=SHELL
/// gaudi-fixes -- WORDS…`, what the registration scripts send, is a completion request.
#[test]
fn a_completion_variable_in_the_environment_changes_no_command() {
    let d = crate::common::fixture();
    let args = crate::common::with_fixture(&["apply", "--check"]);
    let (plain, _) = d.cmd().args(&args).expect(1);
    assert!(plain.contains("fix-a"), "{plain}");
    for value in ["bash", "zsh", "fish", "elvish", "powershell", "1", "true", "yes", "/bin/bash"] {
        let (out, err) = d.cmd().env("GAUDI_FIXES_COMPLETE", value).args(&args).expect(1);
        assert_eq!(out, plain, "GAUDI_FIXES_COMPLETE={value}: {err}");
        let (json, _) = d
            .cmd()
            .env("GAUDI_FIXES_COMPLETE", value)
            .args(crate::common::with_fixture(&["--format", "json", "apply", "--check"]))
            .expect(1);
        serde_json::from_str::<serde_json::Value>(&json).unwrap_or_else(|e| panic!("{value}: {e}: {json}"));
    }
    let before = d.snapshot("root");
    d.cmd().env("GAUDI_FIXES_COMPLETE", "bash").args(crate::common::with_fixture(&["apply"])).expect(0);
    assert_ne!(d.snapshot("root"), before, "apply with the variable set must still apply");
    // The scripts' own form still answers.
    let (out, _) =
        d.cmd().env("GAUDI_FIXES_COMPLETE", "fish").args(["--", "gaudi-fixes", "apply", "--profile", ""]).expect(0);
    assert!(out.lines().any(|l| l.starts_with("default")), "{out}");
}

/// Issue 48: `--python <TAB>` completed nothing. A path completes to directories and
/// executables there, a bare word to the `python…` executables on PATH.
#[test]
fn python_completes_executables() {
    use std::os::unix::fs::PermissionsExt;
    let d = Dir::new();
    let exe = d.write("bin/python-image", "#!/bin/sh\n");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    d.write("bin/python-notes.txt", "not a program\n");
    let bin = d.path().join("bin").display().to_string();
    assert_eq!(bash(&["gaudi-fixes", "--python", &format!("{bin}/py")]), [format!("{bin}/python-image")]);
    let on_path = bash(&["gaudi-fixes", "apply", "--python", "pyth"]);
    assert!(on_path.iter().any(|p| p == "python3"), "python3 on PATH is not offered: {on_path:?}");
}

/// `completions --help` names the directory README installs the bash script into.
#[test]
fn completions_help_and_readme_name_the_same_directory() {
    let out = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes")).args(["completions", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let dir = "/usr/share/bash-completion/completions/";
    assert!(readme.contains(dir), "README no longer installs into {dir}");
    assert!(
        help.split_whitespace().collect::<String>().contains(dir) && !help.contains("bash_completion.d"),
        "completions --help names another directory:\n{help}"
    );
}
