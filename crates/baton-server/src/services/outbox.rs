//! Outbox delivery, on every node: completion webhooks are POSTed with the task's final
//! state, an `Idempotency-Key` header (task id and final status) and a Standard Webhooks
//! signature, and retried with backoff until the receiver answers 2xx, or until the
//! delivery is given up (`webhook_max_attempts` attempts, or `webhook_max_age_s` after the
//! task ended; the task then shows its webhook `failed`). At least once; a receiver that
//! keys on the header sees each exactly once. A node that dies mid-delivery leaves the row
//! to come due again. What a delivery may reach is [`crate::webhooks`]' to say.
//!
//! One slow receiver cannot hold up the others: each delivery runs on its own, up to
//! [`IN_FLIGHT`] at once per node, and a pass only starts them. A row stays held (its next
//! attempt pushed forward) while its delivery is in flight, and a pass takes no more rows
//! than there are free slots, so no row waits held for a slot.
//!
//! An idle node does not poll the outbox every second: a run that ends with a webhook
//! announces it (`Wake::Outbox`), and every node looks then; while rows are due or
//! failing, it looks every `outbox_interval`; otherwise once per `outbox_idle_poll`, which
//! catches an announcement that was lost.

use super::ServiceError;
use super::service::{Passed, Service};
use crate::config::ServeConfig;
use crate::webhooks::{Webhooks, redacted};
use baton_coord::{ClusterClock, Wake};
use baton_core::backoff::Backoff;
use baton_store::{OutboxRecord, Store};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const BATCH: i64 = 50;

/// Deliveries in flight at once on one node. Each is bounded by the request timeout, so
/// this many hung receivers hold this many slots for that long, and the rest wait.
pub(super) const IN_FLIGHT: usize = 32;

/// Retry pacing for a failing receiver: 1 s doubling to 10 min.
const DELIVERY_RETRY: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(600),
    jitter: 0.2,
};

/// What a pass did: deliveries started (their outcomes are recorded as they end), rows
/// given up without an attempt (too old), and whether every slot was busy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    /// Deliveries started.
    pub started: usize,
    /// Rows given up without an attempt.
    pub given_up: usize,
    /// Every delivery slot was busy: the next pass comes at once.
    pub saturated: bool,
}

/// When a delivery stops being tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveUp {
    /// Attempts at most.
    pub max_attempts: i32,
    /// Counted from the task's end (the row's creation).
    pub max_age: chrono::Duration,
}

/// After an attempt failed: when to try again, or why not — its attempts are used up,
/// or the next one would come after the age limit.
pub(super) fn retry_at(
    give_up: GiveUp,
    attempts: i32,
    created_at: DateTime<Utc>,
    now: DateTime<Utc>,
    delay: Duration,
) -> Result<DateTime<Utc>, String> {
    let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
    if attempts >= give_up.max_attempts {
        Err(format!("given up after {attempts} attempts"))
    } else if at >= created_at + give_up.max_age {
        Err(format!(
            "given up: the next attempt would come after the age limit of {} s",
            give_up.max_age.num_seconds()
        ))
    } else {
        Ok(at)
    }
}

/// Before an attempt: why this row is given up without one (the limits were lowered
/// since it was last tried, or its node died holding it), or `None` to go on.
/// `attempts` counts the attempt about to be made.
pub(super) fn spent(
    give_up: GiveUp,
    attempts: i32,
    created_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<String> {
    if attempts > give_up.max_attempts {
        Some(format!("given up after {} attempts", give_up.max_attempts))
    } else if now >= created_at + give_up.max_age {
        Some(format!(
            "given up: older than {} s",
            give_up.max_age.num_seconds()
        ))
    } else {
        None
    }
}

/// How the outbox paces its passes and its deliveries.
#[derive(Debug, Clone)]
pub struct OutboxSettings {
    /// How often it looks while rows are due or failing.
    pub busy: Duration,
    /// With no news of new webhooks, how often it looks anyway.
    pub idle: Duration,
    /// One delivery's request.
    pub timeout: Duration,
    /// When a delivery stops being tried.
    pub give_up: GiveUp,
}

impl OutboxSettings {
    pub(super) fn of(config: &ServeConfig) -> Self {
        let timings = &config.timings;
        let busy = Duration::from_millis(timings.outbox_interval_ms);
        OutboxSettings {
            busy,
            idle: Duration::from_millis(timings.outbox_idle_poll_ms).max(busy),
            timeout: Duration::from_millis(timings.webhook_timeout_ms),
            give_up: GiveUp {
                max_attempts: i32::try_from(config.webhook_max_attempts.max(1)).unwrap_or(i32::MAX),
                max_age: chrono::Duration::seconds(
                    i64::try_from(config.webhook_max_age_s).unwrap_or(i64::MAX / 1000),
                ),
            },
        }
    }
}

/// Delivers the webhooks of ended tasks from the outbox table, retrying failed ones with
/// backoff until they succeed or are given up.
pub struct OutboxDeliverer {
    settings: OutboxSettings,
    courier: Courier,
    /// Free delivery slots.
    slots: Arc<Semaphore>,
    /// Cancelled when the node stops: deliveries in flight stop with it, as at a crash
    /// (their rows come due again). The node's, not the value's: a deliverer a test
    /// built and dropped leaves the deliveries it started to end on their own.
    stop: CancellationToken,
    /// The pause now running is the idle backstop, not the wait for a row known to come
    /// due: when it ends with no news, one cheap look says whether a pass is worth it.
    backstop: bool,
}

impl OutboxDeliverer {
    pub(super) fn new(
        settings: OutboxSettings,
        store: Store,
        webhooks: Arc<Webhooks>,
        clock: Arc<ClusterClock>,
        stop: CancellationToken,
    ) -> Self {
        OutboxDeliverer {
            courier: Courier {
                store,
                webhooks,
                clock,
                give_up: settings.give_up,
            },
            settings,
            slots: Arc::new(Semaphore::new(IN_FLIGHT)),
            stop,
            backstop: false,
        }
    }

    /// The bodies of the rows that hold none, built from their tasks' final rows (which
    /// no longer change), all read in one query. A task deleted meanwhile (by hand: the
    /// janitor waits for the delivery) gets a body with its id alone.
    async fn bodies_of(
        &self,
        rows: &[OutboxRecord],
    ) -> Result<HashMap<Uuid, serde_json::Value>, baton_store::StoreError> {
        let ids: Vec<Uuid> = rows
            .iter()
            .filter(|r| r.body.is_none())
            .map(|r| r.task_id)
            .collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let tasks = self.courier.store.tasks_map(&ids).await?;
        Ok(ids
            .into_iter()
            .map(|id| {
                let body = match tasks.get(&id) {
                    Some(task) => crate::views::webhook_body(task),
                    None => serde_json::json!({ "event": "task.finished", "task": { "id": id } }),
                };
                (id, body)
            })
            .collect())
    }

    /// How long until the next row still to deliver comes due (zero: it is due); `None`:
    /// no row waits.
    async fn next_due(&self) -> Result<Option<Duration>, baton_store::StoreError> {
        Ok(self
            .courier
            .store
            .outbox_next_due()
            .await?
            .map(|at| (at - self.courier.clock.now()).to_std().unwrap_or_default()))
    }

    /// Takes the due rows there are free slots for and starts their deliveries; returns
    /// without waiting for them.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<DeliveryReport, ServiceError> {
        let free = self.slots.available_permits().min(BATCH as usize);
        if free == 0 {
            return Ok(DeliveryReport {
                saturated: true,
                ..DeliveryReport::default()
            });
        }
        // Held for twice the request timeout: long enough that no other node sends it
        // while this one still might.
        let hold = chrono::Duration::from_std(self.settings.timeout * 2).unwrap_or_default();
        let rows = self
            .courier
            .store
            .outbox_take_due(now, hold, free as i64)
            .await?;
        let bodies = self.bodies_of(&rows).await?;
        let mut report = DeliveryReport::default();
        for row in rows {
            if let Some(why) = spent(self.settings.give_up, row.attempts, row.created_at, now) {
                self.courier.give_up(&row, None, &why).await?;
                report.given_up += 1;
                continue;
            }
            // Rows of earlier releases carry their body; the others' were built above.
            let body = match row.body.as_ref().map(|b| &b.0).or(bodies.get(&row.task_id)) {
                Some(body) => serde_json::to_vec(body).expect("a JSON value serialises"),
                None => continue,
            };
            // Never waits: no more rows were taken than there were free slots, and only
            // this pass takes slots.
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                break;
            };
            let (courier, stop) = (self.courier.clone(), self.stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = courier.deliver(&row, &body) => {}
                }
                drop(slot);
            });
            report.started += 1;
        }
        Ok(report)
    }
}

/// One delivery's work, from the POST to recording how it went.
#[derive(Clone)]
struct Courier {
    store: Store,
    webhooks: Arc<Webhooks>,
    /// Delivery and retry times are the cluster's: any node takes a row when it is due.
    clock: Arc<ClusterClock>,
    give_up: GiveUp,
}

impl Courier {
    async fn deliver(&self, row: &OutboxRecord, body: &[u8]) {
        let outcome = self
            .webhooks
            .send(&row.target, &row.idempotency_key, body)
            .await;
        // From when it ended, not from the pass's start: a delivery may have waited out
        // its whole timeout.
        let now = self.clock.now();
        let recorded = match outcome {
            Ok(()) => self.store.outbox_delivered(row.id, now).await,
            Err(error) => {
                let delay = DELIVERY_RETRY.delay(row.attempts.max(1) as u32, rand::random());
                match retry_at(self.give_up, row.attempts, row.created_at, now, delay) {
                    Ok(at) => {
                        tracing::warn!(task.id = %row.task_id, target = %redacted(&row.target), %error, attempts = row.attempts, "webhook delivery failed; will retry");
                        self.store.outbox_retry_at(row.id, at, &error).await
                    }
                    Err(why) => self.give_up(row, Some(&error), &why).await,
                }
            }
        };
        if let Err(e) = recorded {
            tracing::warn!(task.id = %row.task_id, error = %e, "could not record a webhook delivery's outcome; it comes due again");
        }
    }

    /// Records the row given up: `error` is its last failure (`None`: the one stored
    /// stands), `why` what ran out.
    async fn give_up(
        &self,
        row: &OutboxRecord,
        error: Option<&str>,
        why: &str,
    ) -> Result<(), baton_store::StoreError> {
        tracing::warn!(task.id = %row.task_id, target = %redacted(&row.target), error = error.unwrap_or_default(), why, attempts = row.attempts, "webhook delivery given up");
        self.store
            .outbox_give_up(row.id, self.clock.now(), error, why)
            .await
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

impl Service for OutboxDeliverer {
    const NAME: &'static str = "outbox";
    type Report = DeliveryReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<DeliveryReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.settings.busy
    }

    fn heard(&self, wake: &Wake) -> bool {
        matches!(wake, Wake::Outbox | Wake::All)
    }

    async fn before_timed_pass(&mut self) -> Option<Duration> {
        if !self.backstop {
            return None;
        }
        match self.next_due().await {
            Ok(Some(wait)) if wait.is_zero() => None,
            Ok(wait) => {
                let pause;
                (pause, self.backstop) = paced(wait, self.settings.busy, self.settings.idle);
                Some(pause)
            }
            Err(_) => None,
        }
    }

    /// Until the next row comes due (within `busy..=idle`) after a pass that found
    /// nothing to do; `busy` after one that delivered, or failed.
    async fn pause_after(&mut self, passed: &Passed<DeliveryReport>, _took: Duration) -> Duration {
        let busy = self.settings.busy;
        let pause;
        (pause, self.backstop) = match passed {
            Passed::Done(report) if *report == DeliveryReport::default() => {
                match self.next_due().await {
                    Ok(wait) => paced(wait, busy, self.settings.idle),
                    Err(_) => (busy, false),
                }
            }
            _ => (busy, false),
        };
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    const LIMITS: GiveUp = GiveUp {
        max_attempts: 3,
        max_age: chrono::Duration::seconds(100),
    };

    #[test]
    fn a_failed_delivery_is_retried_until_attempts_or_age_run_out() {
        let delay = Duration::from_secs(10);
        // (attempts made, failed at) -> retried at, or given up
        let table = [
            (1, 0, Some(at(10))),
            (2, 50, Some(at(60))),
            (3, 50, None), // that was the last attempt
            (2, 89, Some(at(99))),
            (2, 90, None), // the retry would come at the age limit
            (2, 200, None),
        ];
        for (attempts, failed_at, expected) in table {
            assert_eq!(
                retry_at(LIMITS, attempts, at(0), at(failed_at), delay).ok(),
                expected,
                "attempts {attempts}, failed at {failed_at}"
            );
        }
        assert!(
            retry_at(LIMITS, 3, at(0), at(1), delay)
                .unwrap_err()
                .contains("after 3 attempts")
        );
    }

    #[test]
    fn a_row_past_its_limits_is_given_up_without_an_attempt() {
        assert_eq!(spent(LIMITS, 3, at(0), at(99)), None);
        assert!(
            spent(LIMITS, 4, at(0), at(1))
                .unwrap()
                .contains("3 attempts")
        );
        assert!(
            spent(LIMITS, 1, at(0), at(100))
                .unwrap()
                .contains("older than 100 s")
        );
    }

    #[test]
    fn the_pause_follows_the_next_due_row_within_busy_and_idle() {
        let (busy, idle) = (Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(paced(None, busy, idle), (idle, true));
        assert_eq!(paced(Some(Duration::ZERO), busy, idle), (busy, false));
        assert_eq!(
            paced(Some(Duration::from_secs(5)), busy, idle),
            (Duration::from_secs(5), false)
        );
        assert_eq!(
            paced(Some(Duration::from_secs(60)), busy, idle),
            (idle, true)
        );
    }
}
