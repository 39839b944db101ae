-- no-transaction
-- The unfinished tasks by status: what the repair pass walks and the gauges count. Only
-- rows in these statuses are in it, so a finished task leaves it, and a table full of
-- finished tasks keeps it small (docs/throughput.md).
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_active ON tasks (status, id)
    WHERE status IN ('scheduled', 'queued', 'leased', 'running', 'cancelling');
