-- no-transaction
-- Replaced by tasks_ended_at.
DROP INDEX CONCURRENTLY IF EXISTS tasks_finished_at;
