//! Waiting for a started process to become usable: poll a check until it passes, the
//! process exits, or a deadline passes, and then say which, with the log to read.

use super::processes::Supervised;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

const POLL_EVERY: Duration = Duration::from_millis(100);

/// Polls `check` until it returns true. `what` completes "waiting for ...", e.g.
/// "redis to answer PING".
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
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return Ok(());
        }
        if let Some(status) = process.try_exited() {
            anyhow::bail!(
                "{} exited ({status}) while waiting for {what}; see {}",
                process.name(),
                process.log().display()
            );
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "gave up waiting for {what} after {}s; see {}",
                within.as_secs(),
                process.log().display()
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
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
