//! `gaudi-fixes conform [--schedules N] [--seed S] [--jobs N] [--first] [--replay FILE] [--shrink FILE] [--no-reference]`:
//! run the conformance suite (`fixes/_support/conform.py`, built into the binary with the
//! catalogue) on the trees found, with the interpreter given by `--python`, as `test` does;
//! `--setup` installs what the suite needs into that interpreter's environment (the pinned
//! requirements built in, with pip, without their dependencies), `--requirements` prints them.
//!
//! The suite drives the trees' own sampling path (vllm_gaudi's InputBatch, vLLM's logits
//! processors, the runner's functions lifted from `hpu_model_runner.py`) with seeded schedules
//! under sync and async scheduling, and holds what each sampler call gets against every request's
//! own parameters and vLLM's GPU path. Before it runs, the interpreter is checked for torch and
//! every pinned distribution (all missing ones named at once); while it runs, progress is shown
//! (a bar on a terminal, a line at least every few seconds in a log). Exit 0 when every schedule
//! asked for ran and none found a difference, 1 when one did (a table per feature naming the
//! fixes, the first difference as a sentence), 3 when it cannot run or gives no verdict (no
//! trees, a missing module, a crash, an incomplete report, no schedule run).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::session::{Access, Session};
use crate::catalog::{conform_key, Catalog, SUPPORT_DIR};
use crate::discover;
use crate::exit_status::ExitStatus;
use crate::report::conform::{self as conform_report, Conformance, SetupShown, SetupStep, Shown};
use crate::report::progress::Progress;
use crate::settings::{ConformArgs, Settings};
use crate::upkeep::conform::{self as suite, Environment, LayeredVenv, SuiteArgs};
use crate::upkeep::pytest::{filtered_view, resolve_python, write_folder, Scratch};

/// Run `conform`.
pub fn run(global: &Settings, args: &ConformArgs) -> Result<ExitStatus> {
    let catalog = Catalog::load(global.catalog.as_deref())?;
    if args.requirements {
        let (text, pins) = suite::requirements(&catalog)?;
        let pins: Vec<String> = pins.iter().map(ToString::to_string).collect();
        crate::report::emit(global.quiet, |w| conform_report::requirements(w, global.format, &text, &pins))?;
        return Ok(ExitStatus::Applied);
    }
    let python = resolve_python(&global.python)?;
    if args.setup {
        let (text, pins) = suite::requirements(&catalog)?;
        return setup(global, &python, &text, &pins);
    }
    let replay = args.replay.as_deref().map(suite::replay_file).transpose()?;
    let shrink = args.shrink.as_deref().map(suite::replay_file).transpose()?;
    // Shared, as `status` takes it, for the whole run: no `apply` writes the trees under the suite.
    let session = Session::open(global, Access::Read)?;
    let trees = &session.trees;
    let (Some(vllm), Some(gaudi)) = (&trees.vllm, &trees.vllm_gaudi) else {
        let notes = trees.notes.join("; ");
        bail!("conform needs a vllm tree and a vllm_gaudi tree ({notes}); give --root DIR holding both");
    };
    session.require_the_sampling_path(&catalog).context("cannot run the conformance suite")?;
    // The pins live in conform's own venv once `--setup` made it (the image's interpreter is
    // never changed); else the interpreter may have them itself.
    let python = LayeredVenv::of(&python)?.python().unwrap_or(python);
    let (_, pins) = suite::requirements(&catalog)?;
    let env = suite::probe(&python, &pins)?;
    let setup_line = setup_command(global);
    if !env.ready() {
        bail!(suite::not_ready(&python, &env, &setup_line, Some(&vllm.root)));
    }
    let mut notes = version_notes(&env, &setup_line);
    let scratch = Scratch::new("conform")?;
    let suite_dir = scratch.0.join("support");
    write_folder(&catalog, Path::new(SUPPORT_DIR), &suite_dir)?;
    if !suite_dir.join(suite::SUITE).is_file() {
        bail!("catalogue {} has no {SUPPORT_DIR}/{}", catalog.files.origin, suite::SUITE);
    }
    // The suite reads both packages under one root.
    let root = if vllm.root == gaudi.root {
        vllm.root.clone()
    } else {
        filtered_view(&scratch.0, &[("vllm", &vllm.root), ("vllm_gaudi", &gaudi.root)])?
    };
    if let Some(file) = shrink {
        return shrink_run(global, &python, &suite_dir, &root, &file);
    }
    let suite_args = SuiteArgs {
        root: root.clone(),
        schedules: if replay.is_some() { 1 } else { args.schedules },
        seed: args.seed,
        first: args.first,
        replay,
        no_reference: args.no_reference,
        jobs: args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32)),
    };
    let run = run_with_progress(global, &python, &suite_dir, &suite_args)?;
    suite::judge(&run, &suite_args, &setup_line)?;
    let mut report = run.report.expect("judged: there is a report");
    notes.extend(name_fixes(&catalog, &mut report));
    let status = if report.differences() == 0 { ExitStatus::Applied } else { ExitStatus::NotApplied };
    let replay = args.replay.as_ref().map(|p| p.display().to_string());
    let invocation = global.invocation();
    let shown = Shown {
        python: &python,
        report: &report,
        status,
        notes: &notes,
        replay: replay.as_deref(),
        invocation: &invocation,
    };
    crate::report::emit(global.quiet, |w| conform_report::emit(w, global.format, &shown))?;
    Ok(status)
}

/// `conform --shrink FILE`: the shrinker's progress as step lines, then the smallest schedule that
/// still differs (exit 1: it is a difference), or exit 3 with the reason there is none.
fn shrink_run(global: &Settings, python: &str, dir: &Path, root: &Path, file: &Path) -> Result<ExitStatus> {
    let mut progress = Progress::or_lines(global, "conform --shrink");
    progress.draw(&format!("shrinking {} against {} (each try runs the schedule)", file.display(), root.display()));
    let shrunk = suite::run_shrinker(python, dir, root, file, &mut |line| {
        if let Some(step) = line.strip_prefix("conform-shrink: ") {
            progress.draw(step);
        }
    });
    progress.clear();
    let shrunk = shrunk?;
    crate::report::emit(global.quiet, |w| conform_report::shrunk(w, global.format, &shrunk))?;
    Ok(ExitStatus::NotApplied)
}

/// Run the suite with a progress display: before the first schedule ends (the suite imports the
/// trees' vLLM first), a step line; then schedules done of the total, differences so far and
/// the time left.
fn run_with_progress(global: &Settings, python: &str, dir: &Path, args: &SuiteArgs) -> Result<suite::SuiteRun> {
    let mut progress = Progress::or_lines(global, "conform");
    progress.draw(&format!("importing vLLM and vllm_gaudi from {}; no schedule done yet", args.root.display()));
    let mut counting = false;
    let run = suite::run_suite(python, dir, args, &mut |tick| {
        let Some(t) = tick else { return };
        if !counting {
            progress.set_total(t.total, "schedules");
            counting = true;
        }
        let s = if t.differences == 1 { "" } else { "s" };
        // The suite's own clock: its schedules' time so far, not the import before them.
        let left = (t.done > 0 && t.total >= t.done)
            .then(|| Duration::from_secs_f64(t.seconds.max(0.0) / t.done as f64 * (t.total - t.done) as f64));
        progress.set_done(t.done, &format!("{} difference{s}", t.differences), left);
    });
    progress.clear();
    run
}

/// The command that installs the pinned requirements, with this run's `--python` (and
/// `--catalog`, whose requirements they are).
fn setup_command(global: &Settings) -> String {
    let mut words = vec!["gaudi-fixes".to_string()];
    if let Some(dir) = &global.catalog {
        words.push(format!("--catalog {}", dir.display()));
    }
    if global.python != "python3" {
        words.push(format!("--python {}", global.python));
    }
    words.push("conform --setup".into());
    words.join(" ")
}

/// Pins installed at another version: the suite may still run; say so once.
fn version_notes(env: &Environment, setup: &str) -> Vec<String> {
    if env.other_versions.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> =
        env.other_versions.iter().map(|(pin, v)| format!("{} {v} (pinned {})", pin.name, pin.version)).collect();
    vec![format!(
        "{} distribution(s) are installed at other versions than the pinned ones, which were measured to work: {}; `{setup}` installs the pinned ones",
        list.len(),
        list.join(", ")
    )]
}

/// Fill in each feature's fixes from the catalogue's `conform:` keys; a note for every feature a
/// fix names that the suite did not report.
fn name_fixes(catalog: &Catalog, report: &mut Conformance) -> Vec<String> {
    for feature in &mut report.features {
        feature.fixes = conform_key::fixes_for(catalog, &feature.name).into_iter().map(String::from).collect();
    }
    let mut notes = Vec::new();
    for fix in &catalog.fixes {
        for name in &fix.manifest.conform {
            if !report.features.iter().any(|f| &f.name == name) {
                notes.push(format!(
                    "{}'s conform: names `{name}`, which this suite does not report (a misspelling, or a feature not driven yet)",
                    fix.manifest.name
                ));
            }
        }
    }
    notes
}

/// `conform --setup`: write the pinned requirements into the cache, make conform's own venv
/// layered on `python` (the image's interpreter, left as it is), install the pins into it
/// without their dependencies, then check the venv.
fn setup(global: &Settings, python: &str, text: &str, pins: &[suite::Pin]) -> Result<ExitStatus> {
    let file = suite::write_requirements(text)?;
    let venv = LayeredVenv::of(python)?;
    if !global.quiet {
        conform_report::setup_step(&SetupStep::Venv { dir: &venv.dir, python });
    }
    venv.make(python)?;
    let words = suite::pip_words(python, &file, &venv.site);
    if !global.quiet {
        conform_report::setup_step(&SetupStep::Pip { words: &words });
    }
    suite::run_pip(&words)?;
    let venv_python = venv.python().context("the venv made has no bin/python")?;
    let python = venv_python.as_str();
    let env = suite::probe(python, pins)?;
    let mut missing: Vec<String> = env.missing_modules.clone();
    missing.extend(env.missing.iter().map(ToString::to_string));
    let status = if env.ready() { ExitStatus::Applied } else { ExitStatus::Error };
    let other_versions =
        env.other_versions.iter().map(|(pin, v)| format!("{} is at {v}, pinned {}", pin.name, pin.version)).collect();
    let file = file.display().to_string();
    let shown = SetupShown {
        python,
        file: &file,
        pip: &words.join(" "),
        torch: env.torch.as_deref(),
        pinned: env.pinned,
        missing,
        other_versions,
        status,
        invocation: &global.invocation(),
    };
    crate::report::emit(global.quiet, |w| conform_report::setup(w, global.format, &shown))?;
    if !env.ready() {
        let vllm_root = discover::discover(&global.trees.clone()).ok().and_then(|t| t.vllm.map(|v| v.root));
        let why = suite::not_ready(python, &env, &setup_command(global), vllm_root.as_deref());
        bail!("{why}\n(pip installed the pinned distributions it could; torch is never installed by gaudi-fixes)");
    }
    Ok(status)
}
