//! The watchdog: one small process per agent that kills the agent's tasks when the agent
//! dies — SIGKILL, OOM, a crash — so a task never outlives its runner to run beside the
//! retry the server will start elsewhere (design.md invariant 2). It costs one process
//! per agent, not one per task.
//!
//! The agent holds the write end of the watchdog's stdin. Each task registers its process
//! group there itself, in the moment between `fork` and `exec` (`+<pgid>` — so there is
//! no instant in which a task runs unregistered), and the agent unregisters it once the
//! group is gone (`-<pgid>`). End of file on stdin means the agent is gone: every group
//! still registered is killed at once. Stop signals for the terminal's process group
//! (Ctrl-C) are ignored: the agent stops its tasks itself, then closes the pipe.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// The hidden `baton` subcommand that runs a watchdog.
pub const SUBCOMMAND: &str = "runner-watchdog";

/// Runs the watchdog until its stdin closes; returns the exit code.
pub fn run() -> i32 {
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // Registered flags are never read: the point is not to die of these.
        let _ = signal_hook::flag::register(
            signal as i32,
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
    }
    let mut groups: HashSet<i32> = HashSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        apply(&mut groups, &line);
    }
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    0
}

/// One line of the agent's: `+pgid` registers a group, `-pgid` forgets it.
fn apply(groups: &mut HashSet<i32>, line: &str) {
    let (sign, pgid) = line.split_at(line.len().min(1));
    match (sign, pgid.trim().parse::<i32>()) {
        ("+", Ok(pgid)) if pgid > 1 => {
            groups.insert(pgid);
        }
        ("-", Ok(pgid)) => {
            groups.remove(&pgid);
        }
        _ => {}
    }
}

/// The agent's end: the watchdog process and the pipe to it.
pub struct Watchdog {
    child: Child,
    pipe: Mutex<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog (`program` is this binary).
    pub fn spawn(program: &std::path::Path) -> std::io::Result<Watchdog> {
        let mut child = Command::new(program)
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let pipe = child.stdin.take().expect("piped stdin");
        Ok(Watchdog {
            child,
            pipe: Mutex::new(pipe),
        })
    }

    /// The pipe's file descriptor, for a task to register itself on between `fork` and
    /// `exec` (see [`register_self`]). It is close-on-exec: the task does not keep it.
    pub fn fd(&self) -> RawFd {
        self.pipe.lock().expect("watchdog pipe").as_raw_fd()
    }

    /// Forgets `pgid`: its group is gone.
    pub fn forget(&self, pgid: u32) {
        let mut pipe = self.pipe.lock().expect("watchdog pipe");
        if let Err(e) = writeln!(pipe, "-{pgid}") {
            tracing::warn!(error = %e, "the watchdog is gone: tasks would outlive a crash of this agent");
        }
    }

    /// Whether the watchdog still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Makes the task `cmd` starts register its own process group with the watchdog on
/// `fd`, after `fork` and before `exec`: the one place this crate needs `unsafe`.
#[allow(unsafe_code)]
pub fn register_on_exec(cmd: &mut tokio::process::Command, fd: RawFd) {
    // SAFETY: the closure runs in the forked child of a threaded process, so it may only
    // make async-signal-safe calls and must not allocate: it calls getpid(2) and
    // write(2) on a stack buffer. The descriptor is the agent's open pipe to the
    // watchdog, inherited by the fork and closed by the exec that follows (close-on-exec).
    unsafe {
        cmd.pre_exec(move || {
            let mut line = [0u8; 16];
            let len = format_line(nix::unistd::getpid().as_raw(), &mut line);
            let pipe = std::os::fd::BorrowedFd::borrow_raw(fd);
            nix::unistd::write(pipe, &line[..len]).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// Registers the groups of tasks already running with a watchdog started afresh.
pub fn register_running(watchdog: &Watchdog, pgids: &[u32]) {
    let mut pipe = watchdog.pipe.lock().expect("watchdog pipe");
    for pgid in pgids {
        let _ = writeln!(pipe, "+{pgid}");
    }
}

/// `+<pid>\n` into `buf`, returning its length.
fn format_line(pid: i32, buf: &mut [u8; 16]) -> usize {
    let mut digits = [0u8; 10];
    let (mut n, mut count) = (pid.unsigned_abs(), 0);
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[0] = b'+';
    for i in 0..count {
        buf[1 + i] = digits[count - 1 - i];
    }
    buf[1 + count] = b'\n';
    count + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_register_and_forget_groups() {
        let mut buf = [0u8; 16];
        let n = format_line(4_194_303, &mut buf);
        assert_eq!(&buf[..n], b"+4194303\n");
        let n = format_line(7, &mut buf);
        assert_eq!(&buf[..n], b"+7\n");

        let mut groups = HashSet::new();
        apply(&mut groups, "+42");
        apply(&mut groups, "+43");
        apply(&mut groups, "-42");
        apply(&mut groups, "+1");
        apply(&mut groups, "nonsense");
        apply(&mut groups, "");
        assert_eq!(
            groups,
            HashSet::from([43]),
            "init and junk are never registered"
        );
    }
}
