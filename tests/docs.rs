//! What the docs promise, held to the code and the behaviour: docs/usage.md's per-command exit
//! table, every man page's EXIT STATUS and every `--help`'s "Exit status:" are the one table of
//! `src/cli/exit_codes.rs`, and what the commands exit with in the fixture's cases is in it;
//! fixes/README.md links every fix's page; docs/usage.md names the default profile in
//! profiles/default.yaml's order and docs/maintaining.md links every fix; README's sizes are the
//! marked figures `scripts/build-wheel.sh` prints, within 5% of the last build
//! (`dist/sizes.json`) when there is one.

use std::path::Path;

use gaudi_fixes::cli::exit_codes;

use crate::common::{fixture, with_fixture};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The text between `<!-- NAME: begin … -->` and `<!-- NAME: end -->` in `text`.
fn marked<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let begin = text.find(&format!("<!-- {name}: begin"))?;
    let body = begin + text[begin..].find("-->")? + 3;
    let end = text[body..].find(&format!("<!-- {name}: end -->"))?;
    Some(text[body..body + end].trim_matches('\n'))
}

#[test]
fn usage_md_exit_table_is_the_one_in_the_code() {
    let usage = read("docs/usage.md");
    let table = marked(&usage, "exit-codes").expect("docs/usage.md has no `<!-- exit-codes: begin -->` … end block");
    let want = exit_codes::markdown();
    assert_eq!(
        table,
        want.trim_end(),
        "docs/usage.md's exit table differs from src/cli/exit_codes.rs; it should read:\n{want}"
    );
}

#[test]
fn every_man_page_and_help_lists_the_tables_exit_codes() {
    let d = fixture();
    let (written, _) = d.cmd().args(["man", "--dir", "pages"]).expect(0);
    let pages: Vec<&str> = written.lines().collect();
    assert!(pages.len() > 10, "{written}");
    for page in pages {
        let text = std::fs::read_to_string(d.path().join(page)).unwrap();
        let name = Path::new(page).file_stem().unwrap().to_string_lossy().to_string();
        let command = name.strip_prefix("gaudi-fixes-");
        let section = text.split(".SH EXIT STATUS\n").nth(1).and_then(|s| s.split("\n.SH ").next()).unwrap_or("");
        let codes: Vec<String> = section.lines().filter_map(|l| l.strip_prefix(".B ")).map(String::from).collect();
        let want: Vec<String> = exit_codes::codes(command).iter().map(|(c, _)| c.to_string()).collect();
        assert_eq!(codes, want, "{page}: EXIT STATUS\n{section}");
        if let Some(command) = command {
            let (help, _) = d.cmd().args([command, "--help"]).expect(0);
            assert!(help.contains(&exit_codes::help(command)), "{command} --help:\n{help}");
        }
    }
}

/// The fixture's cases: each command's exit code is one its table lists, with the meaning the
/// case has (a dry run that would change something exits 0, not 1).
#[test]
fn what_the_commands_exit_with_is_in_their_table() {
    let d = fixture();
    let cases: [(&[&str], i32); 12] = [
        (&["apply", "--dry-run"], 0),
        (&["apply", "--check"], 1),
        (&["diff", "fix-a"], 0),
        (&["status"], 0),
        (&["list"], 0),
        (&["lint"], 0),
        (&["apply"], 0),
        (&["apply", "--check"], 0),
        (&["revert", "--dry-run"], 0),
        (&["revert", "fix-a", "fix-b"], 0),
        (&["show", "no-such-fix"], 3),
        (&["test", "fix-a"], 3),
    ];
    for (args, code) in cases {
        d.cmd().args(with_fixture(args)).expect(code);
        let listed = exit_codes::codes(Some(args[0]));
        assert!(listed.iter().any(|(c, _)| i32::from(*c) == code), "{args:?} exits {code}, not in {listed:?}");
    }
    let dry_run_one = exit_codes::codes(Some("apply")).into_iter().find(|(c, _)| *c == 1).map(|(_, w)| w);
    assert!(dry_run_one.is_some_and(|w| w.starts_with("Only with --check")), "{dry_run_one:?}");
}

#[test]
fn fixes_readme_links_every_fix_page() {
    let index = read("fixes/README.md");
    for name in fix_names() {
        assert!(index.contains(&format!("[{name}]({name}/README.md)")), "fixes/README.md does not link {name}'s page");
    }
}

/// Every fix of the catalogue: the directories under fixes/ with a fix.yaml.
fn fix_names() -> Vec<String> {
    let dirs = std::fs::read_dir(Path::new(ROOT).join("fixes")).unwrap().map(|e| e.unwrap().path());
    dirs.filter(|p| p.join("fix.yaml").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect()
}

/// The byte counts README gives for the wheel and its binary: on the line marked
/// `<!-- sizes: build-wheel.sh -->`, as `N,NNN,NNN bytes`; (wheel, binary).
fn readme_sizes(readme: &str) -> Result<(u64, u64), String> {
    let bytes = regex::Regex::new(r"(\d{1,3}(?:,\d{3})+|\d{4,}) bytes").unwrap();
    let megabytes = regex::Regex::new(r"\b\d+(?:\.\d+)? ?MB\b").unwrap();
    let mut marked = None;
    for (i, line) in readme.lines().enumerate() {
        let is_marked = line.contains("<!-- sizes: build-wheel.sh -->");
        if !is_marked && (bytes.is_match(line) || megabytes.is_match(line)) {
            return Err(format!("README.md:{}: a size not marked as build-wheel.sh's: {line}", i + 1));
        }
        if is_marked {
            let n: Vec<u64> = bytes.captures_iter(line).map(|c| c[1].replace(',', "").parse().unwrap()).collect();
            match n.as_slice() {
                [wheel, binary] => marked = Some((*wheel, *binary)),
                _ => {
                    return Err(format!(
                        "README.md:{}: the sizes line needs the wheel's and the binary's bytes: {line}",
                        i + 1
                    ))
                }
            }
        }
    }
    marked.ok_or_else(|| "README.md has no line marked <!-- sizes: build-wheel.sh -->".into())
}

#[test]
fn readme_sizes_are_build_wheels_within_5_percent_of_the_last_build() {
    let readme = read("README.md");
    let (wheel, binary) = readme_sizes(&readme).unwrap_or_else(|e| panic!("{e}"));
    // And the rule itself: an unmarked figure, or a missing one, is refused.
    assert!(readme_sizes("a 2.47 MB wheel\n").is_err());
    assert!(readme_sizes("<!-- sizes: build-wheel.sh --> wheel 2,468,585 bytes\n").is_err());
    let Ok(last) = std::fs::read_to_string(Path::new(ROOT).join("dist/sizes.json")) else {
        eprintln!("no dist/sizes.json (no build here): README's sizes are only checked for their mark");
        return;
    };
    let last: serde_json::Value = serde_json::from_str(&last).expect("dist/sizes.json is JSON");
    for (what, readme, built) in [("wheel", wheel, &last["wheel_bytes"]), ("binary", binary, &last["binary_bytes"])] {
        let built = built.as_u64().unwrap_or_else(|| panic!("dist/sizes.json has no {what}_bytes: {last}"));
        let off = (readme as f64 - built as f64).abs() / built as f64;
        assert!(
            off <= 0.05,
            "README.md says the {what} is {readme} bytes, the last build (dist/sizes.json) {built}: {:.1}% off; \
             copy build-wheel.sh's sizes line into README",
            off * 100.0
        );
    }
}

/// The fixes of `profiles/default.yaml`, in its order.
fn default_profile() -> Vec<String> {
    read("profiles/default.yaml").lines().filter_map(|l| l.strip_prefix("  - ")).map(|n| n.trim().to_string()).collect()
}

#[test]
fn the_docs_name_the_default_profile_as_it_is() {
    let default = default_profile();
    assert!(default.len() > 1, "profiles/default.yaml lists no fixes");
    let usage = read("docs/usage.md");
    let start = usage
        .find("the `default` profile (correctness")
        .expect("docs/usage.md no longer says which fixes `apply` uses by default");
    let end = start + usage[start..].find(").").expect("docs/usage.md: the default profile's list is not closed");
    let named: Vec<String> = usage[start..end]
        .split('`')
        .skip(3) // "…the ", "default", " profile (correctness fixes only: "
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert_eq!(named, default, "docs/usage.md's list of the default profile is not profiles/default.yaml's");
    let n = default.len();
    assert!(
        usage.contains(&format!("everything applied: {n} fixes ({n} applied)")),
        "docs/usage.md's `apply --check` example should count the default profile's {n} fixes"
    );
    let maintaining = read("docs/maintaining.md");
    for name in fix_names() {
        assert!(
            maintaining.contains(&format!("[`{name}`](../fixes/{name}/README.md)")),
            "docs/maintaining.md's list of fixes does not link {name}'s page"
        );
    }
}
