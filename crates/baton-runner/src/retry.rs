//! How the agent treats a failed call to the server: some failures mean "stop" (the lease
//! is gone, the runner is unregistered, the request itself is refused), the rest mean
//! "the server is unreachable or busy: try again later", and [`Retrier`] is the one loop
//! that tries again, with backoff, until an answer, a stop or its give-up rule.

use baton_client::{ClientError, StatusCode};
use baton_core::backoff::Backoff;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why the agent must stop trying a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
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
pub(crate) enum CallError {
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

impl CallError {
    /// Whether trying again may succeed: the server was unreachable, failing, or could
    /// not record it yet. A stop or a local failure stays what it is.
    pub(crate) fn retryable(&self) -> bool {
        matches!(self, CallError::Transient(_) | CallError::StoresOut(_))
    }
}

/// A node answered that its own Redis or Postgres is out, and that it still recorded this
/// request as a proof of life every node can see: for self-fencing, that answer counts as
/// contact. A node that lost Redis says it did not: the node that adopts its claims
/// never hears of this runner, and will declare it lost on its own clock.
pub(crate) fn outage_with_presence(e: &ClientError) -> bool {
    matches!(e, ClientError::Api(api)
        if api.status == StatusCode::SERVICE_UNAVAILABLE
            && api.body.error.is(baton_client::ErrorCode::Unavailable)
            && api.body.error.presence_recorded == Some(true))
}

pub(crate) fn classify(e: ClientError) -> CallError {
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
pub(crate) const OUTAGE_PATIENCE: Duration = Duration::from_secs(3600);

/// When a [`Retrier`] stops trying a call that keeps failing with retryable errors.
enum GiveUp {
    /// Never: only an answer, a failure retrying will not mend, or a stop ends it.
    Never,
    /// Once the next try would come after this instant.
    At(Instant),
    /// Once the next try would come after `deadline`, where silence (no node answering)
    /// counts towards it and an answer that the stores are out moves it on to `patience`
    /// from that answer, up to `outage_until`.
    AfterSilence {
        deadline: Instant,
        patience: Duration,
        outage_until: Instant,
    },
}

impl GiveUp {
    /// Whether a try at `next_try` would come too late.
    fn too_late(&self, next_try: Instant) -> bool {
        match self {
            GiveUp::Never => false,
            GiveUp::At(deadline) | GiveUp::AfterSilence { deadline, .. } => next_try > *deadline,
        }
    }

    /// A node answered that its stores are out: it heard us, so that is not silence.
    fn heard_outage(&mut self) {
        if let GiveUp::AfterSilence {
            deadline,
            patience,
            outage_until,
        } = self
        {
            let silence_from_now = Instant::now() + *patience;
            *deadline = (*deadline).max(silence_from_now.min(*outage_until));
        }
    }
}

/// What a stop does to a [`Retrier`] waiting to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnStop {
    /// Ends the wait and the retrying: the last failure is handed back.
    End,
    /// Cuts the wait short for one last try: a failure once stopped is handed back.
    LastTry,
}

/// The agent's one retry loop for calls to the server: it retries retryable failures
/// (see [`CallError::retryable`]) with `backoff`, and hands back the first failure that
/// is not, or the last one when its give-up rule or its stop ends the retrying.
pub(crate) struct Retrier {
    backoff: Backoff,
    /// Failures so far: the next pause is the backoff's step for one more.
    failures: u32,
    give_up: GiveUp,
    stop: Option<(CancellationToken, OnStop)>,
    /// Ends a wait early when the server answers again after silence.
    heard: Option<tokio::sync::watch::Receiver<u64>>,
}

impl Retrier {
    /// Retries for as long as it takes, pacing the tries with `backoff`.
    pub(crate) fn new(backoff: Backoff) -> Self {
        Retrier {
            backoff,
            failures: 0,
            give_up: GiveUp::Never,
            stop: None,
            heard: None,
        }
    }

    /// Ends a wait as soon as `heard` changes: the agent heard from the server again after
    /// failures. A result held through a partition then goes at once, not after the rest
    /// of its backoff — before it, the heartbeats that go out as the link heals would tell
    /// the server the runner is back while its result still waits, and a run that ended
    /// in time could be judged past its timeout.
    pub(crate) fn woken_by(self, heard: tokio::sync::watch::Receiver<u64>) -> Self {
        Retrier {
            heard: Some(heard),
            ..self
        }
    }

    /// Gives up once the next try would come after `deadline`.
    pub(crate) fn until(self, deadline: Instant) -> Self {
        Retrier {
            give_up: GiveUp::At(deadline),
            ..self
        }
    }

    /// Gives up once the next try would come after `deadline`, except that an answer
    /// that the stores are out moves the deadline on: silence (no node answering) ends
    /// the wait after as long as from now to `deadline`, an outage after up to
    /// [`OUTAGE_PATIENCE`] from now.
    pub(crate) fn patient_until(self, deadline: Instant) -> Self {
        let now = Instant::now();
        Retrier {
            give_up: GiveUp::AfterSilence {
                deadline,
                patience: deadline.saturating_duration_since(now),
                outage_until: now + OUTAGE_PATIENCE,
            },
            ..self
        }
    }

    /// What `stop` does: a stop already there when a call fails ends the retrying; one
    /// that comes during a wait does as `on_stop` says.
    pub(crate) fn stopped_by(self, stop: CancellationToken, on_stop: OnStop) -> Self {
        Retrier {
            stop: Some((stop, on_stop)),
            ..self
        }
    }

    /// Makes the call until it is answered, pausing after each retryable failure; hands
    /// back the failure that ended the retrying.
    pub(crate) async fn call<T, Answer>(
        &mut self,
        mut call: impl FnMut() -> Answer,
    ) -> Result<T, CallError>
    where
        Answer: Future<Output = Result<T, CallError>>,
    {
        loop {
            // News from before this try is old: a server heard again while the try was
            // failing ends the pause after it at once.
            if let Some(heard) = &mut self.heard {
                heard.borrow_and_update();
            }
            match call().await {
                Ok(answer) => return Ok(answer),
                Err(e) => self.pause(e).await?,
            }
        }
    }

    /// After a failure: sleeps before the next try when it is retryable, the agent is
    /// not stopping and time remains; otherwise hands the error back.
    pub(crate) async fn pause(&mut self, error: CallError) -> Result<(), CallError> {
        if !error.retryable() {
            return Err(error);
        }
        if let Some((stop, _)) = &self.stop
            && stop.is_cancelled()
        {
            return Err(error);
        }
        if matches!(error, CallError::StoresOut(_)) {
            self.give_up.heard_outage();
        }
        self.failures += 1;
        let delay = self.backoff.delay(self.failures, rand::random());
        if self.give_up.too_late(Instant::now() + delay) {
            return Err(error);
        }
        crate::metrics::backoff();
        let (heard, stop) = (&mut self.heard, &self.stop);
        let heard = async {
            match heard {
                Some(heard) => {
                    if heard.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let stopped = async {
            match stop {
                Some((stop, on_stop)) => {
                    stop.cancelled().await;
                    *on_stop
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            _ = heard => Ok(()),
            on_stop = stopped => match on_stop {
                OnStop::End => Err(error),
                OnStop::LastTry => Ok(()),
            },
        }
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
        let mut retrier = Retrier::new(Backoff::RUNNER).patient_until(start + patience);
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

    /// A stop during a wait: `End` hands the last failure back at once, `LastTry` tries
    /// once more first; a failure that retrying will not mend ends it without a wait.
    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_retrying_or_leaves_one_last_try() {
        for (on_stop, tries_once_stopped) in [(OnStop::End, 0), (OnStop::LastTry, 1)] {
            let stop = CancellationToken::new();
            let stopper = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                stopper.cancel();
            });
            let mut retrier = Retrier::new(Backoff::RUNNER).stopped_by(stop.clone(), on_stop);
            let mut after_stop = 0;
            let ended = retrier
                .call(|| {
                    after_stop += u32::from(stop.is_cancelled());
                    async { Err::<(), _>(CallError::Transient("refused".into())) }
                })
                .await;
            assert!(matches!(ended, Err(CallError::Transient(_))), "{on_stop:?}");
            assert_eq!(after_stop, tries_once_stopped, "{on_stop:?}");
        }
        let mut tries = 0;
        let refused = Retrier::new(Backoff::RUNNER)
            .call(|| {
                tries += 1;
                async { Err::<(), _>(CallError::Stop(Stop::LeaseGone)) }
            })
            .await;
        assert!(matches!(refused, Err(CallError::Stop(Stop::LeaseGone))));
        assert_eq!(tries, 1, "a stop is not retried");
    }

    /// A fixed deadline: an answer that the stores are out moves it no further.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_ends_the_retrying_before_a_try_would_come_after_it() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(20);
        let mut retrier = Retrier::new(Backoff::RUNNER).until(deadline);
        let ended = retrier
            .call(|| async { Err::<(), _>(CallError::StoresOut("database unavailable".into())) })
            .await;
        assert!(matches!(ended, Err(CallError::StoresOut(_))));
        let longest_step = Backoff::RUNNER.delay(u32::MAX, 1.0);
        assert!(Instant::now() <= deadline && Instant::now() > deadline - longest_step);
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
