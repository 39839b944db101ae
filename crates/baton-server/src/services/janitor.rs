//! The janitor: terminal tasks and their logs are deleted `retention` after they
//! finished, a batch at a time so no single statement holds locks for long. A task whose
//! webhook is still undelivered is kept until it is delivered.

use super::ServiceError;
use crate::state::AppState;
use chrono::{DateTime, Utc};
use std::time::Duration;

const BATCH: i64 = 1000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorReport {
    pub tasks_deleted: u64,
    pub outbox_deleted: u64,
}

pub struct Janitor {
    state: AppState,
}

impl Janitor {
    pub fn new(state: AppState) -> Self {
        Janitor { state }
    }

    pub async fn run(self) {
        let interval = Duration::from_millis(self.state.config.timings.janitor_interval_ms);
        let shutdown = self.state.shutdown.clone();
        super::every(interval, shutdown, || async {
            match self.run_once(Utc::now()).await {
                Ok(r) if r.tasks_deleted > 0 => {
                    tracing::info!(deleted = r.tasks_deleted, "retention: old tasks deleted")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "janitor pass failed"),
            }
        })
        .await;
    }

    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<JanitorReport, ServiceError> {
        let retention = chrono::Duration::seconds(self.state.config.timings.retention_s as i64);
        let before = now - retention;
        let mut report = JanitorReport::default();
        loop {
            let deleted = self
                .state
                .store
                .tasks_delete_finished(before, BATCH)
                .await?;
            report.tasks_deleted += deleted;
            if deleted < BATCH as u64 || self.state.shutdown.is_cancelled() {
                break;
            }
        }
        report.outbox_deleted = self
            .state
            .store
            .outbox_delete_delivered(before, BATCH)
            .await?;
        Ok(report)
    }
}
