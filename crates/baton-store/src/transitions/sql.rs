//! The SQL of each hot-path transition, written once: the statements of the general
//! path (`by_kind.rs`) and the one-statement path (`one_statement.rs`) are both built
//! from these, with their parameters numbered from where each is placed.

use baton_core::TaskStatus;

/// `INSERT … RETURNING *` of tasks given as one JSON array (`$json`) at `$now`; a
/// repeated idempotency key inserts nothing.
pub(super) fn insert(json: usize, now: usize) -> String {
    format!(
        "INSERT INTO tasks (id, queue, labels, command, script, env, payload, priority,
                            timeout_s, queue_timeout_s, max_attempts, idempotency_key,
                            status, created_by, traceparent, created_at, updated_at, queued_at,
                            run_at, notify_url, secret_env)
         SELECT r.id, r.queue, r.labels, r.command, r.script, r.env, r.payload, r.priority,
                r.timeout_s, r.queue_timeout_s, r.max_attempts, r.idempotency_key,
                CASE WHEN r.run_at > ${now} THEN 'scheduled' ELSE 'queued' END,
                r.created_by, r.traceparent, ${now}, ${now},
                CASE WHEN r.run_at > ${now} THEN NULL ELSE ${now}::timestamptz END,
                r.run_at, r.notify_url, r.secret_env
         FROM jsonb_to_recordset(${json}) AS r(
                id uuid, queue text, labels text[], command text[], script text, env jsonb,
                payload jsonb, priority int4, timeout_s int4, queue_timeout_s int4,
                max_attempts int4, idempotency_key text, created_by text, traceparent text,
                run_at timestamptz, notify_url text, secret_env jsonb)
         ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING *"
    )
}

/// The starts `$p..$p+4` (task, lease, runner, boot, leased_at) at `$p+5`: `queued ->
/// running` under the lease the caller checked against the claim, or `leased ->
/// running` for a row leased in Postgres (by a node of the previous version) under the
/// lease it recorded. The attempt count goes up and the log starts afresh.
///
/// A queued row keeps the lease of its last run (`runs.rs` never clears it), and that
/// lease cannot start it again: a start checked against the claim, then held up (a node
/// frozen, a slow network) while its resent twin started, ran and ended the run, must
/// not start the retry that is queued now.
pub(super) fn start(p: usize) -> String {
    let (ids, leases, runners, boots, leased_at, now) = (p, p + 1, p + 2, p + 3, p + 4, p + 5);
    format!(
        "UPDATE tasks t
         SET status = 'running', lease_id = r.lease, runner_id = r.runner,
             boot_id = COALESCE(r.boot, t.boot_id),
             leased_at = CASE WHEN t.status = 'queued' THEN r.leased_at ELSE t.leased_at END,
             started_at = ${now}, updated_at = ${now}, attempt = t.attempt + 1,
             log_size = 0, log_truncated = false, log_incomplete = false
         FROM unnest(${ids}::uuid[], ${leases}::uuid[], ${runners}::uuid[], ${boots}::uuid[],
                     ${leased_at}::timestamptz[]) AS r(id, lease, runner, boot, leased_at)
         WHERE t.id = r.id
           AND ((t.status = 'queued' AND t.lease_id IS DISTINCT FROM r.lease)
                OR (t.status = 'leased' AND t.lease_id = r.lease AND t.runner_id = r.runner))"
    )
}

/// The retry rule of `baton_core::retry::after_run`, as SQL over the row before the
/// update (`t`) and the report (`r`): a `running` task whose run failed or timed out
/// retries while attempts remain. `tests/store_transitions.rs` checks it against
/// `after_run` case by case.
const RETRIES: &str = "(t.status = 'running' AND r.outcome IN ('failed', 'timed_out')
                        AND t.attempt < t.max_attempts)";

/// The run ends `$p..$p+8` (task, lease, runner or NULL for the server's own, outcome,
/// exit code, error, outputs, log size, jitter factor) at `$p+9`, with the retry
/// schedule `$p+10` (`Backoff::schedule`, in seconds): each fenced by its lease (and
/// runner), from `running` or `cancelling` only.
pub(super) fn finish(p: usize) -> String {
    let (now, schedule) = (p + 9, p + 10);
    let arrays: Vec<String> = [
        "uuid", "uuid", "uuid", "text", "int4", "text", "jsonb", "int8", "float8",
    ]
    .iter()
    .enumerate()
    .map(|(i, ty)| format!("${}::{ty}[]", p + i))
    .collect();
    format!(
        "UPDATE tasks t
         SET status = CASE WHEN {RETRIES} THEN 'scheduled' ELSE r.outcome END,
             run_at = CASE WHEN {RETRIES}
                 THEN ${now} + make_interval(secs => (${schedule}::float8[])
                          [LEAST(GREATEST(t.attempt, 1), cardinality(${schedule}::float8[]))] * r.jitter)
                 ELSE t.run_at END,
             finished_at = CASE WHEN {RETRIES} THEN NULL ELSE ${now} END,
             updated_at = ${now}, exit_code = r.exit_code, error = r.error, outputs = r.outputs,
             log_incomplete = (r.log_size IS NOT NULL AND r.log_size > t.log_size)
         FROM unnest({}) AS r(id, lease, runner, outcome, exit_code, error, outputs, log_size, jitter)
         WHERE t.id = r.id AND t.lease_id = r.lease
           AND (r.runner IS NULL OR t.runner_id = r.runner)
           AND t.status IN ('running', 'cancelling')",
        arrays.join(", ")
    )
}

/// The outbox rows (completion webhooks) of the terminal rows of `ended` (a CTE of
/// updated tasks), at `$now`: the body is built when delivered.
pub(super) fn outbox_of(ended: &str, now: usize) -> String {
    let terminal: Vec<String> = TaskStatus::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| format!("'{s}'"))
        .collect();
    format!(
        "INSERT INTO outbox (task_id, kind, target, idempotency_key, created_at, next_attempt_at)
         SELECT e.id, 'webhook', e.notify_url, e.id || ':' || e.status, ${now}, ${now}
         FROM {ended} e
         WHERE e.notify_url IS NOT NULL AND e.status IN ({})
         ON CONFLICT (idempotency_key) DO NOTHING",
        terminal.join(", ")
    )
}
