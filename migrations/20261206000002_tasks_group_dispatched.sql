-- no-transaction
-- The dispatched tasks of each concurrency group: a start counts its group's here
-- (docs/flow-control.md, "Where the limit is enforced"), so a Redis failover that lost a
-- run's group slot cannot start another task of the group beside it. Only dispatched
-- rows of a group are in it: the count reads a group's few live rows, not every row the
-- key ever had.
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_group_dispatched ON tasks (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status IN ('leased', 'running', 'cancelling');
