//! Waiting: poll a check until it passes or a deadline passes ([`poll_until`], and
//! [`poll_every`] where the wait is measured: the one such loop of the cluster and its
//! tests), and for a started process to become usable,
//! saying whether it exited or timed out, with the log to read.

use super::processes::Supervised;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// The longest pause between two looks: a wait notices its effect within this.
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// Polls `check` until it yields `Some`, backing off from 10 ms up to 200 ms between
/// looks; `None` once `within` has passed.
pub async fn poll_until<T, F, Fut>(within: Duration, check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(within, Duration::from_millis(10), LONGEST_PAUSE, check).await
}

/// [`poll_until`] at a steady `pause`, for a wait whose length is the figure (a
/// failover's time): a backed-off look would add up to its pause to what is reported.
pub async fn poll_every<T, F, Fut>(within: Duration, pause: Duration, check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(within, pause, pause, check).await
}

/// Looks at `check` until `Some` or `within` passes, the pause from `first` doubling up
/// to `longest`.
async fn poll<T, F, Fut>(
    within: Duration,
    first: Duration,
    longest: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    let mut pause = first;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(longest);
    }
}

/// Polls `check` until it returns true, while `process` runs. `what` completes
/// "waiting for ...", e.g. "redis to answer PING".
pub async fn wait_until<F, Fut>(
    process: &mut Supervised,
    what: &str,
    within: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    // Ok when the check passed, Err(status) when the process exited first.
    let outcome = poll_until(within, || {
        let exited = process.try_exited();
        let passed = check();
        async move {
            match passed.await {
                true => Some(Ok(())),
                false => exited.map(Err),
            }
        }
    })
    .await;
    let log = process.log().display();
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(status)) => anyhow::bail!(
            "{} exited ({status}) while waiting for {what}; see {log}",
            process.name()
        ),
        None => anyhow::bail!(
            "gave up waiting for {what} after {}s; see {log}",
            within.as_secs()
        ),
    }
}

/// A client for readiness probes: short timeouts, since a probe that hangs is a failed one.
pub fn probe_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?)
}

/// True when `GET url` answers 200.
pub async fn http_ok(http: &reqwest::Client, url: &str) -> bool {
    http.get(url)
        .send()
        .await
        .is_ok_and(|resp| resp.status() == reqwest::StatusCode::OK)
}
