//! A node's Prometheus metrics (docs/metrics.md lists them all): the process's recorder,
//! the families' names and buckets, what the node's own code records, and the gauges
//! read from Redis and Postgres when `/metrics` is scraped.
//!
//! Counters and histograms are recorded where things happen — the store counts terminal
//! writes and times every Postgres call, the coordination crate times every Redis
//! command, and both count failures where their errors are made — so the families
//! recorded outside this crate take their names from there.

use crate::services::ServiceError;
use crate::state::AppState;
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use baton_core::TaskStatus;
use baton_store::TaskRecord;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) const QUEUE_DEPTH: &str = "baton_queue_depth";
pub(crate) const TASKS: &str = "baton_tasks";
pub(crate) const LIVE_NODES: &str = "baton_live_nodes";
pub(crate) const PARKED_LEASES: &str = "baton_parked_leases";
pub(crate) const EVENT_CATCH_UPS: &str = "baton_event_catch_ups";
pub(crate) const HTTP_OPEN_CONNECTIONS: &str = "baton_http_open_connections";
pub(crate) const TASKS_SUBMITTED: &str = "baton_tasks_submitted_total";
const PIPELINE_JOBS: &str = "baton_pipeline_jobs_total";
pub(crate) const TASKS_LEASED: &str = "baton_tasks_leased_total";
pub(crate) const PICKUP_LATENCY: &str = "baton_pickup_latency_seconds";
pub(crate) const LEASE_WAIT: &str = "baton_lease_wait_seconds";
pub(crate) const RECONCILER_ACTIONS: &str = "baton_reconciler_actions_total";
pub(crate) const ORPHAN_ADOPTIONS: &str = "baton_orphan_adoptions_total";
pub(crate) const REDIS_REBUILDS: &str = "baton_redis_rebuilds_total";
pub(crate) const HTTP_REQUESTS: &str = "baton_http_requests_total";
pub(crate) const HTTP_DURATION: &str = "baton_http_request_duration_seconds";
pub(crate) const SCHEDULE_FIRE_LAG: &str = "baton_schedule_fire_lag_seconds";
pub(crate) const SCHEDULE_TICKS_SKIPPED: &str = "baton_schedule_ticks_skipped_total";
pub(crate) const BUILD_INFO: &str = "baton_build_info";
pub(crate) const PROVISION_DEMAND: &str = "baton_provision_demand";
pub(crate) const PROVISION_RUNNERS: &str = "baton_provision_runners";
pub(crate) const PROVISION_STARTED: &str = "baton_provision_started_total";
pub(crate) const PROVISION_FAILURES: &str = "baton_provision_failures_total";
pub(crate) const PROVISION_CLAIM: &str = "baton_provision_claim_seconds";

/// What the reconciler's actions are counted as: one per outcome of `act`.
pub(crate) const RECONCILER_ACTION_KINDS: [&str; 6] = [
    "requeue",
    "retry",
    "fail",
    "cancel",
    "drop_claim",
    "adopt_claim",
];

/// Latencies from a millisecond up to ten minutes (a task waiting for a free runner).
const PICKUP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];
/// A task's run: a no-op's milliseconds up to a long build's hours.
const RUN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
];
/// A lease request answers at once with work, or parks up to its `wait_s` (at most 50 s).
const LEASE_WAIT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0,
];
/// HTTP requests: mostly milliseconds, long polls up to a minute.
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Redis round trips: a fraction of a millisecond on a healthy LAN, up to the timeout.
const REDIS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Items per group commit: powers of two up to the default most.
const GROUP_COMMIT_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];
/// Postgres statements and transactions: milliseconds, up to the statement timeout.
const POSTGRES_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder, once: later calls (more nodes in one test process)
/// return the same handle, and none panics. If something else installed a global
/// recorder first, the node still serves `/metrics`, with nothing in it.
pub(crate) fn install() -> &'static PrometheusHandle {
    RECORDER.get_or_init(|| {
        let buckets = [
            (PICKUP_LATENCY, PICKUP_BUCKETS),
            (LEASE_WAIT, LEASE_WAIT_BUCKETS),
            (HTTP_DURATION, HTTP_BUCKETS),
            (SCHEDULE_FIRE_LAG, PICKUP_BUCKETS),
            (PROVISION_CLAIM, PICKUP_BUCKETS),
            (baton_store::TASK_RUN_SECONDS, RUN_BUCKETS),
            (baton_coord::REDIS_COMMAND_DURATION, REDIS_BUCKETS),
            (baton_store::POSTGRES_QUERY_DURATION, POSTGRES_BUCKETS),
            (baton_store::GROUP_COMMIT_ITEMS, GROUP_COMMIT_BUCKETS),
        ];
        let builder =
            buckets
                .into_iter()
                .fold(PrometheusBuilder::new(), |builder, (name, values)| {
                    builder
                        .set_buckets_for_metric(Matcher::Full(name.into()), values)
                        .expect("bucket lists are not empty")
                });
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed: /metrics will be empty");
        }
        describe();
        process_collector().describe();
        upkeep(handle.clone());
        handle
    })
}

/// The standard `process_*` series of this process (CPU seconds, resident memory, open
/// and most file descriptors, threads), read from `/proc` at each scrape.
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// The exposition with `process_cpu_seconds_total` typed a counter, as every Prometheus
/// client exports it. The collector records it as a gauge, the one kind of series the
/// `metrics` crate keeps as a float (its counters hold whole numbers); CPU time only
/// grows, so the series is a counter whatever the recorder calls it.
pub(crate) fn cpu_seconds_as_a_counter(text: String) -> String {
    text.replacen(
        "# TYPE process_cpu_seconds_total gauge",
        "# TYPE process_cpu_seconds_total counter",
        1,
    )
}

/// Histogram samples wait in the recorder until a scrape or an upkeep folds them into
/// buckets; without a scraper they would pile up.
fn upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                handle.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no metrics upkeep thread: histograms fold at scrapes only");
    }
}

/// Help lines, and every label-less or fixed-label series at zero, so a dashboard sees
/// 0 rather than no data before the first event.
fn describe() {
    describe_gauge!(TASKS, "Tasks in Postgres, by status (cluster-wide)");
    describe_gauge!(
        LIVE_NODES,
        "Nodes whose liveness key is current (cluster-wide)"
    );
    describe_gauge!(PARKED_LEASES, "Lease requests parked on this node now");
    describe_gauge!(
        EVENT_CATCH_UPS,
        "Event subscriptions reading the history on this node now"
    );
    describe_gauge!(
        HTTP_OPEN_CONNECTIONS,
        "HTTP connections open on this node now"
    );
    describe_counter!(TASKS_SUBMITTED, "Tasks accepted by this node");
    describe_counter!(
        PIPELINE_JOBS,
        "Pipeline jobs (and tasks with depends_on) this node found released (`queued`) or skipped after a need's end it wrote"
    );
    describe_counter!(TASKS_LEASED, "Tasks this node handed to a runner");
    describe_counter!(
        baton_store::TASKS_COMPLETED,
        "Tasks this node moved to a terminal status, by outcome and queue"
    );
    describe_histogram!(
        baton_store::TASK_RUN_SECONDS,
        "How long the runs that ended tasks took, start to end, by outcome and queue"
    );
    describe_histogram!(PICKUP_LATENCY, "From queued to leased, recorded at lease");
    describe_histogram!(
        SCHEDULE_FIRE_LAG,
        "From a schedule's tick to the commit of its task, on the node that fired it"
    );
    describe_counter!(
        SCHEDULE_TICKS_SKIPPED,
        "Schedule ticks that made no task, by reason (overlap, missed, invalid)"
    );
    describe_histogram!(
        LEASE_WAIT,
        "How long a lease request took to answer, parking included"
    );
    describe_counter!(
        RECONCILER_ACTIONS,
        "What this node's reconciler did, by action"
    );
    describe_counter!(ORPHAN_ADOPTIONS, "Claims of dead nodes this node took over");
    describe_gauge!(
        PROVISION_DEMAND,
        "Waiting tasks a provisioner serves that no registered runner could take now (cluster-wide, as this node last measured it)"
    );
    describe_gauge!(
        PROVISION_RUNNERS,
        "Runners on demand by provisioner and state: starting, running, retrying (cluster-wide)"
    );
    describe_counter!(PROVISION_STARTED, "Runners this node started on demand");
    describe_counter!(
        PROVISION_FAILURES,
        "Runners on demand that failed their assignment, or a backend's start or release, by reason"
    );
    describe_histogram!(
        PROVISION_CLAIM,
        "From a runner's start on demand to its first task, seen by the node that started it"
    );
    describe_counter!(
        REDIS_REBUILDS,
        "Times this node rebuilt Redis from Postgres"
    );
    describe_counter!(baton_coord::REDIS_ERRORS, "Redis failures, by kind");
    describe_histogram!(
        baton_coord::REDIS_COMMAND_DURATION,
        "Redis round trips, by op"
    );
    describe_counter!(baton_store::POSTGRES_ERRORS, "Postgres failures, by kind");
    describe_histogram!(
        baton_store::POSTGRES_QUERY_DURATION,
        "Postgres statements and transactions, by op"
    );
    describe_histogram!(
        baton_store::GROUP_COMMIT_ITEMS,
        "Items (inserts, starts, log chunks, run ends, reads) written in one group commit"
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method, route and status"
    );
    describe_histogram!(
        HTTP_DURATION,
        "Time to answer an HTTP request, by method and route"
    );

    for name in [
        TASKS_SUBMITTED,
        TASKS_LEASED,
        ORPHAN_ADOPTIONS,
        REDIS_REBUILDS,
    ] {
        counter!(name).increment(0);
    }
    // Under the default queue, as every completion carries a queue: a series with no
    // queue beside them would read as a queue named "" on a dashboard.
    for status in TaskStatus::TERMINAL {
        counter!(baton_store::TASKS_COMPLETED, "outcome" => status.as_str(), "queue" => "default")
            .increment(0);
    }
    for action in RECONCILER_ACTION_KINDS {
        counter!(RECONCILER_ACTIONS, "action" => action).increment(0);
    }
    for kind in ["unavailable", "internal"] {
        counter!(baton_coord::REDIS_ERRORS, "kind" => kind).increment(0);
        counter!(baton_store::POSTGRES_ERRORS, "kind" => kind).increment(0);
    }
    let _ = histogram!(PICKUP_LATENCY);
    let _ = histogram!(SCHEDULE_FIRE_LAG);
    for reason in ["overlap", "missed", "invalid"] {
        counter!(SCHEDULE_TICKS_SKIPPED, "reason" => reason).increment(0);
    }
    let _ = histogram!(baton_store::GROUP_COMMIT_ITEMS);
    for result in ["tasks", "empty", "error"] {
        let _ = histogram!(LEASE_WAIT, "result" => result);
    }
    describe_gauge!(
        BUILD_INFO,
        "Always 1: the release this node runs, in its `version` label"
    );
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    gauge!(PARKED_LEASES).set(0.0);
    gauge!(EVENT_CATCH_UPS).set(0.0);
    gauge!(HTTP_OPEN_CONNECTIONS).set(0.0);
}

/// Tasks were accepted (not those an idempotency key found).
pub(crate) fn tasks_submitted(n: usize) {
    counter!(TASKS_SUBMITTED).increment(n as u64);
}

/// Jobs released or skipped after an end this node wrote, by what became of them.
pub(crate) fn pipeline_jobs(rows: &[TaskRecord]) {
    for row in rows {
        let outcome = if row.status == baton_core::TaskStatus::Skipped {
            "skipped"
        } else {
            "released"
        };
        counter!(PIPELINE_JOBS, "outcome" => outcome).increment(1);
    }
}

/// A task was leased at `leased_at`: count it, and how long it waited since it was
/// queued (a requeued task keeps its place in line, and its `queued_at`).
pub(crate) fn task_leased(task: &TaskRecord, leased_at: chrono::DateTime<chrono::Utc>) {
    counter!(TASKS_LEASED).increment(1);
    if let Some(queued) = task.queued_at {
        let waited = (leased_at - queued).to_std().unwrap_or_default();
        histogram!(PICKUP_LATENCY).record(waited.as_secs_f64());
    }
}

/// A lease request was answered with `answer` tasks (or an error): how long it took,
/// parking included, by `result` (`tasks`, `empty`, `error`).
pub(crate) fn lease_answered<E>(started: Instant, answer: Result<usize, E>) {
    let result = match answer {
        Ok(tasks) if tasks > 0 => "tasks",
        Ok(_) => "empty",
        Err(_) => "error",
    };
    histogram!(LEASE_WAIT, "result" => result).record(started.elapsed().as_secs_f64());
}

/// The reconciler acted (one of [`RECONCILER_ACTION_KINDS`]).
pub(crate) fn reconciler_action(action: &'static str) {
    counter!(RECONCILER_ACTIONS, "action" => action).increment(1);
}

/// The reconciler ended a run: what the run became names the action.
pub(crate) fn reconciler_ended(status: TaskStatus) {
    reconciler_action(match status {
        TaskStatus::Scheduled => "retry",
        TaskStatus::Cancelled => "cancel",
        _ => "fail",
    });
}

/// A schedule's tick made its task `lag` after the tick.
pub(crate) fn schedule_fired(lag: chrono::Duration) {
    histogram!(SCHEDULE_FIRE_LAG).record(lag.to_std().unwrap_or_default().as_secs_f64());
}

/// A schedule's ticks made no task, for `reason` (`overlap`, `missed`, `invalid`).
pub(crate) fn schedule_ticks_skipped(reason: &'static str, ticks: u64) {
    counter!(SCHEDULE_TICKS_SKIPPED, "reason" => reason).increment(ticks);
}

pub(crate) fn provision_demand(provisioner: &str, uncovered: u64) {
    gauge!(PROVISION_DEMAND, "provisioner" => provisioner.to_string()).set(uncovered as f64);
}

pub(crate) fn provision_started(provisioner: &str, backend: &'static str) {
    counter!(PROVISION_STARTED, "provisioner" => provisioner.to_string(), "backend" => backend)
        .increment(1);
}

pub(crate) fn provision_claimed(provisioner: &str, took: Duration) {
    histogram!(PROVISION_CLAIM, "provisioner" => provisioner.to_string())
        .record(took.as_secs_f64());
}

pub(crate) fn provision_failed(provisioner: &str, backend: &'static str, reason: &'static str) {
    counter!(PROVISION_FAILURES, "provisioner" => provisioner.to_string(), "backend" => backend, "reason" => reason)
        .increment(1);
}

pub(crate) fn orphans_adopted(n: usize) {
    counter!(ORPHAN_ADOPTIONS).increment(n as u64);
}

pub(crate) fn redis_rebuilt() {
    counter!(REDIS_REBUILDS).increment(1);
}

/// The HTTP middleware: every request by method, the route it matched (never the raw
/// path, so the label set stays bounded) and status.
pub(crate) async fn track_http(request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    histogram!(HTTP_DURATION, "method" => method, "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    let status = response.status().as_u16().to_string();
    counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status).increment(1);
    response
}

/// Clients choose the method: anything unusual is `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// How long a scrape may wait for Redis and Postgres before it answers with the last
/// values.
const REFRESH_LIMIT: Duration = Duration::from_secs(2);
/// Scrapes closer together than this (several Prometheus servers, several dashboards)
/// reuse the last counts rather than count the task table again.
const REFRESH_EVERY: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Refreshed {
    at: Option<Instant>,
    /// Each queue's depth as last read. Rendered here rather than kept by the recorder,
    /// which holds a series for every label it ever saw: a queue that is gone (queue names
    /// are the submitters' to choose) leaves no series behind.
    queues: BTreeMap<String, u64>,
}

static REFRESHED: Mutex<Refreshed> = Mutex::new(Refreshed {
    at: None,
    queues: BTreeMap::new(),
});

/// `baton_queue_depth`, one series per queue that has work (and `default`), as last read.
pub(crate) fn render_queue_depths() -> String {
    let refreshed = REFRESHED.lock().expect("metrics refresh lock");
    let mut text = format!(
        "# HELP {QUEUE_DEPTH} Tasks waiting in Redis for a runner, by queue (cluster-wide)\n\
         # TYPE {QUEUE_DEPTH} gauge\n"
    );
    for (queue, depth) in &refreshed.queues {
        // Queue names are `[a-z0-9._-]`: nothing in them needs escaping.
        text.push_str(&format!("{QUEUE_DEPTH}{{queue=\"{queue}\"}} {depth}\n"));
    }
    text
}

/// Brings the scrape-time gauges up to date. The cluster-wide ones (queue depths, tasks
/// by status, live nodes) come from Redis and Postgres, at most every `REFRESH_EVERY`
/// and within `REFRESH_LIMIT`; a failure keeps the last values and never fails the
/// scrape (the error counters tell).
pub(crate) async fn refresh(state: &AppState) {
    gauge!(PARKED_LEASES).set(state.wake.parked() as f64);
    process_collector().collect();
    {
        let mut refreshed = REFRESHED.lock().expect("metrics refresh lock");
        if refreshed.at.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
            return;
        }
        refreshed.at = Some(Instant::now());
    }
    let (redis, postgres) = tokio::join!(
        tokio::time::timeout(REFRESH_LIMIT, refresh_redis(state)),
        tokio::time::timeout(REFRESH_LIMIT, refresh_postgres(state)),
    );
    for (store, outcome) in [("redis", redis), ("postgres", postgres)] {
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(%store, error = %e, "metrics refresh failed"),
            Err(_) => tracing::debug!(%store, "metrics refresh timed out"),
        }
    }
}

async fn refresh_redis(state: &AppState) -> Result<(), ServiceError> {
    let live = state.coord.nodes_live().await?;
    gauge!(LIVE_NODES).set(live.len() as f64);
    let mut depths = state.coord.queue_depths().await?;
    // The default queue is always reported, so the family exists (at 0) on an idle
    // cluster too: an alert on it never sees "no data".
    if !depths
        .iter()
        .any(|(queue, _)| queue == baton_core::validate::DEFAULT_QUEUE)
    {
        depths.push((baton_core::validate::DEFAULT_QUEUE.to_string(), 0));
    }
    let mut refreshed = REFRESHED.lock().expect("metrics refresh lock");
    refreshed.queues =
        with_drained_at_zero(&refreshed.queues, depths, state.config.limits.max_queues);
    Ok(())
}

/// The depths as read, and each queue reported before that has drained, at 0: a queue
/// that emptied reads 0, not "no data" (a graph falls to the floor, an alert on it
/// resolves). At most `most` queues are kept (the node's `max_queues`), those with work
/// first: queue names are the submitters' to choose, and past the cap a drained queue is
/// no longer listed.
fn with_drained_at_zero(
    before: &BTreeMap<String, u64>,
    read: Vec<(String, u64)>,
    most: usize,
) -> BTreeMap<String, u64> {
    let mut depths: BTreeMap<String, u64> = read.into_iter().collect();
    for queue in before.keys() {
        if depths.len() >= most.max(1) {
            break;
        }
        depths.entry(queue.clone()).or_insert(0);
    }
    depths
}

async fn refresh_postgres(state: &AppState) -> Result<(), ServiceError> {
    let counts = state.store.tasks_count_by_status(REFRESH_LIMIT).await?;
    for status in TaskStatus::UNFINISHED {
        let n = counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n);
        gauge!(TASKS, "status" => status.as_str()).set(n as f64);
    }
    if !state.config.provisioners.is_empty() {
        let open = state.store.assignments_open().await?;
        for provisioner in &state.config.provisioners {
            for s in ["starting", "running", "retrying"] {
                let n = open
                    .iter()
                    .filter(|a| a.provisioner == provisioner.name && a.state == s)
                    .count();
                gauge!(PROVISION_RUNNERS, "provisioner" => provisioner.name.clone(), "state" => s)
                    .set(n as f64);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_queue_reads_zero_and_the_list_stays_bounded() {
        let before: BTreeMap<String, u64> =
            [("builds".to_string(), 4), ("default".to_string(), 0)].into();
        let now = with_drained_at_zero(&before, vec![("deploys".into(), 2)], 10);
        assert_eq!(
            now,
            [
                ("builds".to_string(), 0),
                ("default".to_string(), 0),
                ("deploys".to_string(), 2)
            ]
            .into()
        );
        let capped = with_drained_at_zero(&now, vec![("new".into(), 1)], 2);
        assert_eq!(capped.len(), 2, "{capped:?}");
        assert_eq!(
            capped.get("new"),
            Some(&1),
            "a queue with work is always listed"
        );
    }

    #[test]
    fn installing_twice_keeps_one_recorder_with_every_fixed_series() {
        let first: *const PrometheusHandle = install();
        assert!(std::ptr::eq(first, install()));
        tasks_submitted(2);
        reconciler_ended(TaskStatus::Scheduled);
        let text = install().render();
        for line in [
            "baton_tasks_submitted_total 2",
            "baton_tasks_leased_total 0",
            "baton_reconciler_actions_total{action=\"retry\"} 1",
            "baton_tasks_completed_total{outcome=\"expired\",queue=\"default\"} 0",
            "baton_redis_errors_total{kind=\"unavailable\"} 0",
            "baton_pickup_latency_seconds_bucket{le=\"0.001\"} 0",
            "# TYPE baton_lease_wait_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn unusual_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let brew = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&brew), "other");
    }
}
