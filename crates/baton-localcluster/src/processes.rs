//! A child process `baton dev` started and therefore must stop: its output goes to a log
//! file, it lives in its own process group, and stopping it is a signal, a grace period,
//! then SIGKILL for the whole group.

use anyhow::Context;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::process::{Child, Command};

/// How a process is asked to stop before it is killed.
#[derive(Debug, Clone)]
pub struct StopPolicy {
    /// What asks it to stop: each program has its own (nginx and Postgres read SIGTERM
    /// as a slow, waiting shutdown).
    pub signal: Signal,
    /// Signal the pid written on the first line of this file instead of the child. Postgres
    /// runs under `runuser`, which ignores SIGINT and answers SIGTERM with a SIGKILL two
    /// seconds later, so the postmaster itself must get the signal.
    pub pid_file: Option<PathBuf>,
    /// How long it may take to stop before its group is killed.
    pub grace: Duration,
}

impl StopPolicy {
    /// `signal` to the child itself, with ten seconds' grace.
    pub fn signal(signal: Signal) -> Self {
        StopPolicy {
            signal,
            pid_file: None,
            grace: Duration::from_secs(10),
        }
    }
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It had already exited.
    Already,
    /// It exited on the stop signal within the grace period.
    Gracefully,
    /// It was killed with SIGKILL.
    Killed,
}

/// A child process in its own process group, its output in a log file, that is stopped
/// by its [`StopPolicy`] and, whatever happens, never outlives its owner.
pub struct Supervised {
    name: String,
    log: PathBuf,
    child: Child,
    /// The child's pid, which is also its process group id.
    pid: Pid,
    stop: StopPolicy,
    exit: Option<ExitStatus>,
}

impl Supervised {
    /// Starts `command` with stdin closed and stdout and stderr appended to `log`.
    pub fn spawn(
        name: impl Into<String>,
        mut command: Command,
        log: &Path,
        stop: StopPolicy,
    ) -> anyhow::Result<Self> {
        let name = name.into();
        // Appended: a member started again (the drill restarts them) keeps its earlier
        // lines for the post-mortem, and for the drill's checks.
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening the log file {}", log.display()))?;
        let err = out.try_clone()?;
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group: Ctrl-C in the terminal then reaches `baton dev` only,
            // which stops the children in order (runners before nodes before the stores)
            // rather than all of them at once.
            .process_group(0)
            // The safety net if `baton dev` unwinds without stopping it; see also `Drop`.
            .kill_on_drop(true);
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({program})"))?;
        let pid = child.id().context("a just-spawned child has a pid")?;
        Ok(Supervised {
            name,
            log: log.to_path_buf(),
            child,
            pid: Pid::from_raw(i32::try_from(pid)?),
            stop,
            exit: None,
        })
    }

    /// What it was started as (`node-0`, `redis`): the name in messages and status.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid, which is also its process group's id.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Its stdout and stderr, for the post-mortem an error message points to.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exit = Some(status);
        }
        self.exit
    }

    /// Resolves when it exits. Cancel-safe, so it can sit in a `select!`.
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.exit = Some(status);
        Ok(status)
    }

    /// Sends the stop signal and waits the grace period; then kills the whole group.
    pub async fn stop(&mut self) -> Stopped {
        if self.try_exited().is_some() {
            return Stopped::Already;
        }
        let signalled = self
            .signal_target()
            .is_some_and(|pid| kill(pid, self.stop.signal).is_ok());
        if signalled
            && let Ok(Ok(status)) = tokio::time::timeout(self.stop.grace, self.child.wait()).await
        {
            self.exit = Some(status);
            return Stopped::Gracefully;
        }
        // The whole group, so helpers (nginx workers, Postgres backends, a runner's tasks)
        // do not outlive it. The leader is not reaped yet, so the group id is still ours.
        let _ = killpg(self.pid, Signal::SIGKILL);
        self.exit = self.child.wait().await.ok();
        Stopped::Killed
    }

    /// [`stop`](Self::stop) for a caller that cannot await (a `Drop`): the same signal,
    /// grace and SIGKILL, waited for by blocking the thread.
    pub fn stop_blocking(&mut self) -> Stopped {
        if self.try_exited().is_some() {
            return Stopped::Already;
        }
        let signalled = self
            .signal_target()
            .is_some_and(|pid| kill(pid, self.stop.signal).is_ok());
        if signalled && self.exits_within(self.stop.grace) {
            return Stopped::Gracefully;
        }
        let _ = killpg(self.pid, Signal::SIGKILL);
        // A SIGKILL cannot be refused; the wait is for the kernel to deliver it.
        while !self.exits_within(Duration::from_secs(1)) {}
        Stopped::Killed
    }

    /// Polls for the exit for up to `within`, blocking the thread; whether it exited.
    fn exits_within(&mut self, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        loop {
            if self.try_exited().is_some() {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL to its group at once, as a crash would, and reap it.
    pub async fn kill_now(&mut self) {
        if self.try_exited().is_none() {
            let _ = killpg(self.pid, Signal::SIGKILL);
            self.exit = self.child.wait().await.ok();
        }
    }

    /// Sends `signal` to the process (SIGSTOP and SIGCONT to pause and resume it).
    pub fn signal(&self, signal: Signal) -> bool {
        kill(self.pid, signal).is_ok()
    }

    fn signal_target(&self) -> Option<Pid> {
        match &self.stop.pid_file {
            None => Some(self.pid),
            // No readable pid file: it never got far enough to write one, so there is
            // nobody to ask politely.
            Some(file) => pid_in_file(file).map(Pid::from_raw),
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Not stopped (an error or a panic unwound past it): kill the group, which also
        // reaches a postmaster under `runuser` that `kill_on_drop` alone would orphan.
        if self.exit.is_none() {
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
    }
}

/// The pid on the first line of a pid file, as Postgres writes its `postmaster.pid`.
pub fn pid_in_file(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The first `name` on PATH, else the first of `elsewhere` that exists (Debian keeps nginx
/// in /usr/sbin, which is not on a normal user's PATH).
pub fn find_program(name: &str, elsewhere: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name));
    on_path
        .chain(elsewhere.iter().map(PathBuf::from))
        .find(|candidate| candidate.is_file())
}

/// Postgres refuses to run as root, and nginx's workers need telling.
pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}
