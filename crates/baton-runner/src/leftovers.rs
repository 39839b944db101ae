//! Tasks a previous run of this agent left behind. The supervisor kills an agent's tasks
//! when the agent dies; this is the net under it, for an agent and supervisor killed
//! together. Every task of this runner carries a mark in its environment
//! (`BATON_RUNNER_MARK`, random per state directory and kept there), which its children
//! inherit; an agent that starts kills every process carrying its mark before it leases
//! anything (design.md §4.9) — its predecessor died without stopping them, and the server
//! has (or will have) given their tasks to others.
//!
//! Marking costs nothing per task (no file written or removed for each); looking costs a
//! read of each process's environment, once per start. A process that rewrites its own
//! environment escapes the net, as one that left its group escapes a group kill; so does
//! one caught inside `exec` (for microseconds its `environ` reads empty).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::Path;
use uuid::Uuid;

/// The environment variable that marks this runner's tasks.
pub(crate) const MARK_VAR: &str = "BATON_RUNNER_MARK";

const MARK_FILE: &str = "runner-mark";

/// This state directory's mark: made once, then read at every start.
pub(crate) fn mark(state_dir: &Path) -> std::io::Result<String> {
    let path = state_dir.join(MARK_FILE);
    match std::fs::read_to_string(&path) {
        Ok(mark) if !mark.trim().is_empty() => Ok(mark.trim().to_string()),
        _ => {
            std::fs::create_dir_all(state_dir)?;
            let mark = Uuid::new_v4().simple().to_string();
            // Like every file of the state dir, the agent's alone.
            crate::owner_only::write(&path, mark.as_bytes())?;
            Ok(mark)
        }
    }
}

/// Kills every other process whose environment carries `mark`. Returns how many.
pub(crate) fn kill_marked(mark: &str) -> usize {
    let needle = format!("{MARK_VAR}={mark}");
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
    {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
            && let Ok(pid) = i32::try_from(pid)
        {
            tracing::warn!(
                pid,
                "killing a task left running by a previous run of this runner"
            );
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until the child's environment is its own. `spawn` returns once the child is
    /// in `exec`, but the kernel fills in the new environment's place a little later; a
    /// look in between reads an empty `environ` (seen on a loaded CI machine).
    fn exec_done(child: &std::process::Child) {
        let path = format!("/proc/{}/environ", child.id());
        let assignment = format!("{MARK_VAR}=");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(&path)
            .unwrap()
            .split(|&b| b == 0)
            .any(|var| var.starts_with(assignment.as_bytes()))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never finished exec"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn kills_the_marked_and_spares_the_rest() {
        let state = std::env::temp_dir().join(format!("baton-leftovers-{}", Uuid::new_v4()));
        let mark = mark(&state).unwrap();
        assert_eq!(
            super::mark(&state).unwrap(),
            mark,
            "kept in the state directory"
        );
        let mode = std::fs::metadata(state.join(MARK_FILE)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600,
            "the agent's alone"
        );
        let spawn = |value: &str| {
            std::process::Command::new("sleep")
                .arg("300")
                .env(MARK_VAR, value)
                .spawn()
                .unwrap()
        };
        let mut ours = spawn(&mark);
        let mut theirs = spawn("another-runner");
        exec_done(&ours);
        exec_done(&theirs);
        assert_eq!(kill_marked(&mark), 1);
        assert!(!ours.wait().unwrap().success(), "the leftover was killed");
        assert!(
            theirs.try_wait().unwrap().is_none(),
            "another runner's task lives"
        );
        theirs.kill().unwrap();
        theirs.wait().unwrap();
        std::fs::remove_dir_all(state).unwrap();
    }
}
