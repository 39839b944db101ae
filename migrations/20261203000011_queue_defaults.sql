-- A queue's defaults for the tasks submitted to it (docs/flow-control.md, "Queue
-- defaults"): a JSON object of `retry`, `max_attempts`, `concurrency_key` and
-- `concurrency_limit`, each filling what a submitted task leaves out. NULL: no defaults.
-- Applied when a task is submitted and stored with it, so a change reaches only the tasks
-- submitted after it.
ALTER TABLE queues ADD COLUMN defaults jsonb;
