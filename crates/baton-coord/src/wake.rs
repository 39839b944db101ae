//! Wake-ups across nodes. Submitting publishes the queue key on one Redis channel; each
//! node keeps a single subscriber and fans the message out to its parked lease requests,
//! so a runner parked on node A gets work submitted on node B at once — without any
//! parked request polling Redis.

use crate::Coord;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// What a parked request is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Work was queued in this queue key (`q:<queue>:<labels>`).
    Queue(Arc<str>),
    /// Anything may have changed (the subscriber reconnected and may have missed
    /// messages): every parked request should look again.
    All,
}

/// The node's fan-out of wake-ups. Subscribe *before* asking Redis for work, so a task
/// queued between the ask and the park is never missed.
#[derive(Debug, Clone)]
pub struct WakeBus {
    tx: broadcast::Sender<Wake>,
}

/// Parked requests that fall this far behind are told `All` (via `Lagged`) rather than
/// holding an unbounded backlog.
const FANOUT_CAPACITY: usize = 1024;
const RECONNECT_MAX: Duration = Duration::from_secs(2);

impl WakeBus {
    /// Starts the node's subscriber; it reconnects until `shutdown`.
    pub fn spawn(coord: &Coord, shutdown: CancellationToken) -> WakeBus {
        let (tx, _) = broadcast::channel(FANOUT_CAPACITY);
        let bus = WakeBus { tx };
        tokio::spawn(subscribe_loop(
            coord.target.clone(),
            coord.keys.wake(),
            bus.tx.clone(),
            shutdown,
        ));
        bus
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.tx.subscribe()
    }

    /// How many requests are parked on this node right now.
    pub fn parked(&self) -> usize {
        self.tx.receiver_count()
    }
}

async fn subscribe_loop(
    target: crate::RedisTarget,
    channel: String,
    tx: broadcast::Sender<Wake>,
    shutdown: CancellationToken,
) {
    let mut failures: u32 = 0;
    loop {
        // Through the sentinels, if any, so a reconnection after a failover finds the
        // new master.
        let pubsub = match target.master_client().await {
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
                    let _ = tx.send(Wake::All);
                    let mut messages = pubsub.on_message();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            msg = messages.next() => match msg {
                                Some(msg) => {
                                    let key: String = msg.get_payload().unwrap_or_default();
                                    let _ = tx.send(Wake::Queue(key.into()));
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
        failures = failures.saturating_add(1);
        let delay =
            (Duration::from_millis(50) * 2u32.saturating_pow(failures.min(6))).min(RECONNECT_MAX);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
