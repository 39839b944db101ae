//! What every background service of a node is: a pass at a time, as of a time it is
//! given, run by one loop ([`run`]) on its pause or when a wake-up calls for it, with
//! a pass stuck on a call that never answers abandoned rather than stopping the service
//! for good. A service says only what differs: what a pass does, how long to pause
//! after it, which wake-ups call for one. (The looks a service makes to choose its
//! pause, `pause_after` and `before_timed_pass`, are its own to bound.)

use super::ServiceError;
use baton_coord::{ClusterClock, Wake, WakeBus};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// How a pass went.
#[derive(Debug)]
pub enum Passed<R> {
    /// It ran to its end, with this report.
    Done(R),
    /// A store failed it; the next pass tries again.
    Failed(ServiceError),
    /// It ran past [`Service::limit`] and was abandoned.
    Stuck,
}

/// A background service of a node.
pub trait Service: Send + Sized + 'static {
    /// Its name in the node's log.
    const NAME: &'static str;
    /// What a pass did.
    type Report: std::fmt::Debug + Send;

    /// One pass as of `now` (the cluster's time; tests give their own).
    fn pass(
        &self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Self::Report, ServiceError>> + Send;

    /// The pause between passes, when the service does not choose another.
    fn interval(&self) -> Duration;

    /// The pause before the first pass: none, unless the service says otherwise.
    fn first_pause(&self) -> Duration {
        Duration::ZERO
    }

    /// The pause before the next pass, given how this one went and how long it took.
    /// The default keeps the interval's cadence from the passes' starts; a pass that
    /// overran it is followed by the next at once (and the cadence goes on from there),
    /// so a slow pass delays the next by no more than its own overrun.
    fn pause_after(
        &mut self,
        passed: &Passed<Self::Report>,
        took: Duration,
    ) -> impl Future<Output = Duration> + Send {
        let _ = passed;
        let interval = self.interval();
        async move { interval.saturating_sub(took) }
    }

    /// Before a pass that the pause's end called for (no wake-up did): another pause
    /// instead, when a cheap look finds nothing worth a pass. The default: pass.
    fn before_timed_pass(&mut self) -> impl Future<Output = Option<Duration>> + Send {
        async { None }
    }

    /// A wake-up heard while pausing: whether it calls for a pass now. A service may act
    /// on it at once instead (and say no). The default: none does.
    fn heard(&self, wake: &Wake) -> bool {
        let _ = wake;
        false
    }

    /// How long a pass may take before it is abandoned.
    fn limit(&self) -> Duration {
        (self.interval() * 10).max(Duration::from_secs(60))
    }

    /// Logs what a pass did, when it is worth a line.
    fn tell(&self, report: &Self::Report) {
        let _ = report;
    }

    /// Logs a failed pass: a warning, unless the service says a failure is expected (a
    /// store away) and not worth one.
    fn tell_failure(&self, error: &ServiceError) {
        tracing::warn!(service = Self::NAME, error = %error, "a service pass failed");
    }
}

/// What a service runs with: when to stop, the cluster's time, and the node's wake-ups
/// (for a service that [`Service::heard`] any).
pub struct Running {
    /// Cancelled when the node stops serving: the loop returns, a pass in flight is
    /// dropped where it stands, as at a crash (every step is a compare-and-set, so
    /// nothing is left half-done).
    pub shutdown: CancellationToken,
    /// The cluster's time, read at each pass's start.
    pub clock: Arc<ClusterClock>,
    /// Where wake-ups arrive; `None`: the service runs on its pauses only.
    pub wake: Option<WakeBus>,
}

/// Runs `service` until shutdown.
pub async fn run<S: Service>(mut service: S, running: Running) {
    let Running {
        shutdown,
        clock,
        wake,
    } = running;
    let mut wakes = wake.map(|w| w.subscribe());
    let mut pause = service.first_pause();
    loop {
        let until = tokio::time::Instant::now() + pause;
        let woken = loop {
            let wake = async {
                match wakes.as_mut() {
                    Some(wakes) => wakes.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(until) => break false,
                wake = wake => match wake {
                    Ok(wake) if service.heard(&wake) => break true,
                    Ok(_) => {}
                    // Missed wake-ups may have held one that called for a pass.
                    Err(RecvError::Lagged(_)) => break true,
                    // No more wake-ups: the pauses alone go on.
                    Err(RecvError::Closed) => wakes = None,
                },
            }
        };
        if !woken && let Some(longer) = service.before_timed_pass().await {
            pause = longer;
            continue;
        }
        let limit = service.limit();
        let started = tokio::time::Instant::now();
        let passed = tokio::select! {
            _ = shutdown.cancelled() => return,
            passed = tokio::time::timeout(limit, service.pass(clock.now())) => match passed {
                Ok(Ok(report)) => Passed::Done(report),
                Ok(Err(e)) => Passed::Failed(e),
                Err(_) => Passed::Stuck,
            },
        };
        match &passed {
            Passed::Done(report) => service.tell(report),
            Passed::Failed(e) => service.tell_failure(e),
            Passed::Stuck => tracing::warn!(
                service = S::NAME,
                limit_s = limit.as_secs(),
                "a service pass took too long and was abandoned"
            ),
        }
        pause = service.pause_after(&passed, started.elapsed()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A service whose first pass never ends, and whose later passes count themselves.
    struct StuckOnce {
        passes: Arc<AtomicUsize>,
    }

    impl Service for StuckOnce {
        const NAME: &'static str = "stuck-once";
        type Report = ();

        async fn pass(&self, _now: DateTime<Utc>) -> Result<(), ServiceError> {
            if self.passes.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }

        fn interval(&self) -> Duration {
            Duration::from_millis(10)
        }

        fn limit(&self) -> Duration {
            Duration::from_millis(200)
        }
    }

    #[tokio::test]
    async fn a_pass_that_never_ends_is_abandoned_and_the_passes_go_on() {
        let passes = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let service = StuckOnce {
            passes: passes.clone(),
        };
        let loop_ = tokio::spawn(run(
            service,
            Running {
                shutdown: shutdown.clone(),
                clock: Arc::new(ClusterClock::default()),
                wake: None,
            },
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while passes.load(Ordering::SeqCst) < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stuck pass was not abandoned at its limit: {} passes",
                passes.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        loop_.await.unwrap();
    }
}
