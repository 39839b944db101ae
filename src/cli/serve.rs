//! `baton serve` and `baton migrate`.

use crate::settings;
use crate::telemetry::{self, TelemetryArgs};
use baton_server::ServeConfig;
use baton_store::{Store, StoreOptions};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Every setting of the node; unset ones come from the file or the defaults.
#[derive(Debug, clap::Args, Serialize)]
pub struct ServeArgs {
    /// TOML settings file (keys as in `ServeConfig`, e.g. `node_ttl_ms`, `[limits]`).
    #[arg(long, env = "BATON_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "BATON_LISTEN")]
    listen: Option<SocketAddr>,
    /// Postgres URL [default: postgres://postgres@127.0.0.1:5432/baton]. Its value from the
    /// environment is never shown by `--help`: it may hold a password.
    #[arg(long, env = "BATON_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Acknowledge a write only when the Postgres primary that committed it has a
    /// synchronous standby; while it has none, writes get 503 and the node is not ready
    /// (see docs/stores.md) [default: false].
    #[arg(long, env = "BATON_REQUIRE_SYNC_STANDBY", num_args = 0..=1, default_missing_value = "true")]
    require_sync_standby: Option<bool>,
    /// Hand tasks' secrets out with the lease to runners that do not ask for them with the
    /// start, as agents of releases before `secrets_at_start` need; only while such agents
    /// run (docs/security.md) [default: false].
    #[arg(long, env = "BATON_SECRETS_WITH_LEASE", num_args = 0..=1, default_missing_value = "true")]
    secrets_with_lease: Option<bool>,
    /// Redis URL [default: redis://127.0.0.1:6379]: `redis://[user:password@]host:port`,
    /// `rediss://` for TLS; `redis+cluster://[user:password@]host:port,host:port` (or
    /// `rediss+cluster://`) names a Redis Cluster's nodes, as --redis-cluster does.
    #[arg(long, env = "BATON_REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis Sentinel addresses, comma-separated (`host:port,...`, or URLs
    /// `redis://[user:password@]host:port`); used instead of --redis-url, and failovers
    /// are followed.
    #[arg(
        long = "redis-sentinel",
        env = "BATON_REDIS_SENTINEL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    redis_sentinels: Option<Vec<String>>,
    /// Redis Cluster nodes, comma-separated (`host:port,...`; some of them are enough);
    /// used instead of --redis-url. Every key shares the prefix's hash tag, so Baton's data
    /// lives in one slot, and a failover of its master is followed.
    #[arg(
        long = "redis-cluster",
        env = "BATON_REDIS_CLUSTER",
        value_delimiter = ',',
        hide_env_values = true
    )]
    redis_cluster: Option<Vec<String>>,
    /// The master name the sentinels monitor [default: mymaster].
    #[arg(long, env = "BATON_REDIS_SENTINEL_MASTER")]
    redis_sentinel_master: Option<String>,
    /// Redis ACL user of the servers holding the data: the one server, the master the
    /// sentinels name, every Cluster node; wins over a user in --redis-url.
    #[arg(long, env = "BATON_REDIS_USERNAME")]
    redis_username: Option<String>,
    /// That user's password (or a server's `requirepass`). Prefer the variable: a flag
    /// shows in the process list.
    #[arg(long, env = "BATON_REDIS_PASSWORD", hide_env_values = true)]
    redis_password: Option<String>,
    /// The sentinels' own ACL user, apart from the master's.
    #[arg(long, env = "BATON_REDIS_SENTINEL_USERNAME")]
    redis_sentinel_username: Option<String>,
    /// The sentinels' own password (their user's, or their `requirepass`).
    #[arg(long, env = "BATON_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    redis_sentinel_password: Option<String>,
    /// Reach Redis over TLS: every server and sentinel, and the master the sentinels
    /// name, as a `rediss://` URL does [default: false].
    #[arg(long, env = "BATON_REDIS_TLS", num_args = 0..=1, default_missing_value = "true")]
    redis_tls: Option<bool>,
    /// PEM file of the CA the Redis servers' certificates must chain to
    /// [default: the system's roots].
    #[arg(long, env = "BATON_REDIS_CA_FILE")]
    redis_ca_file: Option<PathBuf>,
    /// Prefix of every Redis key [default: {baton}:].
    #[arg(long, env = "BATON_REDIS_PREFIX")]
    redis_prefix: Option<String>,
    /// This node's id [default: random per start].
    #[arg(long, env = "BATON_NODE_ID")]
    node_id: Option<String>,
    /// Bootstrap API token (all scopes).
    #[arg(long, env = "BATON_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Bootstrap registration token for runners.
    #[arg(long, env = "BATON_REGISTRATION_TOKEN", hide_env_values = true)]
    registration_token: Option<String>,
    /// Do not apply migrations at start.
    #[arg(long, env = "BATON_NO_MIGRATE", num_args = 0..=1, default_missing_value = "true")]
    no_migrate: Option<bool>,
    /// Liveness key TTL in milliseconds [default: 10000].
    #[arg(long, env = "BATON_NODE_TTL_MS")]
    node_ttl_ms: Option<u64>,
    /// After SIGTERM, how long in-flight requests may take before the node exits anyway
    /// [default: 25].
    #[arg(long, env = "BATON_DRAIN_GRACE_S")]
    drain_grace_s: Option<u64>,
    /// How long a draining node keeps answering, while saying it is leaving, before it
    /// closes its listener [default: 2000].
    #[arg(long, env = "BATON_DRAIN_NOTICE_MS")]
    drain_notice_ms: Option<u64>,
    /// Group commits written at once [default: 2].
    #[arg(long, env = "BATON_GROUP_COMMIT_WRITERS")]
    group_commit_writers: Option<usize>,
    /// Most items written in one group commit [default: 1024].
    #[arg(long, env = "BATON_GROUP_COMMIT_MAX_ITEMS")]
    group_commit_max_items: Option<usize>,
    /// How long a group commit waits for more work, in microseconds [default: 0].
    #[arg(long, env = "BATON_GROUP_COMMIT_LINGER_US")]
    group_commit_linger_us: Option<u64>,
    /// Internal addresses webhooks may reach after all, comma-separated CIDRs or
    /// addresses (e.g. `10.20.0.0/16,127.0.0.1`). Loopback, private, link-local and the
    /// like are refused otherwise [default: none].
    #[arg(long, env = "BATON_WEBHOOK_ALLOW", value_delimiter = ',')]
    webhook_allow: Option<Vec<String>>,
    /// The key webhooks are signed with (`whsec_` + base64, or a string of 16 bytes or
    /// more); every node needs the same [default: the cluster's own, kept in Postgres].
    #[arg(long, env = "BATON_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// The key `secret_env` is sealed with at rest: base64 of 32 bytes (`openssl rand
    /// -base64 32`); more keys after it, one per line or comma-separated, still open what
    /// they sealed (rotation). Every node needs the same. Unset: submits carrying
    /// `secret_env` are refused.
    #[arg(long, env = "BATON_SECRETS_KEY", hide_env_values = true)]
    secrets_key: Option<String>,
    /// A file holding --secrets-key's text (the chart mounts one).
    #[arg(long, env = "BATON_SECRETS_KEY_FILE")]
    secrets_key_file: Option<PathBuf>,
    /// Attempts after which a webhook is given up [default: 20].
    #[arg(long, env = "BATON_WEBHOOK_MAX_ATTEMPTS")]
    webhook_max_attempts: Option<u32>,
    /// Age (seconds since the task ended) after which a webhook is given up
    /// [default: 86400].
    #[arg(long, env = "BATON_WEBHOOK_MAX_AGE_S")]
    webhook_max_age_s: Option<u64>,
    /// Most HTTP connections open at once; the next waits until one closes
    /// [default: 4096].
    #[arg(long, env = "BATON_HTTP_MAX_CONNECTIONS")]
    http_max_connections: Option<usize>,
    /// A request's head must arrive within this many milliseconds (also while a
    /// kept-alive connection is idle), or the connection is closed [default: 60000].
    #[arg(long, env = "BATON_HTTP_HEADER_READ_TIMEOUT_MS")]
    http_header_read_timeout_ms: Option<u64>,
    /// A request's body must arrive whole within this many milliseconds of its head, or
    /// it is answered 408 [default: 60000].
    #[arg(long, env = "BATON_HTTP_BODY_READ_TIMEOUT_MS")]
    http_body_read_timeout_ms: Option<u64>,
    /// Where the web console (/ui) links a task's trace: an http(s) URL with
    /// `{trace_id}` in it, e.g. `https://jaeger.example.com/trace/{trace_id}`
    /// [default: no trace links].
    #[arg(long, env = "BATON_UI_TRACE_URL")]
    ui_trace_url: Option<String>,
    #[command(flatten)]
    timings: TimingArgs,
    /// Test-only fault injection (`after-pop`: abort between the Redis pop and the
    /// answer of a lease; `abort-before-commit`, `abort-after-commit`: abort inside a
    /// group commit; `baton_core::fault::Fault` has them all). Any other name is refused.
    #[arg(long, env = "BATON_FAULT", hide = true)]
    fault: Option<baton_core::fault::Fault>,
    /// Last: the heading it sets stays with its own flags.
    #[command(flatten)]
    #[serde(skip)]
    telemetry: TelemetryArgs,
}

/// The services' intervals and thresholds (`[timings]` in the settings file).
#[derive(Debug, clap::Args, Serialize)]
struct TimingArgs {
    /// How often each node reconciles its claims [default: 2000].
    #[arg(long, env = "BATON_RECONCILE_INTERVAL_MS")]
    reconcile_interval_ms: Option<u64>,
    /// How often each node looks for dead nodes' claims [default: 2000].
    #[arg(long, env = "BATON_CLEANER_INTERVAL_MS")]
    cleaner_interval_ms: Option<u64>,
    /// How often due scheduled tasks are promoted [default: 1000].
    #[arg(long, env = "BATON_PROMOTE_INTERVAL_MS")]
    promote_interval_ms: Option<u64>,
    /// A schedule tick fired later than this was missed (catch-up decides) [default: 2000].
    #[arg(long, env = "BATON_SCHEDULE_MISFIRE_GRACE_MS")]
    schedule_misfire_grace_ms: Option<u64>,
    /// How often the schedule service looks for new schedules when no wake-up came [default: 30000].
    #[arg(long, env = "BATON_SCHEDULE_POLL_MS")]
    schedule_poll_ms: Option<u64>,
    /// How soon the schedule service tries again after a failed pass [default: 1000].
    #[arg(long, env = "BATON_SCHEDULE_RETRY_MS")]
    schedule_retry_ms: Option<u64>,
    /// How long the event stream's history is held for resuming (`Last-Event-ID`) [default: 600].
    #[arg(long, env = "BATON_EVENT_RETENTION_S")]
    event_retention_s: Option<u64>,
    /// How often the repair pass runs (on one node) [default: 30000].
    #[arg(long, env = "BATON_REPAIR_INTERVAL_MS")]
    repair_interval_ms: Option<u64>,
    /// Silence after which a runner's unstarted tasks are requeued [default: 90].
    #[arg(long, env = "BATON_RUNNER_OFFLINE_AFTER_S")]
    runner_offline_after_s: Option<u64>,
    /// Silence after which a runner's running tasks fail or retry [default: 180].
    #[arg(long, env = "BATON_RUNNER_LOST_AFTER_S")]
    runner_lost_after_s: Option<u64>,
    /// How long a leased task may wait for its runner's start [default: 30].
    #[arg(long, env = "BATON_ACK_TIMEOUT_S")]
    ack_timeout_s: Option<u64>,
    /// Added to a task's timeout before the server ends it [default: 40].
    #[arg(long, env = "BATON_TIMEOUT_GRACE_S")]
    timeout_grace_s: Option<u64>,
    /// How long a claim may sit on a still-queued task before it is undone [default: 10000].
    #[arg(long, env = "BATON_DISPATCH_GRACE_MS")]
    dispatch_grace_ms: Option<u64>,
    /// A run its runner's heartbeat no longer lists is ended after this long [default: 15].
    #[arg(long, env = "BATON_FORGOTTEN_RUN_AFTER_S")]
    forgotten_run_after_s: Option<u64>,
    /// First retry delay; it doubles per attempt [default: 2000].
    #[arg(long, env = "BATON_RETRY_INITIAL_MS")]
    retry_initial_ms: Option<u64>,
    /// How long terminal tasks and their logs are kept [default: 604800].
    #[arg(long, env = "BATON_RETENTION_S")]
    retention_s: Option<u64>,
    /// How often the janitor deletes expired tasks [default: 60000].
    #[arg(long, env = "BATON_JANITOR_INTERVAL_MS")]
    janitor_interval_ms: Option<u64>,
    /// While webhooks are due, how often each node delivers them [default: 1000].
    #[arg(long, env = "BATON_OUTBOX_INTERVAL_MS")]
    outbox_interval_ms: Option<u64>,
    /// How often a node writes the presence of the runners it heard to Redis
    /// [default: 1000].
    #[arg(long, env = "BATON_PRESENCE_WRITE_MS")]
    presence_write_ms: Option<u64>,
    /// How often runner presence is copied from Redis to Postgres [default: 15000].
    #[arg(long, env = "BATON_PRESENCE_FLUSH_MS")]
    presence_flush_ms: Option<u64>,
    /// One webhook delivery's timeout, connecting included, in milliseconds
    /// [default: 10000].
    #[arg(long, env = "BATON_WEBHOOK_TIMEOUT_MS")]
    webhook_timeout_ms: Option<u64>,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config: ServeConfig = settings::load(args.config.as_deref(), &args)?;
    // Fixed here, not in the node, so the traces' resource names the node too.
    let node_id = config
        .node_id
        .get_or_insert_with(baton_server::node::random_node_id)
        .clone();
    let telemetry = telemetry::init(
        args.telemetry.log_format,
        &args.telemetry.traces,
        telemetry::Service {
            name: "baton-server",
            instance: &node_id,
        },
    )?;
    let node = baton_server::start(config).await?;
    println!(
        "baton node {} listening on http://{}",
        node.node_id, node.addr
    );
    let started = std::sync::OnceLock::new();
    let signalled = async {
        super::shutdown_signal().await;
        let _ = started.set(std::time::Instant::now());
    };
    let drained = node.run_until(signalled).await;
    if let Some(started) = started.get() {
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "drained");
    }
    telemetry.flush().await;
    drained?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Postgres URL. Its value from the environment is never shown: it may hold a password.
    #[arg(
        long,
        env = "BATON_DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres@127.0.0.1:5432/baton"
    )]
    database_url: String,
    /// Log output format (a migration Job logs as its nodes do).
    #[arg(long, env = "BATON_LOG_FORMAT", value_enum, default_value_t)]
    log_format: telemetry::LogFormat,
}

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    telemetry::init_logs(args.log_format);
    Store::database_create_if_missing(&args.database_url).await?;
    let store = Store::connect_lazy(&args.database_url, &StoreOptions::default())?;
    store.migrate().await?;
    println!("migrations applied");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    /// `[default: N]` in a flag's help is the node's default, written in `ServeConfig`'s
    /// `Default`: the flags stay unset unless given (so they cannot mask the settings
    /// file), and this keeps the number they show true.
    #[test]
    fn the_defaults_the_help_shows_are_the_nodes() {
        let command = ServeArgs::augment_args(clap::Command::new("serve"));
        let defaults = serde_json::to_value(ServeConfig::default()).unwrap();
        let mut checked = 0;
        for arg in command.get_arguments() {
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let Some(shown) = help
                .split("[default: ")
                .nth(1)
                .and_then(|rest| rest.split(']').next())
            else {
                continue;
            };
            let id = arg.get_id().as_str();
            let value = defaults
                .get(id)
                .or_else(|| defaults["timings"].get(id))
                .unwrap_or_else(|| panic!("--{id} shows a default but ServeConfig has no {id}"));
            let actual = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => value.to_string(),
                // Unset or a list: the help says in words what that means.
                _ => continue,
            };
            assert_eq!(
                shown, actual,
                "--{id}: the help says {shown}, the node uses {actual}"
            );
            checked += 1;
        }
        assert!(checked > 30, "only {checked} defaults found in the help");
    }
}
