//! Outbox delivery, on every node: completion webhooks are POSTed with the task's final
//! state and an `Idempotency-Key` header (task id and final status), retried with backoff
//! until the receiver answers 2xx. At least once; a receiver that keys on the header
//! sees each exactly once. A node that dies mid-delivery leaves the row to come due again.
//!
//! An idle node does not poll the outbox every second: a run that ends with a webhook
//! announces it (`Wake::Outbox`), and every node looks then; while rows are due or
//! failing, it looks every `outbox_interval`; otherwise once per `outbox_idle_poll`, which
//! catches an announcement that was lost.

use super::ServiceError;
use crate::state::AppState;
use baton_coord::Wake;
use baton_core::backoff::Backoff;
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

const BATCH: i64 = 50;

/// Retry pacing for a failing receiver: 1 s doubling to 10 min.
const DELIVERY_RETRY: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(600),
    jitter: 0.2,
};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    pub delivered: usize,
    pub failed: usize,
}

pub struct OutboxDeliverer {
    state: AppState,
}

impl OutboxDeliverer {
    pub fn new(state: AppState) -> Self {
        OutboxDeliverer { state }
    }

    pub async fn run(self) {
        let timings = &self.state.config.timings;
        let busy = Duration::from_millis(timings.outbox_interval_ms);
        let idle = Duration::from_millis(timings.outbox_idle_poll_ms).max(busy);
        let shutdown = self.state.shutdown.clone();
        let mut wakes = self.state.wake.subscribe();
        let mut pause = Duration::ZERO;
        // The pause is the idle backstop, not the wait for a row known to come due: when
        // it ends with no news, one cheap look says whether a pass is worth running.
        let mut backstop = false;
        loop {
            let until = tokio::time::Instant::now() + pause;
            let news = loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(until) => break false,
                    wake = wakes.recv() => match wake {
                        Ok(Wake::Outbox | Wake::All) | Err(RecvError::Lagged(_)) => break true,
                        Ok(_) => continue,
                        Err(RecvError::Closed) => return,
                    },
                }
            };
            if backstop && !news {
                match self.next_due().await {
                    Ok(Some(wait)) if wait.is_zero() => {}
                    Ok(wait) => {
                        (pause, backstop) = paced(wait, busy, idle);
                        continue;
                    }
                    Err(_) => {}
                }
            }
            let limit = (busy * 10).max(Duration::from_secs(60));
            let pass = tokio::select! {
                _ = shutdown.cancelled() => return,
                pass = tokio::time::timeout(limit, self.run_once(Utc::now())) => pass,
            };
            (pause, backstop) = match pass {
                Ok(Ok(report)) if report == DeliveryReport::default() => {
                    match self.next_due().await {
                        Ok(wait) => paced(wait, busy, idle),
                        Err(_) => (busy, false),
                    }
                }
                Ok(Ok(_)) => (busy, false),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "outbox pass failed");
                    (busy, false)
                }
                Err(_) => {
                    tracing::warn!(
                        limit_s = limit.as_secs(),
                        "an outbox pass took too long and was abandoned"
                    );
                    (busy, false)
                }
            };
        }
    }

    /// The body of a webhook whose row holds none: built from the task's final row, which
    /// no longer changes.
    async fn body_of(&self, row: &baton_store::OutboxRecord) -> Result<serde_json::Value, String> {
        match self.state.store.task_get(row.task_id).await {
            Ok(task) => Ok(crate::api::views::webhook_body(&task)),
            // Deleted meanwhile (by hand: the janitor waits for the delivery): the id and
            // the final status are all that is left to say.
            Err(baton_store::StoreError::NotFound) => Ok(serde_json::json!({
                "event": "task.finished",
                "task": { "id": row.task_id },
            })),
            Err(e) => Err(format!("cannot read the task: {e}")),
        }
    }

    /// How long until the next undelivered row comes due (zero: it is due); `None`: no
    /// row waits.
    async fn next_due(&self) -> Result<Option<Duration>, baton_store::StoreError> {
        Ok(self
            .state
            .store
            .outbox_next_due()
            .await?
            .map(|at| (at - Utc::now()).to_std().unwrap_or_default()))
    }

    async fn deliver(
        &self,
        row: &baton_store::OutboxRecord,
        timeout: Duration,
    ) -> Result<(), String> {
        let body = match &row.body {
            Some(body) => body.0.clone(),
            None => self.body_of(row).await?,
        };
        let sent = self
            .state
            .http
            .post(&row.target)
            .timeout(timeout)
            .header("Idempotency-Key", &row.idempotency_key)
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("receiver answered {}", resp.status())),
            Err(e) => Err(format!("request failed: {e}")),
        }
    }

    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<DeliveryReport, ServiceError> {
        let state = &self.state;
        let timeout = Duration::from_millis(state.config.timings.webhook_timeout_ms);
        // Held for twice the request timeout: long enough that no other node sends it
        // while we still might.
        let hold = chrono::Duration::from_std(timeout * 2).unwrap_or_default();
        let rows = state.store.outbox_take_due(now, hold, BATCH).await?;
        // All at once: each row is held for two request timeouts, so the batch must not
        // take longer than one.
        let outcomes =
            futures::future::join_all(rows.iter().map(|row| self.deliver(row, timeout))).await;
        let mut report = DeliveryReport::default();
        for (row, outcome) in rows.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    state.store.outbox_delivered(row.id, Utc::now()).await?;
                    report.delivered += 1;
                }
                Err(error) => {
                    let delay = DELIVERY_RETRY.delay(row.attempts.max(1) as u32, rand::random());
                    let at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
                    tracing::warn!(task.id = %row.task_id, target = %row.target, %error, attempts = row.attempts, "webhook delivery failed; will retry");
                    state.store.outbox_retry_at(row.id, at, &error).await?;
                    report.failed += 1;
                }
            }
        }
        Ok(report)
    }
}
/// The pause until a row comes due (`wait`), within `busy..=idle`, and whether that
/// pause is only the idle backstop.
fn paced(wait: Option<Duration>, busy: Duration, idle: Duration) -> (Duration, bool) {
    match wait {
        Some(wait) if wait < idle => (wait.max(busy), false),
        _ => (idle, true),
    }
}
