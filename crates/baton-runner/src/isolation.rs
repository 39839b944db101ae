//! Whom a task runs as. A task is untrusted code: it must not become its runner. Run as the
//! agent's own user it could read the runner token in the state dir, the agent's memory
//! and environment, and its sibling tasks' secrets in `/proc/*/environ`. So it runs as
//! another user:
//!
//! - `--run-as USER`: every task as that user;
//! - an agent running as root with no `--run-as`: each slot as a user of its own, a bare
//!   uid from `--slot-uid-base` on (no account needed), so sibling tasks cannot read each
//!   other's environment or work dir either;
//! - an agent that is not root with no `--run-as`: as the agent's user, with a warning —
//!   nothing keeps such a task from the runner's token.
//!
//! The agent and its supervisor are also not dumpable (`PR_SET_DUMPABLE`): another process
//! of their user cannot read their memory or `/proc/<pid>/environ`.

use anyhow::Context;
use nix::unistd::{Uid, User};

/// The first uid of the per-slot users: far above the ranges distributions give people
/// (1000–60000) and system services (below 1000).
pub(crate) const DEFAULT_SLOT_UID_BASE: u32 = 2_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// Tasks run as the agent's own user (it is not root and was given no `--run-as`).
    SameUser,
    /// Every task as this user and group.
    RunAs { uid: u32, gid: u32 },
    /// Slot `n` runs as uid and gid `base + n`.
    PerSlot { base: u32 },
}

/// A task's user: `None` is the agent's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaskUser {
    pub uid: u32,
    pub gid: u32,
}

impl Isolation {
    /// Decides from the settings and who the agent runs as.
    pub(crate) fn choose(run_as: Option<&str>, slot_uid_base: u32) -> anyhow::Result<Isolation> {
        if let Some(name) = run_as {
            let (uid, gid) = resolve(name)?;
            anyhow::ensure!(uid != 0, "--run-as {name}: tasks must not run as root");
            return Ok(Isolation::RunAs { uid, gid });
        }
        if Uid::effective().is_root() {
            return Ok(Isolation::PerSlot {
                base: slot_uid_base,
            });
        }
        Ok(Isolation::SameUser)
    }

    /// Whom the task in slot `slot` runs as.
    pub(crate) fn user_of(self, slot: usize) -> Option<TaskUser> {
        match self {
            Isolation::SameUser => None,
            Isolation::RunAs { uid, gid } => Some(TaskUser { uid, gid }),
            Isolation::PerSlot { base } => {
                let id = base + slot as u32;
                Some(TaskUser { uid: id, gid: id })
            }
        }
    }

    pub(crate) fn describe(self) -> String {
        match self {
            Isolation::SameUser => "as the agent's own user (not isolated)".into(),
            Isolation::RunAs { uid, gid } => format!("as uid {uid}, gid {gid}"),
            Isolation::PerSlot { base } => format!("each slot as its own uid, from {base}"),
        }
    }
}

/// A user name, or `uid` or `uid:gid`.
fn resolve(name: &str) -> anyhow::Result<(u32, u32)> {
    if let Some((uid, gid)) = name.split_once(':') {
        return Ok((uid.parse()?, gid.parse()?));
    }
    if let Ok(uid) = name.parse::<u32>() {
        let gid = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or(uid, |u| u.gid.as_raw());
        return Ok((uid, gid));
    }
    let user = User::from_name(name)
        .with_context(|| format!("looking up the user {name}"))?
        .with_context(|| format!("--run-as {name}: no such user"))?;
    Ok((user.uid.as_raw(), user.gid.as_raw()))
}

/// Makes this process not dumpable: its memory and `/proc/<pid>/environ` are then readable
/// by root only, not by other processes of its user.
pub(crate) fn forbid_dumps() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make the agent non-dumpable");
    }
}

/// Hands `dir` to the task's user, readable by it alone.
pub(crate) fn give_dir(dir: &std::path::Path, user: TaskUser) -> std::io::Result<()> {
    std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_users_of_their_own_and_run_as_one_for_all() {
        let per_slot = Isolation::PerSlot { base: 5000 };
        assert_eq!(
            per_slot.user_of(0),
            Some(TaskUser {
                uid: 5000,
                gid: 5000
            })
        );
        assert_eq!(
            per_slot.user_of(3),
            Some(TaskUser {
                uid: 5003,
                gid: 5003
            })
        );
        let one = Isolation::RunAs { uid: 70, gid: 71 };
        assert_eq!(one.user_of(9), Some(TaskUser { uid: 70, gid: 71 }));
        assert_eq!(Isolation::SameUser.user_of(0), None);
        assert_eq!(resolve("123:456").unwrap(), (123, 456));
        assert!(Isolation::choose(Some("0:0"), 1).is_err(), "never as root");
    }
}
