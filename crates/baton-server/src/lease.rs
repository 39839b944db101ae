//! Leasing: hand queued tasks to a runner, or park its request until work arrives on any
//! node.
//!
//! One lease attempt follows design.md §4.3: the Redis script pops and claims atomically,
//! then Postgres records `queued -> leased` under the new lease id, then the runner gets
//! the task. If the compare-and-set finds the task no longer queued (cancelled, or handed
//! out by a repair race), this node drops its own claim and hands nothing out for that id.
//! If Postgres fails, the task goes back to its queue and the claim is dropped in one
//! script. The attempt runs in its own task, so it completes even if the runner hangs up.

use crate::api::views::leased_view;
use crate::auth::Runner;
use crate::error::ApiError;
use crate::state::AppState;
use baton_client::LeasedTask;
use baton_coord::Wake;
use baton_core::labels::runner_can_take;
use baton_core::queue::parse_queue_key;
use chrono::Utc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

/// Leases up to `max` tasks for `runner`; with nothing to hand out, parks up to `wait`
/// for a wake-up that concerns this runner, then tries again.
pub async fn lease(
    state: &AppState,
    runner: &Runner,
    max: u32,
    wait: Duration,
) -> Result<Vec<LeasedTask>, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribe before the first look: a task queued between the look and the park
    // leaves its wake-up in this receiver.
    let mut wakes = state.wake.subscribe();
    loop {
        let attempt = tokio::spawn(lease_once(state.clone(), runner.clone(), max));
        let tasks = attempt
            .await
            .map_err(|e| ApiError::unavailable(format!("lease attempt aborted: {e}")))??;
        if !tasks.is_empty() || wait.is_zero() {
            return Ok(tasks);
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                _ = state.shutdown.cancelled() => return Ok(Vec::new()),
                wake = wakes.recv() => match wake {
                    Ok(Wake::Queue(key)) if !concerns(runner, &key) => continue,
                    Ok(_) | Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return Ok(Vec::new()),
                },
            }
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
) -> Result<Vec<LeasedTask>, ApiError> {
    let lease_ids: Vec<Uuid> = (0..max).map(|_| Uuid::new_v4()).collect();
    let now = Utc::now();
    let popped = state
        .coord
        .lease_pop(
            &state.node.id,
            &runner.labels,
            &runner.queues,
            &lease_ids,
            now.timestamp_millis(),
        )
        .await?;
    let mut leased = Vec::with_capacity(popped.len());
    let mut db_error = None;
    for p in popped {
        match state
            .store
            .task_lease(p.task_id, p.lease_id, runner.id, now)
            .await
        {
            Ok(Some(task)) => {
                tracing::info!(task.id = %task.id, runner.id = %runner.id, lease.id = %p.lease_id, "task leased");
                leased.push(leased_view(task, p.lease_id));
            }
            Ok(None) => {
                // No longer queued in Postgres: not ours to hand out.
                if let Err(e) = state.coord.claim_release(p.task_id, p.lease_id).await {
                    tracing::warn!(error = %e, task.id = %p.task_id, "could not drop a refused claim; repair will");
                }
            }
            Err(e) => {
                if let Err(re) = state.coord.claim_requeue(&state.node.id, &p).await {
                    tracing::warn!(error = %re, task.id = %p.task_id, "could not put a task back; the dispatch-grace check will");
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
