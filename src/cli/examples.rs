//! Each command's examples, shown by its `--help` and its man page alike.

/// The examples of `cmd` (`None`: the main page), as (command line, what it does).
pub fn examples(cmd: Option<&str>) -> Vec<(&'static str, &'static str)> {
    match cmd {
        None => vec![
            ("gaudi-fixes apply", "Apply the default profile to the trees python3 imports."),
            ("gaudi-fixes apply --check --format github", "A CI step: 0 applied, 1 not applied, 2 drifted, 3 error."),
            (
                "gaudi-fixes --python /opt/venv/bin/python apply --profile performance",
                "The trees that interpreter imports.",
            ),
            ("gaudi-fixes revert", "Undo what apply did: every fix it recorded in the trees found, back to their bytes."),
            ("gaudi-fixes man --dir /usr/local/share/man/man1", "Install these pages."),
        ],
        Some("apply") => vec![
            ("gaudi-fixes apply", "Apply the `default` profile to the trees python3 finds."),
            (
                "gaudi-fixes apply --check --profile performance",
                "Only check (one line per tree and the verdict; -v for every fix): 0 applied, 1 not applied, 2 drifted, 3 error.",
            ),
            ("gaudi-fixes apply --dry-run topk-subset-sampler", "What would change (with what it requires); nothing written."),
            ("gaudi-fixes --python /opt/venv/bin/python apply --profile performance", "The trees that interpreter imports."),
            ("gaudi-fixes --root /usr/lib/python3/dist-packages apply --check --format github", "A CI step."),
        ],
        Some("revert") => vec![
            ("gaudi-fixes revert", "Undo what apply recorded in the trees found (provenance), in dependency order."),
            ("gaudi-fixes revert bad-words-rows", "Only that fix (refused while an applied fix requires it)."),
            ("gaudi-fixes revert --dry-run --profile performance", "What reverting a profile would change; nothing written."),
        ],
        Some("test") => vec![
            (
                "gaudi-fixes --python /opt/venv/bin/python test bad-words-rows",
                "Run the fix's tests (pytest and torch in that interpreter) against the trees found.",
            ),
            (
                "gaudi-fixes test topk-subset-sampler -- -k \"not mutant\" -x",
                "With extra pytest arguments (the whole suite takes about 5 1/2 min on 2 cores).",
            ),
        ],
        Some("conform") => vec![
            (
                "gaudi-fixes --python /opt/venv/bin/python conform --setup",
                "Install the suite's pinned distributions into that interpreter (it needs torch already).",
            ),
            ("gaudi-fixes --python /opt/venv/bin/python conform", "200 schedules: about 2 min; progress on stderr."),
            ("gaudi-fixes conform --first --schedules 1000", "Stop at the first difference and print its schedule as data."),
            ("gaudi-fixes conform --first | tail -n 1 > schedule.json", "Save that schedule..."),
            ("gaudi-fixes conform --replay schedule.json", "...and run it again."),
            ("gaudi-fixes conform --requirements > conform-requirements.txt", "The pins, for your own pip line."),
        ],
        Some("matrix") => vec![
            ("gaudi-fixes matrix --releases v0.26.0,v0.30.0", "Every fix on two releases' pristine trees."),
            ("gaudi-fixes --catalog . matrix --record", "Record verified: for the cells that applied and passed."),
            ("gaudi-fixes matrix --plan --format github", "The job list for a CI strategy.matrix."),
            (
                "gaudi-fixes --catalog . matrix --merge results/*.json --record",
                "Merge the jobs' results and record verified:.",
            ),
        ],
        Some("completions") => vec![
            (
                "gaudi-fixes completions bash > /usr/share/bash-completion/completions/gaudi-fixes",
                "Bash, for every user (needs the bash-completion package; Debian and Ubuntu images lack it).",
            ),
            (
                "gaudi-fixes completions zsh > /usr/local/share/zsh/site-functions/_gaudi-fixes",
                "Zsh (a directory on $fpath, before compinit runs).",
            ),
            ("gaudi-fixes completions fish > ~/.config/fish/completions/gaudi-fixes.fish", "Fish."),
        ],
        Some("man") => vec![("gaudi-fixes man --dir /usr/local/share/man/man1", "Write every page.")],
        Some("show") => vec![("gaudi-fixes show topk-subset-sampler --readme", "The fix's README.")],
        Some("diff") => vec![(
            "gaudi-fixes diff topk-subset-sampler",
            "What the fix changes in the trees found, or where it drifted.",
        )],
        Some("status") => {
            vec![("gaudi-fixes --root /usr/lib/python3/dist-packages status", "Every fix's state in that tree.")]
        }
        Some("list") => vec![("gaudi-fixes list --format json", "The catalogue as JSON.")],
        Some("lint") => vec![(
            "gaudi-fixes --catalog . lint --upstream ~/.cache/gaudi-fixes/upstream",
            "Every variant against its pristine release.",
        )],
        Some("port") => vec![(
            "gaudi-fixes --catalog . port topk-subset-sampler --to /tmp/v0.34.0 --release v0.34.0",
            "A new release's variant, three-way.",
        )],
        Some("record") => vec![(
            "gaudi-fixes --catalog . record my-fix --release v0.33.0 --pristine /tmp/p --edited /tmp/e",
            "A variant from a hand edit.",
        )],
        Some(_) => vec![],
    }
}
