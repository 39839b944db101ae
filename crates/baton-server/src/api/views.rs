//! Rows as the API shows them. The user view hides the lease id: it is the runner's
//! fencing token, not something a user needs or should be able to replay.

use baton_client::{LeasedTask, Task};
use baton_store::TaskRecord;

pub fn task_view(t: TaskRecord) -> Task {
    Task {
        id: t.id,
        queue: t.queue,
        labels: t.labels,
        command: t.command,
        script: t.script,
        env: t.env.0,
        secret_env_keys: t.secret_env.0.into_keys().collect(),
        payload: t.payload.map(|p| p.0),
        priority: t.priority,
        timeout_s: t.timeout_s.into(),
        queue_timeout_s: t.queue_timeout_s.into(),
        max_attempts: t.max_attempts,
        run_at: t.run_at,
        idempotency_key: t.idempotency_key,
        notify_url: t.notify_url,
        status: t.status,
        attempt: t.attempt,
        runner_id: t.runner_id,
        created_at: t.created_at,
        updated_at: t.updated_at,
        queued_at: t.queued_at,
        leased_at: t.leased_at,
        started_at: t.started_at,
        finished_at: t.finished_at,
        exit_code: t.exit_code,
        error: t.error,
        outputs: t.outputs.map(|o| o.0),
        log_size: t.log_size,
        log_truncated: t.log_truncated,
        log_incomplete: t.log_incomplete,
        traceparent: t.traceparent,
    }
}

/// The body of a completion webhook: the event and the task's final state.
pub fn webhook_body(t: &TaskRecord) -> serde_json::Value {
    serde_json::json!({
        "event": "task.finished",
        "task": task_view(t.clone()),
    })
}

/// What the runner needs to execute a leased task. `attempt` is the attempt this run
/// will be once started.
pub fn leased_view(t: TaskRecord, lease_id: uuid::Uuid) -> LeasedTask {
    LeasedTask {
        id: t.id,
        lease_id,
        queue: t.queue,
        labels: t.labels,
        command: t.command,
        script: t.script,
        env: t.env.0,
        secret_env: t.secret_env.0,
        payload: t.payload.map(|p| p.0),
        timeout_s: t.timeout_s.into(),
        attempt: t.attempt + 1,
        traceparent: t.traceparent,
    }
}
