//! Submitting (design.md §4.1): the Postgres insert commits first — in the node's group
//! commit, with whatever else is being written — then the Redis add and the wake-up. A
//! crash or Redis error in between leaves a committed `queued` row that no queue holds,
//! which the repair pass re-adds; the client's 201 is never a lie.

use super::DispatchError;
use super::Dispatcher;
use crate::queueing::queue_entry;
use baton_coord::Enqueue;
use baton_core::TaskStatus;
use baton_store::{NewTask, TaskRecord, Work};
use uuid::Uuid;

/// Inserts `tasks`, all or none (a repeated idempotency key gives its existing task,
/// `false`), then queues those created; refused first if their queues would pass the
/// caps (`queue_caps`).
pub(crate) async fn submit(
    dispatcher: &Dispatcher,
    tasks: Vec<NewTask>,
) -> Result<Vec<(TaskRecord, bool)>, DispatchError> {
    super::queue_caps::check(dispatcher, &tasks).await?;
    let done = dispatcher
        .commit
        .write(Work {
            inserts: tasks,
            ..Work::default()
        })
        .await?;
    let rows = done.inserts.into_iter().collect::<Result<Vec<_>, _>>()?;
    let created: Vec<&TaskRecord> = rows.iter().filter(|(_, c)| *c).map(|(t, _)| t).collect();
    enqueue_created(dispatcher, &created).await;
    Ok(rows)
}

/// After the commit: queue what was created, or put it in the delayed set when it waits
/// for its `run_at`. A Redis failure here is logged, not returned — the task is accepted,
/// and the repair pass queues (or promotes) it.
pub(crate) async fn enqueue_created(dispatcher: &Dispatcher, created: &[&TaskRecord]) {
    if created.is_empty() {
        return;
    }
    crate::metrics::tasks_submitted(created.len());
    for task in created {
        baton_core::trend_tally::submitted(&task.queue, 1);
    }
    let (queued, scheduled): (Vec<&TaskRecord>, Vec<&TaskRecord>) =
        created.iter().partition(|t| t.status == TaskStatus::Queued);
    let entries: Vec<Enqueue> = queued.iter().map(|t| queue_entry(t)).collect();
    if let Err(e) = dispatcher.coord.enqueue(&entries).await {
        tracing::warn!(error = %e, tasks = entries.len(), "accepted tasks not yet queued in redis; repair will queue them");
    }
    let delayed: Vec<(Uuid, i64)> = scheduled
        .iter()
        .filter_map(|t| Some((t.id, t.run_at?.timestamp_millis())))
        .collect();
    if let Err(e) = dispatcher.coord.delayed_add(&delayed).await {
        tracing::warn!(error = %e, tasks = delayed.len(), "scheduled tasks not in the delayed set; repair will promote them");
    }
}
