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

/// Inserts `tasks` with the tasks they wait for, `edges` `(task, needs)`
/// (docs/pipelines.md), in one transaction of their own — not the group commit's, which
/// writes no edges — then tells and queues what was created: a task whose needs had all
/// ended is released (or skipped) at once, the others wait.
pub(crate) async fn submit_with_needs(
    dispatcher: &Dispatcher,
    tasks: Vec<NewTask>,
    edges: &[(Uuid, Uuid)],
) -> Result<Vec<(TaskRecord, bool)>, DispatchError> {
    super::queue_caps::check(dispatcher, &tasks).await?;
    let rows = dispatcher
        .store
        .tasks_insert_with_needs(&tasks, edges, dispatcher.clock.now())
        .await?;
    let created: Vec<&TaskRecord> = rows.iter().filter(|(_, c)| *c).map(|(t, _)| t).collect();
    tell_and_enqueue(dispatcher, &created).await;
    Ok(rows)
}

/// After a commit that wrote `created` outside the group commit (whose observer tells
/// its own): their events, then the Redis adds of those queued or scheduled.
pub(crate) async fn tell_and_enqueue(dispatcher: &Dispatcher, created: &[&TaskRecord]) {
    dispatcher.events.tasks(created).await;
    let (runnable, held): (Vec<&TaskRecord>, Vec<&TaskRecord>) = created
        .iter()
        .partition(|t| matches!(t.status, TaskStatus::Queued | TaskStatus::Scheduled));
    // Waiting, or skipped at once: accepted all the same (`enqueue_created` counts the rest).
    if !held.is_empty() {
        crate::metrics::tasks_submitted(held.len());
    }
    enqueue_created(dispatcher, &runnable).await;
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
