//! Whom a task runs as, and what it can see. A task is untrusted code: it must not become
//! its runner, nor reach the task that runs after it. Run as the agent's own user it
//! could read the runner token in the state dir, the agent's memory and environment, and
//! its sibling tasks' secrets in `/proc/*/environ`. So it runs as another user:
//!
//! - an agent running as root with no `--run-as`: each task as a uid of its own, never
//!   one a running task has, from a block of uids this agent alone holds
//!   ([`uids`]); at the end of the task every process of that uid is killed, in whatever
//!   group or session it hid, before the uid may go to another task;
//! - `--run-as USER`: every task as that user (tasks then share a user, and what one
//!   leaves running can reach the next: see docs/security.md);
//! - an agent that is not root with no `--run-as`: as the agent's user, with a warning —
//!   nothing keeps such a task from the runner's token.
//!
//! A root agent also gives each task a mount namespace of its own ([`mounts`]): private
//! `/tmp`, `/var/tmp` and `/dev/shm`, and a way into its work dir through folders closed
//! to others. At start it runs a probe as a task would, and refuses to start, naming the
//! folder and the fix, when a task could not get into its work dir.
//!
//! The agent and its supervisor are also not dumpable (`PR_SET_DUMPABLE`): another process
//! of their user cannot read their memory or `/proc/<pid>/environ`.

mod mounts;
mod reach;
pub(crate) mod uids;

use anyhow::Context;
use nix::unistd::{Gid, Uid, User};
use std::path::Path;
use tokio::process::Command;
use uids::TaskUids;

/// The first uid of the task users: far above the ranges distributions give people
/// (1000–60000) and system services (below 1000).
pub(crate) const DEFAULT_SLOT_UID_BASE: u32 = 2_000_000_000;

/// How many processes a task's uid may have at once (`RLIMIT_NPROC`) unless set: a fork
/// bomb stops there, and the sweep at its end has a bounded number to kill.
pub(crate) const DEFAULT_TASK_MAX_PROCESSES: u64 = 4096;

pub(crate) enum Isolation {
    /// Tasks run as the agent's own user (it is not root and was given no `--run-as`).
    SameUser,
    /// Every task as this user and group.
    RunAs {
        uid: u32,
        gid: u32,
        private_views: bool,
        max_processes: u64,
    },
    /// Each task as a fresh uid of this block.
    FreshUids {
        uids: TaskUids,
        private_views: bool,
        max_processes: u64,
    },
}

/// A task's user: `None` is the agent's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaskUser {
    pub uid: u32,
    pub gid: u32,
}

impl Isolation {
    /// Decides from the settings and who the agent runs as. A root agent claims its block
    /// of task uids here.
    pub(crate) fn choose(
        run_as: Option<&str>,
        slot_uid_base: u32,
        max_processes: u64,
    ) -> anyhow::Result<Isolation> {
        if let Some(name) = run_as {
            let (uid, gid) = resolve(name)?;
            anyhow::ensure!(uid != 0, "--run-as {name}: tasks must not run as root");
            return Ok(Isolation::RunAs {
                uid,
                gid,
                private_views: true,
                max_processes,
            });
        }
        if Uid::effective().is_root() {
            let uids = TaskUids::claim(slot_uid_base, Path::new(uids::LOCK_DIR))?;
            return Ok(Isolation::FreshUids {
                uids,
                private_views: true,
                max_processes,
            });
        }
        Ok(Isolation::SameUser)
    }

    /// Whom the next task runs as. Give it back with [`Isolation::give_back`] once the
    /// task's process has ended.
    pub(crate) fn take_user(&self) -> Option<TaskUser> {
        match self {
            Isolation::SameUser => None,
            Isolation::RunAs { uid, gid, .. } => Some(TaskUser {
                uid: *uid,
                gid: *gid,
            }),
            Isolation::FreshUids { uids, .. } => {
                let id = uids.take();
                Some(TaskUser { uid: id, gid: id })
            }
        }
    }

    /// The task of `user` is over: whatever it left running is killed, and its uid may
    /// go to another task. A shared `--run-as` user is left alone: its other tasks run.
    pub(crate) async fn give_back(&self, user: Option<TaskUser>) {
        if let (Isolation::FreshUids { uids, .. }, Some(user)) = (self, user) {
            uids.give_back(user.uid).await;
        }
    }

    fn max_processes(&self) -> u64 {
        match self {
            Isolation::SameUser => u64::MAX,
            Isolation::RunAs { max_processes, .. } | Isolation::FreshUids { max_processes, .. } => {
                *max_processes
            }
        }
    }

    fn private_views(&self) -> bool {
        match self {
            Isolation::SameUser => false,
            Isolation::RunAs { private_views, .. } | Isolation::FreshUids { private_views, .. } => {
                *private_views
            }
        }
    }

    fn set_private_views(&mut self, on: bool) {
        if let Isolation::RunAs { private_views, .. } | Isolation::FreshUids { private_views, .. } =
            self
        {
            *private_views = on;
        }
    }

    /// Makes `cmd` start as the task's process: in `work` (absolute), as `user`, and, for
    /// a root agent, in its own view with `tmp` (absolute) as its `/tmp`.
    ///
    /// Unsafe code, allowed here alone with `uids::sweep`: the mount namespace and the way
    /// into the work dir must be made in the task's process, after the fork and before
    /// it takes its uid, which only `pre_exec` gives.
    #[allow(unsafe_code)]
    pub(crate) fn confine(
        &self,
        cmd: &mut Command,
        work: &Path,
        tmp: &Path,
        user: Option<TaskUser>,
    ) -> std::io::Result<()> {
        cmd.env("PWD", work);
        let Some(user) = user else {
            cmd.current_dir(work).env("TMPDIR", tmp);
            return Ok(());
        };
        let view = if self.private_views() {
            Some(mounts::TaskView::prepare(work, tmp)?)
        } else {
            cmd.env("TMPDIR", tmp);
            None
        };
        let work = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(work.as_os_str()))
            .map_err(std::io::Error::other)?;
        let (uid, gid) = (Uid::from_raw(user.uid), Gid::from_raw(user.gid));
        let max_processes = self.max_processes();
        let enter = move || -> std::io::Result<()> {
            if let Some(view) = &view {
                view.enter()?;
            }
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NPROC,
                max_processes,
                max_processes,
            )?;
            nix::unistd::setgroups(&[])?;
            nix::unistd::setresgid(gid, gid, gid)?;
            nix::unistd::setresuid(uid, uid, uid)?;
            // As the task's user: it fails here, not later, if the way in is closed.
            nix::unistd::chdir(work.as_c_str())?;
            Ok(())
        };
        // SAFETY: `enter` runs in the forked child before exec and only makes system
        // calls with what was prepared above: it allocates nothing and takes no lock.
        unsafe { cmd.pre_exec(enter) };
        Ok(())
    }

    /// Checks, before any task, that a task could get into a work dir under `work_root`
    /// (absolute): a probe runs there as a task would. A root agent whose tasks cannot
    /// have a mount namespace (no `CAP_SYS_ADMIN`) goes on without private views, saying
    /// so; one whose tasks could not reach their work dir either way refuses to start.
    pub(crate) async fn check_reach(&mut self, work_root: &Path) -> anyhow::Result<()> {
        if matches!(self, Isolation::SameUser) {
            return Ok(());
        }
        let with_views = self.probe(work_root).await;
        let Err(with_views) = with_views else {
            return Ok(());
        };
        // Without the right to make namespaces (EPERM), tasks go on without private views;
        // any other failure is not taken for that, and the agent does not start.
        let not_allowed = with_views.chain().any(|e| {
            e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.raw_os_error() == Some(nix::libc::EPERM))
        });
        if !not_allowed {
            anyhow::bail!(
                "a task could not start in a view of its own under {}: {with_views:#}",
                work_root.display()
            );
        }
        self.set_private_views(false);
        match self.probe(work_root).await {
            Ok(()) => {
                tracing::warn!(
                    error = format!("{with_views:#}"),
                    "tasks cannot have a mount namespace of their own here: they share /tmp, \
                     /var/tmp and /dev/shm (run the agent with CAP_SYS_ADMIN to give each its own)"
                );
                Ok(())
            }
            Err(without) => {
                let fix = match reach::first_closed_ancestor(work_root) {
                    Some(closed) => format!(
                        "{} lets no other user through (mode {:o}): give it o+x \
                         (chmod o+x {}), or pass a --work-dir outside it, such as \
                         /var/lib/baton-runner/work",
                        closed.display(),
                        mode_of(&closed),
                        closed.display()
                    ),
                    None => "pass a --work-dir that other users can pass through, such as \
                             /var/lib/baton-runner/work"
                        .to_string(),
                };
                anyhow::bail!(
                    "a task could not get into its work dir under {}: {without:#} (with a mount \
                     namespace of its own: {with_views:#}). {fix}",
                    work_root.display()
                )
            }
        }
    }

    /// Runs `sh` as a task would, in a task dir of its own, and has it write there.
    async fn probe(&self, work_root: &Path) -> anyhow::Result<()> {
        let name = format!("probe-{}", uuid::Uuid::new_v4().simple());
        let (work, tmp) = (work_root.join(&name), work_root.join(format!("{name}.tmp")));
        let user = self.take_user();
        let outcome = async {
            make_task_dirs(&work, &tmp, user)?;
            let mut cmd = Command::new("sh");
            cmd.args([
                "-c",
                "cd \"$PWD\" && : > probe && : > \"${TMPDIR:-/tmp}/probe\"",
            ])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
            self.confine(&mut cmd, &work, &tmp, user)?;
            let out = cmd.output().await.context("cannot start sh")?;
            anyhow::ensure!(
                out.status.success(),
                "sh {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(())
        }
        .await;
        self.give_back(user).await;
        remove_task_dirs(&work, &tmp);
        outcome
    }

    pub(crate) fn describe(&self) -> String {
        let views = if self.private_views() {
            ", each with its own /tmp"
        } else {
            ""
        };
        match self {
            Isolation::SameUser => "as the agent's own user (not isolated)".into(),
            Isolation::RunAs { uid, gid, .. } => format!("as uid {uid}, gid {gid}{views}"),
            Isolation::FreshUids { uids, .. } => {
                let range = uids.range();
                format!(
                    "each as a fresh uid of {}..{}{views}",
                    range.start, range.end
                )
            }
        }
    }
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o7777)
}

/// Makes a task's work dir and private tmp, each its user's alone.
pub(crate) fn make_task_dirs(
    work: &Path,
    tmp: &Path,
    user: Option<TaskUser>,
) -> std::io::Result<()> {
    for dir in [work, tmp] {
        std::fs::create_dir_all(dir)?;
        if let Some(user) = user {
            give_dir(dir, user)?;
        }
    }
    Ok(())
}

/// Removes a task's folders, whatever it left in them.
pub(crate) fn remove_task_dirs(work: &Path, tmp: &Path) {
    for dir in [work, tmp] {
        // Most tasks leave their directory empty: one `rmdir`, and the walk only when not.
        if std::fs::remove_dir(dir).is_err()
            && let Err(e) = std::fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(dir = %dir.display(), error = %e, "task dir not removed");
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
    fn run_as_is_one_user_for_every_task_and_never_root() {
        let one = Isolation::RunAs {
            uid: 70,
            gid: 71,
            private_views: true,
            max_processes: 10,
        };
        assert_eq!(one.take_user(), Some(TaskUser { uid: 70, gid: 71 }));
        assert_eq!(one.take_user(), Some(TaskUser { uid: 70, gid: 71 }));
        assert_eq!(Isolation::SameUser.take_user(), None);
        assert_eq!(resolve("123:456").unwrap(), (123, 456));
        assert!(
            Isolation::choose(Some("0:0"), 1, 10).is_err(),
            "never as root"
        );
    }
}
