-- Pipelines (docs/pipelines.md): jobs that wait for other jobs. A job is a task row with
-- `pipeline_id` and `job`; what it needs is a row of `task_needs` per edge. A job with
-- needs is inserted `waiting`, counting them in `needs_pending`; the terminal write of
-- each need counts it off — in the same transaction, by the trigger below, whichever
-- statement wrote it (a runner's report in the group commit, the server's end of a lost
-- or overdue run, a cancel, an expiry) — and the last one releases the job (`queued`)
-- or skips it (`skipped`, terminal), which cascades. A terminal status is written once
-- (a compare-and-set from a non-terminal one), so each need is counted once: no job is
-- released twice or never.

ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check CHECK (status IN (
    'waiting', 'scheduled', 'queued', 'leased', 'running', 'cancelling',
    'succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_check;

ALTER TABLE tasks
    ADD COLUMN pipeline_id    uuid,
    ADD COLUMN job            text,
    -- `on_success`, `on_failure` or `always` (`baton_core::pipeline::ReleaseRule`).
    ADD COLUMN release_when   text,
    -- Needs not ended yet, and needs that ended without succeeding.
    ADD COLUMN needs_pending  integer NOT NULL DEFAULT 0,
    ADD COLUMN needs_unmet    integer NOT NULL DEFAULT 0,
    -- Some task needs this one: its end runs the release (the trigger's condition, so a
    -- task nothing needs pays nothing for it).
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    -- The task whose end released or skipped this one: the node that wrote that end
    -- reads these to queue them in Redis after its commit.
    ADD COLUMN released_by    uuid;

CREATE INDEX tasks_pipeline ON tasks (pipeline_id, id) WHERE pipeline_id IS NOT NULL;
CREATE INDEX tasks_released_by ON tasks (released_by) WHERE released_by IS NOT NULL;

CREATE TABLE pipelines (
    id              uuid PRIMARY KEY,
    name            text NOT NULL,
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL,
    -- Scoped to its owner, as a task's (`baton_core::idempotency::scoped`).
    idempotency_key text,
    schedule_id     uuid,
    scheduled_for   timestamptz
);
CREATE UNIQUE INDEX pipelines_idempotency_key ON pipelines (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX pipelines_created_by_id ON pipelines (created_by, id);

-- `task_id` needs `needs_id`. Both go with their tasks when the janitor deletes them.
CREATE TABLE task_needs (
    needs_id uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    task_id  uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (needs_id, task_id)
);
CREATE INDEX task_needs_task ON task_needs (task_id);

-- `value` cut to at most `bytes` bytes of UTF-8, never inside a character (a cut inside
-- one would be an invalid string, and fail the terminal write that releases the job).
CREATE FUNCTION tasks_utf8_prefix(value text, bytes integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    encoded bytea := convert_to(value, 'UTF8');
    cut integer := bytes;
BEGIN
    IF octet_length(encoded) <= bytes THEN
        RETURN value;
    END IF;
    -- Back off the continuation bytes (10xxxxxx) of the character the cut falls in.
    WHILE cut > 0 AND (get_byte(encoded, cut) & 192) = 128 LOOP
        cut := cut - 1;
    END LOOP;
    RETURN convert_from(substring(encoded FROM 1 FOR cut), 'UTF8');
END
$$;

-- Gives each released task of `released` the environment it gets from the outputs of the
-- jobs it needs: `BATON_NEEDS_<JOB>_<NAME>` (`baton_core::pipeline::needs_variable`),
-- each value cut to 4,096 bytes, all of them to 65,536 in the order of their names
-- (`MAX_NEEDS_VALUE_BYTES`, `MAX_NEEDS_ENV_BYTES`), under the task's own variables. Two
-- outputs that map to one name: the one of the later job name, then the later output
-- name, wins. One statement for all of them: a fan-out releases thousands at once.
-- Its statements keep one generic plan (here and in `tasks_resolve`): PL/pgSQL would
-- otherwise plan them afresh at every call, their arrays making a generic plan look
-- dearer than it is, and the planning cost more than the work (1.26 ms an end that
-- releases a job, 0.52 ms with generic plans).
CREATE FUNCTION tasks_give_needs_env(released uuid[]) RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    ids uuid[];
    envs jsonb[];
BEGIN
    SELECT array_agg(task_id), array_agg(env) INTO ids, envs
    FROM (SELECT task_id, jsonb_object_agg(name, value ORDER BY job, output) AS env
          FROM (SELECT task_id, name, value, job, output,
                       sum(octet_length(name) + octet_length(value))
                           OVER (PARTITION BY task_id ORDER BY name, job, output) AS total
                FROM (SELECT n.task_id,
                             'BATON_NEEDS_' || upper(regexp_replace(e.job, '[^A-Za-z0-9]', '_', 'g'))
                             || '_' || upper(regexp_replace(o.key, '[^A-Za-z0-9]', '_', 'g')) AS name,
                             tasks_utf8_prefix(
                                 CASE jsonb_typeof(o.value) WHEN 'string' THEN o.value #>> '{}'
                                      ELSE o.value::text END, 4096) AS value,
                             e.job, o.key AS output
                      FROM task_needs n
                      JOIN tasks e ON e.id = n.needs_id
                      CROSS JOIN LATERAL jsonb_each(e.outputs) AS o
                      WHERE n.task_id = ANY(released) AND e.job IS NOT NULL
                        AND jsonb_typeof(e.outputs) = 'object') AS v) AS w
          WHERE total <= 65536
          GROUP BY task_id) AS g;
    IF ids IS NOT NULL THEN
        -- Row by row through the primary key, from the arrays: joined to a subquery,
        -- the planner may read the whole table.
        UPDATE tasks t SET env = c.env || t.env
        FROM unnest(ids, envs) AS c(id, env)
        WHERE t.id = c.id;
    END IF;
END
$$;

-- The rule of `baton_core::pipeline::verdict`: 'queued' (release), 'skipped', or NULL
-- (keep waiting).
CREATE FUNCTION tasks_release_verdict(rule text, pending integer, unmet integer)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN rule = 'on_success' AND unmet > 0 THEN 'skipped'
        WHEN pending > 0 THEN NULL
        WHEN rule = 'on_failure' AND unmet = 0 THEN 'skipped'
        ELSE 'queued' END
$$;

-- Counts the ends of `ended` (tasks now terminal) off the waiting jobs that need them —
-- only those of `among` when given (a job inserted beside needs that had already ended),
-- every one otherwise — and releases or skips those whose verdict says so, at `at`,
-- marking them `released_by` `root`. A skip ends a job, so its own dependents are counted
-- next, a layer at a time: the cascade runs here, not through nested triggers.
CREATE FUNCTION tasks_resolve(ended uuid[], among uuid[], root uuid, at timestamptz)
RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    dependents uuid[];
    ends integer[];
    unmets integer[];
    released uuid[];
    skipped uuid[];
BEGIN
    WHILE cardinality(ended) > 0 LOOP
        -- The tasks that need these and how many of their needs just ended (not
        -- succeeded), found through the edges; then read and written by their ids, row
        -- by row through the primary key. (Joined to the counts instead, the planner
        -- read every waiting row, or compared every row with every count: milliseconds
        -- a release with ten thousand waiting, seconds for a fan-out of ten thousand.)
        SELECT array_agg(task_id ORDER BY task_id), array_agg(n_ended ORDER BY task_id),
               array_agg(n_unmet ORDER BY task_id)
        INTO dependents, ends, unmets
        FROM (SELECT n.task_id, count(*)::integer AS n_ended,
                     (count(*) FILTER (WHERE e.status <> 'succeeded'))::integer AS n_unmet
              FROM task_needs n JOIN tasks e ON e.id = n.needs_id
              WHERE n.needs_id = ANY(ended) AND (among IS NULL OR n.task_id = ANY(among))
              GROUP BY n.task_id) AS c;
        EXIT WHEN dependents IS NULL;
        -- Written in id order, the order of the arrays, so this call locks its rows in
        -- that order. (Two statements each ending several needs can still lock in
        -- opposite orders through two calls: Postgres finds the deadlock and the group
        -- commit writes its batch again.)
        WITH counted AS (
            UPDATE tasks t
            SET needs_pending = t.needs_pending - c.n_ended,
                needs_unmet = t.needs_unmet + c.n_unmet
            FROM unnest(dependents, ends, unmets) AS c(id, n_ended, n_unmet)
            WHERE t.id = c.id AND t.status = 'waiting'
            RETURNING t.id, tasks_release_verdict(t.release_when, t.needs_pending, t.needs_unmet) AS verdict
        )
        SELECT array_agg(id) FILTER (WHERE verdict = 'queued'),
               array_agg(id) FILTER (WHERE verdict = 'skipped')
        INTO released, skipped
        FROM counted;
        IF released IS NOT NULL THEN
            UPDATE tasks t
            SET status = 'queued', queued_at = at, updated_at = at, released_by = root
            WHERE t.id = ANY(released);
            -- Most needs report no outputs: one look before the work of giving them.
            IF EXISTS (SELECT 1 FROM task_needs n JOIN tasks e ON e.id = n.needs_id
                       WHERE n.task_id = ANY(released) AND e.job IS NOT NULL
                         AND jsonb_typeof(e.outputs) = 'object') THEN
                PERFORM tasks_give_needs_env(released);
            END IF;
        END IF;
        ended := '{}';
        IF skipped IS NOT NULL THEN
            UPDATE tasks t
            SET status = 'skipped', finished_at = at, updated_at = at, released_by = root,
                error = CASE WHEN t.release_when = 'on_failure'
                             THEN 'skipped: every job it needs succeeded'
                             ELSE 'skipped: a job it needs did not succeed' END
            WHERE t.id = ANY(skipped);
            -- A skip is an end: its completion webhook is due as any end's (§4.8).
            INSERT INTO outbox (task_id, kind, target, idempotency_key, created_at, next_attempt_at)
            SELECT id, 'webhook', notify_url, id || ':skipped', at, at
            FROM tasks WHERE id = ANY(skipped) AND notify_url IS NOT NULL
            ON CONFLICT (idempotency_key) DO NOTHING;
            ended := ARRAY(SELECT id FROM tasks WHERE id = ANY(skipped) AND has_dependents);
        END IF;
        among := NULL;
    END LOOP;
END
$$;

CREATE FUNCTION tasks_release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tasks_resolve(ARRAY[NEW.id], NULL, NEW.id, NEW.updated_at);
    RETURN NULL;
END
$$;

-- Only a task something needs, only as it ends, and never for a skip: every skip is
-- written by `tasks_resolve`, whose loop counts it off the jobs after it (this trigger
-- counting it again would count it twice).
CREATE TRIGGER tasks_release_dependents AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (NEW.has_dependents
          AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired')
          AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped'))
    EXECUTE FUNCTION tasks_release_dependents();

-- A skipped job's secrets are erased as any ended task's are.
DROP TRIGGER tasks_erase_secrets ON tasks;
CREATE TRIGGER tasks_erase_secrets
    BEFORE UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped')
          AND NEW.status IS DISTINCT FROM OLD.status
          AND NEW.secret_env <> '{}'::jsonb)
    EXECUTE FUNCTION tasks_erase_secrets();
