//! The one mapping from failures to HTTP answers: every error leaves the node as
//! `{"error": {"code", "message"}}` with a status a client can act on (design.md
//! invariant 7). A client's mistake is never a 500.

use crate::dispatch::{DispatchError, logged};
use axum::Json;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use baton_client::{ErrorBody, ErrorCode, ErrorDetail};
use baton_coord::CoordError;
use baton_core::{Invalid, TaskStatus};
use baton_store::StoreError;

#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub offset: Option<i64>,
    pub task_status: Option<TaskStatus>,
    pub presence_recorded: Option<bool>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            offset: None,
            task_status: None,
            presence_recorded: None,
        }
    }

    pub(crate) fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }

    pub(crate) fn too_large(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, code, message)
    }

    pub(crate) fn too_many(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyRequests,
            message,
        )
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            message,
        )
    }

    /// The error body's detail: in an answer of its own, or one item's in a bulk answer.
    pub(crate) fn detail(self) -> ErrorDetail {
        ErrorDetail {
            code: self.code.as_str().to_string(),
            message: self.message,
            offset: self.offset,
            status: self.task_status,
            presence_recorded: self.presence_recorded,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, code = self.code.as_str(), message = %self.message, "request failed");
        }
        let status = self.status;
        let body = ErrorBody {
            error: self.detail(),
        };
        (status, Json(body)).into_response()
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::Invalid,
            e.to_string(),
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::not_found("no such task"),
            StoreError::Conflict { status, reason } => ApiError {
                task_status: Some(status),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::Conflict,
                    format!("{reason} (task is {status})"),
                )
            },
            StoreError::LogOffsetPastEnd { requested, held } => ApiError {
                offset: Some(held),
                ..ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    ErrorCode::LogOffsetPastEnd,
                    format!(
                        "chunk starts at {requested} but the server holds {held} bytes: resend from {held}"
                    ),
                )
            },
            StoreError::Duplicate(m) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::Duplicate, m)
            }
            StoreError::InvalidValue(m) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::Invalid,
                format!("a value was refused: {m}"),
            ),
            StoreError::OverBound(bound) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::Invalid,
                format!(
                    "the search read for longer than {} s without filling the page: narrow it \
                     (status, queue, label) or page with the cursor",
                    bound.as_secs_f64()
                ),
            ),
            StoreError::Unavailable(m) => ApiError::unavailable(logged("database unavailable", &m)),
            StoreError::Internal(m) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                logged("database error", &m),
            ),
        }
    }
}

/// The hot path's refusals, as the API answers them.
impl From<DispatchError> for ApiError {
    fn from(e: DispatchError) -> Self {
        let answer = |status, code, e: &DispatchError| ApiError::new(status, code, e.to_string());
        match e {
            DispatchError::Store(e) => e.into(),
            DispatchError::Coord(e) => e.into(),
            DispatchError::Stale { status, .. } => ApiError {
                task_status: Some(status),
                ..answer(StatusCode::CONFLICT, ErrorCode::Conflict, &e)
            },
            DispatchError::Gone => answer(StatusCode::NOT_FOUND, ErrorCode::NotFound, &e),
            DispatchError::SecretsSealed(_) => {
                answer(StatusCode::FORBIDDEN, ErrorCode::SecretsUnavailable, &e)
            }
            DispatchError::Unavailable {
                presence_recorded, ..
            } => ApiError {
                presence_recorded,
                ..answer(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable, &e)
            },
            DispatchError::TooManyParked(_) => answer(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyRequests,
                &e,
            ),
            DispatchError::TooManyQueues(_) => {
                answer(StatusCode::TOO_MANY_REQUESTS, ErrorCode::TooManyQueues, &e)
            }
            DispatchError::TooManyLabelSets(_) => answer(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyLabelSets,
                &e,
            ),
            DispatchError::RunnerDeleted => {
                answer(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, &e)
            }
        }
    }
}

impl From<CoordError> for ApiError {
    fn from(e: CoordError) -> Self {
        match e {
            CoordError::Unavailable(m) => ApiError::unavailable(logged("redis unavailable", &m)),
            CoordError::Internal(m) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                logged("redis error", &m),
            ),
        }
    }
}

fn body_rejection(e: &BytesRejection) -> ApiError {
    if is_body_timeout(e) {
        body_timed_out()
    } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(
            ErrorCode::BodyTooLarge,
            "the request body is over the size limit",
        )
    } else {
        ApiError::bad_request(ErrorCode::UnreadableBody, e.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> Self {
        body_rejection(&e)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError::bad_request(ErrorCode::InvalidQuery, e.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        ApiError::bad_request(ErrorCode::InvalidPath, e.body_text())
    }
}

/// What a body read past its deadline fails with (`api::body_deadline`, which times the
/// reading); [`is_body_timeout`] finds it among a read error's causes.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} of its head")]
pub(crate) struct BodyTimedOut(pub(crate) std::time::Duration);

/// Whether a body read failed because it outlived its deadline.
fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The answer to a body that did not arrive in time.
fn body_timed_out() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        ErrorCode::BodyTimeout,
        "the request body did not arrive in time (http_body_read_timeout_ms)",
    )
}
