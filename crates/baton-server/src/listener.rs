//! The node's HTTP/1 server under the router, with the bounds `axum::serve` does not set:
//! at most `max_connections` open at once (the next waits in the kernel's backlog until
//! one closes), and a request's head must arrive within `header_read_timeout` — from the
//! connection's start, and again while a kept-alive connection waits for its next
//! request — or the connection is closed. A slowloris client, which holds connections
//! open by sending a head a byte at a time or not at all, holds each for that long, and
//! never more than the cap. Request bodies are bounded by the routes' own limits; a
//! parked lease or a followed log is a response, not a read, and is not cut short.
//!
//! On `stop`, it accepts nothing more, tells every connection to close once its request
//! in flight is answered, and returns when all have closed (the node's drain bounds how
//! long that may take).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy)]
pub(crate) struct ServeLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let places = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    loop {
        let place = tokio::select! {
            place = places.clone().acquire_owned() => place.expect("the semaphore is never closed"),
            _ = stop.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was
                    // taken: the listener itself is fine. Pause rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            metrics::gauge!(crate::metrics::HTTP_OPEN_CONNECTIONS).increment(1.0);
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics::gauge!(crate::metrics::HTTP_OPEN_CONNECTIONS).decrement(1.0);
            drop(place);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
