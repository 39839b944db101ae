//! The Baton nodes: this very binary, run as `baton serve`.

use super::processes::{StopPolicy, Supervised};
use super::readiness::{http_ok, probe_client, wait_until};
use super::workdir::WorkDir;
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

/// Generous: the first node applies the migrations, and a node is ready only while its
/// stores take writes — which a Postgres failover can keep refused for minutes, until
/// pg_auto_failover has a synchronous standby again (an hour's drill on a loaded machine
/// met 3.5 minutes of it, and a node restarted in them gave up at 60 s). A node that
/// exits first is reported at once.
const READY_WITHIN: Duration = Duration::from_secs(240);

/// What every node shares.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// `BATON_DATABASE_URL`: one Postgres for the whole cluster.
    pub database_url: String,
    /// `BATON_REDIS_URL`: one Redis (or cluster, or sentinels) for the whole cluster.
    pub redis_url: String,
    /// `BATON_API_TOKEN`, the admin's token.
    pub api_token: String,
    /// `BATON_REGISTRATION_TOKEN`, which the runners register with.
    pub registration_token: String,
    /// The key `secret_env` is sealed with (`--secrets-key`): every node the same.
    pub secrets_key: String,
    /// `node-<index>` for every start; otherwise a random id per start, as in production.
    pub fixed_ids: bool,
    /// More `baton serve` flags (thresholds, intervals).
    pub extra_args: Vec<String>,
    /// More environment (the drill's clock skew).
    pub extra_env: Vec<(String, String)>,
}

/// A new key to seal `secret_env` with, for a cluster started here: base64 of 32 random
/// bytes, as `openssl rand -base64 32` makes one.
pub fn fresh_secrets_key() -> String {
    use base64::Engine;
    let key: [u8; 32] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// Node `index`'s supervised name, and its log's.
pub fn name(index: usize) -> String {
    format!("node-{index}")
}

/// Starts node `index` listening on `port`. Its port is fixed by the caller, so a restart
/// comes back where nginx expects it.
pub fn spawn(
    exe: &Path,
    work: &WorkDir,
    index: usize,
    port: u16,
    settings: &NodeSettings,
) -> anyhow::Result<Supervised> {
    let name = name(index);
    let mut command = baton_command(exe);
    command.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    if settings.fixed_ids {
        command.args(["--node-id", &name]);
    }
    command
        .args(&settings.extra_args)
        .env("BATON_DATABASE_URL", &settings.database_url)
        .env("BATON_REDIS_URL", &settings.redis_url)
        .env("BATON_API_TOKEN", &settings.api_token)
        .env("BATON_REGISTRATION_TOKEN", &settings.registration_token)
        .env("BATON_SECRETS_KEY", &settings.secrets_key)
        // Everything of a local cluster, the drill's webhook receiver included, is on
        // loopback, which webhooks may not reach by default.
        .env("BATON_WEBHOOK_ALLOW", "127.0.0.0/8")
        .envs(settings.extra_env.iter().map(|(k, v)| (k, v)));
    // SIGTERM: stop taking requests, finish those in flight, stop the services.
    Supervised::spawn(
        &name,
        command,
        &work.log(&name),
        StopPolicy::signal(Signal::SIGTERM),
    )
}

/// Waits until the node on `port` answers `/readyz` with 200: its stores are reachable
/// and its migrations applied.
pub async fn wait_ready(node: &mut Supervised, port: u16) -> anyhow::Result<()> {
    let http = probe_client()?;
    let url = format!("http://127.0.0.1:{port}/readyz");
    let what = format!("{} to answer /readyz", node.name());
    let (http, url) = (&http, url.as_str());
    wait_until(node, &what, READY_WITHIN, || http_ok(http, url)).await
}

/// `baton` with none of the caller's `BATON_*` settings, which would otherwise leak into
/// the cluster (a `BATON_CONFIG` of theirs, say) and make runs differ from machine to
/// machine. Shared with the runners.
pub fn baton_command(exe: &Path) -> Command {
    let mut command = Command::new(exe);
    // Log files are not terminals: no colour codes in them.
    command.env("NO_COLOR", "1");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BATON_") {
            command.env_remove(key);
        }
    }
    command
}
