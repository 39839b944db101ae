-- no-transaction
-- The unfinished tasks by status, `waiting` (pipelines) among them: `tasks_active` with
-- the status machine's new status, built beside it before it is dropped.
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_unfinished ON tasks (status, id)
    WHERE status IN ('waiting', 'scheduled', 'queued', 'leased', 'running', 'cancelling');
