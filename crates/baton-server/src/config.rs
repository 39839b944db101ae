//! Node settings. Defaults suit a local run; the CLI layers a TOML file, `BATON_*`
//! variables and flags over them.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod provisioners;
mod trace_url;

pub use provisioners::{BackendKind, ProvisionerConfig};
pub use trace_url::TraceUrlTemplate;

/// Every setting of one node (`baton serve`). Unknown keys are refused, so a misspelt
/// setting in a file fails the start instead of being silently ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Where the HTTP API listens.
    pub listen: SocketAddr,
    /// The Postgres database holding the tasks (the source of truth); created if it
    /// does not exist, unless `no_migrate`.
    pub database_url: String,
    /// Acknowledge a write only when the primary that committed it replicated it
    /// synchronously (`baton_store::StoreOptions::require_sync_standby`).
    pub require_sync_standby: bool,
    /// Hand a task's `secret_env` out with its lease to runners that do not say they take
    /// it with the start (`secrets_at_start`), as agents before that field did. Off, such
    /// a runner gets secrets only with the start's answer: a lease that is never started
    /// learns nothing. On only while agents of that age still run.
    pub secrets_with_lease: bool,
    /// The one Redis server, when neither `redis_sentinels` nor `redis_cluster` is set;
    /// a `redis+cluster://` URL names a cluster's nodes instead (`redis_target`).
    pub redis_url: String,
    /// Sentinel addresses (`host:port`); when set, Redis is found through them (the
    /// master named `redis_sentinel_master`) instead of `redis_url`, and a failover is
    /// followed without a restart.
    pub redis_sentinels: Vec<String>,
    /// The master name the sentinels monitor.
    pub redis_sentinel_master: String,
    /// Redis Cluster nodes (`host:port`), some or all; when set, Redis is reached as a
    /// cluster instead of at `redis_url`.
    pub redis_cluster: Vec<String>,
    /// Prefix of every Redis key; keep a `{hash tag}` so all keys share one Cluster slot.
    pub redis_prefix: String,
    /// The Redis ACL user of the servers holding the data: the single server, the master
    /// the sentinels name, every Cluster node. Wins over a user in `redis_url`.
    pub redis_username: Option<String>,
    /// That user's password, or the `requirepass` of a server without ACL users.
    pub redis_password: Option<String>,
    /// The sentinels' own user, apart from the master's: a sentinel has ACLs (or a
    /// `requirepass`) of its own.
    pub redis_sentinel_username: Option<String>,
    /// The sentinels' own password: their user's, or their `requirepass`.
    pub redis_sentinel_password: Option<String>,
    /// Reach every Redis server, sentinel and the master they name over TLS, as a
    /// `rediss://` URL does (baton_coord::RedisAccess says the rules).
    pub redis_tls: bool,
    /// PEM file of the CA Redis servers' certificates must chain to, instead of the
    /// system's roots.
    pub redis_ca_file: Option<PathBuf>,
    /// This node's id; random per start when unset, so a restarted node never mistakes
    /// a dead predecessor's claims for its own.
    pub node_id: Option<String>,
    /// Bootstrap API token with every scope. Tokens created through the API are stored
    /// hashed in Postgres.
    pub api_token: Option<String>,
    /// Bootstrap registration token for runners.
    pub registration_token: Option<String>,
    /// Skip applying migrations at start (when a migration job runs them).
    pub no_migrate: bool,
    /// How long a node's liveness key lives without a refresh; refreshed every third.
    /// A node that could not refresh it for this long stops acting on its claims and
    /// rejoins under a new id.
    pub node_ttl_ms: u64,
    /// Bounds on what a request may hold or ask for.
    pub limits: Limits,
    /// How often the node's services run and the thresholds they apply.
    pub timings: Timings,
    /// Test-only fault injection (`baton_core::fault::Fault` says what each does); a name
    /// no node knows is refused when the settings are read.
    pub fault: Option<baton_core::fault::Fault>,
    /// How often the node reads its cached runners again from Postgres, all in one query
    /// (a revocation reaches every node at once through Redis; this catches one missed).
    pub token_cache_ttl_ms: u64,
    /// Group commits written at once, each on a connection of its own (a pool of this
    /// size, beside `db_max_connections`).
    pub group_commit_writers: usize,
    /// Most items (inserts, starts, log chunks, run ends, reads) in one group commit.
    pub group_commit_max_items: usize,
    /// How long the group commit waits for more work once it has some (0: it writes
    /// what has gathered at once; batches still grow under load, while the previous one
    /// is being written).
    pub group_commit_linger_us: u64,
    /// Size of the Postgres pool the handlers and services share (the group commit's
    /// writers have their own).
    pub db_max_connections: u32,
    /// Connections in the Redis pool.
    pub redis_pool_size: usize,
    /// Bound on each Redis command and each wait for a Postgres connection.
    pub store_timeout_ms: u64,
    /// Most HTTP connections open at once on this node; the next waits in the kernel's
    /// backlog until one closes.
    pub http_max_connections: usize,
    /// A request's head must arrive within this, from a connection's start and while a
    /// kept-alive connection waits for its next request, or the connection is closed
    /// (a slowloris client). Keep it above the proxy's upstream keep-alive (nginx: 30 s).
    pub http_header_read_timeout_ms: u64,
    /// A request's body must arrive whole within this of its head, or the request is
    /// answered 408 (a client sending its body a byte at a time).
    pub http_body_read_timeout_ms: u64,
    /// After SIGTERM: how long in-flight requests may take to finish before the node
    /// exits anyway. Keep it under the orchestrator's termination grace (Kubernetes: 30 s).
    pub drain_grace_s: u64,
    /// The first part of a drain: the node still answers, but says it is leaving
    /// (readiness fails, leases are turned away, every answer closes its connection), so
    /// load balancers stop sending before the listener closes.
    pub drain_notice_ms: u64,
    /// Internal addresses webhooks may reach after all (CIDRs or addresses). By default
    /// loopback, private, shared, link-local, multicast, broadcast, reserved and
    /// unspecified addresses are refused: a submitter chooses the URL, the node sends
    /// from inside the network (docs/webhooks.md).
    pub webhook_allow: Vec<String>,
    /// The key webhooks are signed with: `whsec_` + base64, or any string of at least
    /// 16 bytes. Unset: the cluster's own, generated once and kept in Postgres (an admin
    /// reads it at `GET /v1/webhooks/secret`).
    pub webhook_secret: Option<String>,
    /// The keys `secret_env` values are sealed with (AES-256-GCM), as base64 of 32 bytes
    /// each, one per line or comma-separated: the first seals, all open (rotation,
    /// docs/security.md). Unset, and no `secrets_key_file`: submits that carry
    /// `secret_env` are refused.
    pub secrets_key: Option<String>,
    /// A file holding `secrets_key`'s text, read once at start.
    pub secrets_key_file: Option<std::path::PathBuf>,
    /// A webhook is given up after this many attempts...
    pub webhook_max_attempts: u32,
    /// ...or once it is this old (from the task's end), whichever comes first.
    pub webhook_max_age_s: u64,
    /// Where the web console links a task's trace: a URL with `{trace_id}` in it (a
    /// Jaeger UI's `.../trace/{trace_id}`). Unset: the console shows no trace links.
    pub ui_trace_url: Option<TraceUrlTemplate>,
    /// Runners started on demand for waiting work (`[[provisioners]]`,
    /// docs/dynamic-runners.md); none by default.
    pub provisioners: Vec<ProvisionerConfig>,
    /// How often a node looks at the demand and at the runners it started.
    pub provision_interval_ms: u64,
}

/// Input limits: each one breached is answered with a JSON 413 or 422.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Any JSON request body.
    pub max_body_bytes: usize,
    /// A task's `payload`, serialised.
    pub max_payload_bytes: usize,
    /// Tasks in one batch submit (`POST /v1/tasks/batch`); more is a 413.
    pub max_batch: usize,
    /// Jobs in one pipeline (`POST /v1/pipelines`); more is a 422.
    pub max_pipeline_jobs: usize,
    /// Variables in a task's `env`, and again in its `secret_env`.
    pub max_env_vars: usize,
    /// Labels a task may require.
    pub max_labels: usize,
    /// One log chunk from a runner.
    pub max_log_chunk_bytes: usize,
    /// A runner's registration: the one body anyone may send without a bearer token.
    pub max_registration_body_bytes: usize,
    /// Stored log per task; beyond it the log is marked truncated.
    pub max_log_bytes: i64,
    /// A task's `timeout_s` when its submit names none.
    pub default_timeout_s: i64,
    /// Longest `timeout_s` a submit may ask for.
    pub max_timeout_s: i64,
    /// How long a task may wait queued when its submit names no `queue_timeout_s`; the
    /// repairer expires it after that.
    pub default_queue_timeout_s: i64,
    /// Longest `queue_timeout_s` a submit may ask for.
    pub max_queue_timeout_s: i64,
    /// Longest lease long-poll; runners are declared offline only well after it.
    pub max_wait_s: u32,
    /// Most tasks one lease request may take.
    pub max_lease: u32,
    /// Most lease requests one runner may have waiting (parked) on one node; past it,
    /// 429. An agent parks one at a time.
    pub max_parked_per_runner: usize,
    /// Most log follow streams one API token may have open on one node; past it, 429.
    pub max_follows_per_token: usize,
    /// Most event subscriptions reading the history at once on one node (catching up
    /// from an old `Last-Event-ID`); the rest wait their turn.
    pub max_catch_ups: usize,
    /// Most of those one API token may have reading at once.
    pub max_catch_ups_per_token: usize,
    /// Most task lists searching text (`GET /v1/tasks?text=`) and task counts (`GET
    /// /v1/tasks/count`) at once on one node, each holding a Postgres connection; past it,
    /// 429. The pool's other connections stay
    /// free for everything else, token checks included.
    pub max_text_searches: usize,
    /// Most starts and completions in one runner exchange (and most running leases in
    /// its heartbeat).
    pub max_exchange_items: usize,
    /// Most attempts a task (or a queue's defaults) may allow.
    pub max_attempts: i32,
    /// Longest webhook `notify_url`, in characters.
    pub max_notify_url: usize,
    /// Queue keys (a queue name with a label set) that may have work at once: a submit
    /// that would add one past it gets 429. Each costs Redis a sorted set; empty ones are
    /// dropped, so this bounds what client-chosen names can make Redis hold.
    pub max_queues: usize,
    /// Distinct label sets that may have work at once (429 past it). Every lease reads
    /// them all, so this bounds a lease's cost, whatever the number of queues.
    pub max_label_sets: usize,
    /// Queue keys one owner (API token) may have queued work in at once, beside
    /// `max_queues`: one tenant cannot take every place (429 past it).
    pub max_queues_per_owner: usize,
    /// Label sets one owner may have queued work with at once, beside `max_label_sets`.
    pub max_label_sets_per_owner: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 << 20,
            max_payload_bytes: 256 << 10,
            max_batch: 1000,
            max_pipeline_jobs: 10_000,
            max_env_vars: 128,
            max_labels: baton_core::labels::MAX_LABELS,
            max_log_chunk_bytes: 1 << 20,
            max_registration_body_bytes: 64 << 10,
            max_log_bytes: 16 << 20,
            default_timeout_s: 3600,
            max_timeout_s: 7 * 24 * 3600,
            default_queue_timeout_s: 86_400,
            max_queue_timeout_s: 30 * 86_400,
            max_wait_s: 50,
            max_lease: 64,
            max_parked_per_runner: 64,
            max_follows_per_token: 32,
            max_catch_ups: 16,
            max_catch_ups_per_token: 2,
            max_text_searches: 2,
            max_exchange_items: 256,
            max_attempts: 100,
            max_notify_url: 2048,
            max_queues: 10_000,
            max_label_sets: 256,
            max_queues_per_owner: 256,
            max_label_sets_per_owner: 32,
        }
    }
}

/// How often the node's services run and the thresholds they apply (design.md §5).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timings {
    /// How often the reconciler looks at this node's claims.
    pub reconcile_interval_ms: u64,
    /// How often the orphan cleaner looks for claims of dead nodes to take over.
    pub cleaner_interval_ms: u64,
    /// How often the promoter moves due `scheduled` tasks to `queued`.
    pub promote_interval_ms: u64,
    /// How often a node tries to take the lock and repair Redis from Postgres.
    pub repair_interval_ms: u64,
    /// How often the janitor deletes the tasks past `retention_s`, a batch at a time.
    pub janitor_interval_ms: u64,
    /// How often the outbox looks for webhooks to deliver while rows are due or failing.
    pub outbox_interval_ms: u64,
    /// How often runner presence is copied from Redis to Postgres.
    pub presence_flush_ms: u64,
    /// How often a node writes the presence of the runners it heard to Redis (one
    /// command for all of them).
    pub presence_write_ms: u64,
    /// With no news of new webhooks, how often a node looks in the outbox anyway.
    pub outbox_idle_poll_ms: u64,
    /// A runner silent this long gets no new tasks and its unstarted ones are requeued.
    /// Keep it above the longest lease `wait_s`.
    pub runner_offline_after_s: u64,
    /// A runner silent this long is presumed dead: its running tasks fail (or retry).
    pub runner_lost_after_s: u64,
    /// How long a leased task may wait for its runner's `start`.
    pub ack_timeout_s: u64,
    /// Added to a task's `timeout_s` before the server ends it as `timed_out`, and run
    /// again from the end of the node's own store outage. Keep it above the runners'
    /// longest backoff step (30 s + 20 %): a result held through an outage lands first.
    pub timeout_grace_s: u64,
    /// How long a claim may sit on a task Postgres still calls `queued` before the
    /// dispatch is presumed dead.
    pub dispatch_grace_ms: u64,
    /// A run its runner's heartbeat no longer lists (same boot) is ended once it has been
    /// going this long: longer than a heartbeat can be in flight.
    pub forgotten_run_after_s: u64,
    /// A retried task's first backoff; each later retry waits longer, up to
    /// `retry_max_ms`.
    pub retry_initial_ms: u64,
    /// Longest backoff between a task's attempts.
    pub retry_max_ms: u64,
    /// Terminal tasks and their logs are deleted this long after they finished.
    pub retention_s: u64,
    /// TTL of the finalize lock.
    pub finalize_lock_ms: u64,
    /// One webhook delivery, from resolving its host to the answer's status.
    pub webhook_timeout_ms: u64,
    /// A schedule's tick fired later than this was missed: its schedule's catch-up
    /// policy decides whether it fires (docs/schedules.md).
    pub schedule_misfire_grace_ms: u64,
    /// How often a node looks for new or changed schedules while none is due sooner and
    /// no wake-up said one changed: a backstop, since every change wakes every node.
    pub schedule_poll_ms: u64,
    /// How soon a node's schedule service tries again after a pass that failed (a store
    /// unreachable, failing over, or refusing writes): nothing wakes it when the store
    /// comes back, so this bounds how long ticks wait after it does.
    pub schedule_retry_ms: u64,
    /// How long the event history (`GET /v1/events`) holds events: a subscriber that
    /// reconnects after longer is told to `resync`.
    pub event_retention_s: u64,
}

impl Default for Timings {
    /// The reconcile thresholds and the retry backoff are baton-core's defaults, read from
    /// there.
    fn default() -> Self {
        let core = baton_core::reconcile::Thresholds::default();
        let secs = |d: chrono::Duration| d.num_seconds() as u64;
        let retry = baton_core::after_run::TASK_RETRY;
        Timings {
            reconcile_interval_ms: 2_000,
            cleaner_interval_ms: 2_000,
            promote_interval_ms: 1_000,
            repair_interval_ms: 30_000,
            janitor_interval_ms: 60_000,
            outbox_interval_ms: 1_000,
            presence_flush_ms: 15_000,
            presence_write_ms: 1_000,
            outbox_idle_poll_ms: 30_000,
            runner_offline_after_s: secs(core.runner_offline_after),
            runner_lost_after_s: secs(core.runner_lost_after),
            ack_timeout_s: secs(core.ack_timeout),
            timeout_grace_s: secs(core.timeout_grace),
            dispatch_grace_ms: core.dispatch_grace.num_milliseconds() as u64,
            forgotten_run_after_s: 15,
            retry_initial_ms: retry.initial.as_millis() as u64,
            retry_max_ms: retry.max.as_millis() as u64,
            retention_s: 7 * 86_400,
            finalize_lock_ms: 30_000,
            webhook_timeout_ms: 10_000,
            schedule_misfire_grace_ms: 2_000,
            schedule_poll_ms: 30_000,
            schedule_retry_ms: 1_000,
            event_retention_s: 600,
        }
    }
}

impl Timings {
    /// The thresholds the reconciler's pure decision and the heartbeat's timeout verdict
    /// apply, from the settings' units.
    pub fn thresholds(&self) -> baton_core::reconcile::Thresholds {
        let secs = |s: u64| chrono::Duration::seconds(s as i64);
        baton_core::reconcile::Thresholds {
            runner_offline_after: secs(self.runner_offline_after_s),
            runner_lost_after: secs(self.runner_lost_after_s),
            ack_timeout: secs(self.ack_timeout_s),
            timeout_grace: secs(self.timeout_grace_s),
            dispatch_grace: chrono::Duration::milliseconds(self.dispatch_grace_ms as i64),
        }
    }

    /// The backoff between a task's attempts: a queue's defaults or a submit may choose
    /// their own; this is what applies otherwise. The jitter is baton-core's.
    pub fn retry_backoff(&self) -> baton_core::backoff::Backoff {
        baton_core::backoff::Backoff {
            initial: Duration::from_millis(self.retry_initial_ms),
            max: Duration::from_millis(self.retry_max_ms),
            jitter: baton_core::after_run::TASK_RETRY.jitter,
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            database_url: "postgres://postgres@127.0.0.1:5432/baton".into(),
            require_sync_standby: false,
            secrets_with_lease: false,
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_sentinels: Vec::new(),
            redis_sentinel_master: "mymaster".into(),
            redis_cluster: Vec::new(),
            redis_prefix: baton_coord::DEFAULT_PREFIX.into(),
            redis_username: None,
            redis_password: None,
            redis_sentinel_username: None,
            redis_sentinel_password: None,
            redis_tls: false,
            redis_ca_file: None,
            node_id: None,
            api_token: None,
            registration_token: None,
            no_migrate: false,
            node_ttl_ms: 10_000,
            limits: Limits::default(),
            timings: Timings::default(),
            fault: None,
            token_cache_ttl_ms: 60_000,
            group_commit_writers: 2,
            group_commit_max_items: 1024,
            group_commit_linger_us: 0,
            db_max_connections: 16,
            redis_pool_size: 16,
            store_timeout_ms: 2_000,
            http_max_connections: 4096,
            http_header_read_timeout_ms: 60_000,
            http_body_read_timeout_ms: 60_000,
            drain_grace_s: 25,
            drain_notice_ms: 2_000,
            webhook_allow: Vec::new(),
            webhook_secret: None,
            secrets_key: None,
            secrets_key_file: None,
            webhook_max_attempts: 20,
            webhook_max_age_s: 86_400,
            ui_trace_url: None,
            provisioners: Vec::new(),
            provision_interval_ms: 1_000,
        }
    }
}

impl ServeConfig {
    /// Where Redis is: `redis_cluster` or `redis_sentinels` when given, else
    /// `redis_url` — a `redis+cluster://` (or `rediss+cluster://`) URL naming a
    /// cluster's nodes, or one server's `redis://` or `rediss://` URL.
    pub fn redis_target(&self) -> baton_coord::RedisTarget {
        let urls = |addrs: &[String]| -> Vec<String> {
            addrs
                .iter()
                .map(|s| {
                    if s.contains("://") {
                        s.clone()
                    } else {
                        format!("redis://{s}")
                    }
                })
                .collect()
        };
        if !self.redis_cluster.is_empty() {
            return baton_coord::RedisTarget::Cluster {
                nodes: urls(&self.redis_cluster),
            };
        }
        if let Some(nodes) = cluster_nodes(&self.redis_url) {
            return baton_coord::RedisTarget::Cluster { nodes };
        }
        if self.redis_sentinels.is_empty() {
            return baton_coord::RedisTarget::Url(self.redis_url.clone());
        }
        baton_coord::RedisTarget::Sentinel {
            sentinels: urls(&self.redis_sentinels),
            master: self.redis_sentinel_master.clone(),
        }
    }

    /// Who the node is to Redis beyond the URLs, with the CA file read. A CA file with
    /// nothing asking for TLS is refused: it would be silently unused.
    pub fn redis_access(&self) -> Result<baton_coord::RedisAccess, String> {
        let ca_pem =
            match &self.redis_ca_file {
                Some(path) => Some(std::fs::read(path).map_err(|e| {
                    format!("cannot read the Redis CA file {}: {e}", path.display())
                })?),
                None => None,
            };
        let access = baton_coord::RedisAccess {
            username: self.redis_username.clone(),
            password: self.redis_password.clone(),
            sentinel_username: self.redis_sentinel_username.clone(),
            sentinel_password: self.redis_sentinel_password.clone(),
            tls: self.redis_tls,
            ca_pem,
        };
        if access.ca_pem.is_some() && !access.uses_tls(&self.redis_target()) {
            return Err(
                "a Redis CA file is given, but nothing asks for TLS: set --redis-tls or use \
                 rediss:// URLs"
                    .into(),
            );
        }
        Ok(access)
    }

    /// Every provisioner can run (docs/dynamic-runners.md): refused at start otherwise.
    pub fn provisioners_check(&self) -> Result<(), String> {
        provisioners::check_all(&self.provisioners)
    }

    /// A Redis Cluster keeps every key Baton writes in one slot only if the prefix holds a
    /// hash tag; without one each multi-key script fails with CROSSSLOT, so a node would
    /// take submits and never dispatch them. Refused at start instead.
    pub fn redis_prefix_check(&self) -> Result<(), String> {
        let cluster = matches!(
            self.redis_target(),
            baton_coord::RedisTarget::Cluster { .. }
        );
        if cluster && baton_coord::hash_tag_of(&self.redis_prefix).is_none() {
            let shared = match self
                .redis_prefix
                .trim_matches(|c| matches!(c, ':' | '{' | '}'))
            {
                "" => "baton",
                named => named,
            };
            return Err(format!(
                "the Redis key prefix {:?} has no hash tag, so on a Redis Cluster Baton's keys \
                 would fall in different slots and every multi-key script would fail: put \
                 the part every key shares in braces (--redis-prefix '{{{}}}:')",
                self.redis_prefix, shared,
            ));
        }
        Ok(())
    }

    /// `node_ttl_ms` as a duration.
    pub fn node_ttl(&self) -> Duration {
        Duration::from_millis(self.node_ttl_ms)
    }

    /// `drain_grace_s` as a duration.
    pub fn drain_grace(&self) -> Duration {
        Duration::from_secs(self.drain_grace_s)
    }

    /// `store_timeout_ms` as a duration.
    pub fn store_timeout(&self) -> Duration {
        Duration::from_millis(self.store_timeout_ms)
    }

    /// How long a runner request's replay record is kept. The first attempt may park for
    /// up to `max_wait_s` before it answers, and a runner resends an exchange whose answer
    /// it lost after at most its longest backoff (`Backoff::RUNNER.max`); the record must
    /// outlive both, or the resend of a `start_leased` exchange finds nothing and the
    /// tasks it started end as runs the runner forgot. `ack_timeout_s` on top, as before.
    pub fn replay_ttl(&self) -> Duration {
        Duration::from_secs(self.timings.ack_timeout_s + u64::from(self.limits.max_wait_s))
            + baton_core::backoff::Backoff::RUNNER.max
    }
}

/// `redis+cluster://[user:password@]host:port,host:port` — a Redis Cluster's nodes in one
/// URL, for settings that hold a single Redis URL; `rediss+cluster://` for TLS. The user
/// is every node's: one URL per node, each with it.
fn cluster_nodes(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), rest),
    };
    Some(
        hosts
            .split(',')
            .filter(|n| !n.is_empty())
            .map(|node| format!("{scheme}://{userinfo}{node}"))
            .collect(),
    )
}

#[cfg(test)]
mod redis_target_tests;
