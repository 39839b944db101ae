//! `baton dev status | kill | restart`, from another terminal: what the running `baton dev`
//! supervises, read from the state file it keeps in its folder, and the two ways to break
//! or mend a member by hand.
//!
//! - `kill NAME` sends SIGKILL to the member's process group, as a crash would; `baton dev`
//!   sees it die and starts it again after `--restart-after-s` (unless `--no-restart`).
//! - `restart NAME` asks `baton dev` (a request file in `control/`, which it reads a few
//!   times a second) to stop the member gracefully and start it again at once — also a
//!   member left down by `--no-restart`.

use anyhow::Context;
use baton_localcluster::cluster::{Cluster, MemberState, Role};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const STATE_FILE: &str = "dev-state.json";
const CONTROL_DIR: &str = "control";
const RESTART_PREFIX: &str = "restart-";

#[derive(Debug, clap::Subcommand)]
pub enum DevAction {
    /// List what the running `baton dev` supervises: name, pid, state, address, where
    /// its Prometheus metrics are, log.
    Status {
        /// The folder `baton dev` runs in.
        #[arg(long, default_value = ".baton-dev")]
        dir: PathBuf,
    },
    /// Kill a member (node-2, runner-1, nginx, ...) with SIGKILL, as a crash would.
    Kill {
        /// The member's name, as `baton dev status` shows it.
        name: String,
        /// The folder `baton dev` runs in.
        #[arg(long, default_value = ".baton-dev")]
        dir: PathBuf,
    },
    /// Stop a member gracefully and start it again (also one left down).
    Restart {
        /// The member's name, as `baton dev status` shows it.
        name: String,
        /// The folder `baton dev` runs in.
        #[arg(long, default_value = ".baton-dev")]
        dir: PathBuf,
    },
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// The pid of the `baton dev` that writes this: a state whose writer is gone is stale.
    pub supervisor: i32,
    pub load_balancer: String,
    pub members: Vec<MemberState>,
}

/// Writes what the cluster holds now, whole or not at all (a rename), for `status`.
pub fn write_state(root: &Path, load_balancer: &str, cluster: &mut Cluster) -> anyhow::Result<()> {
    let state = State {
        supervisor: i32::try_from(std::process::id())?,
        load_balancer: load_balancer.to_string(),
        members: cluster.states(),
    };
    let partial = root.join(format!("{STATE_FILE}.partial"));
    std::fs::write(&partial, serde_json::to_vec_pretty(&state)?)?;
    std::fs::rename(&partial, root.join(STATE_FILE))?;
    Ok(())
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

fn read_state(dir: &Path) -> anyhow::Result<State> {
    let file = dir.join(STATE_FILE);
    let text = std::fs::read(&file).with_context(|| {
        format!(
            "no `baton dev` state in {} — is `baton dev` running there? (pass its --dir)",
            dir.display()
        )
    })?;
    let state: State = serde_json::from_slice(&text)?;
    anyhow::ensure!(
        alive(state.supervisor),
        "the `baton dev` that wrote {} (pid {}) is no longer running",
        file.display(),
        state.supervisor
    );
    Ok(state)
}

fn member<'a>(state: &'a State, name: &str) -> anyhow::Result<&'a MemberState> {
    state
        .members
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = state.members.iter().map(|m| m.name.as_str()).collect();
            anyhow::anyhow!("no member {name}; there are {}", names.join(", "))
        })
}

/// The restart requests waiting in `control/`, removed as they are read.
pub fn take_restart_requests(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join(CONTROL_DIR)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let member = name.strip_prefix(RESTART_PREFIX)?.to_string();
            std::fs::remove_file(entry.path()).ok()?;
            Some(member)
        })
        .collect()
}

/// Where a member serves Prometheus metrics: a node beside its API, a runner beside its
/// health (`--healthz-listen`, the address `baton dev` gives it).
fn metrics_of(member: &MemberState) -> Option<String> {
    match member.role {
        Role::Node | Role::Runner => Some(format!("{}/metrics", member.address.as_deref()?)),
        Role::LoadBalancer | Role::Postgres | Role::Redis => None,
    }
}

pub async fn run(action: DevAction) -> anyhow::Result<ExitCode> {
    match action {
        DevAction::Status { dir } => {
            let state = read_state(&dir)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "load balancer  {}", state.load_balancer)?;
            writeln!(
                out,
                "{:<10}  {:<13}  {:<7}  {:<5}  {:<22}  {:<30}  LOG",
                "NAME", "ROLE", "PID", "STATE", "ADDRESS", "METRICS"
            )?;
            for m in &state.members {
                let up = m.up && alive(m.pid);
                writeln!(
                    out,
                    "{:<10}  {:<13}  {:<7}  {:<5}  {:<22}  {:<30}  {}",
                    m.name,
                    m.role.as_str(),
                    m.pid,
                    if up { "up" } else { "down" },
                    m.address.as_deref().unwrap_or("-"),
                    metrics_of(m).as_deref().unwrap_or("-"),
                    m.log.display()
                )?;
            }
        }
        DevAction::Kill { name, dir } => {
            let state = read_state(&dir)?;
            let target = member(&state, &name)?;
            anyhow::ensure!(target.up && alive(target.pid), "{name} is not running");
            killpg(Pid::from_raw(target.pid), Signal::SIGKILL)
                .with_context(|| format!("killing {name} (pid {})", target.pid))?;
            println!("killed {name} (pid {}) with SIGKILL", target.pid);
        }
        DevAction::Restart { name, dir } => {
            let state = read_state(&dir)?;
            let target = member(&state, &name)?;
            let control = dir.join(CONTROL_DIR);
            std::fs::create_dir_all(&control)?;
            std::fs::write(control.join(format!("{RESTART_PREFIX}{name}")), b"")?;
            // Said done once `baton dev` has it running under a new pid.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = read_state(&dir)?;
                if let Ok(m) = member(&now, &name)
                    && m.pid != target.pid
                    && m.up
                {
                    println!("restarted {name} (pid {} → {})", target.pid, m.pid);
                    return Ok(ExitCode::SUCCESS);
                }
            }
            anyhow::bail!("{name} was not restarted within 60 s; see its log");
        }
    }
    Ok(ExitCode::SUCCESS)
}
