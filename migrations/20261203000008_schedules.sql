-- Schedules: a cron expression in a time zone that makes tasks from a template. The next
-- tick lives here; firing it is one transaction that advances `next_fire_at` under a
-- compare-and-set and inserts the tick's task, whose key is unique per (schedule, tick),
-- so two nodes firing the same tick make one task (docs/schedules.md).

CREATE TABLE schedules (
    id                uuid PRIMARY KEY,
    name              text NOT NULL,
    cron              text NOT NULL,
    timezone          text NOT NULL,
    template          jsonb NOT NULL,          -- the task, as POST /v1/tasks takes it
    overlap           text NOT NULL CHECK (overlap IN ('allow', 'skip', 'cancel', 'queue')),
    catch_up          text NOT NULL CHECK (catch_up IN ('skip', 'latest', 'all')),
    catch_up_window_s integer NOT NULL,
    jitter_s          integer NOT NULL DEFAULT 0,
    paused            boolean NOT NULL DEFAULT false,
    start_at          timestamptz,
    end_at            timestamptz,
    created_by        text NOT NULL,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    next_fire_at      timestamptz,             -- NULL: no tick left (past end_at)
    buffered_for      timestamptz,             -- overlap 'queue': the tick held back
    fired_count       bigint NOT NULL DEFAULT 0,
    skipped_count     bigint NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX schedules_owner_name ON schedules (created_by, name);
CREATE INDEX schedules_due ON schedules (next_fire_at)
    WHERE NOT paused AND next_fire_at IS NOT NULL;

-- Ticks that made no task, with why (fired ticks are their tasks). Kept to the last few
-- hundred per schedule.
CREATE TABLE schedule_skips (
    schedule_id   uuid NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,        -- the first tick of the range
    through       timestamptz NOT NULL,        -- its last
    ticks         bigint NOT NULL,
    reason        text NOT NULL CHECK (reason IN ('overlap', 'missed', 'invalid')),
    recorded_at   timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, scheduled_for)
);

ALTER TABLE tasks ADD COLUMN schedule_id uuid, ADD COLUMN scheduled_for timestamptz;
CREATE INDEX tasks_schedule ON tasks (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
