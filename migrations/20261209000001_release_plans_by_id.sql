-- The release's functions keep one generic plan per session (their own
-- `plan_cache_mode`), made at their first call. Made while the statistics knew of few
-- waiting jobs (any cluster before its first pipeline, or since its last `ANALYZE`), the
-- count of an end off the jobs that need it read every waiting row — through the index of
-- unfinished rows, as the outer side of a join it took for one row — at every end of a
-- task something needs, and went on doing so until Postgres replanned it. Their
-- statements find every row by its id, through the primary key and `task_needs`'s
-- indexes: with sequential scans, hash joins and merge joins off
-- (`baton_store::BY_ID_ONLY`, the group commit's sessions' same settings), the waiting
-- rows no longer an index's condition, and each needed job's row read by a lateral
-- lookup by its id (planned on a nearly empty table, a join read the whole table from
-- its outer side), the planner takes those whatever the statistics said
-- (`tests/store_plans.rs`).

-- And the release's time. A job was released (or skipped) at the time of the end that
-- counted its last need off it. Two batches (two nodes', or one node's two committing sessions) each take their
-- time and then write; the one dated later can commit first, and the other, waiting for
-- its lock on the job, then counts the last need off at its earlier time: the job was
-- said released before a need it waited for had ended (`tests/pipelines.rs`' fan-in
-- saw it in CI). A release or a skip is now dated no earlier than any end of a need it
-- counted: the latest of the counting end's time and its ended needs' ends; a skip's
-- webhook is due from then.
-- (`tests/store_pipelines.rs`, `a_job_is_released_no_earlier_than_its_needs_ended`.)

-- The time a job waiting on its needs is released or skipped at, when the end being
-- counted is dated `at`: `at`, or the end of one of its needs dated later. Each need's
-- row read by its id, as everything the release reads: once per job released, one read
-- per edge.
-- Called per row of an update that finds its rows by `id = ANY(…)`, so no plan can join
-- it to the table.
CREATE FUNCTION tasks_dated_after_needs(task uuid, at timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
    SELECT greatest($2, max(e.finished_at))
    FROM task_needs n
    CROSS JOIN LATERAL (SELECT finished_at FROM tasks WHERE tasks.id = n.needs_id OFFSET 0) AS e
    WHERE n.task_id = $1
$$;

CREATE OR REPLACE FUNCTION tasks_resolve(ended uuid[], among uuid[], root uuid, at timestamptz)
RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
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
              FROM task_needs n
              -- Each need's row by its id: a lateral lookup that cannot be pulled up
              -- (`OFFSET 0`) is never the outer side of the join.
              CROSS JOIN LATERAL (SELECT status FROM tasks WHERE id = n.needs_id OFFSET 0) AS e
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
            -- Not `t.status = 'waiting'`, which the index on unfinished rows could serve:
            -- planned while the statistics knew of few waiting rows, it read them all.
            WHERE t.id = c.id AND (t.status = 'waiting') IS TRUE
            RETURNING t.id, tasks_release_verdict(t.release_when, t.needs_pending, t.needs_unmet) AS verdict
        )
        SELECT array_agg(id) FILTER (WHERE verdict = 'queued'),
               array_agg(id) FILTER (WHERE verdict = 'skipped')
        INTO released, skipped
        FROM counted;
        IF released IS NOT NULL THEN
            UPDATE tasks t
            SET (status, queued_at, updated_at, released_by) =
                (SELECT 'queued', d, d, root FROM tasks_dated_after_needs(t.id, at) AS d)
            WHERE t.id = ANY(released);
            -- Most needs report no outputs: one look before the work of giving them.
            IF EXISTS (SELECT 1 FROM task_needs n
                       CROSS JOIN LATERAL (SELECT 1 FROM tasks e
                                           WHERE e.id = n.needs_id AND e.job IS NOT NULL
                                             AND jsonb_typeof(e.outputs) = 'object'
                                           OFFSET 0) AS e
                       WHERE n.task_id = ANY(released)) THEN
                PERFORM tasks_give_needs_env(released);
            END IF;
        END IF;
        ended := '{}';
        IF skipped IS NOT NULL THEN
            UPDATE tasks t
            SET (status, finished_at, updated_at, released_by, error) =
                (SELECT 'skipped', d, d, root,
                        CASE WHEN t.release_when = 'on_failure'
                             THEN 'skipped: every job it needs succeeded'
                             ELSE 'skipped: a job it needs did not succeed' END
                 FROM tasks_dated_after_needs(t.id, at) AS d)
            WHERE t.id = ANY(skipped);
            -- A skip is an end: its completion webhook is due as any end's (§4.8).
            INSERT INTO outbox (task_id, kind, target, idempotency_key, created_at, next_attempt_at)
            SELECT id, 'webhook', notify_url, id || ':skipped', finished_at, finished_at
            FROM tasks WHERE id = ANY(skipped) AND notify_url IS NOT NULL
            ON CONFLICT (idempotency_key) DO NOTHING;
            ended := ARRAY(SELECT id FROM tasks WHERE id = ANY(skipped) AND has_dependents);
        END IF;
        among := NULL;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION tasks_give_needs_env(released uuid[]) RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
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
                      CROSS JOIN LATERAL (SELECT job, outputs FROM tasks
                                          WHERE id = n.needs_id AND job IS NOT NULL
                                            AND jsonb_typeof(outputs) = 'object'
                                          OFFSET 0) AS e
                      CROSS JOIN LATERAL jsonb_each(e.outputs) AS o
                      WHERE n.task_id = ANY(released)) AS v) AS w
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
