-- no-transaction
-- Replaced by tasks_unfinished.
DROP INDEX CONCURRENTLY IF EXISTS tasks_active;
