//! Where the trees are found when no directory is given: what the interpreter imports from a
//! neutral directory (never the checkout gaudi-fixes runs in), `PYTHONPATH` honoured as
//! `vllm serve` honours it, and a note when a package is not where the interpreter installs
//! packages. With no tree found at all: an error on stderr, exit 3, even with `-q`.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;

/// A real virtual environment (no pip) at `d/venv`, and its site-packages; `None` without a
/// `python3` that has `venv`.
fn venv(d: &Dir) -> Option<PathBuf> {
    let made =
        Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(d.path().join("venv")).output().ok()?;
    if !made.status.success() {
        return None;
    }
    let out = Command::new(d.path().join("venv/bin/python"))
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .ok()?;
    Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
}

/// The fixture's vllm package (pristine `mod.py`) written under `dir` (relative to `d`).
fn vllm_package(d: &Dir, dir: &str, module: &str) {
    d.write(&format!("{dir}/vllm/__init__.py"), "");
    d.write(&format!("{dir}/vllm/_version.py"), "__version__ = version = '0.26.0'\n");
    d.write(&format!("{dir}/vllm/mod.py"), module);
}

/// Run from a vllm + vllm_gaudi source checkout (a CI job after `pip install .`, a Dockerfile
/// `WORKDIR`) whose vllm/mod.py is already patched, while the interpreter's site-packages holds
/// the pristine installed copy that `vllm serve` imports: `--check` judges and `apply` patches
/// the installed one, the checkout is left alone.
#[test]
fn the_installed_package_is_found_not_the_checkout_in_the_working_directory() {
    let d = fixture();
    let Some(site) = venv(&d) else {
        eprintln!("no python3 with venv: skipped");
        return;
    };
    let patched = PRISTINE.replace("    b = a * 2\n", "    # fix-a: triple instead of double\n    b = a * 3\n");
    // The checkout is the directory gaudi-fixes runs in (the fixture dir: cat/ is beside it).
    vllm_package(&d, ".", &patched);
    d.write("vllm_gaudi/__init__.py", "");
    let rel_site = site.strip_prefix(d.path()).unwrap().to_str().unwrap().to_string();
    vllm_package(&d, &rel_site, PRISTINE);
    let checkout = d.snapshot("vllm");

    let python = ["--catalog", "cat", "--python", "venv/bin/python"];
    let args = |more: &[&'static str]| python.iter().copied().chain(more.iter().copied()).collect::<Vec<_>>();
    let (out, _) = d.cmd().args(args(&["apply", "--check"])).env("PYTHONPATH", "").expect(1);
    let site_real = std::fs::canonicalize(&site).unwrap();
    assert!(
        out.contains(&format!("vllm        {}  (version 0.26.0, found by venv/bin/python)", site_real.display())),
        "the installed vllm should be judged: {out}"
    );
    assert!(out.contains("fix-a  not applied"), "{out}");
    assert!(out.contains("`venv/bin/python` has no `vllm_gaudi` package installed"), "{out}");
    assert!(!out.contains("not where it installs packages"), "{out}");

    d.cmd().args(args(&["apply"])).env("PYTHONPATH", "").expect(0);
    assert_eq!(d.read_string(&format!("{rel_site}/vllm/mod.py")), patched);
    assert_same(&d.snapshot("vllm"), &checkout, "the checkout in the working directory");

    // PYTHONPATH is honoured as `vllm serve` honours it (a relative entry against the working
    // directory), and the tree found there is said not to be where packages are installed.
    vllm_package(&d, "elsewhere", PRISTINE);
    let (out, _) = d.cmd().args(args(&["--format", "json", "status"])).env("PYTHONPATH", "elsewhere").expect(0);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let vllm = &doc["trees"]["vllm"];
    assert_eq!(vllm["root"], std::fs::canonicalize(d.path().join("elsewhere")).unwrap().to_str().unwrap(), "{out}");
    assert_eq!(vllm["outside_site_packages"], true, "{out}");
    let (out, _) = d.cmd().args(args(&["status"])).env("PYTHONPATH", "elsewhere").expect(0);
    assert!(out.contains("which is not where it installs packages") && out.contains("PYTHONPATH"), "{out}");

    // The venv first on PATH as a relative entry (no --python): its python3, as the shell finds it.
    let path = format!("venv/bin:{}", std::env::var("PATH").unwrap_or_default());
    let (out, _) = d
        .cmd()
        .args(["--catalog", "cat", "--format", "json", "status"])
        .env("PATH", path)
        .env("PYTHONPATH", "")
        .expect(0);
    assert_eq!(value(&out)["trees"]["vllm"]["root"], site_real.to_str().unwrap(), "{out}");
}

/// An empty `PYTHONPATH` entry (`:/opt/x` from `PYTHONPATH=$PYTHONPATH:/opt/x` with it unset,
/// `/opt/x:`, `a::b`) is the working directory to Python: run from a checkout, that checkout is
/// what `vllm serve` imports, so it is the tree found (and patched), not site-packages' copy.
#[test]
fn an_empty_pythonpath_entry_is_the_working_directory() {
    let d = fixture();
    let Some(site) = venv(&d) else {
        eprintln!("no python3 with venv: skipped");
        return;
    };
    vllm_package(&d, ".", PRISTINE);
    let rel_site = site.strip_prefix(d.path()).unwrap().to_str().unwrap().to_string();
    vllm_package(&d, &rel_site, PRISTINE);
    let here = std::fs::canonicalize(d.path()).unwrap();
    for spelling in [":/nonexistent-h50", "/nonexistent-h50:", "a::b"] {
        let (out, _) = d
            .cmd()
            .args(["--catalog", "cat", "--python", "venv/bin/python", "--format", "json", "status"])
            .env("PYTHONPATH", spelling)
            .expect(0);
        assert_eq!(
            value(&out)["trees"]["vllm"]["root"],
            here.to_str().unwrap(),
            "PYTHONPATH={spelling}: the checkout in the working directory is what Python imports: {out}"
        );
    }
}

/// One interpreter: `--python python3` found through a relative `PATH` entry (here a wrapper
/// named python3 in `bin/`) is the interpreter `test` runs pytest with, though pytest runs in a
/// scratch directory where that entry names nothing (before, the bare name was run from there
/// and `PATH` gave another python3).
#[test]
fn test_runs_the_interpreter_discovery_resolves() {
    let d = fixture();
    let log = d.path().join("used.log");
    fake_python(
        &d,
        "bin/python3",
        &format!(
            "echo \"$*\" >> '{}'\n\
             if [ \"$1\" = \"-c\" ]; then echo gaudi-fixes-probe-ok; exit 0; fi\n\
             echo '4 passed in 0.01s'; verdict 0 4 0\n",
            log.display()
        ),
    );
    d.write("cat/fixes/fix-a/test_a.py", "def test_a():\n    pass\n");
    let yaml = d.read_string("cat/fixes/fix-a/fix.yaml");
    d.write("cat/fixes/fix-a/fix.yaml", format!("{yaml}tests: [test_a.py]\n"));
    let path = format!("bin:{}", std::env::var("PATH").unwrap_or_default());
    d.cmd().args(with_fixture(&["--python", "python3", "test", "fix-a"])).env("PATH", path).expect(0);
    let used = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(used.contains("-m pytest"), "pytest must run with bin/python3, the interpreter resolved here: {used:?}");
}

/// An editable install (`pip install -e CHECKOUT`: a `.pth` naming the checkout, the dist-info
/// with `direct_url.json` in site-packages): the checkout is the tree found, and its version is
/// read from that dist-info (it said "unknown"). A `.pth` that prints to stdout changes nothing
/// (discovery failed, exit 3, "unexpected output").
#[test]
fn an_editable_install_has_its_version_and_a_printing_pth_is_no_answer() {
    let d = fixture();
    let Some(site) = venv(&d) else {
        eprintln!("no python3 with venv: skipped");
        return;
    };
    d.write("checkout/vllm_gaudi/__init__.py", "");
    let checkout = std::fs::canonicalize(d.path().join("checkout")).unwrap();
    let rel_site = site.strip_prefix(d.path()).unwrap().to_str().unwrap().to_string();
    d.write(&format!("{rel_site}/__editable__.vllm_gaudi-0.26.1.pth"), format!("{}\n", checkout.display()));
    d.write(
        &format!("{rel_site}/vllm_gaudi-0.26.1.dist-info/direct_url.json"),
        format!("{{\"url\": \"file://{}\", \"dir_info\": {{\"editable\": true}}}}", checkout.display()),
    );
    d.write(&format!("{rel_site}/vllm_gaudi-0.26.1.dist-info/METADATA"), "Name: vllm_gaudi\nVersion: 0.26.1\n");
    let args = ["--catalog", "cat", "--python", "venv/bin/python", "--format", "json", "status"];
    let (out, _) = d.cmd().args(args).env("PYTHONPATH", "").expect(0);
    let gaudi = &value(&out)["trees"]["vllm_gaudi"];
    assert_eq!(gaudi["root"], checkout.to_str().unwrap(), "{out}");
    assert_eq!(gaudi["version"], "0.26.1", "the editable install's dist-info says its version: {out}");
    d.write(&format!("{rel_site}/chatty.pth"), "import sys; print('hello from a .pth file')\n");
    let (out, _) = d.cmd().args(args).env("PYTHONPATH", "").expect(0);
    assert_eq!(value(&out)["trees"]["vllm_gaudi"]["version"], "0.26.1", "{out}");
}

fn value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// No tree found (an interpreter that cannot be run, no flag): every command that judges or
/// changes trees says so on stderr and exits 3, with `-q` too (`--help`: errors still print),
/// and nothing of it goes to stdout; `status` too (it exited 0).
#[test]
fn no_tree_found_is_an_error_on_stderr_even_with_quiet() {
    let d = fixture();
    let base = ["--catalog", "cat", "--python", "no-such-python"];
    for command in [&["apply", "--check"][..], &["apply"], &["revert"], &["status"], &["-q", "apply", "--check"]] {
        let args: Vec<&str> = base.iter().chain(command).copied().collect();
        let (out, err) = d.cmd().args(&args).expect(3);
        assert!(
            err.contains("gaudi-fixes: error: no vllm or vllm_gaudi tree found")
                && err.contains("could not run `no-such-python`"),
            "{command:?}: {err}"
        );
        assert!(out.is_empty(), "{command:?}: the error went to stdout: {out}");
    }
    let args: Vec<&str> = base.iter().chain(&["--format", "json", "status"]).copied().collect();
    let (out, _) = d.cmd().args(&args).expect(3);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["exit_code"], 3, "{out}");
    assert!(doc["error"]["message"].as_str().unwrap().contains("no vllm or vllm_gaudi tree found"), "{out}");
}

/// `test` reads the tree under the shared lock, as `status` does: while a writer holds the
/// tree it waits (here: gives up after `--lock-timeout`), instead of testing a tree an `apply`
/// is halfway through.
#[test]
fn test_waits_for_a_writer_holding_the_tree() {
    let d = crate::upkeep::with_tests();
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a"])).expect(0);
    let root = std::fs::File::open(d.path().join("root")).unwrap();
    root.lock().unwrap();
    let (_, err) =
        d.cmd().args(with_fixture(&["--python", "./py", "test", "fix-a", "--lock-timeout", "0.3"])).expect(3);
    assert!(err.contains("gave up waiting for the lock"), "{err}");
    root.unlock().unwrap();
}

/// One tree found, a selected fix needing the other: exit 3, and under `-q` (no report) the
/// fix's error still prints on stderr.
#[test]
fn quiet_still_prints_a_fix_that_cannot_be_judged() {
    let d = fixture();
    std::fs::remove_dir_all(d.path().join("root/vllm")).unwrap();
    d.write("root/vllm_gaudi/__init__.py", "");
    let (out, err) = d.cmd().args(with_fixture(&["-q", "apply", "--check"])).expect(3);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("gaudi-fixes: error: fix-a: needs the vllm tree, which was not found"), "{err}");
}
