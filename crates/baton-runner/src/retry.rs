//! How the agent treats a failed call to the server: some failures mean "stop" (the lease
//! is gone, the runner is unregistered, the request itself is refused), the rest mean
//! "the server is unreachable or busy: try again later".

use baton_client::{ClientError, StatusCode};
use baton_core::backoff::Backoff;
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
    #[error("local failure: {0}")]
    Local(String),
}

/// A node answered that its own Redis or Postgres is out. The server restarts its
/// staleness clocks after such an outage, so it will not declare this runner lost over
/// it: for self-fencing, that answer counts as contact.
pub fn server_outage(e: &ClientError) -> bool {
    matches!(e, ClientError::Api(api)
        if api.status == StatusCode::SERVICE_UNAVAILABLE && api.body.error.code == "unavailable")
}

pub fn classify(e: ClientError) -> CallError {
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

/// Paces retries of transient failures with backoff, up to a deadline.
pub struct Retrier {
    deadline: Instant,
    failures: u32,
}

impl Retrier {
    pub fn new(deadline: Instant) -> Self {
        Retrier {
            deadline,
            failures: 0,
        }
    }

    /// After a failure: sleeps before the next try when it is transient and time
    /// remains; otherwise hands the error back.
    pub async fn pause(&mut self, error: CallError) -> Result<(), CallError> {
        let CallError::Transient(_) = &error else {
            return Err(error);
        };
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
