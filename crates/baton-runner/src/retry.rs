//! How the agent treats a failed call to the server: some failures mean "stop" (the lease
//! is gone, the runner is unregistered, the request itself is refused), the rest mean
//! "the server is unreachable or busy: try again later".

use baton_client::{ClientError, StatusCode};
use baton_core::backoff::Backoff;
use std::time::Duration;
use tokio::time::Instant;

/// Why the agent must stop trying a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The lease is no longer ours (409/404/403): stop the task, report nothing.
    LeaseGone,
    /// The runner is no longer registered (401): the agent exits.
    Unregistered,
    /// The server refuses the request itself (a 4xx that retrying will not change).
    Refused(String),
    /// The server cannot serve a runner of this version (426): the agent exits.
    Incompatible(String),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("{0:?}")]
    Stop(Stop),
    /// Unreachable, failing, or unable to record it now: try again.
    #[error("server unreachable or failing: {0}")]
    Transient(String),
    /// The node is up and heard us, but its Postgres is out, so it cannot record this
    /// now: try again for as long as the outage lasts (up to [`OUTAGE_PATIENCE`]), since
    /// a result given up on is a run done for nothing.
    #[error("the server's stores are out: {0}")]
    StoresOut(String),
    #[error("local failure: {0}")]
    Local(String),
}

/// A node answered that its own Redis or Postgres is out, and that it still recorded this
/// request as a proof of life every node can see: for self-fencing, that answer counts as
/// contact. A node that lost Redis says it did not: the node that adopts its claims
/// never hears of this runner, and will declare it lost on its own clock.
pub fn outage_with_presence(e: &ClientError) -> bool {
    matches!(e, ClientError::Api(api)
        if api.status == StatusCode::SERVICE_UNAVAILABLE
            && api.body.error.is(baton_client::ErrorCode::Unavailable)
            && api.body.error.presence_recorded == Some(true))
}

pub fn classify(e: ClientError) -> CallError {
    if outage_with_presence(&e) {
        return CallError::StoresOut(e.to_string());
    }
    match e.status() {
        Some(StatusCode::UNAUTHORIZED) => CallError::Stop(Stop::Unregistered),
        Some(StatusCode::UPGRADE_REQUIRED) => CallError::Stop(Stop::Incompatible(e.to_string())),
        Some(StatusCode::CONFLICT | StatusCode::NOT_FOUND | StatusCode::FORBIDDEN) => {
            CallError::Stop(Stop::LeaseGone)
        }
        Some(s)
            if s.is_client_error()
                && s != StatusCode::REQUEST_TIMEOUT
                && s != StatusCode::TOO_MANY_REQUESTS =>
        {
            CallError::Stop(Stop::Refused(e.to_string()))
        }
        _ => CallError::Transient(e.to_string()),
    }
}

/// How long a report is retried while nodes answer that their stores are out: a Postgres
/// failover or restart takes far less, and an agent asked to stop waits no longer.
pub const OUTAGE_PATIENCE: Duration = Duration::from_secs(3600);

/// Paces retries of transient failures with backoff, up to a deadline. Silence (no node
/// answering) counts towards the deadline; an answer that the stores are out moves it on,
/// up to [`OUTAGE_PATIENCE`] from the first try.
pub struct Retrier {
    deadline: Instant,
    patience: Duration,
    outage_until: Instant,
    failures: u32,
}

impl Retrier {
    pub fn new(deadline: Instant) -> Self {
        let now = Instant::now();
        Retrier {
            deadline,
            patience: deadline.saturating_duration_since(now),
            outage_until: now + OUTAGE_PATIENCE,
            failures: 0,
        }
    }

    /// After a failure: sleeps before the next try when it is transient and time
    /// remains; otherwise hands the error back.
    pub async fn pause(&mut self, error: CallError) -> Result<(), CallError> {
        match &error {
            CallError::Transient(_) => {}
            CallError::StoresOut(_) => {
                let silence_from_now = Instant::now() + self.patience;
                self.deadline = self.deadline.max(silence_from_now.min(self.outage_until));
            }
            _ => return Err(error),
        }
        self.failures += 1;
        let delay = Backoff::RUNNER.delay(self.failures, rand::random());
        if Instant::now() + delay > self.deadline {
            return Err(error);
        }
        crate::metrics::backoff();
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::{ApiError, ErrorBody, ErrorDetail};

    fn unavailable(presence_recorded: Option<bool>) -> ClientError {
        ClientError::Api(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body: ErrorBody {
                error: ErrorDetail {
                    code: "unavailable".into(),
                    message: "redis unavailable".into(),
                    offset: None,
                    status: None,
                    presence_recorded,
                },
            },
        })
    }

    /// A Postgres outage longer than the report patience: the result waits it out while
    /// nodes answer that they heard us; silence still ends the wait after the patience.
    #[tokio::test(start_paused = true)]
    async fn a_report_waits_out_a_stores_outage_but_not_silence() {
        let patience = Duration::from_secs(120);
        let start = Instant::now();
        let mut retrier = Retrier::new(start + patience);
        let stores_out = || CallError::StoresOut("database unavailable".into());
        let mut last_vouched = start;
        while Instant::now() < start + Duration::from_secs(600) {
            last_vouched = Instant::now();
            retrier
                .pause(stores_out())
                .await
                .expect("still waiting out the outage");
        }
        let given_up = loop {
            if let Err(e) = retrier.pause(CallError::Transient("refused".into())).await {
                break e;
            }
        };
        assert!(matches!(given_up, CallError::Transient(_)));
        // The wait ends within one (jittered) backoff step of `patience` after the last
        // answer that vouched for us; the steps are random, so that is the tightest bound.
        let longest_step = Backoff::RUNNER.delay(u32::MAX, 1.0);
        let waited = Instant::now() - last_vouched;
        assert!(
            waited <= patience && waited > patience - longest_step,
            "silence after the outage still ends the wait about the patience after the last \
             answer: {waited:?}"
        );
    }

    #[test]
    fn an_outage_is_contact_only_when_the_node_vouches_for_the_runner() {
        assert!(matches!(
            classify(unavailable(Some(true))),
            CallError::StoresOut(_)
        ));
        assert!(matches!(
            classify(unavailable(Some(false))),
            CallError::Transient(_)
        ));
        assert!(outage_with_presence(&unavailable(Some(true))));
        // A node that lost Redis, and a node too old to say: not contact.
        assert!(!outage_with_presence(&unavailable(Some(false))));
        assert!(!outage_with_presence(&unavailable(None)));
    }
}
