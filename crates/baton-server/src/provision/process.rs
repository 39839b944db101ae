//! The `process` backend: each runner is `baton runner --once`, a child of the node, with
//! a state and a work folder of its own. It runs in a process group of its own, so a
//! node killed with its group leaves its runners to finish their tasks (another node
//! adopts their assignments); the node that started one reaps it, and stops it (the
//! runner's own SIGTERM handling, then SIGKILL) when it is released. The `sandbox`
//! backend is this one with each runner inside a sandbox (`sandbox.rs`), in a session
//! and group of its own, and a relay outside it in another.

use super::backend::{BackendError, RunnerToStart};
use super::sandbox;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// How long a runner told to stop has before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A runner this node started.
struct Started {
    /// The runner (or, sandboxed, `bwrap` around it).
    child: Child,
    /// A sandboxed runner's relay outside.
    relay: Option<Child>,
    folder: PathBuf,
}

/// A sandbox's relay outside, killed and reaped when dropped: on every way out of a
/// start that failed after it, and when its runner is released.
struct Relay(Option<Child>);

impl Relay {
    /// The child, to keep beside its runner until the release.
    fn keep(mut self) -> Child {
        self.0.take().expect("a relay is kept once")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How long a sandbox's relay has to open its socket.
const RELAY_READY_WITHIN: Duration = Duration::from_secs(5);

/// `command` with none of the node's own settings in its environment.
fn without_node_settings(command: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BATON_") {
            command.env_remove(key);
        }
    }
    command.env("NO_COLOR", "1")
}

/// Starts runners as child processes.
pub(crate) struct ProcessBackend {
    exe: PathBuf,
    dir: PathBuf,
    runner_args: Vec<String>,
    /// Each runner in a sandbox of its own (the `sandbox` backend).
    sandboxed: bool,
    /// The runners this node started, by assignment and attempt, with their folders,
    /// until released.
    children: Arc<Mutex<HashMap<(Uuid, i32), Started>>>,
}

impl ProcessBackend {
    pub(super) fn new(
        exe: PathBuf,
        dir: PathBuf,
        runner_args: Vec<String>,
        sandboxed: bool,
    ) -> Self {
        ProcessBackend {
            exe,
            dir,
            runner_args,
            sandboxed,
            children: Arc::default(),
        }
    }

    /// Starts the runner; the process id of its group's leader is the handle. The
    /// token goes in the runner's environment, never on its command line (which every
    /// user of the host may read).
    pub(super) async fn start(&self, runner: &RunnerToStart<'_>) -> Result<String, BackendError> {
        let failed = |what: &str, e: std::io::Error| {
            BackendError(format!("{what} for runner {}: {e}", runner.name))
        };
        let folder = self.dir.join(runner.name);
        std::fs::create_dir_all(folder.join("state"))
            .map_err(|e| failed("making its folder", e))?;
        let log = std::fs::File::create(self.dir.join(format!("{}.log", runner.name)))
            .map_err(|e| failed("making its log", e))?;
        let (relay, mut command) = if self.sandboxed {
            let relay = self
                .spawn_relay(runner.server_url, &folder, &log)
                .await
                .map_err(|e| failed("starting its relay", e))?;
            let inside = Path::new(sandbox::INSIDE);
            let server = format!("http://{}", sandbox::SERVER_INSIDE);
            let args = self.runner_args(runner, &server, inside);
            // In a session of its own: the sandbox has no controlling terminal to push
            // keystrokes into, and bwrap leads a process group that holds the runner.
            let mut command = Command::new("setsid");
            command.arg("bwrap").args(sandbox::bwrap_args(
                &self.exe,
                &folder,
                &sandbox::inside(&args),
            ));
            (Some(Relay(Some(relay))), command)
        } else {
            let mut command = Command::new(&self.exe);
            command
                .arg("runner")
                .args(self.runner_args(runner, runner.server_url, &folder));
            // A process group of its own, which a node killed with its group spares.
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
            (None, command)
        };
        let err = log.try_clone().map_err(|e| failed("opening its log", e))?;
        let child = without_node_settings(&mut command)
            .env("BATON_REGISTRATION_TOKEN", runner.registration_token)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| failed("starting the runner", e))?;
        let handle = child.id().to_string();
        self.lock().insert(
            (runner.assignment, runner.attempt),
            Started {
                child,
                relay: relay.map(Relay::keep),
                folder,
            },
        );
        Ok(handle)
    }

    /// `baton runner`'s arguments: one task, talking to `server`, its state and work
    /// folders in `folder` (as the runner sees it).
    fn runner_args(&self, runner: &RunnerToStart<'_>, server: &str, folder: &Path) -> Vec<String> {
        let mut args: Vec<String> = [
            "--once",
            "--capacity",
            "1",
            "--server",
            server,
            "--name",
            runner.name,
            "--labels",
            &runner.labels.join(","),
            "--state-dir",
            &folder.join("state").display().to_string(),
            "--work-dir",
            &folder.join("work").display().to_string(),
        ]
        .map(str::to_string)
        .to_vec();
        if !runner.queues.is_empty() {
            args.extend(["--queues".to_string(), runner.queues.join(",")]);
        }
        args.extend(self.runner_args.iter().cloned());
        args
    }

    /// The relay outside a sandbox, leading a process group of its own, passing the
    /// sandbox's connections to `server_url`'s address; returns once its socket exists.
    async fn spawn_relay(
        &self,
        server_url: &str,
        folder: &Path,
        log: &std::fs::File,
    ) -> std::io::Result<Child> {
        let url = reqwest::Url::parse(server_url).map_err(std::io::Error::other)?;
        let address = format!(
            "{}:{}",
            url.host_str().unwrap_or("127.0.0.1"),
            url.port_or_known_default().unwrap_or(80)
        );
        let socket = folder.join(sandbox::RELAY_SOCKET);
        let mut command = Command::new(&self.exe);
        command
            .arg("relay")
            .arg("--listen-unix")
            .arg(&socket)
            .args(["--to-tcp", &address]);
        let mut relay = std::os::unix::process::CommandExt::process_group(
            without_node_settings(&mut command)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log.try_clone()?),
            0,
        )
        .spawn()?;
        let deadline = std::time::Instant::now() + RELAY_READY_WITHIN;
        while !socket.exists() {
            if std::time::Instant::now() >= deadline || matches!(relay.try_wait(), Ok(Some(_))) {
                let _ = relay.kill();
                let _ = relay.wait();
                return Err(std::io::Error::other("the relay did not open its socket"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(relay)
    }

    /// The attempts whose runner, started by this node, exited (reaped here).
    pub(super) fn exited_all(&self) -> Vec<(Uuid, i32)> {
        self.lock()
            .iter_mut()
            .filter_map(|(attempt, started)| {
                matches!(started.child.try_wait(), Ok(Some(_))).then_some(*attempt)
            })
            .collect()
    }

    /// Stops this node's runner of that attempt if it still runs, reaps it and removes
    /// its folder (its log stays beside it). A runner this node did not start (adopted
    /// from a dead node) is stopped by its revoked token and deleted row instead.
    pub(super) fn release(&self, assignment: Uuid, attempt: i32) {
        let Some(Started {
            mut child,
            relay,
            folder,
        }) = self.lock().remove(&(assignment, attempt))
        else {
            return;
        };
        // The runner leads its process group (bwrap, sandboxed, after `setsid`): asked to
        // stop while its leader is unreaped, so the group id is still its own. The group
        // then lives while any of its members does (a group id is not reused meanwhile):
        // the release waits for it to empty, not for the leader alone — bwrap itself dies
        // at once while the runner inside finishes stopping.
        let group = Pid::from_raw(child.id() as i32);
        let asked = matches!(child.try_wait(), Ok(None)) && killpg(group, Signal::SIGTERM).is_ok();
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + STOP_GRACE;
            let group_left = || asked && killpg(group, None).is_ok();
            while matches!(child.try_wait(), Ok(None)) || group_left() {
                if std::time::Instant::now() >= deadline {
                    let _ = killpg(group, Signal::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // The relay outlives nothing: the runner it served is gone.
            drop(relay.map(|r| Relay(Some(r))));
            let _ = std::fs::remove_dir_all(folder);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i32), Started>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }
}
