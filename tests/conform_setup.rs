//! `conform --setup` never changes the interpreter it is given (issue 48: it `pip install`ed its
//! pins into the image's interpreter, over versions vLLM requires, and `pip check` broke): the
//! pins go into conform's own venv in the cache, layered on that interpreter's packages.
//! Offline: a scratch "image" venv with a conflicting pair installed, and a local wheel.

use std::path::Path;
use std::process::Command;

use crate::common::{fixture, with_fixture, Dir};

/// `python -c code`'s stdout, trimmed.
fn python(python: &Path, args: &[&str]) -> String {
    let out = Command::new(python).args(args).env("PIP_DISABLE_PIP_VERSION_CHECK", "1").output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
}

/// A dist-info for `name` `version` (requiring `requires`) in `site`.
fn installed(d: &Dir, site: &str, name: &str, version: &str, requires: &str) {
    let module = name.replace('-', "_");
    let info = format!("{site}/{module}-{version}.dist-info");
    let requires = if requires.is_empty() { String::new() } else { format!("Requires-Dist: {requires}\n") };
    d.write(
        &format!("{info}/METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}"),
    );
    d.write(&format!("{info}/INSTALLER"), "pip\n");
    d.write(&format!("{info}/RECORD"), "");
    d.write(&format!("{site}/{module}/__init__.py"), format!("VERSION = {version:?}\n"));
}

/// A wheel of gf-dep 2.0 in `d/wheels`, made by Python's zipfile.
fn wheel(d: &Dir) {
    std::fs::create_dir_all(d.path().join("wheels")).unwrap();
    let code = "import zipfile, sys\n\
                files = {'gf_dep/__init__.py': 'VERSION = \"2.0\"\\n',\n\
                 'gf_dep-2.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: gf-dep\\nVersion: 2.0\\n',\n\
                 'gf_dep-2.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}\n\
                record = ''.join(f'{p},,\\n' for p in files) + 'gf_dep-2.0.dist-info/RECORD,,\\n'\n\
                z = zipfile.ZipFile(sys.argv[1], 'w')\n\
                [z.writestr(p, t) for p, t in files.items()]\n\
                z.writestr('gf_dep-2.0.dist-info/RECORD', record)\n\
                z.close()\n";
    let whl = d.path().join("wheels/gf_dep-2.0-py3-none-any.whl");
    let out = Command::new("python3").args(["-c", code, whl.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn setup_installs_into_a_venv_of_its_own_and_pip_check_of_the_interpreter_is_unchanged() {
    let d = fixture();
    let img = d.path().join("img");
    let made =
        Command::new("python3").args(["-m", "venv", "--without-pip", "--system-site-packages"]).arg(&img).output();
    if !made.is_ok_and(|o| o.status.success())
        || python(&img.join("bin/python"), &["-m", "pip", "--version"]).is_empty()
    {
        eprintln!("skipped: no python3 with venv and pip here");
        return;
    }
    let img_python = img.join("bin/python");
    let site = python(&img_python, &["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]);
    let site = Path::new(&site).strip_prefix(d.path()).unwrap().display().to_string();
    // vLLM-like requirements: gf-needs-old needs gf-dep < 2; the suite pins gf-dep 2.0.
    installed(&d, &site, "gf-dep", "1.0", "");
    installed(&d, &site, "gf-needs-old", "1.0", "gf-dep<2");
    d.write("root/vllm_gaudi/__init__.py", "");
    d.write("cat/fixes/_support/requirements.txt", "gf-dep==2.0\n");
    wheel(&d);
    let check_before = python(&img_python, &["-m", "pip", "check"]);
    let (out, _) = d
        .cmd()
        .args(with_fixture(&["--python", img_python.to_str().unwrap(), "conform", "--setup"]))
        .env("GAUDI_FIXES_CACHE", d.path().join("cache"))
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", d.path().join("wheels"))
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    // No torch in the scratch interpreter: not ready (3), after pip ran.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{err}");
    assert_eq!(
        python(&img_python, &["-m", "pip", "check"]),
        check_before,
        "pip check of the interpreter changed:\n{err}"
    );
    assert_eq!(python(&img_python, &["-c", "import gf_dep; print(gf_dep.VERSION)"]), "1.0", "{err}");
    let venv = std::fs::read_dir(d.path().join("cache/conform"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("venv-")));
    let venv_python = venv.unwrap_or_else(|| panic!("no venv in the cache:\n{err}")).join("bin/python");
    let seen = "import gf_dep, importlib.metadata as m; print(gf_dep.VERSION, m.version('gf-needs-old'))";
    assert_eq!(python(&venv_python, &["-c", seen]), "2.0 1.0", "the venv does not layer its pins on the interpreter's");
}
