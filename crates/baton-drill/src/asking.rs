//! Asking the cluster through its faults: a request a node answered with a 5xx, or that
//! no node answered (one killed mid-request, Postgres failing over), is asked again; a
//! 4xx is an answer.

use baton_client::ClientError;
use std::future::Future;
use std::time::Duration;

/// `ask`, again every 250 ms while it gets no answer, for up to `within`; the last error
/// once that has passed.
pub async fn until_answered<T, F, Fut>(within: Duration, mut ask: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match ask().await {
            Ok(answer) => return Ok(answer),
            Err(e)
                if e.status().is_some_and(|s| !s.is_server_error())
                    || tokio::time::Instant::now() > deadline =>
            {
                return Err(e);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
