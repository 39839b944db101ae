//! While a node drains, every answer closes its connection: a load balancer or client
//! holding a keep-alive connection to this node opens its next one elsewhere, instead of
//! sending a request down a connection the node is about to close (which, for a POST,
//! nginx could not safely retry).

use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

pub(super) async fn close_connections(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if state.draining.is_cancelled() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
