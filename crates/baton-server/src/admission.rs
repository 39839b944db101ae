//! What a submission must be to become a row: each field checked against the node's
//! limits, the queue's defaults filled in, and its secrets sealed for Postgres.

use crate::auth::User;
use crate::config::Limits;
use crate::error::ApiError;
use crate::queue_defaults::{self, DefaultsByQueue};
use crate::state::AppState;
use crate::webhooks::AddressPolicy;
use axum::http::StatusCode;
use baton_client::ErrorCode;
use baton_client::SubmitTask;
use baton_core::LabelSet;
use baton_core::backoff::Backoff;
use baton_core::validate::{self, DEFAULT_QUEUE};
use baton_store::NewTask;
use chrono::Utc;
use uuid::Uuid;

/// Makes the concurrency group a submission names its submitter's own: a token other than
/// an admin's gets `<token id>/<key>`, so no tenant can fill another's group (`deploy-prod`)
/// or a queue's default group (`queue:builds`) by naming it. An admin names groups as
/// they are, to share them; a group a queue's defaults give is the queue's, never scoped.
/// Scoping twice is scoping once (a schedule's stored template is scoped already).
pub(crate) fn own_group(user: &User, task: &mut SubmitTask) {
    if user.is_admin() {
        return;
    }
    if let Some(key) = &task.concurrency_key {
        let scope = format!("{}/", user.token_id);
        if !key.starts_with(&scope) {
            task.concurrency_key = Some(format!("{scope}{key}"));
        }
    }
}

/// Turns a submission into a row to insert, or says which field is wrong. `queues`: every
/// queue's defaults, which fill what the task leaves out (`crate::queue_defaults`);
/// `retry_default`: the node's task backoff, which fills what a retry policy still lacks.
pub(crate) fn new_task(
    mut req: SubmitTask,
    queues: &DefaultsByQueue,
    limits: &Limits,
    webhooks: &AddressPolicy,
    retry_default: &Backoff,
    created_by: &str,
    traceparent: Option<String>,
) -> Result<NewTask, ApiError> {
    let queue = req
        .queue
        .take()
        .unwrap_or_else(|| DEFAULT_QUEUE.to_string());
    validate::check_queue(&queue)?;
    if let Some(defaults) = queues.get(&queue) {
        queue_defaults::fill(&mut req, defaults);
    }
    let labels = LabelSet::new(req.labels.clone())?;
    validate::check_command(req.command.as_deref(), req.script.as_deref())?;
    validate::check_env(&req.env, limits.max_env_vars)?;
    validate::check_env(&req.secret_env, limits.max_env_vars)
        .map_err(|e| validate::Invalid::new("secret_env", e.message))?;
    validate::check_exec_size(
        req.command.as_deref(),
        req.script.as_deref(),
        req.env.iter().chain(&req.secret_env),
    )?;
    if req.labels.len() > limits.max_labels {
        return Err(validate::Invalid::new(
            "labels",
            format!(
                "at most {} labels are allowed, got {}",
                limits.max_labels,
                req.labels.len()
            ),
        )
        .into());
    }
    validate::check_priority(req.priority)?;
    let timeout_s = req.timeout_s.unwrap_or(limits.default_timeout_s);
    validate::check_seconds("timeout_s", timeout_s, limits.max_timeout_s)?;
    let queue_timeout_s = req
        .queue_timeout_s
        .unwrap_or(limits.default_queue_timeout_s);
    validate::check_seconds(
        "queue_timeout_s",
        queue_timeout_s,
        limits.max_queue_timeout_s,
    )?;
    if let Some(key) = &req.idempotency_key {
        validate::check_idempotency_key(key)?;
    }
    let max_attempts = req.max_attempts.unwrap_or(1);
    validate::check_range("max_attempts", max_attempts, 1, limits.max_attempts)?;
    // A key scoped to its submitter (`own_group`) is checked as the submitter wrote it.
    let scope = format!("{created_by}/");
    let named = req
        .concurrency_key
        .as_deref()
        .map(|key| key.strip_prefix(&scope).unwrap_or(key));
    let group = baton_core::flow::check_group(named, req.concurrency_limit)?.map(|group| {
        baton_core::flow::Group {
            key: req.concurrency_key.clone().unwrap_or(group.key),
            ..group
        }
    });
    if let Some(url) = &req.notify_url {
        check_notify_url(url, limits.max_notify_url, webhooks)?;
    }
    if let Some(run_at) = req.run_at
        && run_at > Utc::now() + chrono::Duration::days(MAX_DELAY_DAYS)
    {
        return Err(validate::Invalid::new(
            "run_at",
            format!("must be within {MAX_DELAY_DAYS} days from now"),
        )
        .into());
    }
    let needs = check_needs(&req)?;
    if let Some(payload) = &req.payload {
        check_json_floats("payload", payload)?;
        let size = serde_json::to_vec(payload)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > limits.max_payload_bytes {
            return Err(ApiError::too_large(
                ErrorCode::PayloadTooLarge,
                format!(
                    "payload is {size} bytes, over the limit of {}",
                    limits.max_payload_bytes
                ),
            ));
        }
    }
    Ok(NewTask {
        id: Uuid::now_v7(),
        queue,
        labels: labels.into(),
        command: req.command,
        script: req.script,
        env: req.env,
        secret_env: req.secret_env,
        payload: req.payload,
        priority: req.priority,
        timeout_s: i32::try_from(timeout_s).expect("bounded by max_timeout_s"),
        queue_timeout_s: i32::try_from(queue_timeout_s).expect("bounded by max_queue_timeout_s"),
        max_attempts,
        run_at: req.run_at,
        idempotency_key: req
            .idempotency_key
            .map(|key| baton_core::idempotency::scoped(created_by, &key)),
        notify_url: req.notify_url,
        created_by: created_by.to_string(),
        traceparent,
        schedule_id: None,
        scheduled_for: None,
        retry_of: None,
        retry_policy: req
            .retry
            .map(|policy| policy.resolved(retry_default))
            .transpose()?,
        concurrency_key: group.as_ref().map(|g| g.key.clone()),
        concurrency_limit: group.map(|g| g.limit),
        needs_pending: needs,
        release_when: (needs > 0).then(|| req.when.unwrap_or_default().as_str().to_string()),
        ..Default::default()
    })
}

/// The most tasks one task may name in `depends_on`.
pub(crate) const MAX_DEPENDS_ON: usize = 100;

/// How many tasks a submission waits for (`depends_on`, docs/pipelines.md): each named
/// once, not with a delayed start; `when` only beside them. (A pipeline's job has taken
/// its `when` out before it comes here, and names its needs apart.)
fn check_needs(req: &SubmitTask) -> Result<i32, ApiError> {
    let count = req.depends_on.len();
    if count == 0 {
        if req.when.is_some() {
            return Err(validate::Invalid::new(
                "when",
                "only a task with depends_on (or a pipeline's job with needs) is released by a rule",
            )
            .into());
        }
        return Ok(0);
    }
    if count > MAX_DEPENDS_ON {
        return Err(validate::Invalid::new(
            "depends_on",
            format!("{count} tasks, over the limit of {MAX_DEPENDS_ON}"),
        )
        .into());
    }
    let distinct: std::collections::HashSet<&Uuid> = req.depends_on.iter().collect();
    if distinct.len() < count {
        return Err(validate::Invalid::new("depends_on", "a task is named twice").into());
    }
    if req.run_at.is_some() {
        return Err(validate::Invalid::new(
            "run_at",
            "a task with depends_on starts when what it needs has ended, not at a time",
        )
        .into());
    }
    Ok(i32::try_from(count).expect("bounded by MAX_DEPENDS_ON"))
}

/// Whether these submissions' secrets are sealed now: always, once every live node opens
/// sealed values (`crate::sealing_gate`); asked only when one carries secrets.
pub(crate) async fn sealing_now(state: &AppState, tasks: &[SubmitTask]) -> bool {
    if tasks.iter().all(|t| t.secret_env.is_empty()) {
        return true;
    }
    state.sealing.every_node_opens(&state.coord).await
}

/// A task the token may submit, sealed for Postgres (see [`sealed`]).
pub(crate) fn admitted(
    state: &AppState,
    user: &User,
    task: NewTask,
    seal: bool,
) -> Result<NewTask, ApiError> {
    user.may_submit_to(&task.queue, &task.labels, task.priority)?;
    sealed(state, task, seal)
}

/// The task with its `secret_env` sealed for Postgres (`crate::secrets`); refused when
/// the cluster has no key to seal with, rather than stored in the clear. While a node of
/// an earlier release serves (`seal` false), stored as that release stored it.
fn sealed(state: &AppState, mut task: NewTask, seal: bool) -> Result<NewTask, ApiError> {
    if task.secret_env.is_empty() {
        return Ok(task);
    }
    let Some(ring) = &state.dispatcher.secrets else {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::SecretsUnavailable,
            "secret_env: this cluster has no key to seal secrets with (its nodes run \
             without --secrets-key or --secrets-key-file); submit without secret_env, or \
             ask its operator",
        ));
    };
    if seal {
        task.secret_env = ring.seal(task.id, std::mem::take(&mut task.secret_env));
    }
    Ok(task)
}

/// Every float inside a JSON value must be one Postgres gives back intact.
pub(crate) fn check_json_floats(
    field: &str,
    value: &serde_json::Value,
) -> Result<(), validate::Invalid> {
    match value {
        serde_json::Value::Number(n) if n.is_f64() => {
            validate::check_json_float(field, n.as_f64().unwrap_or(f64::INFINITY))
        }
        serde_json::Value::Array(items) => {
            items.iter().try_for_each(|v| check_json_floats(field, v))
        }
        serde_json::Value::Object(map) => {
            map.values().try_for_each(|v| check_json_floats(field, v))
        }
        _ => Ok(()),
    }
}

/// Refuses JSON with a NUL character in a string or a key: Postgres's `jsonb` cannot
/// store one, and a run's report refused by Postgres in a group commit would hold up the
/// other reports written with it.
pub(crate) fn check_json_nul(
    field: &str,
    value: &serde_json::Value,
) -> Result<(), validate::Invalid> {
    let refused = || validate::Invalid::new(field, "a NUL character (\\u0000) cannot be stored");
    match value {
        serde_json::Value::String(text) if text.contains('\0') => Err(refused()),
        serde_json::Value::Array(items) => items.iter().try_for_each(|v| check_json_nul(field, v)),
        serde_json::Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            if k.contains('\0') {
                return Err(refused());
            }
            check_json_nul(field, v)
        }),
        _ => Ok(()),
    }
}

/// How far ahead a delayed start may be.
const MAX_DELAY_DAYS: i64 = 3650;

/// Webhooks go to absolute http(s) URLs. A host given as an address the nodes refuse
/// to reach is refused here too, so the submitter learns it now rather than from a
/// webhook that never comes; a name is only resolved when delivered (what it resolves
/// to then is what counts), so the check stays cheap.
fn check_notify_url(
    url: &str,
    max: usize,
    webhooks: &AddressPolicy,
) -> Result<(), validate::Invalid> {
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
    let parsed = match parsed {
        Some(parsed) if url.chars().count() <= max && !url.chars().any(char::is_control) => parsed,
        _ => {
            return Err(validate::Invalid::new(
                "notify_url",
                format!("must be an absolute http or https URL of at most {max} characters"),
            ));
        }
    };
    crate::webhooks::check_url(webhooks, &parsed).map_err(|refused| {
        validate::Invalid::new(
            "notify_url",
            format!(
                "{refused}, which webhooks may not reach (the nodes' webhook_allow setting \
                 lists internal receivers)"
            ),
        )
    })
}
