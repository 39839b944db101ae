//! The runners: this very binary, run as `baton runner`, talking to the load balancer as
//! a real runner would.

use super::nodes::baton_command;
use super::processes::{StopPolicy, Supervised};
use super::workdir::WorkDir;
use nix::sys::signal::Signal;
use std::path::Path;

/// What kind of runner to start.
#[derive(Debug, Clone)]
pub struct RunnerSpec {
    /// `--labels`, comma-separated: which tasks it takes.
    pub labels: String,
    /// `--capacity`: how many tasks it runs at once.
    pub capacity: u32,
    /// More `baton runner` flags.
    pub extra_args: Vec<String>,
    /// More environment (the drill's clock skew).
    pub extra_env: Vec<(String, String)>,
}

/// Runner `index`'s supervised name, log and state folder.
pub fn name(index: usize) -> String {
    format!("runner-{index}")
}

/// Starts runner `index`; its state dir is fixed by the index, so starting the same index
/// again is a restart of the same runner (same identity, new boot id).
pub fn spawn(
    exe: &Path,
    work: &WorkDir,
    index: usize,
    lb_url: &str,
    registration_token: &str,
    spec: &RunnerSpec,
) -> anyhow::Result<Supervised> {
    let name = name(index);
    let state = work.join(&name);
    let mut command = baton_command(exe);
    command
        .args(["runner", "--server", lb_url])
        .args(["--registration-token", registration_token])
        .args(["--name", &format!("dev-{name}")])
        .args(["--labels", &spec.labels])
        .args(["--capacity", &spec.capacity.to_string()])
        .arg("--state-dir")
        .arg(&state)
        .arg("--work-dir")
        .arg(work.join(&format!("{name}-work")))
        .args(&spec.extra_args)
        .envs(spec.extra_env.iter().map(|(k, v)| (k, v)));
    // SIGTERM: take no new tasks and let the running ones finish (within the grace).
    Supervised::spawn(
        &name,
        command,
        &work.log(&name),
        StopPolicy::signal(Signal::SIGTERM),
    )
}
