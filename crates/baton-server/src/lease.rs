//! Leasing: hand queued tasks to a runner, or park its request until work arrives on any
//! node.
//!
//! One lease attempt follows design.md §4.3: the Redis script pops and claims atomically
//! (and records what it leased for replay), then Postgres records `queued -> leased` under
//! the new lease id, then the runner gets the task. If the compare-and-set finds the task
//! no longer queued (cancelled, expired), this node drops its own claim and hands nothing
//! out for that id. If Postgres fails, the task goes back to its queue and the claim is
//! dropped in one script. The attempt runs in its own task, so it completes even if the
//! runner hangs up.

use crate::api::views::leased_view;
use crate::auth::Runner;
use crate::error::ApiError;
use crate::state::AppState;
use baton_client::trace_context;
use baton_client::{LeaseRequest, LeasedTask};
use baton_coord::{LeaseCaller, Replay, ReplayKey, Wake};
use baton_core::TaskStatus;
use baton_core::labels::runner_can_take;
use baton_core::queue::parse_queue_key;
use chrono::Utc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

/// How long a replay waits for the first attempt's Postgres write.
const REPLAY_SETTLE: Duration = Duration::from_secs(5);

/// Leases up to `req.max` tasks for `runner`; with nothing to hand out, parks up to
/// `wait` for a wake-up that concerns this runner, then tries again. A retried request
/// (same `request_id`) gets what its first attempt leased.
pub async fn lease(
    state: &AppState,
    runner: &Runner,
    req: &LeaseRequest,
    wait: Duration,
) -> Result<Vec<LeasedTask>, ApiError> {
    let ttl_ms = state.config.timings.ack_timeout_s * 1000;
    let give_up = tokio::time::Instant::now() + wait + Duration::from_secs(10);
    let caller = LeaseCaller {
        runner: runner.id,
        boot_id: req.boot_id,
        now_ms: Utc::now().timestamp_millis(),
    };
    let replay = loop {
        match state
            .coord
            .replay_begin(caller, req.request_id, ttl_ms)
            .await?
        {
            Replay::Fresh(key) => break key,
            Replay::Leased(pairs) => return replayed(state, runner, &pairs).await,
            Replay::InProgress if tokio::time::Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Replay::InProgress => return Ok(Vec::new()),
        }
    };
    let leased = park_and_lease(state, runner, req, &replay, wait).await;
    if !matches!(&leased, Ok(tasks) if !tasks.is_empty()) {
        let _ = state.coord.replay_forget(&replay).await;
    }
    leased
}

/// What an earlier attempt of the same request leased, as long as it is still leased
/// under the same lease (not yet started, not taken back).
async fn replayed(
    state: &AppState,
    runner: &Runner,
    pairs: &[(Uuid, Uuid)],
) -> Result<Vec<LeasedTask>, ApiError> {
    let ids: Vec<Uuid> = pairs.iter().map(|(task, _)| *task).collect();
    // The script records the result before the Postgres write: while a listed task is
    // still `queued` there, the first attempt is mid-way; wait for it (design.md §4.7).
    let settle_by = tokio::time::Instant::now() + REPLAY_SETTLE;
    let tasks = loop {
        let tasks = state.store.tasks_by_ids(&ids).await?;
        let mid_way = tasks.iter().any(|t| t.status == TaskStatus::Queued);
        if !mid_way || tokio::time::Instant::now() >= settle_by {
            break tasks;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    Ok(pairs
        .iter()
        .filter_map(|(id, lease)| {
            let task = tasks.iter().find(|t| t.id == *id)?;
            (task.status == TaskStatus::Leased
                && task.lease_id == Some(*lease)
                && task.runner_id == Some(runner.id))
            .then(|| leased_view(task.clone(), *lease))
        })
        .collect())
}

async fn park_and_lease(
    state: &AppState,
    runner: &Runner,
    req: &LeaseRequest,
    replay: &ReplayKey,
    wait: Duration,
) -> Result<Vec<LeasedTask>, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribe before the first look: a task queued between the look and the park
    // leaves its wake-up in this receiver.
    let mut parked = state.wake.park();
    let wakes = &mut parked.wakes;
    if state.draining.is_cancelled() {
        // Nothing new is claimed by a node about to leave. A 503: a load balancer sends
        // the request to another node (it is idempotent by its request id), a runner
        // talking to this node directly backs off and asks again.
        return Err(ApiError::unavailable("node is draining; ask another node"));
    }
    loop {
        if runner.paused {
            // A paused runner leases nothing; it parks, so it does not spin, and is woken
            // when it is resumed.
            return park_paused(state, runner, wakes, deadline).await;
        }
        let attempt = tokio::spawn(lease_once(
            state.clone(),
            runner.clone(),
            req.max,
            req.boot_id,
            replay.clone(),
        ));
        let tasks = attempt
            .await
            .map_err(|e| ApiError::unavailable(format!("lease attempt aborted: {e}")))??;
        if !tasks.is_empty() || wait.is_zero() {
            return Ok(tasks);
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                _ = state.draining.cancelled() => return Ok(Vec::new()),
                wake = wakes.recv() => match wake {
                    Ok(Wake::Queue(key)) if concerns(runner, &key) => break,
                    // A cancel for one of this runner's tasks: answer now, with the news.
                    Ok(Wake::Runner(id)) if id == runner.id => return Ok(Vec::new()),
                    Ok(Wake::All) | Err(RecvError::Lagged(_)) => break,
                    Ok(_) => continue,
                    Err(RecvError::Closed) => return Ok(Vec::new()),
                },
            }
        }
    }
}

async fn park_paused(
    state: &AppState,
    runner: &Runner,
    wakes: &mut tokio::sync::broadcast::Receiver<Wake>,
    deadline: tokio::time::Instant,
) -> Result<Vec<LeasedTask>, ApiError> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            _ = state.draining.cancelled() => return Ok(Vec::new()),
            wake = wakes.recv() => match wake {
                Ok(Wake::Runner(id)) if id == runner.id => return Ok(Vec::new()),
                Err(RecvError::Closed) => return Ok(Vec::new()),
                _ => continue,
            },
        }
    }
}

/// Whether work queued under `key` is something this runner could take.
fn concerns(runner: &Runner, key: &str) -> bool {
    match parse_queue_key(key) {
        Some((queue, labels)) => runner_can_take(&runner.labels, &runner.queues, &queue, &labels),
        None => true,
    }
}

async fn lease_once(
    state: AppState,
    runner: Runner,
    max: u32,
    boot_id: Uuid,
    replay: ReplayKey,
) -> Result<Vec<LeasedTask>, ApiError> {
    let node = state.identity.current();
    if !state.identity.is_live(Utc::now().timestamp_millis()) {
        // Our liveness lapsed: claims taken now could be adopted from under us.
        return Err(ApiError::unavailable("this node is rejoining the cluster"));
    }
    let lease_ids: Vec<Uuid> = (0..max).map(|_| Uuid::new_v4()).collect();
    let now = Utc::now();
    let popped = state
        .coord
        .lease_pop(
            &node.id,
            &runner.labels,
            &runner.queues,
            &lease_ids,
            &replay,
            now.timestamp_millis(),
        )
        .await?;
    if !popped.is_empty() && state.config.fault.as_deref() == Some("after-pop") {
        tracing::error!(node.id = %node.id, "fault injection: aborting between the Redis pop and the Postgres write");
        std::process::abort();
    }
    let mut leased = Vec::with_capacity(popped.len());
    let mut db_error = None;
    for p in popped {
        match state
            .store
            .task_lease(p.task_id, p.lease_id, runner.id, boot_id, now)
            .await
        {
            Ok(Some(task)) => {
                crate::metrics::task_leased(&task);
                // The lease joins the task's trace; the runner's spans hang under it.
                let span = tracing::info_span!("task.lease", task.id = %task.id, runner.id = %runner.id, lease.id = %p.lease_id, node.id = %node.id);
                trace_context::adopt_parent(&span, task.traceparent.as_deref());
                let _entered = span.enter();
                tracing::info!(task.id = %task.id, runner.id = %runner.id, lease.id = %p.lease_id, "task leased");
                let mut view = leased_view(task, p.lease_id);
                if let Some(tp) = trace_context::traceparent_of(&span) {
                    view.traceparent = Some(tp);
                }
                leased.push(view);
            }
            Ok(None) => {
                // No longer queued in Postgres: not ours to hand out.
                if let Err(e) = state.coord.claim_release(p.task_id, p.lease_id).await {
                    tracing::warn!(error = %e, task.id = %p.task_id, "could not drop a refused claim; repair will");
                }
            }
            Err(e) => {
                if let Err(re) = state.coord.claim_requeue(&node.id, &p).await {
                    tracing::warn!(error = %re, task.id = %p.task_id, "could not put a task back; the reconciler will");
                }
                db_error = Some(e);
            }
        }
    }
    match db_error {
        Some(e) if leased.is_empty() => Err(e.into()),
        _ => Ok(leased),
    }
}
