//! The SQL of each hot-path transition, written once: the statements of the general
//! path (`by_kind.rs`) and the one-statement path (`one_statement.rs`) are both built
//! from these, with their parameters numbered from where each is placed.
//!
//! The statuses a compare-and-set expects are bound as parameters, not spelled in the
//! SQL: these statements run as generic plans, and a generic plan cannot match a bound
//! status to the partial indexes on `status`. So each row is found by its id, through
//! the primary key, whatever the table's statistics say — spelled out, the planner took
//! the partial index while its statistics still called the queue small after a burst of
//! submits, and read every queued row to start a few. The sessions that run them take no
//! sequential scan, hash join or merge join ([`crate::BY_ID_ONLY`]): a plan made on a new
//! cluster's nearly empty table otherwise joined each batch to the whole table by hash.

use crate::statuses::{group_dispatched, sql_list};
use baton_core::{TaskStatus, Transition};

/// `INSERT … RETURNING *` of tasks given as one JSON array (`$json`) at `$now`; a
/// repeated idempotency key inserts nothing.
pub(super) fn insert(json: usize, now: usize) -> String {
    format!(
        "INSERT INTO tasks (id, queue, labels, command, script, env, payload, priority,
                            timeout_s, queue_timeout_s, max_attempts, idempotency_key,
                            status, created_by, traceparent, created_at, updated_at, queued_at,
                            run_at, notify_url, secret_env, schedule_id, scheduled_for,
                            retry_of, retry_policy,
                            concurrency_key, concurrency_limit,
                            pipeline_id, job, release_when, needs_pending, has_dependents)
         SELECT r.id, r.queue, r.labels, r.command, r.script, r.env, r.payload, r.priority,
                r.timeout_s, r.queue_timeout_s, r.max_attempts, r.idempotency_key,
                CASE WHEN r.needs_pending > 0 THEN 'waiting'
                     WHEN r.run_at > ${now} THEN 'scheduled' ELSE 'queued' END,
                r.created_by, r.traceparent, ${now}, ${now},
                CASE WHEN r.needs_pending > 0 OR r.run_at > ${now} THEN NULL
                     ELSE ${now}::timestamptz END,
                r.run_at, r.notify_url, r.secret_env, r.schedule_id, r.scheduled_for,
                r.retry_of, r.retry_policy,
                r.concurrency_key, r.concurrency_limit,
                r.pipeline_id, r.job, r.release_when, COALESCE(r.needs_pending, 0),
                COALESCE(r.has_dependents, false)
         FROM jsonb_to_recordset(${json}) AS r(
                id uuid, queue text, labels text[], command text[], script text, env jsonb,
                payload jsonb, priority int4, timeout_s int4, queue_timeout_s int4,
                max_attempts int4, idempotency_key text, created_by text, traceparent text,
                run_at timestamptz, notify_url text, secret_env jsonb, schedule_id uuid,
                scheduled_for timestamptz, retry_of uuid, retry_policy jsonb,
                concurrency_key text, concurrency_limit int4,
                pipeline_id uuid, job text, release_when text, needs_pending int4,
                has_dependents bool)
         ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING *"
    )
}

/// The statuses `start` expects, bound after its other parameters, from the status
/// machine's edges: the row is `queued` while its lease lives in Redis only (the
/// [`Transition::Lease`] that Postgres never sees), `leased` when a node of the previous
/// version wrote the lease.
pub(super) const START_FROM: [TaskStatus; 2] =
    [Transition::Lease.from()[0], Transition::Start.from()[0]];

/// The statuses `finish` expects, bound as one array after its other parameters: those a
/// runner's report ends, which are those the server's ends start from too.
pub(super) const FINISH_FROM: &[TaskStatus] = Transition::Report(TaskStatus::Succeeded).from();

/// The starts `$p..$p+4` (task, lease, runner, boot, leased_at) at `$p+5`, with
/// [`START_FROM`] at `$p+6` and `$p+7`, each for a runner that may take it
/// ([`RUNNER_MAY_TAKE`]): `queued ->
/// running` under the lease the caller checked against the claim, or `leased ->
/// running` for a row leased in Postgres (by a node of the previous version) under the
/// lease it recorded. The attempt count goes up and the log starts afresh.
///
/// A queued row keeps the lease of its last run (`runs.rs` never clears it), and that
/// lease cannot start it again: a start checked against the claim, then held up (a node
/// frozen, a slow network) while its resent twin started, ran and ended the run, must
/// not start the retry that is queued now. Nor can a lease voided before its task was
/// put back in its queue (`voided_leases`, `tasks_void_leases`).
///
/// The starts are joined to their rows for the group check's `nth`
/// ([`group_has_room`]), then put back in id order, the order `binds::by_task` gave
/// them: every statement takes its rows' locks in that one order.
pub(super) fn start(p: usize) -> String {
    let (ids, leases, runners, boots, leased_at, now) = (p, p + 1, p + 2, p + 3, p + 4, p + 5);
    let (queued, leased) = (p + 6, p + 7);
    format!(
        "UPDATE tasks t
         SET status = 'running', lease_id = r.lease, runner_id = r.runner,
             boot_id = COALESCE(r.boot, t.boot_id),
             leased_at = CASE WHEN t.status = ${queued} THEN r.leased_at ELSE t.leased_at END,
             started_at = ${now}, updated_at = ${now}, attempt = t.attempt + 1,
             log_size = 0, log_truncated = false, log_incomplete = false
         FROM (SELECT u.*, count(*) FILTER (WHERE k.status = ${queued}) OVER (
                           PARTITION BY k.concurrency_key ORDER BY u.id
                           ROWS UNBOUNDED PRECEDING) AS nth
               FROM unnest(${ids}::uuid[], ${leases}::uuid[], ${runners}::uuid[],
                           ${boots}::uuid[], ${leased_at}::timestamptz[])
                    AS u(id, lease, runner, boot, leased_at)
               JOIN tasks k ON k.id = u.id
               ORDER BY u.id) AS r
         WHERE t.id = r.id
           AND ((t.status = ${queued} AND t.lease_id IS DISTINCT FROM r.lease
                 AND NOT r.lease = ANY(t.voided_leases))
                OR (t.status = ${leased} AND t.lease_id = r.lease AND t.runner_id = r.runner))
           AND {RUNNER_MAY_TAKE}
           AND {group_has_room}",
        group_has_room = group_has_room(queued)
    )
}

/// The limit of a task's concurrency group, checked again at the start of a queued row
/// from Postgres: the group's dispatched rows, and the queued starts of the group in
/// this statement up to this one (`r.nth`, in id order: each sees the same rows, so
/// without it a batch could start several into one free place), leave it room. Redis's
/// slots admit a lease; a failover that lost a run's slot (its start long committed)
/// made the group look freer than it is, and tasks ahead of the run in its queues were
/// leased beside it. A start of the batch refused for another reason still takes its
/// place in `nth`: at worst a task is refused and put back. Two statements starting
/// tasks of one group at once (two nodes' group commits) each count the rows committed
/// before them. `$queued` is [`START_FROM`]'s first status; a limit missing from a row
/// with a key is 1, as Redis takes it (`queueing::group_of`).
fn group_has_room(queued: usize) -> String {
    format!(
        "(t.status <> ${queued} OR t.concurrency_key IS NULL
             OR (SELECT count(*) FROM tasks g
                 WHERE g.concurrency_key = t.concurrency_key AND g.id <> t.id
                   AND {dispatched})
                + r.nth <= COALESCE(t.concurrency_limit, 1))",
        dispatched = group_dispatched("g")
    )
}

/// Who may take a task is decided here, at the start, from Postgres — not trusted from
/// Redis, which only proposed it: the runner exists, is neither deleted nor paused, has
/// every label the task needs, and serves its queue (or every queue); and the queue is
/// not paused. A queue entry forged in Redis, a deleted runner's stale cache entry, or a
/// pause whose Redis copy a failover lost, starts nothing.
const RUNNER_MAY_TAKE: &str = "EXISTS (SELECT 1 FROM runners w
                  WHERE w.id = r.runner AND w.deleted_at IS NULL AND NOT w.paused
                    AND t.labels <@ w.labels
                    AND (cardinality(w.queues) = 0 OR t.queue = ANY(w.queues)))
           AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = t.queue AND q.paused)";

/// The retry rule of `baton_core::after_run::after_run`, as SQL over the row before the
/// update (`t`) and the report (`r`): a `running` task whose run failed or timed out
/// retries while attempts remain and its retry policy, if it has one, agrees
/// ([`POLICY_AGREES`]). `tests/store_transitions.rs` checks it against `after_run` case
/// by case.
const RETRIES: &str = "(t.status = 'running' AND r.outcome IN ('failed', 'timed_out')
                        AND t.attempt < t.max_attempts AND {POLICY_AGREES})";

/// `RetryPolicy::retries` over the stored (resolved) policy: a timeout (the server's, or
/// the runner's own as `after_run::timed_out` reads its report) retries as `on_timeout` says;
/// a run with no exit code otherwise always; an exit code as the lists say.
const POLICY_AGREES: &str = "(t.retry_policy IS NULL OR CASE
        WHEN r.outcome = 'timed_out'
             OR (r.exit_code IS NULL AND starts_with(r.error, {RUNNER_TIMEOUT}))
            THEN COALESCE((t.retry_policy->>'on_timeout')::boolean, true)
        WHEN r.exit_code IS NULL THEN true
        WHEN jsonb_typeof(t.retry_policy->'on_exit_codes') = 'array'
            THEN t.retry_policy->'on_exit_codes' @> to_jsonb(r.exit_code)
        WHEN jsonb_typeof(t.retry_policy->'never_on_exit_codes') = 'array'
            THEN NOT t.retry_policy->'never_on_exit_codes' @> to_jsonb(r.exit_code)
        ELSE true END)";

/// `RetryPolicy::delay` over the stored policy, in seconds: base × factor^(failures−1),
/// capped, spread by the report's random draw `r.unit`. Without a policy, the node's
/// schedule `$schedule` (`Backoff::schedule`) looked up by attempt, times the report's
/// jitter factor `r.jitter`.
fn retry_delay(schedule: usize) -> String {
    let max_exponent = baton_core::retry_policy::MAX_EXPONENT;
    let field = |f: &str| format!("(t.retry_policy->>'{f}')::float8");
    let (base, factor, cap, jitter) = (
        field("backoff_base_s"),
        field("backoff_factor"),
        field("backoff_cap_s"),
        field("jitter"),
    );
    format!(
        "CASE WHEN t.retry_policy IS NULL
             THEN (${schedule}::float8[])[LEAST(GREATEST(t.attempt, 1),
                                          cardinality(${schedule}::float8[]))] * r.jitter
             ELSE LEAST({cap}, {base} * power({factor}, LEAST(GREATEST(t.attempt, 1) - 1, {max_exponent})))
                  * (1 + {jitter} * (2 * r.unit - 1)) END"
    )
}

/// The rule of `after_run` for a server's end (no runner, so no result) of a run being
/// cancelled: the cancel stands.
const CANCELLED_BY_SERVER: &str = "(t.status = 'cancelling' AND r.runner IS NULL)";

/// The run ends `$p..$p+9` (task, lease, runner or NULL for the server's own, outcome,
/// exit code, error, outputs, log size, jitter factor, jitter draw) at `$p+10`, with the
/// retry schedule `$p+11` (`Backoff::schedule`, in seconds) and [`FINISH_FROM`] at
/// `$p+12`: each fenced by its lease (and runner), from `running` or `cancelling` only.
pub(super) fn finish(p: usize) -> String {
    let (now, schedule, from) = (p + 10, p + 11, p + 12);
    let arrays: Vec<String> = [
        "uuid", "uuid", "uuid", "text", "int4", "text", "jsonb", "int8", "float8", "float8",
    ]
    .iter()
    .enumerate()
    .map(|(i, ty)| format!("${}::{ty}[]", p + i))
    .collect();
    let retries = RETRIES.replace("{POLICY_AGREES}", POLICY_AGREES).replace(
        "{RUNNER_TIMEOUT}",
        &format!("'{}'", baton_core::after_run::RUNNER_TIMEOUT_ERROR),
    );
    let delay = retry_delay(schedule);
    format!(
        "UPDATE tasks t
         SET status = CASE WHEN {retries} THEN 'scheduled'
                           WHEN {CANCELLED_BY_SERVER} THEN 'cancelled'
                           ELSE r.outcome END,
             run_at = CASE WHEN {retries}
                 THEN ${now} + make_interval(secs => {delay})
                 ELSE t.run_at END,
             finished_at = CASE WHEN {retries} THEN NULL ELSE ${now} END,
             updated_at = ${now}, exit_code = r.exit_code, error = r.error, outputs = r.outputs,
             log_incomplete = (r.log_size IS NOT NULL AND r.log_size > t.log_size)
         FROM unnest({}) AS r(id, lease, runner, outcome, exit_code, error, outputs, log_size,
                             jitter, unit)
         WHERE t.id = r.id AND t.lease_id = r.lease
           AND (r.runner IS NULL OR t.runner_id = r.runner)
           AND t.status = ANY(${from}::text[])",
        arrays.join(", ")
    )
}

/// The outbox rows (completion webhooks) of the terminal rows of `ended` (a CTE of
/// updated tasks), at `$now`: the body is built when delivered.
pub(super) fn outbox_of(ended: &str, now: usize) -> String {
    format!(
        "INSERT INTO outbox (task_id, kind, target, idempotency_key, created_at, next_attempt_at)
         SELECT e.id, 'webhook', e.notify_url, e.id || ':' || e.status, ${now}, ${now}
         FROM {ended} e
         WHERE e.notify_url IS NOT NULL AND e.status IN ({})
         ON CONFLICT (idempotency_key) DO NOTHING",
        sql_list(TaskStatus::TERMINAL)
    )
}
