//! The bytecode kept at a module's first apply follows the source it belongs to: when the
//! package is upgraded (or reinstalled) in place between two applies, the next apply keeps the
//! new install's `.pyc` files, and the revert gives those back; a stash nothing refers to any
//! more is removed by the next writer, which says so. Before: apply → upgrade → apply → revert
//! left the module without the `.pyc` pip made and a stale stash under
//! `.gaudi-fixes/bytecode/` for ever.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::common::{fixture, with_fixture, Dir, PRISTINE};

/// What pip leaves: `source` written with an old mtime, compiled (false when there is no
/// python3).
fn install(d: &Dir, source: &str, age_days: u64) -> bool {
    let module = d.write("root/vllm/mod.py", source);
    let when = SystemTime::now() - Duration::from_secs(86_400 * age_days);
    std::fs::File::options().write(true).open(&module).unwrap().set_modified(when).unwrap();
    let _ = std::fs::remove_dir_all(d.path().join("root/vllm/__pycache__"));
    std::process::Command::new("python3")
        .args(["-m", "compileall", "-q"])
        .arg(d.path().join("root/vllm"))
        .status()
        .is_ok_and(|s| s.success())
}

/// The new release's module: the fix's context intact, something else changed.
fn upgraded() -> String {
    format!("{PRISTINE}\n\ndef added_in_the_upgrade():\n    return 3\n")
}

fn bytecode(d: &Dir) -> Vec<(String, Vec<u8>)> {
    d.snapshot("root").into_iter().filter(|(k, _)| k.starts_with("vllm/__pycache__/mod.")).collect()
}

fn stash_dir(d: &Dir) -> std::path::PathBuf {
    d.path().join("root/.gaudi-fixes/bytecode")
}

#[test]
fn after_an_upgrade_in_place_the_revert_gives_back_the_new_install_s_bytecode() {
    let d = fixture();
    if !install(&d, PRISTINE, 2) {
        eprintln!("no python3: skipped");
        return;
    }
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert!(stash_dir(&d).exists(), "the first apply kept no bytecode (the test proves nothing)");
    // pip upgrades the package in place: new source, its own bytecode.
    assert!(install(&d, &upgraded(), 1));
    let pip_made = bytecode(&d);
    assert!(!pip_made.is_empty());
    let pip_mtime = std::fs::metadata(d.path().join("root/vllm/mod.py")).unwrap().modified().unwrap();
    let (out, _) = d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert!(out.contains("removed the bytecode kept for") && out.contains("mod.py"), "not said: {out}");
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert_eq!(d.read_string("root/vllm/mod.py"), upgraded());
    assert_eq!(bytecode(&d), pip_made, "the revert did not give back the bytecode pip compiled");
    let mtime = std::fs::metadata(d.path().join("root/vllm/mod.py")).unwrap().modified().unwrap();
    assert_eq!(mtime, pip_mtime, "the source's mtime is not pip's: its bytecode is stale");
    assert!(!stash_dir(&d).exists(), "a stash is left: {:?}", d.snapshot("root/.gaudi-fixes").keys());
}

#[test]
fn a_stash_nothing_refers_to_is_removed_and_said() {
    let d = fixture();
    if !install(&d, PRISTINE, 2) {
        eprintln!("no python3: skipped");
        return;
    }
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    assert!(stash_dir(&d).exists());
    // Upgraded in place: fix-a is not applied any more, and nothing will give the stash back.
    assert!(install(&d, &upgraded(), 1));
    let pip_made = bytecode(&d);
    // A reader leaves it (only writers clean up) ...
    d.cmd().args(with_fixture(&["status"])).expect(0);
    assert!(stash_dir(&d).exists());
    // ... the next writer removes it and says so, and leaves pip's bytecode alone.
    let (out, _) = d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    assert!(
        out.contains("removed the bytecode kept for") && out.contains("changed since gaudi-fixes wrote it"),
        "{out}"
    );
    assert!(!stash_dir(&d).exists());
    assert!(!Path::new(&d.path().join("root/.gaudi-fixes/bytecode")).exists());
    assert_eq!(bytecode(&d), pip_made);
}

/// The stash follows gaudi-fixes' own writes: fix-b applied on top in a second run, then fix-b
/// reverted alone, then fix-a: the tree is pip's again, bytecode and all, and nothing said.
#[test]
fn the_stash_follows_every_write_of_gaudi_fixes_own() {
    let d = fixture();
    if !install(&d, PRISTINE, 2) {
        eprintln!("no python3: skipped");
        return;
    }
    let installed = d.snapshot("root");
    for args in [["apply", "fix-a"], ["apply", "fix-b"], ["revert", "fix-b"], ["revert", "fix-a"]] {
        let (out, _) = d.cmd().args(with_fixture(&args)).expect(0);
        assert!(!out.contains("removed the bytecode"), "{args:?} dropped a live stash: {out}");
    }
    crate::common::assert_same(&d.snapshot("root"), &installed, "after apply, apply on top, revert, revert");
}

/// Issue 50 (2): apply, edit a patched line, `revert` → exit 2 "nothing was written", yet the
/// stash was removed ("note: removed the bytecode kept for …"): once the edit was undone the
/// revert gave the source back with its own mtime and without pip's `.pyc`. A refused run
/// changes nothing; the stash is still the way back.
#[test]
fn a_refused_revert_keeps_the_bytecode_stash() {
    let d = fixture();
    if !install(&d, PRISTINE, 2) {
        eprintln!("no python3: skipped");
        return;
    }
    let installed = d.snapshot("root");
    d.cmd().args(with_fixture(&["apply", "fix-a"])).expect(0);
    let applied = d.read_string("root/vllm/mod.py");
    d.write("root/vllm/mod.py", applied.replace("b = a * 3", "b = a * 4"));
    let state = d.snapshot("root/.gaudi-fixes");
    for args in [&["revert", "fix-a"][..], &["revert"], &["apply", "fix-a"]] {
        let (out, _) = d.cmd().args(with_fixture(args)).expect(2);
        assert!(!out.contains("removed the bytecode"), "{args:?} refused, yet: {out}");
        crate::common::assert_same(&d.snapshot("root/.gaudi-fixes"), &state, "after a refused run");
    }
    d.write("root/vllm/mod.py", &applied);
    d.cmd().args(with_fixture(&["revert", "fix-a"])).expect(0);
    let mut now = d.snapshot("root");
    now.retain(|k, _| !k.starts_with(".gaudi-fixes"));
    crate::common::assert_same(&now, &installed, "after the edit was undone and fix-a reverted");
}
