-- no-transaction
-- Every version of every task was in it. A queue's unfinished tasks are found through
-- tasks_active (by status, then the queue), its finished ones along the primary key.
DROP INDEX CONCURRENTLY IF EXISTS tasks_queue_status_id;
