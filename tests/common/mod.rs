//! Test harness shared by the integration tests: a temp [`Dir`] holding a catalogue and a tree,
//! and a [`TestCommand`] that runs the real binary and, on a failed expectation, shows the
//! command, the directory and the tree.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory with helpers to write files and snapshot the tree.
pub struct Dir {
    pub tmp: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Dir {
        Dir { tmp: tempfile::tempdir().expect("tempdir") }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Write `rel` (parents created).
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, contents).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        fs::read(self.path().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
    }

    pub fn read_string(&self, rel: &str) -> String {
        String::from_utf8(self.read(rel)).unwrap()
    }

    /// Every file under `rel` (relative path → bytes), symlinks as `-> target`.
    pub fn snapshot(&self, rel: &str) -> BTreeMap<String, Vec<u8>> {
        let base = self.path().join(rel);
        let mut out = BTreeMap::new();
        for entry in walkdir::WalkDir::new(&base).sort_by_file_name() {
            let entry = entry.unwrap();
            let key = entry.path().strip_prefix(&base).unwrap().display().to_string();
            if entry.file_type().is_symlink() {
                out.insert(key, format!("-> {}", fs::read_link(entry.path()).unwrap().display()).into_bytes());
            } else if entry.file_type().is_file() {
                out.insert(key, fs::read(entry.path()).unwrap());
            } else {
                out.insert(key + "/", Vec::new());
            }
        }
        out
    }

    /// A `tree` listing for failure messages.
    pub fn listing(&self) -> String {
        self.snapshot("").keys().map(|k| format!("  {k}\n")).collect()
    }

    /// A command running the real binary in this directory.
    pub fn cmd(&self) -> TestCommand<'_> {
        TestCommand::new(self)
    }
}

/// The real `gaudi-fixes` binary with args and env; no colour, no ambient GAUDI_FIXES_* env.
pub struct TestCommand<'d> {
    dir: &'d Dir,
    cmd: Command,
    shown: String,
}

impl<'d> TestCommand<'d> {
    fn new(dir: &'d Dir) -> TestCommand<'d> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gaudi-fixes"));
        cmd.current_dir(dir.path());
        for (k, _) in std::env::vars() {
            if k.starts_with("GAUDI_FIXES_") {
                cmd.env_remove(k);
            }
        }
        // No vllm_gaudi archives but a test's own (a shared/upstream/ above the temp dir is not).
        cmd.env("NO_COLOR", "1").env("GAUDI_FIXES_VLLM_GAUDI_ARCHIVES", "");
        TestCommand { dir, cmd, shown: "gaudi-fixes".into() }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for a in args {
            self.shown.push(' ');
            self.shown.push_str(a.as_ref());
            self.cmd.arg(a.as_ref());
        }
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Self {
        self.shown = format!("{k}={} {}", v.as_ref().to_string_lossy(), self.shown);
        self.cmd.env(k, v);
        self
    }

    /// Run and return the output.
    pub fn output(mut self) -> (Output, String) {
        let out = self.cmd.output().expect("running gaudi-fixes");
        (out, self.shown)
    }

    /// Run, assert the exit code, return (stdout, stderr).
    pub fn expect(self, code: i32) -> (String, String) {
        let dir = self.dir;
        let (out, shown) = self.output();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.code() != Some(code) {
            panic!(
                "expected exit {code}, got {:?}\ncommand: {shown}\ndir: {}\ntree:\n{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                out.status.code(),
                dir.path().display(),
                dir.listing()
            );
        }
        (stdout, stderr)
    }
}

/// A small pristine module and a fix for it, mirroring the real catalogue's layout:
/// `cat/fixes/<name>/…`, `cat/profiles/…`, tree at `root/vllm/…`.
pub const PRISTINE: &str = "\
import os


def helper():
    return 1


def sample(x):
    a = x + 1
    b = a * 2
    return b


def other():
    return 2
";

pub const FIX_A_PATCH: &str = "\
--- a/vllm/mod.py
+++ b/vllm/mod.py
@@ -7,7 +7,8 @@ def helper():
 
 def sample(x):
     a = x + 1
-    b = a * 2
+    # fix-a: triple instead of double
+    b = a * 3
     return b
 
 
";

/// Fix B edits `other()`, lower in the same file; declared `after: [fix-a]`, so made on top of
/// fix-a's patch (one line longer above it).
pub const FIX_B_PATCH: &str = "\
--- a/vllm/mod.py
+++ b/vllm/mod.py
@@ -14,3 +14,4 @@ def sample(x):
 
 def other():
+    # fix-b was here
     return 2
";

pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Write a catalogue with fix-a (and fix-b after it) and profiles, and a pristine tree.
pub fn fixture() -> Dir {
    let d = Dir::new();
    let pristine = sha256(PRISTINE.as_bytes());
    d.write("root/vllm/__init__.py", "");
    d.write("root/vllm/_version.py", "__version__ = version = '0.26.0'\n");
    d.write("root/vllm/mod.py", PRISTINE);
    d.write(
        "cat/fixes/fix-a/fix.yaml",
        format!(
            "name: fix-a\nsummary: triple it\nkind: correctness\nupstream: {{status: not-filed}}\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {pristine}\n"
        ),
    );
    d.write("cat/fixes/fix-a/v0.26.0/mod.patch", FIX_A_PATCH);
    d.write(
        "cat/fixes/fix-b/fix.yaml",
        format!(
            "name: fix-b\nsummary: mark other\nkind: performance\nupstream: {{status: not-filed}}\nafter: [fix-a]\nreleases:\n  v0.26.0:\n    patches:\n      - tree: vllm\n        file: vllm/mod.py\n        patch: v0.26.0/mod.patch\n        pristine_sha256: {pristine}\n"
        ),
    );
    d.write("cat/fixes/fix-b/v0.26.0/mod.patch", FIX_B_PATCH);
    d.write("cat/profiles/default.yaml", "name: default\ndescription: correctness\nfixes: [fix-a]\n");
    d.write("cat/profiles/performance.yaml", "name: performance\ndescription: all\nfixes: [fix-b, fix-a]\n");
    d
}

/// `--catalog cat --root root` plus `args`.
pub fn with_fixture<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--catalog", "cat", "--root", "root"];
    v.extend_from_slice(args);
    v
}

/// Assert two snapshots are equal, naming the paths that differ (not dumping every byte).
pub fn assert_same(
    now: &std::collections::BTreeMap<String, Vec<u8>>,
    want: &std::collections::BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    let differ: Vec<&String> = now.keys().chain(want.keys()).filter(|k| now.get(*k) != want.get(*k)).collect();
    assert!(differ.is_empty(), "{what}: these paths differ: {differ:?}");
}

/// `port FIX` from the fixture catalogue's v0.26.0 variant (pristine trees in `root/`) onto the
/// tree `to` as `release`: the arguments every port test starts from.
pub fn port_args<'a>(fix: &'a str, to: &'a str, release: &'a str) -> [&'a str; 12] {
    ["--catalog", "cat", "port", fix, "--from", "v0.26.0", "--from-tree", "root", "--to", to, "--release", release]
}

/// For stand-in pythons (`sh` scripts): `verdict EXIT PASSED FAILED [SKIPPED [SKIPS_JSON]]`
/// writes the result pytest's gaudi-fixes plugin would write, where the run names it.
pub const SH_VERDICT: &str = r#"verdict() {
  printf '{"exitstatus": %s, "passed": %s, "failed": %s, "errors": 0, "skipped": %s, "skips": [%s], "duration": 0.01}\n' \
    "$1" "$2" "$3" "${4:-0}" "$5" > "$GAUDI_FIXES_PYTEST_REPORT"
}
"#;

/// Write the stand-in python `body` (a `sh` script after its `#!` line, with [`SH_VERDICT`]
/// defined) at `rel` in `d`, executable.
pub fn fake_python(d: &Dir, rel: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let body = body.strip_prefix("#!/bin/sh\n").unwrap_or(body);
    let py = d.write(rel, format!("#!/bin/sh\n{SH_VERDICT}{body}"));
    fs::set_permissions(&py, fs::Permissions::from_mode(0o755)).unwrap();
    py
}

/// The project's venv (torch, pytest), when this machine has one (`GAUDI_FIXES_TEST_PYTHON`,
/// else `~/.cache/gaudi-fixes/venv`).
pub fn real_python() -> Option<PathBuf> {
    let p = std::env::var_os("GAUDI_FIXES_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/gaudi-fixes/venv/bin/python")))?;
    let ok = Command::new(&p).args(["-c", "import pytest, torch"]).output().ok()?.status.success();
    ok.then_some(p)
}

/// Everything under `<cache>/upstream`, `scratch` and `gaudi` but the finished v0.26.0 tree.
pub fn cache_leftovers(d: &Dir) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["upstream", "scratch", "gaudi"] {
        let Ok(entries) = std::fs::read_dir(d.path().join("cache").join(sub)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(sub == "upstream" && name == "v0.26.0") {
                out.push(format!("{sub}/{name}"));
            }
        }
    }
    out.sort();
    out
}
