//! A status change as the event stream tells it: which task, where it is now, and who
//! may see it (its submitter). Every write that moves a task says which ones it moved —
//! not which it was asked to move: a repeated report that changed nothing is no event.

use crate::tasks::TaskRecord;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use uuid::Uuid;

/// One status change, as the event stream tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The task.
    pub task: Uuid,
    /// Its queue.
    pub queue: String,
    /// Where it is now.
    pub status: TaskStatus,
    /// Its attempt.
    pub attempt: i32,
    /// The runner holding it, if any.
    pub runner_id: Option<RunnerId>,
    /// The token that submitted it: a `submit`-only subscriber sees its own tasks only.
    pub created_by: String,
    /// The schedule that made it, if any.
    pub schedule_id: Option<Uuid>,
    /// The pipeline and job it is, if any (docs/pipelines.md).
    pub pipeline_id: Option<Uuid>,
    /// Its job's name in the pipeline.
    pub job: Option<String>,
    /// Whether some task needs it: its end may have released or skipped others, which
    /// the writer's node then queues and tells (`released_by`).
    pub has_dependents: bool,
}

impl Transition {
    /// The change that left `row` as it is.
    pub fn of(row: &TaskRecord) -> Transition {
        Transition {
            task: row.id,
            queue: row.queue.clone(),
            status: row.status,
            attempt: row.attempt,
            runner_id: row.runner_id,
            created_by: row.created_by.clone(),
            schedule_id: row.schedule_id,
            pipeline_id: row.pipeline_id,
            job: row.job.clone(),
            has_dependents: row.has_dependents,
        }
    }

    /// The changes that left each of `rows` as it is.
    pub fn all<'a>(rows: impl IntoIterator<Item = &'a TaskRecord>) -> Vec<Transition> {
        rows.into_iter().map(Transition::of).collect()
    }
}
