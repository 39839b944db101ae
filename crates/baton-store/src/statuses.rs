//! Status lists in SQL text, written from `TaskStatus` so that no statement spells out
//! its own list of terminal or dispatched statuses.
//!
//! They are written into the text, not bound: a partial index on `status`
//! (`tasks_ended_at`, `tasks_runner_active`, `tasks_unfinished`) serves a query only when
//! the planner can see that the query's statuses are among the index's, which a generic
//! plan cannot see through a bound parameter. The text is the same on every call, so each
//! statement is still prepared once per connection.

use baton_core::TaskStatus;

/// `'a', 'b', …`: `statuses` as the inside of an SQL `IN (…)` list.
pub fn sql_list(statuses: impl IntoIterator<Item = TaskStatus>) -> String {
    statuses
        .into_iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows of `alias` that hold a place of their concurrency group, as the partial index
/// `tasks_group_dispatched` has them (so it serves the query).
pub(crate) fn group_dispatched(alias: &str) -> String {
    format!(
        "{alias}.concurrency_key IS NOT NULL AND {alias}.status IN ({})",
        sql_list(TaskStatus::DISPATCHED)
    )
}

/// The unfinished statuses a queue counts: waiting in it (`queued`) or dispatched.
pub(crate) fn in_a_queue() -> impl Iterator<Item = TaskStatus> {
    std::iter::once(TaskStatus::Queued).chain(TaskStatus::DISPATCHED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partial indexes were written with these lists; a status added to the machine
    /// must be added to them too (in a new migration), or the queries above stop using
    /// them.
    #[test]
    fn the_partial_indexes_list_the_same_statuses() {
        let init = include_str!("../../../migrations/20261129000001_init.sql");
        let runner_active = format!("WHERE status IN ({})", sql_list(TaskStatus::DISPATCHED));
        let finished = format!("WHERE status IN ({})", sql_list(TaskStatus::TERMINAL));
        assert!(init.contains(&runner_active), "{runner_active}");
        let ended = include_str!("../../../migrations/20261208000004_tasks_ended_at.sql");
        assert!(ended.contains(&finished), "{finished}");
        let group_dispatched =
            include_str!("../../../migrations/20261206000002_tasks_group_dispatched.sql");
        let dispatched = format!("status IN ({})", sql_list(TaskStatus::DISPATCHED));
        assert!(group_dispatched.contains(&dispatched), "{dispatched}");
        assert_eq!(
            sql_list(in_a_queue()),
            "'queued', 'leased', 'running', 'cancelling'"
        );
    }
}
