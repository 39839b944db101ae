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
use super::service::Service;
use crate::auth::TokenCache;
use baton_coord::Wake;
use baton_store::Store;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// Drops revoked runners' tokens from this node's cache, and reads every cached runner
/// again after a gap in the news and every interval.
pub struct RevocationListener {
    /// How often every cached runner is read again.
    interval: Duration,
    tokens: Arc<TokenCache>,
    store: Store,
}

impl RevocationListener {
    pub(super) fn new(interval: Duration, tokens: Arc<TokenCache>, store: Store) -> Self {
        RevocationListener {
            interval,
            tokens,
            store,
        }
    }

    /// Reads every cached runner again; returns how many.
    pub async fn run_once(&self) -> Result<usize, ServiceError> {
        Ok(self.tokens.refresh(&self.store).await?)
    }
}

impl Service for RevocationListener {
    const NAME: &'static str = "revocation listener";
    type Report = usize;

    async fn pass(&self, _now: DateTime<Utc>) -> Result<usize, ServiceError> {
        self.run_once().await
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    /// The cache starts empty: nothing to read again before an interval has passed.
    fn first_pause(&self) -> Duration {
        self.interval
    }

    /// Expected while Postgres is away: the cached tokens stand until the next refresh.
    fn tell_failure(&self, error: &ServiceError) {
        tracing::debug!(error = %error, "cached runner tokens kept as they were; next refresh");
    }

    /// A revocation is acted on at once, without a pass; a reconnect (`All`) may have
    /// lost some, so every cached runner is read again.
    fn heard(&self, wake: &Wake) -> bool {
        match wake {
            Wake::Revoke(runner) => {
                self.tokens.forget_runner(*runner);
                false
            }
            Wake::All => true,
            _ => false,
        }
    }
}
