//! A request body must arrive whole within `http_body_read_timeout_ms` of its head: a
//! client that sends its body a byte at a time (a slow-body slowloris) is answered 408 and
//! its connection freed, however small the pieces and however regular. The size limits
//! bound what a body may hold; this bounds how long it may take. Only the reading is
//! timed: a parked lease or a followed log is a long answer to a short request.

use crate::error::BodyTimedOut;
use crate::state::AppState;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

pub(crate) async fn bound_body_reads(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let within = Duration::from_millis(state.config.http_body_read_timeout_ms);
    let (parts, body) = request.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep_until(Instant::now() + within)),
        within,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// The body a handler reads: an error once its deadline passes before its end.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    within: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.within))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
