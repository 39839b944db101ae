//! A request answered before its body was read to the end — refused as too large, or
//! refused for its token before the body mattered — has the rest of its body read and
//! thrown away in the background, up to a bound. Closing a socket that still holds unread
//! bytes makes the kernel answer with a reset, and a client still writing its body then
//! loses the 413 or 401 it had already been sent: it sees a broken connection instead of
//! the clear JSON error (design.md invariant 7).

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How much of an unread body is read before the connection is given up instead: past
/// this the client is not sending a body it will stop, and the reset is the answer.
const DRAIN_AT_MOST_BYTES: usize = 64 << 20;
/// How long a client may take to finish a body nobody will read.
const DRAIN_FOR: Duration = Duration::from_secs(10);

pub(super) async fn drain_when_unread(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(DrainOnDrop(Some(body)));
    next.run(Request::from_parts(parts, body)).await
}

/// The request body as the handler sees it; dropped unfinished, it hands what is left to a
/// background reader so the connection can send its answer and close (or stay) cleanly.
struct DrainOnDrop(Option<Body>);

impl HttpBody for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.get_mut().0.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.0.take() else { return };
        if body.is_end_stream() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut rest = body.into_data_stream();
            let mut read = 0usize;
            let _ = tokio::time::timeout(DRAIN_FOR, async {
                while let Some(Ok(chunk)) = rest.next().await {
                    read += chunk.len();
                    if read > DRAIN_AT_MOST_BYTES {
                        break;
                    }
                }
            })
            .await;
        });
    }
}
