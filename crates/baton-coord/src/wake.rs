//! Wake-ups across nodes. Submitting publishes the queue key on one Redis channel; each
//! node keeps a single subscriber and fans the message out to its parked lease requests,
//! so a runner parked on node A gets work submitted on node B at once — without any
//! parked request polling Redis. The same channel carries the other news a node must act
//! on at once: a cancel for a parked runner, a revoked runner token, new log output.

use crate::{Coord, CoordError};
use baton_core::RunnerId;
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What the node hears on the wake channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Work was queued in this queue key (`q:<queue>:<labels>`).
    Queue(Arc<str>),
    /// Something concerns this runner (a cancel of one of its tasks): its parked lease
    /// should answer now.
    Runner(RunnerId),
    /// This runner's cached token must be looked up again (deleted, paused, resumed).
    Revoke(RunnerId),
    /// New output for this task: log followers read on.
    Log(Uuid),
    /// These tasks' runs ended: their followers read to the end and stop. (Sent as one
    /// message for a batch of runs; heard as one `Log` per task.)
    Logs(Vec<Uuid>),
    /// Webhooks were written to the outbox: deliverers look now rather than at their
    /// next idle poll.
    Outbox,
    /// A schedule was made or changed: schedule services look again now rather than at
    /// their next poll.
    Schedules,
    /// Anything may have changed (the subscriber reconnected and may have missed
    /// messages): everyone should look again.
    All,
}

impl Wake {
    pub(crate) fn payload(&self) -> String {
        match self {
            Wake::Queue(key) => key.to_string(),
            Wake::Runner(id) => format!("runner:{id}"),
            Wake::Revoke(id) => format!("revoke:{id}"),
            Wake::Log(id) => format!("log:{id}"),
            Wake::Logs(ids) => format!(
                "log:{}",
                ids.iter()
                    .map(Uuid::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Wake::Outbox => "outbox".into(),
            Wake::Schedules => "schedules".into(),
            Wake::All => "all".into(),
        }
    }

    /// What a message means to the node's listeners: a batch of log news is heard as one
    /// `Log` per task.
    fn parse(payload: &str) -> Vec<Wake> {
        let id = |rest: &str| Uuid::parse_str(rest).ok();
        if let Some(w) = payload.strip_prefix("runner:").and_then(id) {
            return vec![Wake::Runner(w.into())];
        }
        if let Some(w) = payload.strip_prefix("revoke:").and_then(id) {
            return vec![Wake::Revoke(w.into())];
        }
        if let Some(ids) = payload.strip_prefix("log:") {
            return ids.split(',').filter_map(id).map(Wake::Log).collect();
        }
        match payload {
            "all" => vec![Wake::All],
            "outbox" => vec![Wake::Outbox],
            "schedules" => vec![Wake::Schedules],
            key => vec![Wake::Queue(key.into())],
        }
    }
}

impl Coord {
    /// Tells every node (their subscribers), e.g. to wake a runner's parked lease.
    pub async fn publish(&self, wake: &Wake) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        redis::cmd("PUBLISH")
            .arg(self.keys.wake())
            .arg(wake.payload())
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}

/// The node's fan-out of wake-ups. Subscribe *before* asking Redis for work, so a task
/// queued between the ask and the park is never missed.
#[derive(Debug, Clone)]
pub struct WakeBus {
    tx: broadcast::Sender<Wake>,
    parked: Arc<AtomicUsize>,
    /// Counts the news of queued work this node has heard (and every reconnection,
    /// after which anything may have been queued): a lease that found nothing can tell
    /// whether anything came since.
    queue_news: Arc<AtomicU64>,
}

/// A parked lease request's receiver; counted while it lives.
pub struct Parked {
    /// The wake-ups this parked request hears.
    pub wakes: broadcast::Receiver<Wake>,
    count: Arc<AtomicUsize>,
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Parked requests that fall this far behind are told `All` (via `Lagged`) rather than
/// holding an unbounded backlog.
const FANOUT_CAPACITY: usize = 1024;
const RECONNECT_MAX: Duration = Duration::from_secs(2);

impl WakeBus {
    /// Starts the node's subscriber; it reconnects until `shutdown`.
    pub fn spawn(coord: &Coord, shutdown: CancellationToken) -> WakeBus {
        let (tx, _) = broadcast::channel(FANOUT_CAPACITY);
        let bus = WakeBus {
            tx,
            parked: Arc::new(AtomicUsize::new(0)),
            queue_news: Arc::new(AtomicU64::new(0)),
        };
        tokio::spawn(subscribe_loop(
            coord.endpoint.clone(),
            coord.keys.wake(),
            bus.clone(),
            shutdown,
        ));
        bus
    }

    /// How much news of queued work this node has heard so far (see `queue_news`).
    pub fn queue_news(&self) -> u64 {
        self.queue_news.load(Ordering::Acquire)
    }

    fn hear(&self, wake: Wake) {
        if matches!(wake, Wake::Queue(_) | Wake::All) {
            self.queue_news.fetch_add(1, Ordering::AcqRel);
        }
        let _ = self.tx.send(wake);
    }

    /// A receiver for the node's own listeners (token revocations, log followers).
    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.tx.subscribe()
    }

    /// A receiver for a lease request about to look for work and maybe park.
    pub fn park(&self) -> Parked {
        self.parked.fetch_add(1, Ordering::Relaxed);
        Parked {
            wakes: self.tx.subscribe(),
            count: self.parked.clone(),
        }
    }

    /// How many lease requests are parked (or looking for work) on this node right now.
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }
}

async fn subscribe_loop(
    endpoint: crate::connection::Endpoint,
    channel: String,
    bus: WakeBus,
    shutdown: CancellationToken,
) {
    let mut failures: u32 = 0;
    loop {
        // Through the sentinels, if any, so a reconnection after a failover finds the
        // new master.
        let pubsub = match endpoint.master_client().await {
            Ok(client) => client.get_async_pubsub().await,
            Err(e) => Err(e),
        };
        match pubsub {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    failures = 0;
                    tracing::debug!(channel, "wake subscriber connected");
                    // Whatever was published while we were not listening is not lost
                    // work (it sits in Redis); parked requests just need to look again.
                    bus.hear(Wake::All);
                    let mut messages = pubsub.on_message();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            msg = messages.next() => match msg {
                                Some(msg) => {
                                    let payload: String = msg.get_payload().unwrap_or_default();
                                    for wake in Wake::parse(&payload) {
                                        bus.hear(wake);
                                    }
                                }
                                None => break,
                            },
                        }
                    }
                    tracing::warn!(channel, "wake subscriber lost its connection");
                }
                Err(e) => tracing::warn!(error = %e, "wake subscribe failed"),
            },
            Err(e) => tracing::warn!(error = %e, "wake subscriber cannot connect"),
        }
        crate::error::count("unavailable");
        failures = failures.saturating_add(1);
        let delay =
            (Duration::from_millis(50) * 2u32.saturating_pow(failures.min(6))).min(RECONNECT_MAX);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        let id = Uuid::new_v4();
        for wake in [
            Wake::Queue("q:default:-".into()),
            Wake::Runner(id.into()),
            Wake::Revoke(id.into()),
            Wake::Log(id),
            Wake::Outbox,
            Wake::All,
        ] {
            assert_eq!(Wake::parse(&wake.payload()), vec![wake]);
        }
        let other = Uuid::new_v4();
        assert_eq!(
            Wake::parse(&Wake::Logs(vec![id, other]).payload()),
            vec![Wake::Log(id), Wake::Log(other)]
        );
    }
}
