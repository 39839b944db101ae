//! The runners: this very binary, run as `baton runner`, talking to the load balancer as
//! a real runner would.

use super::nodes::baton_command;
use super::processes::{StopPolicy, Supervised};
use super::workdir::WorkDir;
use nix::sys::signal::Signal;
use std::path::Path;

pub const LABELS: &str = "linux,dev";
const CAPACITY: u32 = 2;

pub fn spawn(
    exe: &Path,
    work: &WorkDir,
    index: usize,
    lb_url: &str,
    registration_token: &str,
) -> anyhow::Result<Supervised> {
    let name = format!("runner-{index}");
    let state = work.join(&name);
    let mut command = baton_command(exe);
    command
        .args(["runner", "--server", lb_url])
        .args(["--registration-token", registration_token])
        .args(["--name", &format!("dev-{name}")])
        .args(["--labels", LABELS])
        .args(["--capacity", &CAPACITY.to_string()])
        .arg("--state-dir")
        .arg(&state)
        .arg("--work-dir")
        .arg(state.join("work"));
    // SIGTERM: take no new tasks and let the running ones finish (within the grace).
    Supervised::spawn(
        &name,
        command,
        &work.log(&name),
        StopPolicy::signal(Signal::SIGTERM),
    )
}
