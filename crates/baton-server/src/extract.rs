//! Axum extractors that answer bad input with our JSON error body instead of axum's
//! plain-text rejections.

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use baton_client::ErrorCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A JSON request body. Beyond axum's `Json`: the body must be a JSON object (serde would
/// also take an array for a struct), and a number with no fractional part is an integer
/// (`5.0` is a valid JSON-Schema integer, which serde would refuse for an `i32`).
pub(crate) struct ApiJson<T>(pub T);

/// `application/json`, or any `application/*+json`, parameters aside.
fn is_json(req: &Request) -> bool {
    let Some(value) = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Whole-valued floats become integers, all the way down.
fn integral(value: Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                Value::Number((f as i64).into())
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect())
        }
        other => other,
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(&req) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
                "send the body as JSON with Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(
                ErrorCode::MalformedJson,
                format!("the body is not valid JSON: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(invalid_body("the body must be a JSON object"));
        }
        serde_json::from_value(integral(value))
            .map(ApiJson)
            .map_err(|e| invalid_body(&e.to_string()))
    }
}

fn invalid_body(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::InvalidBody,
        message,
    )
}

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct ApiQuery<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct ApiPath<T>(pub T);

/// A raw request body (log chunks: output need not be UTF-8).
pub(crate) struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(RawBody(Bytes::from_request(req, state).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_floats_become_integers_and_others_stay() {
        let v = integral(serde_json::json!({"a": 5.0, "b": [1.5, 2.0], "c": "3.0", "d": -0.0}));
        assert_eq!(
            v,
            serde_json::json!({"a": 5, "b": [1.5, 2], "c": "3.0", "d": 0})
        );
    }
}
