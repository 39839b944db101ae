//! Ending a run, from a runner's report or a reconciler's verdict, in the order design.md
//! §4 requires: Postgres first (the terminal compare-and-set with its outbox rows, or
//! `scheduled` for a retry), then Redis (drop the claim; a retry goes to the delayed set).
//!
//! The finalize lock (`SET NX PX` with an owner and a TTL) keeps two finalizers — a late
//! report and the reconciler, say — from doing the work twice. Correctness never depends
//! on it: the Postgres compare-and-set with the lease as fencing token decides.

use crate::api::views::webhook_body;
use crate::state::AppState;
use baton_coord::Lock;
use baton_core::TaskStatus;
use baton_store::{Fence, FinishPolicy, RunEnd, StoreError, TaskRecord};
use chrono::Utc;
use std::time::Duration;
use uuid::Uuid;

/// Takes the finalize lock of `task`. `patience` is how long to wait for another holder.
pub async fn lock(state: &AppState, task: Uuid, patience: Duration) -> Option<Lock> {
    let owner = format!("{}:{}", state.node_id(), Uuid::new_v4());
    let ttl = Duration::from_millis(state.config.timings.finalize_lock_ms);
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match state
            .coord
            .lock_acquire(&format!("fin:{task}"), &owner, ttl)
            .await
        {
            Ok(Some(lock)) => return Some(lock),
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %e, task.id = %task, "finalize lock unavailable; proceeding on the compare-and-set alone");
                return None;
            }
        }
    }
}

pub async fn unlock(state: &AppState, lock: Option<Lock>) {
    if let Some(lock) = lock {
        let _ = state.coord.lock_release(&lock).await;
    }
}

/// Ends the run of `task` under `fence` and tidies Redis after the commit.
pub async fn finish_run(
    state: &AppState,
    task: Uuid,
    fence: Fence,
    end: &RunEnd,
) -> Result<TaskRecord, StoreError> {
    let policy = FinishPolicy {
        backoff: state.config.timings.retry_backoff(),
        jitter_unit: rand::random(),
        webhook_body,
    };
    let ended = state
        .store
        .task_finish_run(task, fence, end, &policy, Utc::now())
        .await?;
    after_commit(state, &ended, fence.lease_id).await;
    Ok(ended)
}

/// Redis follows Postgres: the claim goes (compare-and-delete on the lease), a retry
/// waits in the delayed set. If this fails or the node dies first, the repair pass drops
/// claims of terminal tasks and promotes overdue scheduled ones.
async fn after_commit(state: &AppState, task: &TaskRecord, lease_id: Uuid) {
    // Log followers stop once the run is over.
    let _ = state.coord.publish(&baton_coord::Wake::Log(task.id)).await;
    if let Err(e) = state.coord.claim_release(task.id, lease_id).await {
        tracing::warn!(error = %e, task.id = %task.id, "claim of an ended run not dropped; repair will");
    }
    if task.status == TaskStatus::Scheduled
        && let Some(run_at) = task.run_at
        && let Err(e) = state
            .coord
            .delayed_add(&[(task.id, run_at.timestamp_millis())])
            .await
    {
        tracing::warn!(error = %e, task.id = %task.id, "retry not in the delayed set; repair will promote it");
    }
}
