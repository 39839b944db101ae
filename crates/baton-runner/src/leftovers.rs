//! Process groups a previous run of this agent left behind. Each task's group is recorded
//! in the state directory while it runs; an agent that starts and finds records kills
//! those groups before it leases anything (design.md §4.9) — its predecessor died without
//! stopping them, and the server has (or will have) given their tasks to others.
//!
//! A record holds the group id and its leader's start time (from `/proc`), so a group id
//! the kernel has since reused for an unrelated process is left alone.

use crate::process_group::signal_group;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use uuid::Uuid;

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("pgroups")
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), or `None` if it does not exist.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

pub fn record(state_dir: &Path, task: Uuid, pgid: u32) -> std::io::Result<()> {
    let dir = dir(state_dir);
    std::fs::create_dir_all(&dir)?;
    let started = start_time(pgid).unwrap_or(0);
    std::fs::write(dir.join(task.to_string()), format!("{pgid} {started}\n"))
}

pub fn forget(state_dir: &Path, task: Uuid) {
    let _ = std::fs::remove_file(dir(state_dir).join(task.to_string()));
}

/// Kills every recorded group whose leader is still the same process. Returns how many
/// were killed.
pub fn kill_all(state_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir(state_dir)) else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        if let (Some(Some(pgid)), Some(Some(started))) = (fields.next(), fields.next())
            && let Ok(pgid) = u32::try_from(pgid)
            && start_time(pgid) == Some(started)
        {
            tracing::warn!(pgid, task = %entry.file_name().to_string_lossy(), "killing a task left running by a previous run of this runner");
            signal_group(pgid, Signal::SIGKILL);
            killed += 1;
        }
        let _ = std::fs::remove_file(entry.path());
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn kills_recorded_groups_and_spares_reused_ids() {
        let state = std::env::temp_dir().join(format!("baton-leftovers-{}", Uuid::new_v4()));
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let task = Uuid::new_v4();
        record(&state, task, child.id()).unwrap();
        // A record whose start time does not match (the id was reused) is skipped.
        std::fs::write(dir(&state).join(Uuid::new_v4().to_string()), "1 12345\n").unwrap();
        assert_eq!(kill_all(&state), 1);
        let status = child.wait().unwrap();
        assert!(!status.success(), "the leftover was killed");
        assert_eq!(std::fs::read_dir(dir(&state)).unwrap().count(), 0);
        std::fs::remove_dir_all(state).unwrap();
    }
}
