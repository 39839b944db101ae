//! The revocation listener: keeps this node's cache of runner tokens true. A runner
//! deleted, paused or resumed on any node is announced through Redis (`Wake::Revoke`),
//! and its cached token is dropped at once; after a gap in that feed (the subscriber
//! lagged or reconnected), and every `interval` anyway, every cached runner is read again
//! in one query, which catches a revocation this node missed.
//!
//! When Postgres cannot answer, the cache stays as it is: emptied, it would turn every
//! runner's next poll into a Postgres query that fails, and the runners would go unheard
//! — their presence frozen — for as long as the outage lasts. The next refresh settles it.

use super::ServiceError;
use crate::auth::TokenCache;
use baton_coord::{Wake, WakeBus};
use baton_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

pub(super) struct RevocationListener {
    /// How often every cached runner is read again.
    interval: Duration,
    tokens: Arc<TokenCache>,
    store: Store,
    wake: WakeBus,
}

impl RevocationListener {
    pub(super) fn new(
        interval: Duration,
        tokens: Arc<TokenCache>,
        store: Store,
        wake: WakeBus,
    ) -> Self {
        RevocationListener {
            interval,
            tokens,
            store,
            wake,
        }
    }

    pub(super) async fn run(self, shutdown: CancellationToken) {
        let mut wakes = self.wake.subscribe();
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.reset();
        loop {
            let refresh = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => true,
                wake = wakes.recv() => match wake {
                    Ok(Wake::Revoke(runner)) => {
                        self.tokens.forget_runner(runner);
                        false
                    }
                    Ok(Wake::All) | Err(RecvError::Lagged(_)) => true,
                    Ok(_) => false,
                    Err(RecvError::Closed) => return,
                },
            };
            if refresh && let Err(e) = self.run_once().await {
                tracing::debug!(error = %e, "cached runner tokens kept as they were; next refresh");
            }
        }
    }

    /// Reads every cached runner again; returns how many.
    pub(super) async fn run_once(&self) -> Result<usize, ServiceError> {
        Ok(self.tokens.refresh(&self.store).await?)
    }
}
