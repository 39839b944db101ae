//! The task guard: a small process between the agent and each task. It leads the task's
//! process group, runs the command as its child, and holds a pipe from the agent. If the
//! agent dies — SIGKILL, OOM, a crash — the pipe closes and the guard kills the whole
//! group at once, so a task never outlives its runner to run beside the retry the server
//! will start elsewhere (design.md invariant 2).
//!
//! Stop signals sent to the group (SIGTERM on cancel or timeout) are the task's to
//! handle: the guard outlasts them and mirrors the task's end — its exit code, or death
//! by the same signal — so the agent sees what the task did.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::getpgrp;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The hidden `baton` subcommand that runs a guard: `baton task-guard -- CMD ARGS...`.
pub const SUBCOMMAND: &str = "task-guard";

/// Exit code when the command cannot be started, as shells use for "not found".
const CANNOT_START: i32 = 127;

/// Runs `argv` under the guard; returns the exit code to leave with (a death by signal
/// is re-raised and does not return).
pub fn run(argv: &[OsString]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("baton: task-guard needs a command");
        return CANNOT_START;
    };
    // Survive the group's stop signals: they are for the task, and we must see it end.
    let stop_requested = Arc::new(AtomicBool::new(false));
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let _ = signal_hook::flag::register(signal as i32, stop_requested.clone());
    }
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!(
                "baton: cannot start the command {}: {e}",
                program.to_string_lossy()
            );
            return CANNOT_START;
        }
    };
    // The agent never writes to our stdin; end of file means it is gone.
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 64];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = killpg(getpgrp(), Signal::SIGKILL);
    });
    match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => {
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                128 + signal
            }
            (None, None) => 1,
        },
        Err(e) => {
            eprintln!("baton: lost track of the command: {e}");
            1
        }
    }
}
