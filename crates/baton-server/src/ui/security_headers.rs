//! The headers every console answer carries.
//!
//! The page runs with the user's API token in its memory, so what may run on it is
//! fixed: only the node's own files (`default-src 'self'`), no inline script or style,
//! no plugin, and no other site may frame it (clickjacking a cancel button). Data
//! comes only from this origin's `/v1` API.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const HEADERS: [(HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    // The page's addresses carry a task's id; other sites need not learn it.
    (header::REFERRER_POLICY, "no-referrer"),
];

pub(super) async fn add(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
