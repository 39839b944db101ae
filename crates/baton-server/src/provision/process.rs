//! The `process` backend: each runner is `baton runner --once`, a child of the node, with
//! a state and a work folder of its own. It runs in a process group of its own, so a
//! node killed with its group leaves its runners to finish their tasks (another node
//! adopts their assignments); the node that started one reaps it, and stops it (the
//! runner's own SIGTERM handling, then SIGKILL) when its assignment fails.

use super::backend::{BackendError, RunnerToStart};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// How long a runner told to stop has before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A runner this node started.
struct Started {
    child: Child,
    folder: PathBuf,
}

/// Starts runners as child processes.
pub(crate) struct ProcessBackend {
    exe: PathBuf,
    dir: PathBuf,
    runner_args: Vec<String>,
    /// The runners this node started, by assignment and attempt, with their folders,
    /// until released.
    children: Arc<Mutex<HashMap<(Uuid, i32), Started>>>,
}

impl ProcessBackend {
    pub(super) fn new(exe: PathBuf, dir: PathBuf, runner_args: Vec<String>) -> Self {
        ProcessBackend {
            exe,
            dir,
            runner_args,
            children: Arc::default(),
        }
    }

    /// Starts the runner; its process id is the handle. The token goes in the runner's
    /// environment, never on its command line (which every user of the host may read).
    pub(super) fn start(&self, runner: &RunnerToStart<'_>) -> Result<String, BackendError> {
        let failed = |what: &str, e: std::io::Error| {
            BackendError(format!("{what} for runner {}: {e}", runner.name))
        };
        let folder = self.dir.join(runner.name);
        std::fs::create_dir_all(folder.join("state"))
            .map_err(|e| failed("making its folder", e))?;
        let log = std::fs::File::create(self.dir.join(format!("{}.log", runner.name)))
            .map_err(|e| failed("making its log", e))?;
        let mut command = Command::new(&self.exe);
        command
            .arg("runner")
            .args(["--once", "--capacity", "1"])
            .args(["--server", runner.server_url, "--name", runner.name])
            .args(["--labels", &runner.labels.join(",")])
            .arg("--state-dir")
            .arg(folder.join("state"))
            .arg("--work-dir")
            .arg(folder.join("work"));
        if !runner.queues.is_empty() {
            command.args(["--queues", &runner.queues.join(",")]);
        }
        command.args(&self.runner_args);
        // None of the node's own settings leak into the runner.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("BATON_") {
                command.env_remove(key);
            }
        }
        let err = log.try_clone().map_err(|e| failed("opening its log", e))?;
        let child = std::os::unix::process::CommandExt::process_group(
            command
                .env("BATON_REGISTRATION_TOKEN", runner.registration_token)
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err),
            0,
        )
        .spawn()
        .map_err(|e| failed("starting baton runner", e))?;
        let pid = child.id().to_string();
        self.lock().insert(
            (runner.assignment, runner.attempt),
            Started { child, folder },
        );
        Ok(pid)
    }

    /// Whether this node's runner of that attempt exited (reaped here).
    pub(super) fn exited(&self, assignment: Uuid, attempt: i32) -> bool {
        self.lock()
            .get_mut(&(assignment, attempt))
            .is_some_and(|started| matches!(started.child.try_wait(), Ok(Some(_))))
    }

    /// Stops this node's runner of that attempt if it still runs, reaps it and removes
    /// its folder (its log stays beside it). A runner this node did not start (adopted
    /// from a dead node) is stopped by its revoked token and deleted row instead.
    pub(super) fn release(&self, assignment: Uuid, attempt: i32) {
        let Some(Started { mut child, folder }) = self.lock().remove(&(assignment, attempt)) else {
            return;
        };
        let group = Pid::from_raw(child.id() as i32);
        let running = matches!(child.try_wait(), Ok(None));
        if running {
            let _ = killpg(group, Signal::SIGTERM);
        }
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + STOP_GRACE;
            while matches!(child.try_wait(), Ok(None)) {
                if std::time::Instant::now() >= deadline {
                    let _ = killpg(group, Signal::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_dir_all(folder);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i32), Started>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }
}
