-- Every ended run of a task, one row per attempt: what the console's history and
-- `GET /v1/tasks/{id}/attempts` show (the task's row keeps only its latest run). Written
-- by a trigger as a run's end is written — whichever statement ends it (a runner's
-- report in the group commit, the server's own end of a lost or overdue run, a cancel
-- carried out), the same transaction records it, so the history cannot miss a run or
-- hold one that did not end. A running attempt is the task's row itself.
CREATE TABLE task_attempts (
    task_id     uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    runner_id   uuid,
    lease_id    uuid,
    leased_at   timestamptz,
    started_at  timestamptz,
    ended_at    timestamptz NOT NULL,
    -- How the run ended: the terminal status it wrote, or, for a run retried, `failed`
    -- or `timed_out` as its error says.
    outcome     text NOT NULL,
    retried     boolean NOT NULL,
    exit_code   integer,
    error       text,
    PRIMARY KEY (task_id, attempt)
);

CREATE FUNCTION task_attempt_ended() RETURNS trigger AS $$
BEGIN
    INSERT INTO task_attempts (task_id, attempt, runner_id, lease_id, leased_at, started_at,
                               ended_at, outcome, retried, exit_code, error)
    VALUES (OLD.id, OLD.attempt, OLD.runner_id, OLD.lease_id, OLD.leased_at, OLD.started_at,
            NEW.updated_at,
            CASE WHEN NEW.status IN ('queued', 'scheduled')
                 THEN CASE WHEN NEW.error = 'timed out' THEN 'timed_out' ELSE 'failed' END
                 ELSE NEW.status END,
            NEW.status IN ('queued', 'scheduled'), NEW.exit_code, NEW.error)
    ON CONFLICT (task_id, attempt) DO NOTHING;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

-- Fired only by the rows whose run ends: the condition is checked before any function
-- is called, so the hot path's other updates (starts, log appends) pay nothing.
CREATE TRIGGER task_attempt_ended AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (OLD.status IN ('running', 'cancelling')
          AND NEW.status NOT IN ('running', 'cancelling'))
    EXECUTE FUNCTION task_attempt_ended();
