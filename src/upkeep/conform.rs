//! The conformance suite's runner, behind `gaudi-fixes conform`: the pinned requirements built
//! into the binary (the catalogue's `fixes/_support/requirements.txt`), the check of an
//! interpreter against them (every missing distribution at once, before anything runs), the
//! `--setup` that installs them, and the suite's run: its progress lines read as they come, its
//! report (the last line of stdout) and its exit code judged together — a verdict needs the
//! suite's exit 0, a complete report and at least one schedule.
//!
//! The suite's side of the contract (`conform.py`): `--root DIR --schedules N --seed S [--first]
//! [--replay FILE] [--no-reference] [--progress] [--jobs N]`, run in the support folder; stdout's last line
//! is one JSON object (the report, or `error`/`missing`/`pip` with exit 3); with `--progress`
//! stderr has one `conform-progress {"done": n, "total": N, "differences": d, "seconds": t}` line
//! per finished schedule; any other stderr line is free text, kept for error messages.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, SUPPORT_DIR};
use crate::error::{FileContext, Located};

/// The suite's script in the test-support folder.
pub const SUITE: &str = "conform.py";

/// The shrinker's script in the test-support folder (`conform --shrink`): it imports the suite.
pub const SHRINKER: &str = "conform_shrink.py";

/// The pinned requirements' file in the test-support folder.
pub const REQUIREMENTS: &str = "requirements.txt";

/// The prefix of the suite's progress lines on stderr.
const PROGRESS: &str = "conform-progress ";

/// How many of the suite's last free-text stderr lines an error shows.
const TAIL: usize = 15;

/// One pinned distribution (`name==version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub name: String,
    pub version: String,
}

impl std::fmt::Display for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=={}", self.name, self.version)
    }
}

/// The catalogue's pinned requirements: the file's text (what `--setup` hands pip) and its pins.
pub fn requirements(catalog: &Catalog) -> Result<(String, Vec<Pin>)> {
    let rel = Path::new(SUPPORT_DIR).join(REQUIREMENTS);
    let shown = catalog.files.display(&rel);
    if !catalog.files.files.contains_key(&rel) {
        bail!("the catalogue has no {shown}: the conformance suite's requirements are unknown");
    }
    let text = catalog.files.text(&rel)?;
    let mut pins = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, version)) = line.split_once("==").filter(|(n, v)| !n.trim().is_empty() && !v.trim().is_empty())
        else {
            return Err(Located::at(&shown, i + 1, format!("`{line}` is not a pin (`name==version`)")).into());
        };
        pins.push(Pin { name: name.trim().to_string(), version: version.trim().to_string() });
    }
    Ok((text.to_string(), pins))
}

/// What an interpreter has of what the suite needs.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// torch's version, when it is there.
    pub torch: Option<String>,
    /// Modules that are not there (torch, numpy).
    pub missing_modules: Vec<String>,
    /// Pinned distributions that are not installed.
    pub missing: Vec<Pin>,
    /// Pinned distributions installed at another version (a note, not an error).
    pub other_versions: Vec<(Pin, String)>,
    /// How many pins there are.
    pub pinned: usize,
}

impl Environment {
    /// Whether the suite can run here.
    pub fn ready(&self) -> bool {
        self.missing_modules.is_empty() && self.missing.is_empty()
    }
}

/// The modules the suite imports besides the pinned distributions: never installed by
/// gaudi-fixes (torch is the interpreter's own).
const MODULES: [&str; 2] = ["torch", "numpy"];

/// What the probe prints first, so an interpreter that runs nothing (`/bin/true`) is caught.
const PROBE_OK: &str = "gaudi-fixes-probe-ok";

#[derive(Deserialize)]
struct ProbeAnswer {
    missing_modules: Vec<String>,
    dists: std::collections::BTreeMap<String, Option<String>>,
    torch: Option<String>,
}

/// Ask `python` (from a neutral directory, so no checkout there shadows what is installed)
/// which of the suite's modules and pinned distributions it has, all in one run.
pub fn probe(python: &str, pins: &[Pin]) -> Result<Environment> {
    let code = format!(
        "import importlib.util, importlib.metadata as md, json, sys\n\
         print({PROBE_OK:?})\n\
         mods = [m for m in {MODULES:?} if importlib.util.find_spec(m) is None]\n\
         def version(name):\n    \
             try:\n        return md.version(name)\n    \
             except md.PackageNotFoundError:\n        return None\n\
         print(json.dumps({{'missing_modules': mods, 'dists': {{n: version(n) for n in sys.argv[1:]}}, \
         'torch': None if 'torch' in mods else version('torch')}}))"
    );
    let neutral = super::pytest::Scratch::new("conform-probe")?;
    let out = crate::discover::interpreter_command(python)
        .current_dir(&neutral.0)
        .arg("-c")
        .arg(code)
        .args(pins.iter().map(|p| &p.name))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{python}` for the conformance suite (give --python PATH)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Anything a `.pth` file or `sitecustomize` printed first is passed over.
    let mut lines = stdout.lines().skip_while(|l| l.trim() != PROBE_OK);
    if !out.status.success() || lines.next().is_none() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "`{python}` is not a Python interpreter that runs a one-line probe ({}); give --python PATH",
            err.trim().lines().last().unwrap_or("it printed nothing")
        );
    }
    let answer: ProbeAnswer = serde_json::from_str(lines.next().unwrap_or(""))
        .with_context(|| format!("`{python}` answered the probe with something that is not its JSON"))?;
    let mut env = Environment {
        torch: answer.torch,
        missing_modules: answer.missing_modules,
        pinned: pins.len(),
        ..Environment::default()
    };
    for pin in pins {
        match answer.dists.get(&pin.name).cloned().flatten() {
            None => env.missing.push(pin.clone()),
            Some(v) if v != pin.version => env.other_versions.push((pin.clone(), v)),
            Some(_) => {}
        }
    }
    Ok(env)
}

/// Why the suite cannot run on `env`, in conform's words, with what to do: every missing module
/// and distribution at once. `setup` is the command that installs the pinned ones.
pub fn not_ready(python: &str, env: &Environment, setup: &str, vllm_root: Option<&std::path::Path>) -> String {
    let mut parts = Vec::new();
    if env.missing_modules.iter().any(|m| m == "torch") {
        parts.push(format!(
            "`{python}` has no torch: conform drives vLLM's and vllm_gaudi's sampling code on CPU with the \
             interpreter's own torch, and gaudi-fixes never installs one. In a Gaudi image give --python the \
             image's interpreter; on a CPU-only machine first {}{}",
            super::pytest::cpu_torch_install(python),
            super::pytest::vllm_pin_note(vllm_root)
        ));
    }
    if env.missing_modules.iter().any(|m| m == "numpy") {
        parts.push(format!("`{python}` has no numpy (`{python} -m pip install numpy`)"));
    }
    if !env.missing.is_empty() {
        let names: Vec<String> = env.missing.iter().map(Pin::to_string).collect();
        parts.push(format!(
            "{} of the {} distributions the suite imports (pinned, installed without their dependencies) \
             are missing: {}. Install them with `{setup}`",
            env.missing.len(),
            env.pinned,
            names.join(", ")
        ));
    }
    format!("the conformance suite cannot run with `{python}`:\n  - {}", parts.join("\n  - "))
}

/// Write the pinned requirements to `<cache>/conform/requirements.txt` for pip; its path.
pub fn write_requirements(text: &str) -> Result<PathBuf> {
    let dir = super::upstream::cache_dir()?.join("conform");
    std::fs::create_dir_all(&dir).file_context(&dir, || format!("creating {}", dir.display()))?;
    let path = dir.join(REQUIREMENTS);
    std::fs::write(&path, text).file_context(&path, || format!("writing {}", path.display()))?;
    Ok(path)
}

/// The pip command `--setup` runs, as words: `python`'s own pip, installing into `target` (the
/// layered venv's site-packages), never into `python`'s environment.
pub fn pip_words(python: &str, file: &Path, target: &Path) -> Vec<String> {
    let mut words = vec![python.to_string()];
    words.extend(["-m", "pip", "install", "--no-deps", "--upgrade", "--target"].map(String::from));
    words.push(target.display().to_string());
    words.push("-r".into());
    words.push(file.display().to_string());
    words
}

/// The venv of conform's own that `--setup` makes for an interpreter (the image's): its pins
/// live there, so the interpreter's environment is never changed (pinned versions vLLM's own
/// requirements exclude broke `pip check` of the image's vLLM). It is layered on the
/// interpreter: `--system-site-packages`, and a `.pth` naming the interpreter's site-packages
/// (a venv made from a venv's python is based on the base installation, whose site-packages
/// would not hold the image's torch).
#[derive(Debug, Clone)]
pub struct LayeredVenv {
    pub dir: PathBuf,
    /// The venv's site-packages, where the pins go.
    pub site: PathBuf,
    /// The interpreter's site-packages directories, for the `.pth`.
    base_sites: Vec<String>,
}

/// The `.pth` in the layered venv that puts the interpreter's site-packages after its own.
const BASE_PTH: &str = "gaudi_fixes_base.pth";

impl LayeredVenv {
    /// The layered venv for `python` in the cache (one per interpreter and Python version),
    /// made or not.
    pub fn of(python: &str) -> Result<LayeredVenv> {
        let code = "import json, sys  # gaudi_fixes_site\n\
                    print(json.dumps([sys.executable, '%d.%d' % sys.version_info[:2], \
                    [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]]))";
        let out = crate::discover::interpreter_command(python)
            .arg("-c")
            .arg(code)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run `{python}` for the conformance suite (give --python PATH)"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer: Option<(String, String, Vec<String>)> =
            stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).filter(|_| out.status.success());
        let Some((executable, version, base_sites)) = answer else {
            bail!("`{python}` did not say where its packages are (is it a Python interpreter?); give --python PATH");
        };
        let key = crate::hash::sha256_hex(format!("{executable}\n{version}").as_bytes());
        let dir = super::upstream::cache_dir()?.join("conform").join(format!("venv-{}", &key[..12]));
        let site = dir.join("lib").join(format!("python{version}")).join("site-packages");
        Ok(LayeredVenv { dir, site, base_sites })
    }

    /// The venv's interpreter, once `--setup` made it.
    pub fn python(&self) -> Option<String> {
        let python = self.dir.join("bin").join("python");
        python.is_file().then(|| python.display().to_string())
    }

    /// Make the venv with `python` (once), and name `python`'s site-packages in its `.pth`
    /// (every time: the image's may have moved).
    pub fn make(&self, python: &str) -> Result<()> {
        if self.python().is_none() {
            let dir = self.dir.display().to_string();
            let words: Vec<String> =
                [python, "-m", "venv", "--without-pip", "--system-site-packages", &dir].map(String::from).to_vec();
            run_pip(&words)?;
        }
        std::fs::create_dir_all(&self.site).file_context(&self.site, || format!("creating {}", self.site.display()))?;
        let pth = self.site.join(BASE_PTH);
        let text: String = self.base_sites.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(&pth, text).file_context(&pth, || format!("writing {}", pth.display()))?;
        Ok(())
    }
}

/// Run pip (or `python -m venv`; its output on our stderr, so stdout stays the report's); an
/// error when it fails.
pub fn run_pip(words: &[String]) -> Result<()> {
    let status = crate::discover::interpreter_command(&words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .stderr(std::io::stderr())
        .status()
        .with_context(|| format!("running `{}`", words.join(" ")))?;
    if !status.success() {
        bail!("`{}` failed ({}); its output is above", words.join(" "), ended(status));
    }
    Ok(())
}

/// How a process ended, in words: `exit status 1`, `killed by signal 9`.
pub fn ended(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended without an exit status".to_string(),
    }
}

/// What the suite is asked.
#[derive(Debug, Clone)]
pub struct SuiteArgs {
    pub root: PathBuf,
    pub schedules: u32,
    pub seed: u64,
    pub first: bool,
    /// An absolute path to a schedule to replay.
    pub replay: Option<PathBuf>,
    pub no_reference: bool,
    /// Worker processes (`--jobs`; 1 runs in the suite's own process).
    pub jobs: u32,
}

/// One of the suite's progress lines.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Tick {
    pub done: u64,
    pub total: u64,
    #[serde(default)]
    pub differences: u64,
    #[serde(default)]
    pub seconds: f64,
}

/// How the suite's run ended: its exit, the report it printed (if its last line was one), the
/// last free-text lines of its stderr.
pub struct SuiteRun {
    pub status: std::process::ExitStatus,
    pub report: Option<Conformance>,
    pub tail: Vec<String>,
}

/// Run the suite in `suite_dir` with `python`; `tick` is called with each progress line, and
/// with `None` about twice a second while it runs (so a caller can keep time).
pub fn run_suite(
    python: &str,
    suite_dir: &Path,
    args: &SuiteArgs,
    tick: &mut dyn FnMut(Option<Tick>),
) -> Result<SuiteRun> {
    let mut cmd = crate::discover::interpreter_command(python);
    cmd.current_dir(suite_dir)
        .arg(SUITE)
        .arg("--root")
        .arg(&args.root)
        .args(["--schedules", &args.schedules.to_string(), "--seed", &args.seed.to_string()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A suite from before the progress lines refuses the flag; it then runs without them.
    let suite = std::fs::read_to_string(suite_dir.join(SUITE)).unwrap_or_default();
    if suite.contains("\"--progress\"") {
        cmd.arg("--progress");
    }
    if args.first {
        cmd.arg("--first");
    }
    if let Some(file) = &args.replay {
        cmd.arg("--replay").arg(file);
    }
    if args.no_reference {
        cmd.arg("--no-reference");
    }
    // A suite from before `--jobs` refuses the flag; it then runs in one process.
    if args.jobs > 1 && suite.contains("\"--jobs\"") {
        cmd.args(["--jobs", &args.jobs.to_string()]);
    }
    let (mut child, watch) =
        super::child::Watch::spawn(&mut cmd).with_context(|| format!("running `{python} {SUITE}`"))?;
    let (reader, stderr) = split_output(&mut child);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let lines = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut tail: VecDeque<String> = VecDeque::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(500)) {
            Ok(line) => match line.strip_prefix(PROGRESS).and_then(|json| serde_json::from_str::<Tick>(json).ok()) {
                Some(t) => tick(Some(t)),
                None => {
                    tail.push_back(line);
                    if tail.len() > TAIL {
                        tail.pop_front();
                    }
                }
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => tick(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = lines.join();
    let status = child.wait().context("waiting for the conformance suite")?;
    watch.finish()?;
    let stdout = reader.join().unwrap_or_default();
    // The report is the last line, and only that: a line a tree prints while it is imported
    // (`{}`) is no report.
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let report = serde_json::from_str::<serde_json::Value>(last)
        .ok()
        .filter(serde_json::Value::is_object)
        .and_then(|v| serde_json::from_value::<Conformance>(v).ok());
    Ok(SuiteRun { status, report, tail: tail.into() })
}

/// The verdict of a run: `Ok(differences)` when it may be trusted — the suite exited 0 and
/// reported every schedule asked (or, with `--first`, stopped at a difference), at least one —
/// else the reason there is none, in words. `setup` is the command that installs what is missing.
pub fn judge(run: &SuiteRun, args: &SuiteArgs, setup: &str) -> Result<u32> {
    let tail = || {
        if run.tail.is_empty() {
            " (it printed nothing on stderr)".to_string()
        } else {
            format!("; the last lines it printed on stderr:\n{}", run.tail.join("\n"))
        }
    };
    let Some(report) = &run.report else {
        bail!("the conformance suite ended without a report ({}){}", ended(run.status), tail());
    };
    if let Some(error) = &report.error {
        let missing = report.missing_names();
        let mut message = format!("the conformance suite cannot run: {error}");
        if !missing.is_empty() {
            message.push_str(&format!("; missing: {}", missing.join(", ")));
        }
        match &report.pip {
            Some(pip) => message.push_str(&format!("; install with `{pip}` (or all pinned ones: `{setup}`)")),
            None if !missing.is_empty() => message.push_str(&format!("; install with `{setup}`")),
            None => {}
        }
        bail!(message);
    }
    if !run.status.success() {
        bail!(
            "the conformance suite printed a report but then ended with {}: a run that did not end cleanly \
             gives no verdict{}",
            ended(run.status),
            tail()
        );
    }
    let asked = if args.replay.is_some() { 1 } else { args.schedules };
    if report.schedules == 0 {
        bail!("the conformance suite ran no schedule: nothing was checked, so there is no verdict");
    }
    if let Some(requested) = report.requested.filter(|&r| r != asked) {
        bail!("the conformance suite reports {requested} schedule(s) asked for, but {asked} were: no verdict");
    }
    let differences = report.differences();
    let stopped_at_one = args.first && differences > 0;
    let complete = report.complete.unwrap_or(report.schedules >= asked || stopped_at_one);
    if !complete {
        bail!(
            "the conformance suite ran {} of the {asked} schedule(s) asked for and says its report is not \
             complete: no verdict{}",
            report.schedules,
            tail()
        );
    }
    Ok(differences)
}

/// Read a schedule saved from `--first` (`failing_schedule`): it must be one JSON object. Its
/// absolute path, to hand to the suite (which runs in another directory).
pub fn replay_file(path: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(path)
        .file_context(path, || format!("reading the schedule to replay, {}", path.display()))?;
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v.is_object() => {
            if let Err(why) = schedule_gives_a_verdict(&v) {
                return Err(Located::in_file(path, format!("not a schedule to replay: {why}")).into());
            }
        }
        Ok(_) => {
            return Err(Located::in_file(
                path,
                "not a schedule: expected one JSON object (the `failing_schedule` of `conform --first --format json`)",
            )
            .into())
        }
        Err(e) => {
            return Err(Located::at(path, e.line(), format!("not a schedule: {e}")).column(e.column()).into());
        }
    }
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// Whether a schedule (`fixes/_support/conform_schedule.py` documents its format) can give a
/// verdict: at least one request and one step, and every request a step names (`finish`,
/// `preempt`, `arrive`, `structured`; the keys of `scheduled` and `drafts`) one it defines.
/// Otherwise the suite ran it and called what broke a difference of the HPU path, or checked
/// nothing and passed.
fn schedule_gives_a_verdict(schedule: &serde_json::Value) -> Result<(), String> {
    let requests = match schedule.get("requests") {
        Some(serde_json::Value::Object(r)) if !r.is_empty() => r,
        _ => return Err("it defines no requests (`requests`, an object of named requests)".into()),
    };
    let steps = match schedule.get("steps") {
        Some(serde_json::Value::Array(s)) if !s.is_empty() => s,
        _ => return Err("it has no steps (`steps`, a list)".into()),
    };
    for (n, step) in steps.iter().enumerate() {
        let Some(step) = step.as_object() else { return Err(format!("step {n} is not an object")) };
        let mut named: Vec<(&str, &str)> = Vec::new();
        for key in ["finish", "preempt", "arrive", "structured"] {
            match step.get(key) {
                None => {}
                Some(serde_json::Value::Array(names)) if names.iter().all(|x| x.is_string()) => {
                    named.extend(names.iter().filter_map(|x| x.as_str()).map(|x| (key, x)));
                }
                Some(_) => return Err(format!("step {n}'s `{key}` is not a list of request names")),
            }
        }
        for key in ["scheduled", "drafts"] {
            match step.get(key) {
                None => {}
                Some(serde_json::Value::Object(by_name)) => named.extend(by_name.keys().map(|x| (key, x.as_str()))),
                Some(_) => return Err(format!("step {n}'s `{key}` is not an object keyed by request name")),
            }
        }
        if let Some((key, name)) = named.into_iter().find(|(_, name)| !requests.contains_key(*name)) {
            return Err(format!("step {n}'s `{key}` names {name}, a request the schedule does not define"));
        }
    }
    Ok(())
}

/// What the suite printed (its one JSON line), and the fixes `conform` names per feature.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Conformance {
    #[serde(default)]
    pub root: Option<String>,
    /// Schedules run.
    #[serde(default)]
    pub schedules: u32,
    /// Schedules asked for, as the suite understood the request.
    #[serde(default)]
    pub requested: Option<u32>,
    /// Whether every schedule asked for ran (or, with `--first`, it stopped at a difference).
    #[serde(default)]
    pub complete: Option<bool>,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub seconds: f64,
    /// Worker processes the schedules ran in (absent from suites before `--jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u32>,
    /// Schedules finished per minute of the suite's own clock (the import before them left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedules_per_minute: Option<f64>,
    /// The seed of the last schedule run (a seeded run's seeds are `seed`..=`last_seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seed: Option<u64>,
    /// By feature, in the suite's order.
    #[serde(default)]
    pub features: Vec<Feature>,
    /// The differential reference the suite drove (vLLM's GPU path), when it drove one.
    #[serde(default)]
    pub reference: Option<String>,
    /// Where HPU and vLLM's GPU path differ but the GPU path disagrees with the request itself:
    /// listed, never counted against HPU.
    #[serde(default)]
    pub gpu_disagrees: Vec<GpuDisagrees>,
    /// Failures of vLLM's own GPU reference: the reference's, never counted as HPU differences.
    #[serde(default)]
    pub reference_errors: Vec<serde_json::Value>,
    /// With `--first`, the schedule that found the difference, as data (`--replay` takes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_schedule: Option<serde_json::Value>,
    /// Set when the suite cannot run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The modules it lacks (a list; one name from older suites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<serde_json::Value>,
    /// The pip line that installs a missing module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pip: Option<String>,
}

/// One feature's row.
#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct Feature {
    pub name: String,
    pub schedules: u32,
    pub differences: u32,
    pub first: Option<String>,
    /// The catalogue's fixes whose `conform:` names this feature (filled in by `conform`).
    #[serde(default)]
    pub fixes: Vec<String>,
}

/// One feature in which vLLM's GPU path disagrees with the request.
#[derive(Debug, Deserialize, Serialize, Clone)]
pub struct GpuDisagrees {
    pub name: String,
    pub count: u32,
    pub first: Option<String>,
}

impl Conformance {
    /// Differences over every feature.
    pub fn differences(&self) -> u32 {
        self.features.iter().map(|f| f.differences).sum()
    }

    /// The modules the suite said it lacks.
    pub fn missing_names(&self) -> Vec<String> {
        match &self.missing {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => {
                a.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// A child's stdout read whole on a thread of its own (so that its stderr can be read as it
/// comes without either pipe filling up), and its stderr.
fn split_output(child: &mut std::process::Child) -> (std::thread::JoinHandle<String>, std::process::ChildStderr) {
    let mut stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    (reader, stderr)
}

/// What the shrinker printed (`conform_shrink.py`'s last stdout line): the smallest schedule it
/// found that still differs in `feature`, with the first difference and the sizes before and
/// after; or an `error` (the file finds no difference to shrink).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Shrunk {
    #[serde(default)]
    pub schedule: serde_json::Value,
    #[serde(default)]
    pub feature: String,
    #[serde(default)]
    pub first: String,
    #[serde(default)]
    pub before: serde_json::Value,
    #[serde(default)]
    pub after: serde_json::Value,
    #[serde(default)]
    pub runs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Run the shrinker in `suite_dir` on `file` (an absolute path) against the trees under `root`;
/// `line` gets each of its stderr lines as it comes. Its result, or why there is none.
pub fn run_shrinker(
    python: &str,
    suite_dir: &Path,
    root: &Path,
    file: &Path,
    line: &mut dyn FnMut(&str),
) -> Result<Shrunk> {
    let mut cmd = crate::discover::interpreter_command(python);
    cmd.current_dir(suite_dir)
        .arg(SHRINKER)
        .arg("--root")
        .arg(root)
        .arg(file)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, watch) =
        super::child::Watch::spawn(&mut cmd).with_context(|| format!("running `{python} {SHRINKER}`"))?;
    let (reader, stderr) = split_output(&mut child);
    let mut tail: VecDeque<String> = VecDeque::new();
    for l in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
        line(&l);
        tail.push_back(l);
        if tail.len() > TAIL {
            tail.pop_front();
        }
    }
    let status = child.wait().context("waiting for the shrinker")?;
    watch.finish()?;
    let stdout = reader.join().unwrap_or_default();
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let shrunk = serde_json::from_str::<Shrunk>(last).ok();
    match shrunk {
        Some(Shrunk { error: Some(error), .. }) => bail!("cannot shrink: {error}"),
        Some(s) if status.success() && s.schedule.is_object() => Ok(s),
        _ => bail!(
            "the shrinker ended with {} and no schedule; the last lines it printed on stderr:\n{}",
            ended(status),
            Vec::from(tail).join("\n")
        ),
    }
}
