//! After a pipeline job's end commits (docs/pipelines.md, design.md §4.16): the jobs that
//! end released or skipped — in its own transaction, by the store's trigger — are told as
//! events, and those released are queued in Redis, as a submit's are (§4.1: Postgres has
//! committed, then Redis). The node that wrote the end does it; one that dies first
//! leaves committed `queued` rows no queue holds, which the repair pass queues.

use crate::events::EventLog;
use crate::queueing::queue_entry;
use baton_coord::{Coord, Enqueue};
use baton_core::TaskStatus;
use baton_store::{Store, TaskRecord, Transition};
use uuid::Uuid;

/// The ended tasks among `transitions` that some task needs.
pub(crate) fn ended_with_dependents(transitions: &[Transition]) -> Vec<Uuid> {
    transitions
        .iter()
        .filter(|t| t.has_dependents && t.status.is_terminal())
        .map(|t| t.task)
        .collect()
}

/// The same, of rows a statement returned.
pub(crate) fn rows_ended_with_dependents<'a>(
    rows: impl IntoIterator<Item = &'a TaskRecord>,
) -> Vec<Uuid> {
    rows.into_iter()
        .filter(|t| t.has_dependents && t.status.is_terminal())
        .map(|t| t.id)
        .collect()
}

/// Queues and tells what the ends of `ended` released or skipped — a skip's own
/// dependents included: the store's cascade marks them with the same `released_by`. Best
/// effort: a
/// failure is logged, and the repair pass queues what was released.
pub(crate) async fn follow(store: &Store, coord: &Coord, events: &EventLog, ended: &[Uuid]) {
    if ended.is_empty() {
        return;
    }
    let released = match store.tasks_released_by(ended).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "released jobs not read; the repair pass queues them");
            return;
        }
    };
    if released.is_empty() {
        return;
    }
    // A job released and already gone further (a repair pass queued it, a runner ran it)
    // is told as it is now; only one still queued is added, and only if no claim holds it.
    let queued: Vec<Enqueue> = released
        .iter()
        .filter(|t| t.status == TaskStatus::Queued)
        .map(queue_entry)
        .collect();
    events.tasks(&released.iter().collect::<Vec<_>>()).await;
    if let Err(e) = coord.enqueue_unclaimed(&queued).await {
        tracing::warn!(error = %e, jobs = queued.len(), "released jobs not queued in redis; the repair pass queues them");
    }
    crate::metrics::pipeline_jobs(&released);
    // A skip is an end: its webhook row was written with it, for any node to deliver.
    if released
        .iter()
        .any(|t| t.status.is_terminal() && t.notify_url.is_some())
        && let Err(e) = coord.publish(&baton_coord::Wake::Outbox).await
    {
        tracing::debug!(error = %e, "outbox wake-up lost; the outbox's own poll delivers");
    }
}
