//! A start's checks: against its task's claim before Postgres is asked, against the row
//! when Redis holds no claim, and the secrets only a recorded start is handed.

use super::super::DispatchError;
use super::super::Dispatcher;
use super::super::lease;
use crate::auth::Runner;
use baton_coord::Claim;
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_store::{StartRun, Started, TaskRecord};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A recorded start, and what only a recorded start gets: the task's secrets, opened.
#[derive(Clone)]
pub(crate) struct StartAnswer {
    pub started: Started,
    pub secret_env: BTreeMap<String, String>,
}

/// The secrets' names only: an answer logged whole must not carry their values.
impl std::fmt::Debug for StartAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartAnswer")
            .field("started", &self.started)
            .field("secret_env", &self.secret_env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// How a start is decided before Postgres is asked.
pub(super) enum StartCheck {
    /// Its lease matches the task's claim: Postgres records it.
    Record(StartRun),
    /// No claim: only the row can tell (a repeat whose claim Redis lost, or a lease
    /// taken back).
    AskRow,
    Refused(DispatchError),
}

pub(super) fn check_start(
    runner: &Runner,
    boot_id: Option<Uuid>,
    task: Uuid,
    lease_id: LeaseId,
    claim: Option<&Claim>,
) -> StartCheck {
    let Some(claim) = claim else {
        return StartCheck::AskRow;
    };
    // Claims written before they carried their runner name none; the Postgres
    // compare-and-set still checks the lease.
    let ours = claim.runner.is_none_or(|r| r == runner.id);
    if !ours {
        return StartCheck::Refused(DispatchError::Gone);
    }
    if claim.lease_id != lease_id {
        return StartCheck::Refused(stale());
    }
    StartCheck::Record(StartRun {
        task,
        lease_id,
        runner_id: runner.id,
        boot_id: claim.boot.or(boot_id),
        leased_at: at_ms(claim.claimed_at_ms),
    })
}

fn stale() -> DispatchError {
    DispatchError::Stale {
        status: baton_core::TaskStatus::Queued,
        reason: "stale lease: the task was leased again",
    }
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// A start with no claim to check: the row decides. The same start again under the same
/// lease (Redis lost the claim) took effect; anything else is not the runner's to run.
pub(super) fn start_from_row(
    row: Option<&TaskRecord>,
    runner: RunnerId,
    lease_id: LeaseId,
) -> Result<Started, DispatchError> {
    let row = row
        .filter(|t| t.runner_id == Some(runner))
        .ok_or(DispatchError::Gone)?;
    if row.lease_id != Some(lease_id) {
        return Err(stale());
    }
    if matches!(
        row.status,
        baton_core::TaskStatus::Running | baton_core::TaskStatus::Cancelling
    ) {
        return Ok(Started {
            status: row.status,
            attempt: row.attempt,
        });
    }
    Err(DispatchError::Stale {
        status: row.status,
        reason: "the task is not in a dispatcher that accepts this report",
    })
}

/// A recorded start with its task's secrets. One whose secrets this node cannot open
/// (it lacks the key that sealed them) is answered as not the runner's to run: run
/// without them it would do something else than was asked. Its runner drops it unrun,
/// and the run is ended as forgotten (`verdicts::end_forgotten_runs`).
pub(super) fn with_secrets(
    dispatcher: &Dispatcher,
    started: Started,
    row: Option<&TaskRecord>,
) -> Result<StartAnswer, DispatchError> {
    let secret_env = match row {
        Some(row) => lease::opened_secrets(dispatcher, row).map_err(|e| {
            tracing::error!(task.id = %row.id, error = %e, "start recorded, but its secrets do not open on this node");
            DispatchError::SecretsSealed(e.to_string())
        })?,
        // Deleted as it started: nothing to run, and nothing to hand over.
        None => BTreeMap::new(),
    };
    Ok(StartAnswer {
        started,
        secret_env,
    })
}
