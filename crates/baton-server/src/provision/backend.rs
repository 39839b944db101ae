//! How a provisioner starts and releases a runner: a child process of the node
//! ([`ProcessBackend`]), or the operator's scripts ([`CommandBackend`]). A backend is given
//! everything a runner needs to register, once; it keeps nothing of the token.

use super::command::CommandBackend;
use super::process::ProcessBackend;
use crate::config::{BackendKind, ProvisionerConfig};
use serde::Serialize;
use std::path::PathBuf;
use uuid::Uuid;

/// A runner to start: what the `create` script reads as JSON on its stdin. Its `Debug`
/// leaves the token out.
#[derive(Clone, Serialize)]
pub(crate) struct RunnerToStart<'a> {
    /// The assignment it is for.
    pub assignment: Uuid,
    /// Which start for that assignment (1 for the first).
    pub attempt: i32,
    /// The provisioner starting it.
    pub provisioner: &'a str,
    /// The name it registers with.
    pub name: &'a str,
    /// The labels it registers with.
    pub labels: &'a [String],
    /// The queues it serves; empty: all.
    pub queues: &'a [String],
    /// Its one-use registration token, scoped to those labels and queues.
    pub registration_token: &'a str,
    /// The address it talks to.
    pub server_url: &'a str,
}

impl std::fmt::Debug for RunnerToStart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerToStart")
            .field("assignment", &self.assignment)
            .field("attempt", &self.attempt)
            .field("name", &self.name)
            .field("registration_token", &"[hidden]")
            .finish_non_exhaustive()
    }
}

/// A runner to release: what the `delete` script reads as JSON on its stdin.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunnerToRelease<'a> {
    /// The assignment it was for.
    pub assignment: Uuid,
    /// Which start for that assignment it was.
    pub attempt: i32,
    /// The provisioner that started it.
    pub provisioner: &'a str,
    /// The name it registered (or would have registered) with.
    pub name: &'a str,
    /// What `create` printed, or the process id the `process` backend recorded.
    pub handle: Option<&'a str>,
}

/// A backend could not start or release a runner.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BackendError(pub String);

/// A provisioner's backend.
pub(crate) enum Backend {
    /// Child processes of this node (`process` and `sandbox`).
    Process(ProcessBackend),
    /// The operator's scripts.
    Command(CommandBackend),
}

impl Backend {
    /// The backend `config` names. `exe` is the `baton` binary the process backend runs.
    pub(crate) fn of(config: &ProvisionerConfig, exe: PathBuf) -> Backend {
        match config.backend {
            BackendKind::Process | BackendKind::Sandbox => Backend::Process(ProcessBackend::new(
                exe,
                config.runners_dir(),
                config.runner_args.clone(),
                config.backend == BackendKind::Sandbox,
            )),
            BackendKind::Command => Backend::Command(CommandBackend {
                create: config.create.clone().unwrap_or_default(),
                delete: config.delete.clone().unwrap_or_default(),
            }),
        }
    }

    /// Starts `runner`; its handle, if the backend has one.
    pub(crate) async fn start(
        &self,
        runner: &RunnerToStart<'_>,
    ) -> Result<Option<String>, BackendError> {
        match self {
            Backend::Process(b) => b.start(runner).await.map(Some),
            Backend::Command(b) => b.start(runner).await,
        }
    }

    /// Releases `runner`: stops it if it still runs, and frees what it held.
    pub(crate) async fn release(&self, runner: &RunnerToRelease<'_>) -> Result<(), BackendError> {
        match self {
            Backend::Process(b) => {
                b.release(runner.assignment, runner.attempt);
                Ok(())
            }
            Backend::Command(b) => b.release(runner).await,
        }
    }

    /// The attempts whose runner is known to have exited: only the process backend, for
    /// the runners it started itself, knows.
    pub(crate) fn exited_all(&self) -> Vec<(Uuid, i32)> {
        match self {
            Backend::Process(b) => b.exited_all(),
            Backend::Command(_) => Vec::new(),
        }
    }
}
