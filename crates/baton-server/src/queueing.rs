//! From a task row to its place in Redis.

use baton_coord::Enqueue;
use baton_core::LabelSet;
use baton_core::flow::Group;
use baton_store::{QueuedRow, TaskRecord};

/// The queue entry of a task: its queue, labels and priority, aged from when it was
/// (first) queued so a requeued task keeps its place in line.
pub(crate) fn queue_entry(task: &TaskRecord) -> Enqueue {
    queue_entry_of(QueuedRow::from(task))
}

/// The queue entry of a queued row as the repair pass reads it (the same fields).
pub(crate) fn queue_entry_of(row: QueuedRow) -> Enqueue {
    Enqueue {
        task_id: row.id,
        labels: LabelSet::new(row.labels).expect("labels were validated on insert"),
        priority: row.priority,
        enqueued_at_ms: row.queued_at.unwrap_or(row.created_at).timestamp_millis(),
        group: row.concurrency_key.map(|key| Group {
            key,
            limit: row.concurrency_limit.unwrap_or(1),
        }),
        queue: row.queue,
        owner: row.created_by,
    }
}
