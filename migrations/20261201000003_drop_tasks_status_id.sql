-- no-transaction
-- Replaced by tasks_active: every version of every task was in it.
DROP INDEX CONCURRENTLY IF EXISTS tasks_status_id;
