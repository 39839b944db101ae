-- Baton's source of truth. Forward-only: see migrations/README.md.

CREATE TABLE tasks (
    id              uuid PRIMARY KEY,                 -- UUIDv7: time-ordered, the list cursor
    queue           text NOT NULL,
    labels          text[] NOT NULL DEFAULT '{}',
    command         text[],
    script          text,
    env             jsonb NOT NULL DEFAULT '{}',
    secret_env      jsonb NOT NULL DEFAULT '{}',     -- handed to the runner, never shown
    payload         jsonb,
    priority        integer NOT NULL DEFAULT 0,
    timeout_s       integer NOT NULL,
    queue_timeout_s integer NOT NULL,
    max_attempts    integer NOT NULL DEFAULT 1,
    run_at          timestamptz,
    idempotency_key text,
    status          text NOT NULL CHECK (status IN (
                        'scheduled', 'queued', 'leased', 'running', 'cancelling',
                        'succeeded', 'failed', 'cancelled', 'timed_out', 'expired')),
    attempt         integer NOT NULL DEFAULT 0,
    runner_id       uuid,
    lease_id        uuid,                             -- the fencing token of the current lease
    boot_id         uuid,                             -- the runner process it was leased to
    notify_url      text,                             -- completion webhook
    created_by      text NOT NULL,                    -- the token that submitted it
    traceparent     text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    queued_at       timestamptz,
    leased_at       timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    exit_code       integer,
    error           text,
    outputs         jsonb,
    -- The log of the current attempt (each attempt's output is kept apart).
    log_size        bigint NOT NULL DEFAULT 0,
    log_truncated   boolean NOT NULL DEFAULT false,   -- output went past the log cap
    log_incomplete  boolean NOT NULL DEFAULT false,   -- the runner reported more than arrived
    CONSTRAINT tasks_command_or_script CHECK ((command IS NULL) <> (script IS NULL))
);

-- Keys are kept as long as the task: a repeat returns the existing task.
CREATE UNIQUE INDEX tasks_idempotency_key ON tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_status_id ON tasks (status, id);
CREATE INDEX tasks_queue_status_id ON tasks (queue, status, id);
CREATE INDEX tasks_created_by_id ON tasks (created_by, id);
CREATE INDEX tasks_runner_active ON tasks (runner_id)
    WHERE status IN ('leased', 'running', 'cancelling');
-- The promoter's and the repair pass's scans.
CREATE INDEX tasks_scheduled_run_at ON tasks (run_at) WHERE status = 'scheduled';
CREATE INDEX tasks_queued_at ON tasks (queued_at) WHERE status = 'queued';
-- The janitor's scan.
CREATE INDEX tasks_finished_at ON tasks (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired');

-- A task's output as raw bytes, one row per accepted chunk, keyed by attempt and byte
-- offset so a resent chunk cannot be stored twice.
CREATE TABLE task_logs (
    task_id  uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt  integer NOT NULL,
    "offset" bigint NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (task_id, attempt, "offset")
);

-- Side effects of terminal transitions, written in the same transaction as the
-- transition and delivered from here at least once (design.md §4.8).
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    task_id         uuid NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('webhook')),
    target          text NOT NULL,
    body            jsonb NOT NULL,
    idempotency_key text NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    delivered_at    timestamptz,
    last_error      text
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE delivered_at IS NULL;

CREATE TABLE runners (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    labels      text[] NOT NULL DEFAULT '{}',
    queues      text[] NOT NULL DEFAULT '{}',
    capacity    integer NOT NULL,
    token_hash  bytea NOT NULL UNIQUE,               -- sha256 of the token; the token is shown once
    version     text NOT NULL,
    boot_id     uuid,
    paused      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL,
    last_seen   timestamptz,
    deleted_at  timestamptz
);

CREATE TABLE api_tokens (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    token_hash  bytea NOT NULL UNIQUE,
    scopes      text[] NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE TABLE registration_tokens (
    id          uuid PRIMARY KEY,
    token_hash  bytea NOT NULL UNIQUE,
    expires_at  timestamptz,
    uses_left   integer,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
