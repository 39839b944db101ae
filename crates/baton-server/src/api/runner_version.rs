//! Version skew on the runner API: a runner announces its version on every request, and
//! one this server cannot serve is told so plainly (426, with the reason) instead of
//! failing on a field it does not know. A request without the header is served: agents
//! older than the header, and hand-written clients, speak the base protocol.

use crate::error::ApiError;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use baton_client::ErrorCode;
use baton_client::RUNNER_VERSION_HEADER;
use baton_core::version::{Version, runner_compatible};
use std::sync::LazyLock;

/// This server's version, read once: the gate runs on every runner request.
static SERVER_VERSION: LazyLock<Version> = LazyLock::new(|| {
    Version::parse(env!("CARGO_PKG_VERSION")).expect("the crate version is MAJOR.MINOR.PATCH")
});

pub(super) async fn gate(request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/v1/runner/")
        && let Some(value) = request.headers().get(RUNNER_VERSION_HEADER)
    {
        let announced = String::from_utf8_lossy(value.as_bytes());
        if let Err(reason) = runner_compatible(*SERVER_VERSION, &announced) {
            return ApiError::new(
                StatusCode::UPGRADE_REQUIRED,
                ErrorCode::RunnerVersionUnsupported,
                reason,
            )
            .into_response();
        }
    }
    next.run(request).await
}
