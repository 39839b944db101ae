//! Stopping a task means stopping everything it started: each task runs as the leader of
//! its own process group, and signals go to the whole group.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Sends `signal` to every process in group `pgid`. A group that no longer exists is not
/// an error: there is nothing left to stop.
pub(crate) fn signal_group(pgid: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(pgid) else { return };
    match killpg(Pid::from_raw(raw), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, %signal, error = %e, "could not signal process group"),
    }
}
