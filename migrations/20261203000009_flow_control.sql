-- Flow control (issue 13): queue settings and concurrency groups.
--
-- `queues` holds the settings of queues that have any (a queue with no row is running,
-- with no settings). `paused` is the truth the Redis `paused` set mirrors; `resumed_at`
-- restarts the queue-timeout clock of the queue's waiting tasks (docs/flow-control.md).
CREATE TABLE queues (
    name text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    paused_at timestamptz,
    resumed_at timestamptz,
    updated_at timestamptz NOT NULL
);

-- A task of a concurrency group runs only while fewer than `concurrency_limit` tasks of
-- its `concurrency_key` hold a lease. Both NULL for a task of no group.
ALTER TABLE tasks ADD COLUMN concurrency_key text, ADD COLUMN concurrency_limit int4;

-- The repair pass recounts each group from the rows: only grouped tasks are indexed, and
-- no column a transition changes is, so transitions stay HOT updates.
CREATE INDEX tasks_concurrency_key ON tasks (concurrency_key) WHERE concurrency_key IS NOT NULL;
