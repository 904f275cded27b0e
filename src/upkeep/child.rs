//! A long-running Python child (pytest, the conformance suite, its shrinker) that a signal to
//! gaudi-fixes reaches: the child runs in a process group of its own, and while it runs
//! SIGTERM, SIGINT and SIGHUP to gaudi-fixes are caught (the handler only records the signal and
//! forwards it to the child's group with `kill`, both async-signal-safe). The caller then waits
//! for the child as usual, and [`Watch::finish`] turns the signal into an [`Interrupted`] error:
//! it unwinds (the scratch directories are removed as they drop) and the process exits
//! 128 + the signal, as a shell reports a process the signal ended. The default handlers are back
//! once the child is done, so nothing else of gaudi-fixes is ever shielded from a signal.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};

/// The forwarded signals.
const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The running children's process groups (their pids), 0 for a free slot: several may run at
/// once (threads); each gets the signal.
static CHILD_GROUPS: [AtomicI32; 64] = [const { AtomicI32::new(0) }; 64];
/// How many children are watched now: the first installs the handlers, the last restores them.
static WATCHED: std::sync::Mutex<(usize, Vec<(libc::c_int, libc::sigaction)>)> = std::sync::Mutex::new((0, Vec::new()));
/// The last forwarded signal caught while a child ran, 0 when none.
static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
    for slot in &CHILD_GROUPS {
        let group = slot.load(Ordering::SeqCst);
        if group > 0 {
            // SAFETY: kill(2) is async-signal-safe; a group already gone only returns ESRCH.
            unsafe { libc::kill(-group, sig) };
        }
    }
}

/// gaudi-fixes was stopped by a signal while a child ran; the child got it too and was waited
/// for. The process exits 128 + the signal ([`Interrupted::exit_code`]).
#[derive(Debug)]
pub struct Interrupted(pub libc::c_int);

impl Interrupted {
    /// 128 + the signal: 143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP.
    pub fn exit_code(&self) -> u8 {
        (128 + self.0).clamp(0, 255) as u8
    }

    fn name(&self) -> &'static str {
        match self.0 {
            libc::SIGTERM => "SIGTERM",
            libc::SIGINT => "SIGINT",
            libc::SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped by {}: the Python child was sent it too and has exited; its scratch directory is removed",
            self.name()
        )
    }
}

impl std::error::Error for Interrupted {}

/// One running child watched; dropping it frees its slot (and, for the last one, puts the
/// previous handlers back).
pub struct Watch {
    slot: Option<usize>,
}

impl Watch {
    /// Spawn `cmd` in a process group of its own, the signals forwarded to it until the
    /// [`Watch`] drops. A signal that came while it started is forwarded once it has a pid.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<(Child, Watch)> {
        use std::os::unix::process::CommandExt;
        {
            let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
            if watched.0 == 0 {
                CAUGHT.store(0, Ordering::SeqCst);
                for sig in SIGNALS {
                    // SAFETY: a zeroed sigaction is a valid value; the handler only touches
                    // atomics and calls kill(2).
                    unsafe {
                        let mut action: libc::sigaction = std::mem::zeroed();
                        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                        action.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut action.sa_mask);
                        let mut old: libc::sigaction = std::mem::zeroed();
                        if libc::sigaction(sig, &action, &mut old) == 0 {
                            watched.1.push((sig, old));
                        }
                    }
                }
            }
            watched.0 += 1;
        }
        let mut watch = Watch { slot: None };
        let child = cmd.process_group(0).spawn()?;
        let pid = child.id() as i32;
        watch.slot = CHILD_GROUPS
            .iter()
            .position(|slot| slot.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst).is_ok());
        let early = CAUGHT.load(Ordering::SeqCst);
        if early != 0 {
            // SAFETY: kill(2) on the child's own group.
            unsafe { libc::kill(-pid, early) };
        }
        Ok((child, watch))
    }

    /// After the child was waited for: the signal that stopped this run, as an error.
    pub fn finish(self) -> Result<(), Interrupted> {
        drop(self);
        match CAUGHT.load(Ordering::SeqCst) {
            0 => Ok(()),
            sig => Err(Interrupted(sig)),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            CHILD_GROUPS[slot].store(0, Ordering::SeqCst);
        }
        let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
        watched.0 = watched.0.saturating_sub(1);
        if watched.0 == 0 {
            for (sig, old) in watched.1.drain(..) {
                // SAFETY: restoring the action sigaction(2) returned.
                unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
            }
        }
    }
}
