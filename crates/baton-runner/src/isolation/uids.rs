//! A fresh uid for every task, from a block of uids this agent alone holds.
//!
//! A uid reused by the next task lets whatever the last one left running — a `setsid`
//! daemon, a double fork out of its process group — read the next task's environment
//! (its `secret_env`), work dir and files. So each task gets a uid no task of this agent
//! has had since the block was claimed, or, once every uid has been used, the one given
//! back longest ago; and a uid goes back only when no process of it is left: at the end
//! of its task every process of the uid is killed (`sweep`), whichever group or session
//! it moved to.
//!
//! Two root agents on one host (sharing its `/run`) must not hand out the same uids: each
//! claims a block of `BLOCK` uids by holding an exclusive `flock` on the block's lock file
//! for as long as it lives (the kernel lets go of it when the process dies, however it
//! dies). A block claimed after a dead agent may still have that agent's leftovers: they
//! are swept when the block is claimed, found by their real uid in `/proc/<pid>/status`.
//! The lock file keeps where the block's next unused uid is, so a restarted agent does
//! not hand out the uids its last run used first.
//!
//! The block's last uid is the sweeper's: no task has it, so nothing a task leaves can
//! signal the process that kills it.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{ForkResult, Gid, Pid, Uid};
use std::collections::VecDeque;
use std::fs::File;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Uids per block: enough that a uid comes back only after this many other tasks.
pub(crate) const BLOCK: u32 = 65_536;
/// Uids below this belong to the system and to people: never a task's.
pub(crate) const LOWEST_BASE: u32 = 65_536;
/// Blocks tried from the base: as many root agents on one host.
const BLOCKS: u32 = 256;
/// Where the blocks' lock files live: the host's, not a runner's, since every agent on
/// the host must see the same ones.
pub(crate) const LOCK_DIR: &str = "/run/baton-runner/uid-blocks";

/// The uids of one claimed block, handed out oldest-returned first.
pub(crate) struct TaskUids {
    /// Held for the agent's life: the claim on the block; it also keeps the cursor.
    claim: Flock<File>,
    first: u32,
    state: Mutex<Pool>,
}

struct Pool {
    /// Uids not handed out since the claim: `first + next_unused ..`.
    next_unused: u32,
    /// Uids given back, in the order they came back.
    returned: VecDeque<u32>,
}

impl TaskUids {
    /// Claims the first free block from `base` (lock files in `lock_dir`) and sweeps it.
    pub(crate) fn claim(base: u32, lock_dir: &Path) -> anyhow::Result<TaskUids> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        anyhow::ensure!(
            base >= LOWEST_BASE,
            "--slot-uid-base {base}: task uids must lie above those of the system and of \
             people (at least {LOWEST_BASE}); the default is {}",
            super::DEFAULT_SLOT_UID_BASE
        );
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(lock_dir)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", lock_dir.display()))?;
        for block in 0..BLOCKS {
            let Some(first) = block
                .checked_mul(BLOCK)
                .and_then(|offset| base.checked_add(offset))
                .filter(|first| first.checked_add(BLOCK).is_some())
            else {
                break;
            };
            let path = lock_dir.join(format!("{first}.lock"));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(claim) => {
                    let swept = sweep_range(first, BLOCK);
                    let next_unused = read_cursor(&claim).filter(|n| *n < USABLE).unwrap_or(0);
                    if swept > 0 {
                        tracing::warn!(
                            swept,
                            first,
                            "killed processes an earlier agent's tasks left in this uid block"
                        );
                    }
                    return Ok(TaskUids {
                        claim,
                        first,
                        state: Mutex::new(Pool {
                            next_unused,
                            returned: VecDeque::new(),
                        }),
                    });
                }
                Err((_, Errno::EWOULDBLOCK)) => continue,
                Err((_, e)) => anyhow::bail!("cannot lock {}: {e}", path.display()),
            }
        }
        anyhow::bail!(
            "every block of task uids from {base} is held by another agent on this host \
             ({BLOCKS} blocks of {BLOCK}): stop one, or give this one another --slot-uid-base"
        )
    }

    /// The uids this agent may hand out (the block but its sweeper's).
    pub(crate) fn range(&self) -> std::ops::Range<u32> {
        self.first..self.first + USABLE
    }

    fn sweeper(&self) -> u32 {
        self.first + USABLE
    }

    /// A uid no running task has, the least recently used one.
    pub(crate) fn take(&self) -> u32 {
        let mut pool = self.state.lock().expect("uid pool lock");
        if pool.next_unused < USABLE {
            pool.next_unused += 1;
            write_cursor(&self.claim, pool.next_unused);
            return self.first + pool.next_unused - 1;
        }
        // Every uid is out only with 65,535 tasks at once, or as many uids whose sweep
        // failed: neither comes from any slot count.
        pool.returned
            .pop_front()
            .expect("a block holds more uids than the agent has slots")
    }

    /// Ends everything `uid` still runs, then gives it back. A uid with a process that
    /// would not die is not given back: its next task would share with it.
    pub(crate) async fn give_back(&self, uid: u32) {
        let sweeper = self.sweeper();
        let swept = tokio::task::spawn_blocking(move || {
            if nothing_escaped() {
                return Ok(());
            }
            sweep(uid, sweeper)
        })
        .await;
        match swept {
            Ok(Ok(())) => self
                .state
                .lock()
                .expect("uid pool lock")
                .returned
                .push_back(uid),
            Ok(Err(e)) => tracing::error!(uid, error = %e, "task uid not given back"),
            Err(e) => tracing::error!(uid, error = %e, "task uid not given back"),
        }
    }
}

/// How long a sweep keeps killing before it gives up: a process mid-exit, or a zombie
/// its parent has not reaped yet, still counts as the uid's.
const SWEEP_FOR: Duration = Duration::from_secs(5);

/// Whether no process that any task left behind is alive, known for the price of one
/// small read, so that the sweep's forks are paid only when one is.
///
/// The agent's supervisor is the subreaper of everything below the agent
/// (`supervisor.rs`): once a task's own process has ended (and the caller has waited for
/// it), every process it left — in its group or not, in a session of its own, forked
/// twice — has an ancestor among the supervisor's children, having been reparented there
/// when its parent ended; a process still dying keeps its place there until reaped, so
/// one in the middle of being reparented is seen too. If the supervisor's only child is
/// this agent, nothing is left of any task. Without a supervisor (or `/proc` children
/// lists), the answer is "not known": the caller sweeps.
fn nothing_escaped() -> bool {
    let Ok(supervisor) = std::env::var(crate::supervisor::AGENT_ENV) else {
        return false;
    };
    let Ok(children) =
        std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
    else {
        return false;
    };
    let me = std::process::id().to_string();
    children.split_whitespace().all(|pid| pid == me)
}

/// Kills every process of `uid` and returns once none is left.
///
/// A helper process runs with the sweeper's uid as its real and saved uid and the task's
/// as its effective uid: the kernel lets it signal every process of the task's uid, and
/// none of them signal it back. It sends SIGKILL to every process it may signal
/// (`kill(-1)`), in whatever group or session, round after round; after each round it
/// asks the kernel whether any is left, without reading `/proc` (where a non-dumpable
/// process shows as root's): a probe that takes the task's uid whole, with its process
/// limit (`RLIMIT_NPROC`) at 2, may fork only while it is the uid's one process — every
/// other one, a zombie not yet reaped included, counts. A leftover that stops or kills
/// the probe only makes that round count as "some left". A fork bomb is bounded by the
/// task's process limit, and each round kills what the last one missed. A uid whose
/// processes outlast `SWEEP_FOR` is reported, and its caller keeps it from every task.
///
/// Unsafe code, allowed here alone with `confine`: taking another uid for a moment needs a
/// process of its own, made by `fork` and left by `_exit`, as std's own spawn does.
#[allow(unsafe_code)]
pub(crate) fn sweep(uid: u32, sweeper: u32) -> anyhow::Result<()> {
    anyhow::ensure!(
        uid >= LOWEST_BASE && sweeper >= LOWEST_BASE,
        "uid {uid} is no task's: not swept"
    );
    // Anything the forks do before `_exit` must not allocate or take a lock another
    // thread may hold: only these system calls.
    // SAFETY: the children call only async-signal-safe functions (setgroups, setresgid,
    // setresuid, setrlimit, kill, fork, waitpid, nanosleep, _exit) and never return.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => {
            let exit = |code| -> ! { unsafe { nix::libc::_exit(code) } };
            let (task, own) = (Uid::from_raw(uid), Uid::from_raw(sweeper));
            let own_group = Gid::from_raw(sweeper);
            if nix::unistd::setgroups(&[]).is_err()
                || nix::unistd::setresgid(own_group, own_group, own_group).is_err()
                || nix::unistd::setresuid(own, task, own).is_err()
            {
                exit(2)
            }
            let pause = nix::libc::timespec {
                tv_sec: 0,
                tv_nsec: 2_000_000,
            };
            for _ in 0..(SWEEP_FOR.as_millis() / 2) {
                let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                if alone(task) {
                    exit(0)
                }
                unsafe { nix::libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
            exit(1)
        }
        ForkResult::Parent { child } => {
            let status = loop {
                match nix::sys::wait::waitpid(child, None) {
                    Err(Errno::EINTR) => continue,
                    other => break other?,
                }
            };
            anyhow::ensure!(
                status == nix::sys::wait::WaitStatus::Exited(child, 0),
                "processes of uid {uid} still alive after {SWEEP_FOR:?} of SIGKILL ({status:?})"
            );
            Ok(())
        }
    }
}

/// In the sweeper's helper: whether `task` has no process left. A probe takes the uid
/// whole and, allowed two processes, forks: it can only if it is the uid's one process.
/// Anything else — it could not fork, or a leftover stopped or killed it — is "not yet".
#[allow(unsafe_code)]
fn alone(task: Uid) -> bool {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    // SAFETY: as in `sweep`: only async-signal-safe calls, and `_exit`.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            let exit = |code| -> ! { unsafe { nix::libc::_exit(code) } };
            if nix::unistd::setresuid(task, task, task).is_err()
                || nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NPROC, 2, 2)
                    .is_err()
            {
                exit(3)
            }
            match unsafe { nix::unistd::fork() } {
                Ok(ForkResult::Child) => exit(0),
                Ok(ForkResult::Parent { child }) => {
                    let _ = waitpid(child, None);
                    exit(0)
                }
                Err(_) => exit(10),
            }
        }
        Ok(ForkResult::Parent { child }) => loop {
            match waitpid(child, Some(WaitPidFlag::WUNTRACED)) {
                Err(Errno::EINTR) => continue,
                Ok(WaitStatus::Exited(_, 0)) => return true,
                Ok(WaitStatus::Stopped(..)) => {
                    let _ = kill(child, Signal::SIGKILL);
                }
                _ => return false,
            }
        },
        Err(_) => false,
    }
}

/// Sweeps every uid in `first .. first + count` that has a process now, found by its
/// real uid. Returns how many uids had one.
fn sweep_range(first: u32, count: u32) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let range = first..first + count;
    let mut uids: Vec<u32> = procs
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| real_uid_of(&e.path().join("status")))
        .filter(|uid| range.contains(uid))
        .collect();
    uids.sort_unstable();
    uids.dedup();
    let sweeper = first + count - 1;
    for &uid in &uids {
        if let Err(e) = sweep(uid, sweeper) {
            tracing::error!(uid, error = %e, "cannot sweep a uid of the claimed block");
        }
    }
    uids.len()
}

/// The real uid on a `/proc/<pid>/status` file's `Uid:` line (readable for any process,
/// non-dumpable ones too).
pub(crate) fn real_uid_of(status: &Path) -> Option<u32> {
    std::fs::read_to_string(status)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The block's next unused uid, as the lock file keeps it.
fn read_cursor(claim: &Flock<File>) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 10];
    let n = claim.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

fn write_cursor(claim: &Flock<File>, next: u32) {
    use std::os::unix::fs::FileExt;
    // Fixed width: a shorter number never leaves digits of a longer one behind.
    if let Err(e) = claim.write_at(format!("{next:010}").as_bytes(), 0) {
        tracing::debug!(error = %e, "uid cursor not kept");
    }
}

/// Uids of a block that tasks get: all but the sweeper's.
const USABLE: u32 = BLOCK - 1;

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("uid-blocks-{}", uuid::Uuid::new_v4().simple()))
    }

    #[test]
    fn two_claims_get_two_blocks_and_uids_come_back_last() {
        let dir = lock_dir();
        let a = TaskUids::claim(3_000_000_000, &dir).unwrap();
        let b = TaskUids::claim(3_000_000_000, &dir).unwrap();
        assert_eq!(a.range().start, 3_000_000_000);
        assert_eq!(
            b.range().start,
            3_000_000_000 + BLOCK,
            "blocks never overlap"
        );
        let (first, second) = (a.take(), a.take());
        assert_ne!(first, second);
        drop(a);
        let c = TaskUids::claim(3_000_000_000, &dir).unwrap();
        assert_eq!(
            c.range().start,
            3_000_000_000,
            "a dead agent's block is free again"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_returned_uid_comes_back_only_after_every_unused_one() {
        let dir = lock_dir();
        let uids = TaskUids::claim(3_100_000_000, &dir).unwrap();
        let first = uids.take();
        uids.give_back(first).await;
        for _ in 1..USABLE {
            assert_ne!(uids.take(), first);
        }
        assert_eq!(uids.take(), first);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_sweep_kills_a_process_that_left_its_group_and_hid_as_root() {
        use std::os::unix::process::CommandExt;
        let (uid, sweeper) = (3_200_000_123, 3_200_065_535);
        // Out of its group and session, orphaned, and not dumpable (/proc shows it as
        // root's): what a task could leave.
        // It also keeps trying to stop whatever of its uid sweeps it.
        let hide = "setsid python3 -c 'import ctypes,time,os,signal\n\
                    ctypes.CDLL(None).prctl(4, 0)\n\
                    while True:\n\
                    \ttry: os.kill(-1, signal.SIGSTOP)\n\
                    \texcept OSError: pass\n\
                    \ttime.sleep(0.001)' </dev/null >/dev/null 2>&1 & echo $!";
        let out = std::process::Command::new("sh")
            .args(["-c", hide])
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap();
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        let started = std::time::Instant::now();
        sweep(uid, sweeper).unwrap();
        assert!(started.elapsed() < SWEEP_FOR);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "the hidden process outlived the sweep"
        );
        sweep(uid, sweeper).unwrap();
    }
}
