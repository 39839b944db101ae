-- Runners on demand (docs/dynamic-runners.md). An assignment is one runner to start for
-- waiting work, owned by the node that admitted it (`node_id`) and adopted by another
-- when that node's liveness lapses. Each attempt gets a one-use registration token of
-- its own, and the runner registered with it records that token: that is how an
-- assignment finds its runner, and how a runner is known to be ephemeral.
CREATE TABLE runner_assignments (
    id                    uuid PRIMARY KEY,
    provisioner           text NOT NULL,
    backend               text NOT NULL,
    labels                text[] NOT NULL,
    queues                text[] NOT NULL,
    state                 text NOT NULL
        CHECK (state IN ('starting', 'running', 'retrying', 'done', 'failed', 'dropped')),
    attempt               integer NOT NULL,
    node_id               text NOT NULL,
    runner_name           text NOT NULL,
    registration_token_id uuid NOT NULL,
    -- What the backend needs to release the runner: a process id, or what an operator's
    -- `create` script printed.
    handle                text,
    created_at            timestamptz NOT NULL,
    started_at            timestamptz NOT NULL,
    claimed_at            timestamptz,
    retry_at              timestamptz,
    ended_at              timestamptz,
    error                 text
);
CREATE INDEX runner_assignments_open ON runner_assignments (provisioner)
    WHERE ended_at IS NULL;
-- Assignments that gave up lately still stand for their tasks (admission's count).
CREATE INDEX runner_assignments_cooling ON runner_assignments (provisioner, retry_at)
    WHERE state = 'failed';

ALTER TABLE registration_tokens ADD COLUMN provisioner text;
ALTER TABLE runners
    ADD COLUMN registration_token_id uuid,
    ADD COLUMN provisioner text;
CREATE INDEX runners_registration_token ON runners (registration_token_id)
    WHERE registration_token_id IS NOT NULL;
-- The janitor prunes a provisioner's spent tokens.
CREATE INDEX registration_tokens_provisioned ON registration_tokens (expires_at)
    WHERE provisioner IS NOT NULL;
