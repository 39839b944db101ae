-- no-transaction
-- The janitor's scan, `skipped` (pipelines) among the terminal statuses: `tasks_finished_at`
-- with the status machine's new status, built beside it before it is dropped.
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_ended_at ON tasks (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped');
