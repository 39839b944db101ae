//! `baton runner` is two processes. The outer one — the supervisor, this file — is tiny:
//! it starts the agent as its child, passes stop signals on to it, and is the *subreaper*
//! of everything below it (`PR_SET_CHILD_SUBREAPER`). If the agent dies — SIGKILL, OOM,
//! a crash — every task it left running is reparented here instead of to init, and the
//! supervisor kills them all at once, then exits with the agent's status. So a task never
//! outlives its runner to run beside the retry the server will start elsewhere (design.md
//! invariant 2) — not even a process that left its task's group.
//!
//! The other way round, the agent asks the kernel for SIGUSR1 should the supervisor die
//! (`PR_SET_PDEATHSIG`), and then kills its tasks itself and exits.
//!
//! It costs one process per agent and nothing per task: tasks are spawned directly by
//! the agent, with no registration step. Being the subreaper also tells the agent, for
//! one read of this process's children list, whether a finished task left anything
//! behind (`isolation::uids`).

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid, getppid};
use std::time::{Duration, Instant};

/// Set in the agent's environment to the supervisor's pid: a `baton runner` that finds
/// it is the agent.
pub const AGENT_ENV: &str = "BATON_RUNNER_SUPERVISOR";

/// The signal the agent gets when its supervisor dies.
pub const ORPHANED: Signal = Signal::SIGUSR1;

/// How long the supervisor keeps sweeping for the dead agent's leftovers.
const SWEEP_FOR: Duration = Duration::from_secs(10);

/// Whether this `baton runner` process is the agent (started by a supervisor).
pub fn is_agent() -> bool {
    std::env::var_os(AGENT_ENV).is_some()
}

/// Runs the supervisor: starts `baton runner` with the same arguments as the agent, and
/// returns the exit code to leave with.
pub fn supervise() -> i32 {
    // Its environment holds what the agent's does: readable by root only.
    crate::isolation::forbid_dumps();
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("baton runner: cannot become the subreaper of its tasks: {e}");
        return 1;
    }
    let program = std::env::current_exe().unwrap_or_else(|_| "baton".into());
    let agent = match std::process::Command::new(program)
        .args(std::env::args_os().skip(1))
        .env(AGENT_ENV, getpid().to_string())
        .spawn()
    {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("baton runner: cannot start the agent: {e}");
            return 1;
        }
    };
    let agent = Pid::from_raw(agent.id() as i32);
    forward_stop_signals(agent);
    let code = wait_for(agent);
    sweep();
    code
}

/// SIGTERM, SIGINT, SIGHUP and SIGQUIT are the agent's to handle (a graceful stop).
fn forward_stop_signals(agent: Pid) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT])
    {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("baton runner: stop signals will not reach the agent: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if let Ok(signal) = Signal::try_from(signal) {
                let _ = kill(agent, signal);
            }
        }
    });
}

/// Reaps children until the agent exits (reparented leftovers of finished tasks are
/// reaped on the way); its exit code, or 128 + the signal that killed it.
fn wait_for(agent: Pid) -> i32 {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => return code,
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == agent => return 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return 1,
        }
    }
}

/// The agent is gone: everything below it now hangs here. Kill each one's group and
/// itself, reap, and repeat until nothing is left (a killed task's own children come up
/// here too).
fn sweep() {
    let own_group = getpgrp();
    let until = Instant::now() + SWEEP_FOR;
    loop {
        let children = children_of(getpid());
        if children.is_empty() || Instant::now() >= until {
            return;
        }
        for child in children {
            if let Ok(group) = nix::unistd::getpgid(Some(child))
                && group != own_group
            {
                let _ = killpg(group, Signal::SIGKILL);
            }
            let _ = kill(child, Signal::SIGKILL);
        }
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live children of `parent` (from `/proc`).
fn children_of(parent: Pid) -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| parent_of(pid) == Some(parent.as_raw()))
        .map(Pid::from_raw)
        .collect()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the parent (field 4) follows it.
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// In the agent, first thing: SIGUSR1 when the supervisor dies. False when it is already
/// gone (the agent then has no one to clean up after it and should not start).
pub fn watch_supervisor() -> bool {
    let Some(supervisor) = std::env::var(AGENT_ENV)
        .ok()
        .and_then(|pid| pid.parse::<i32>().ok())
    else {
        return true;
    };
    if nix::sys::prctl::set_pdeathsig(Some(ORPHANED)).is_err() {
        return false;
    }
    getppid().as_raw() == supervisor
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_knows_its_parent() {
        let me = std::process::id() as i32;
        assert_eq!(super::parent_of(me), Some(nix::unistd::getppid().as_raw()));
        assert_eq!(super::parent_of(i32::MAX), None);
    }
}
