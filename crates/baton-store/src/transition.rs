//! A status change as the event stream tells it: which task, where it is now, and who
//! may see it (its submitter). Every write that moves a task says which ones it moved —
//! not which it was asked to move: a repeated report that changed nothing is no event.

use crate::tasks::TaskRecord;
use baton_core::TaskStatus;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub task: Uuid,
    pub queue: String,
    pub status: TaskStatus,
    pub attempt: i32,
    pub runner_id: Option<Uuid>,
    /// The token that submitted it: a `submit`-only subscriber sees its own tasks only.
    pub created_by: String,
    pub schedule_id: Option<Uuid>,
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
        }
    }

    pub fn all<'a>(rows: impl IntoIterator<Item = &'a TaskRecord>) -> Vec<Transition> {
        rows.into_iter().map(Transition::of).collect()
    }
}
