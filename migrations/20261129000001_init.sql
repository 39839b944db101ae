-- Baton's source of truth. Forward-only: see migrations/README.md.

CREATE TABLE tasks (
    id              uuid PRIMARY KEY,                 -- UUIDv7: time-ordered, the list cursor
    queue           text NOT NULL,
    labels          text[] NOT NULL DEFAULT '{}',
    command         text[],
    script          text,
    env             jsonb NOT NULL DEFAULT '{}',
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
    lease_id        uuid,
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
CREATE INDEX tasks_runner_active ON tasks (runner_id)
    WHERE status IN ('leased', 'running', 'cancelling');

-- A task's output as raw bytes, one row per accepted chunk, keyed by its byte offset so a
-- resent chunk cannot be stored twice.
CREATE TABLE task_logs (
    task_id  uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    "offset" bigint NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (task_id, "offset")
);

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
