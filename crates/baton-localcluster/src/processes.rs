//! A child process `baton dev` started and therefore must stop: its output goes to a log
//! file, it lives in its own process group (or, for a test's, in the test's), and
//! stopping it is a signal, a grace period, then SIGKILL for the whole group.

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
    /// What asks it to stop: each program has its own (Postgres reads SIGTERM as a smart
    /// shutdown that waits for its clients; nginx's graceful stop is SIGQUIT).
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

/// Which process group a supervised child lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// A group of its own, which it leads: Ctrl-C in the terminal reaches its owner only,
    /// and a kill reaches its helpers (nginx workers, Postgres backends) too.
    Own,
    /// Its owner's: a signal to the owner's group (Ctrl-C on `cargo test`, a runner's
    /// timeout) reaches it as well, so an interrupted test leaves nothing running. A
    /// kill is to the process alone.
    Owners,
}

/// A child process, its output in a log file, that is stopped by its [`StopPolicy`] and
/// killed when its owner drops it, even on a panic (not when the owner itself is killed:
/// see [`Group::Owners`]).
pub struct Supervised {
    name: String,
    log: PathBuf,
    child: Child,
    /// The child's pid; with [`Group::Own`] also its process group's id.
    pid: Pid,
    group: Group,
    stop: StopPolicy,
    exit: Option<ExitStatus>,
}

/// How long a blocking stop waits for a SIGKILLed child to be reaped before it gives up.
const REAP_WITHIN: Duration = Duration::from_secs(30);

impl Supervised {
    /// Starts `command` in a process group of its own, with stdin closed and stdout and
    /// stderr appended to `log`.
    pub fn spawn(
        name: impl Into<String>,
        command: Command,
        log: &Path,
        stop: StopPolicy,
    ) -> anyhow::Result<Self> {
        Self::spawn_in(Group::Own, name, command, log, stop)
    }

    /// [`spawn`](Self::spawn), in the process group `group`.
    pub fn spawn_in(
        group: Group,
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
            // The safety net if `baton dev` unwinds without stopping it; see also `Drop`.
            .kill_on_drop(true);
        if group == Group::Own {
            // Ctrl-C in the terminal then reaches `baton dev` only, which stops the
            // children in order (runners before nodes before the stores) rather than all
            // of them at once.
            command.process_group(0);
        }
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
            group,
            stop,
            exit: None,
        })
    }

    /// What it was started as (`node-0`, `redis`): the name in messages and status.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid (with [`Group::Own`], also its process group's id).
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
        if self.ask_to_stop()
            && let Ok(Ok(status)) = tokio::time::timeout(self.stop.grace, self.child.wait()).await
        {
            self.exit = Some(status);
            return Stopped::Gracefully;
        }
        self.kill_all();
        self.exit = self.child.wait().await.ok();
        Stopped::Killed
    }

    /// Sends the stop signal; whether it was sent.
    fn ask_to_stop(&self) -> bool {
        self.signal_target()
            .is_some_and(|pid| kill(pid, self.stop.signal).is_ok())
    }

    /// SIGKILL to its group when it leads one, so helpers (nginx workers, Postgres
    /// backends, a runner's tasks) do not outlive it; to it alone in its owner's group.
    /// Sent before it is reaped, while the group id is still its own.
    fn kill_all(&self) {
        let _ = match self.group {
            Group::Own => killpg(self.pid, Signal::SIGKILL),
            Group::Owners => kill(self.pid, Signal::SIGKILL),
        };
    }

    /// [`stop`](Self::stop) for a caller that cannot await (a `Drop`): the same signal,
    /// grace and SIGKILL, waited for by blocking the thread.
    pub fn stop_blocking(&mut self) -> Stopped {
        if self.try_exited().is_some() {
            return Stopped::Already;
        }
        if self.ask_to_stop() && self.exits_within(self.stop.grace) {
            return Stopped::Gracefully;
        }
        self.kill_all();
        // A SIGKILL cannot be refused; the wait is for the kernel to deliver it. Bounded,
        // so a Drop never hangs on a child that cannot be reaped (one already reaped).
        if !self.exits_within(REAP_WITHIN) {
            eprintln!("{}: not reaped {REAP_WITHIN:?} after SIGKILL", self.name);
        }
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

    /// SIGKILL at once (to its group when it leads one), as a crash would, and reap it.
    pub async fn kill_now(&mut self) {
        if self.try_exited().is_none() {
            self.kill_all();
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
            self.kill_all();
        }
    }
}

/// Runs a tool (initdb, pg_basebackup) to its end, supervised all the same: if we are
/// interrupted meanwhile, its process group is killed, which reaches a tool behind
/// `runuser` too. An error names its log when it fails.
pub(crate) async fn run_to_end(name: &str, command: Command, log: &Path) -> anyhow::Result<()> {
    let mut tool = Supervised::spawn(name, command, log, StopPolicy::signal(Signal::SIGTERM))?;
    let status = tool
        .exited()
        .await
        .with_context(|| format!("waiting for {name}"))?;
    if !status.success() {
        anyhow::bail!("{name} failed ({status}); see {}", log.display());
    }
    Ok(())
}

/// The pid on the first line of a pid file, as Postgres writes its `postmaster.pid`.
pub(crate) fn pid_in_file(file: &Path) -> Option<i32> {
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
