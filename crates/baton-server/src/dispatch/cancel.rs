//! Cancelling a task, from the API or a schedule whose overlap policy cancels the
//! previous run. Postgres first (one compare-and-set under the row lock: a cancel racing
//! a lease or a report ends in exactly one of them), then Redis follows: the queue or
//! delayed entry goes, a lease's claim goes (its runner's `start` is refused), and a
//! running task's runner is woken if it is parked.

use super::DispatchError;
use super::Dispatcher;
use crate::queueing::queue_entry;
use baton_coord::Wake;
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_store::Cancelled;
use uuid::Uuid;

/// Cancels `id` (`owner`: only if that token submitted it).
pub(crate) async fn cancel(
    dispatcher: &Dispatcher,
    id: Uuid,
    owner: Option<&str>,
) -> Result<Cancelled, DispatchError> {
    let lease = lease_in_redis(dispatcher, id).await;
    let cancelled = dispatcher
        .store
        .task_cancel(id, owner, lease, dispatcher.clock.now())
        .await?;
    follow_up(dispatcher, &cancelled, lease).await;
    Ok(cancelled)
}

/// The (runner, lease) of a lease of `id` not started yet, which is in its claim only
/// (best effort: without Redis, the runner's start is refused all the same, by the row).
pub(crate) async fn lease_in_redis(
    dispatcher: &Dispatcher,
    id: Uuid,
) -> Option<(RunnerId, LeaseId)> {
    match dispatcher.coord.claim_get(id).await {
        Ok(claim) => claim.and_then(|c| Some((c.runner?, c.lease_id))),
        Err(_) => None,
    }
}

/// After a cancel committed: its events, then Redis follows — what Redis still says of
/// the task goes, a running task's runner is woken, a webhook is due. A node that dies
/// before this leaves it to the repair pass and the runner's heartbeat.
pub(crate) async fn follow_up(
    dispatcher: &Dispatcher,
    cancelled: &Cancelled,
    lease: Option<(RunnerId, LeaseId)>,
) {
    let task = &cancelled.task;
    let id = task.id;
    if task.status != cancelled.was {
        // Before the runner hears of it: its report of the end comes after this news.
        dispatcher.events.tasks(&[task]).await;
        let ended = super::releases::rows_ended_with_dependents([task]);
        super::releases::follow(
            &dispatcher.store,
            &dispatcher.coord,
            &dispatcher.events,
            &ended,
        )
        .await;
    }
    let redis = match cancelled.was {
        TaskStatus::Queued => {
            // Queued, or leased in Redis only: the entry goes, and a lease's claim with
            // it (its runner's start is refused).
            let place = (task.id, queue_entry(task).key_rel());
            match (dispatcher.coord.queue_remove(&[place]).await, lease) {
                (Ok(()), Some((_, lease))) => dispatcher
                    .coord
                    .claim_release(task.id, lease)
                    .await
                    .map(|_| ()),
                (result, _) => result,
            }
        }
        TaskStatus::Scheduled => dispatcher.coord.delayed_remove(&[task.id]).await,
        TaskStatus::Leased => match task.lease_id {
            Some(lease) => dispatcher
                .coord
                .claim_release(task.id, lease)
                .await
                .map(|_| ()),
            None => Ok(()),
        },
        TaskStatus::Running => match task.runner_id {
            Some(runner) => dispatcher.coord.publish(&Wake::Runner(runner)).await,
            None => Ok(()),
        },
        _ => Ok(()),
    };
    if let Err(e) = redis {
        tracing::warn!(error = %e, task.id = %id, "cancel recorded; redis tidy-up left to repair and heartbeats");
    }
    if task.status.is_terminal() && task.notify_url.is_some() {
        let _ = dispatcher.coord.publish(&Wake::Outbox).await;
    }
}
