//! From a task row to its place in Redis.

use baton_coord::Enqueue;
use baton_core::LabelSet;
use baton_core::flow::Group;
use baton_store::TaskRecord;

/// The queue entry of a task: its queue, labels and priority, aged from when it was
/// (first) queued so a requeued task keeps its place in line.
pub(crate) fn queue_entry(task: &TaskRecord) -> Enqueue {
    Enqueue {
        task_id: task.id,
        queue: task.queue.clone(),
        labels: LabelSet::new(task.labels.clone()).expect("labels were validated on insert"),
        priority: task.priority,
        enqueued_at_ms: task.queued_at.unwrap_or(task.created_at).timestamp_millis(),
        group: group_of(task),
        owner: task.created_by.clone(),
    }
}

/// The task's concurrency group, as validated on insert.
pub(crate) fn group_of(task: &TaskRecord) -> Option<Group> {
    Some(Group {
        key: task.concurrency_key.clone()?,
        limit: task.concurrency_limit.unwrap_or(1),
    })
}
