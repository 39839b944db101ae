-- The runs of a task that a retry followed, one row per attempt: a retry starts a new run
-- on the task's row and overwrites the last one's runner, times, exit code and error, so
-- they are kept here first. The task's last run is its row itself (and a task that never
-- retried has no row here): `GET /v1/tasks/{id}/attempts` reads both. Written by a
-- trigger as the retry is written — whichever statement writes it (a runner's report in
-- the group commit, the server's end of a lost or overdue run) — in the same
-- transaction, so the history cannot miss a run or hold one that did not end. Only a
-- retry fires it: the runs that end a task, nearly all of them, cost it nothing.
CREATE TABLE task_attempts (
    task_id     uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    runner_id   uuid,
    lease_id    uuid,
    leased_at   timestamptz,
    started_at  timestamptz,
    ended_at    timestamptz NOT NULL,
    -- `failed`, or `timed_out` when the server ended it at its timeout.
    outcome     text NOT NULL,
    exit_code   integer,
    error       text,
    PRIMARY KEY (task_id, attempt)
);

CREATE FUNCTION task_attempt_retried() RETURNS trigger AS $$
BEGIN
    INSERT INTO task_attempts (task_id, attempt, runner_id, lease_id, leased_at, started_at,
                               ended_at, outcome, exit_code, error)
    VALUES (OLD.id, OLD.attempt, OLD.runner_id, OLD.lease_id, OLD.leased_at, OLD.started_at,
            NEW.updated_at,
            CASE WHEN NEW.error = 'timed out' THEN 'timed_out' ELSE 'failed' END,
            NEW.exit_code, NEW.error)
    ON CONFLICT (task_id, attempt) DO NOTHING;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

-- The condition is checked before any function is called: every other update of the
-- hot path (starts, log appends, the ends of tasks) pays nothing.
CREATE TRIGGER task_attempt_retried AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (OLD.status IN ('running', 'cancelling')
          AND NEW.status IN ('queued', 'scheduled'))
    EXECUTE FUNCTION task_attempt_retried();
