//! The `command` backend: the operator's `create` and `delete` scripts, each given its
//! runner as JSON on stdin (as GitLab's custom executor and fleeting plugins are), so a
//! runner may be a VM, a cloud instance, anything that can run `baton runner --once`.
//! `create`'s first line of output is the handle `delete` gets back. A script that
//! leaves a process running must not leave it holding the script's output, or the node
//! waits for it until the script's time is up.

use super::backend::{BackendError, RunnerToRelease, RunnerToStart};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// A script has this long to answer.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// The most of a failed script's stderr kept in the assignment's error.
const ERROR_TAIL: usize = 500;

/// Starts and releases runners with the operator's scripts.
pub(crate) struct CommandBackend {
    /// Run to start a runner.
    pub create: PathBuf,
    /// Run to release one.
    pub delete: PathBuf,
}

impl CommandBackend {
    pub(super) async fn start(
        &self,
        runner: &RunnerToStart<'_>,
    ) -> Result<Option<String>, BackendError> {
        let out = run(&self.create, runner, Some(runner.registration_token)).await?;
        Ok(out
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string))
    }

    pub(super) async fn release(&self, runner: &RunnerToRelease<'_>) -> Result<(), BackendError> {
        run(&self.delete, runner, None).await.map(|_| ())
    }
}

/// Runs `script` with `input` as JSON on its stdin; its stdout when it exits 0. A failure
/// tells the end of its stderr, with `secret` (the token it was given) blanked out.
async fn run(
    script: &Path,
    input: &impl Serialize,
    secret: Option<&str>,
) -> Result<String, BackendError> {
    let failed = |what: String| BackendError(format!("{}: {what}", script.display()));
    let json = serde_json::to_vec(input).map_err(|e| failed(e.to_string()))?;
    let mut command = Command::new(script);
    // None of the node's own settings reach the operator's script.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BATON_") {
            command.env_remove(key);
        }
    }
    // A group of its own: a script out of time is stopped with what it started.
    let mut child = command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let group = child.id().map(|pid| Pid::from_raw(pid as i32));
    let stdin = child.stdin.take();
    let answered = tokio::time::timeout(SCRIPT_TIMEOUT, async {
        if let Some(mut stdin) = stdin {
            // A script that reads nothing closes its end: not an error of ours.
            let _ = stdin.write_all(&json).await;
        }
        child.wait_with_output().await
    });
    let output = match answered.await {
        Ok(output) => output.map_err(|e| failed(e.to_string()))?,
        Err(_) => {
            // What the script started goes too: the group id stays its members' while
            // any lives, whatever became of the script itself.
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            return Err(failed(format!(
                "no answer within {}s",
                SCRIPT_TIMEOUT.as_secs()
            )));
        }
    };
    if !output.status.success() {
        let mut stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if let Some(secret) = secret {
            stderr = stderr.replace(secret, "[token]");
        }
        let tail: String = stderr
            .chars()
            .rev()
            .take(ERROR_TAIL)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(failed(format!("{}: {}", output.status, tail.trim())));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
