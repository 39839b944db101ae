//! Rows as the API shows them. The user view hides the lease id: it is the runner's
//! fencing token, not something a user needs or should be able to replay; and the
//! password of a `notify_url`, which is the receiver's, not every reader's.

use baton_client::{LeasedTask, NotifyDelivery, NotifyState, Task};
use baton_store::{OutboxState, TaskRecord};
use std::collections::BTreeMap;

pub(crate) fn task_view(t: TaskRecord) -> Task {
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
        idempotency_key: t
            .idempotency_key
            .as_deref()
            .map(|k| baton_core::idempotency::unscoped(&t.created_by, k).to_string()),
        notify_url: t
            .notify_url
            .as_deref()
            .map(|url| crate::webhooks::redacted(url).into_owned()),
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
        concurrency_key: t.concurrency_key,
        concurrency_limit: t.concurrency_limit,
        pipeline_id: t.pipeline_id,
        job: t.job,
        when: t
            .release_when
            .as_deref()
            .and_then(baton_core::pipeline::ReleaseRule::parse),
        notify_state: None,
        schedule_id: t.schedule_id,
        scheduled_for: t.scheduled_for,
        retry: t.retry_policy.map(|p| p.0),
        retry_of: t.retry_of,
        retried_by: None,
        node_id: None,
        summary: false,
    }
}

/// The view of a task read as a list reads it (`Store::task_list_matching`), saying so.
pub(crate) fn task_summary_view(t: TaskRecord) -> Task {
    Task {
        summary: true,
        ..task_view(t)
    }
}

/// Where a task's webhook stands: delivered, given up (`failed`), or still being tried.
pub(crate) fn notify_state(o: OutboxState) -> NotifyState {
    let state = match (o.delivered_at, o.given_up_at) {
        (Some(_), _) => NotifyDelivery::Delivered,
        (None, Some(_)) => NotifyDelivery::Failed,
        (None, None) => NotifyDelivery::Pending,
    };
    NotifyState {
        state,
        attempts: o.attempts,
        last_error: o.last_error,
    }
}

/// The body of a completion webhook: the event and the task's final state.
pub(crate) fn webhook_body(t: &TaskRecord) -> serde_json::Value {
    serde_json::json!({
        "event": "task.finished",
        "task": task_view(t.clone()),
    })
}

/// What the runner gets of a task leased to it: `started`, its start already recorded
/// (the row counts the attempt), or still to be acknowledged (the attempt it will be).
/// `secret_env`: the opened secrets of a started task; none for one still to be
/// acknowledged, which gets them with its start's answer.
pub(crate) fn leased_view(
    t: TaskRecord,
    lease_id: baton_core::LeaseId,
    started: bool,
    secret_env: BTreeMap<String, String>,
) -> LeasedTask {
    LeasedTask {
        id: t.id,
        lease_id,
        queue: t.queue,
        labels: t.labels,
        command: t.command,
        script: t.script,
        env: t.env.0,
        secret_env,
        payload: t.payload.map(|p| p.0),
        timeout_s: t.timeout_s.into(),
        attempt: if started { t.attempt } else { t.attempt + 1 },
        traceparent: t.traceparent,
        started,
    }
}
