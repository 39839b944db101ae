//! Tasks as users read them: the row with what Redis knows of it (a lease not started
//! yet is shown `leased`; the node answering for a dispatched task), and, for one task,
//! its webhook's state and its re-run. The API's task handlers only check who may see
//! what and shape the answer.

use crate::dispatch::Dispatcher;
use crate::dispatch::lease::as_leased;
use crate::views::{notify_state, task_view};
use baton_client::Task;
use baton_coord::Coord;
use baton_core::TaskStatus;
use baton_store::{StoreError, TaskRecord};
use uuid::Uuid;

/// Rows as users see them: a task Postgres calls `queued` whose lease a runner holds (in
/// Redis only, until its start) is shown `leased` to that runner. Without Redis, as
/// stored.
pub(crate) async fn with_leases(coord: &Coord, rows: Vec<TaskRecord>) -> Vec<TaskRecord> {
    let queued: Vec<Uuid> = rows
        .iter()
        .filter(|t| t.status == TaskStatus::Queued)
        .map(|t| t.id)
        .collect();
    if queued.is_empty() {
        return rows;
    }
    let claims = match coord.claims_by_task(&queued).await {
        Ok(claims) => claims,
        Err(e) => {
            tracing::debug!(error = %e, "leases not shown: redis unavailable");
            return rows;
        }
    };
    rows.into_iter()
        .map(|t| match claims.get(&t.id) {
            Some(claim) => as_leased(t, claim),
            None => t,
        })
        .collect()
}

/// One task whole, as `GET /v1/tasks/{id}` shows it.
pub(crate) async fn detail(dispatcher: &Dispatcher, task: TaskRecord) -> Result<Task, StoreError> {
    let id = task.id;
    let task = with_leases(&dispatcher.coord, vec![task])
        .await
        .pop()
        .expect("one row");
    // Which node answers for it while a runner holds it (best effort: without Redis,
    // not shown).
    let node_id = if task.status.is_dispatched() {
        match dispatcher.coord.claim_get(id).await {
            Ok(claim) => claim.map(|c| c.node),
            Err(_) => None,
        }
    } else {
        None
    };
    // Only here, not in lists: one more indexed read, for one task.
    let webhook = match &task.notify_url {
        Some(_) if task.status.is_terminal() => dispatcher
            .store
            .outbox_state_of(task.id, task.status)
            .await?
            .map(notify_state),
        _ => None,
    };
    // The same for its re-run: an ended task's only.
    let retried_by = if task.status.is_terminal() {
        dispatcher.store.task_rerun(&task).await?.map(|r| r.id)
    } else {
        None
    };
    Ok(Task {
        notify_state: webhook,
        retried_by,
        node_id,
        ..task_view(task)
    })
}
