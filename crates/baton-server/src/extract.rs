//! Axum extractors that answer bad input with our JSON error body instead of axum's
//! plain-text rejections.

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Request};
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
            return Err(not_json());
        }
        Self::parse(&Bytes::from_request(req, state).await?)
    }
}

/// A body a request may leave out (`Option<ApiJson<T>>`): an empty one is `None`, any
/// other is checked as [`ApiJson`] checks it.
impl<S: Send + Sync, T: DeserializeOwned> OptionalFromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        let json = is_json(&req);
        let bytes = Bytes::from_request(req, state).await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        if !json {
            return Err(not_json());
        }
        Self::parse(&bytes).map(Some)
    }
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorCode::UnsupportedMediaType,
        "send the body as JSON with Content-Type: application/json",
    )
}

impl<T: DeserializeOwned> ApiJson<T> {
    /// The body checked: bounded in size and depth, valid JSON, an object, of `T`'s shape.
    fn parse(bytes: &Bytes) -> Result<Self, ApiError> {
        // A generic value costs ~50 bytes of memory per element: a body of 8 MiB of
        // `0,` would take hundreds of MiB before the handler even checks the token's
        // scope. Counted first, in one pass over the bytes, and refused past the bound.
        check_shape(bytes).map_err(|e| invalid_body(&e))?;
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
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

/// Most JSON values one body may hold: a batch of 1,000 tasks with 128 environment
/// variables each is a third of it.
pub(crate) const MAX_JSON_VALUES: usize = 500_000;
/// Deepest nesting of arrays and objects in a body.
pub(crate) const MAX_JSON_DEPTH: usize = 64;

/// Refuses a body with more than `MAX_JSON_VALUES` values or nested deeper than
/// `MAX_JSON_DEPTH`, by counting separators and openings outside strings (an upper bound
/// on the values), without building anything. Malformed JSON is left to the parser.
fn check_shape(bytes: &[u8]) -> Result<(), String> {
    let (mut values, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                values += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(format!(
                        "the body nests deeper than {MAX_JSON_DEPTH} arrays and objects"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => values += 1,
            _ => continue,
        }
        if values > MAX_JSON_VALUES {
            return Err(format!(
                "the body holds more than {MAX_JSON_VALUES} JSON values; send fewer at once"
            ));
        }
    }
    Ok(())
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

    #[test]
    fn values_and_depth_are_counted_outside_strings() {
        assert!(check_shape(br#"{"a": [1, 2, {"b": "x,y:[{"}]}"#).is_ok());
        let flat = format!("{{\"t\":[{}0]}}", "0,".repeat(MAX_JSON_VALUES));
        assert!(check_shape(flat.as_bytes()).is_err());
        let in_a_string = format!("{{\"t\":\"{}\"}}", ",".repeat(MAX_JSON_VALUES * 2));
        assert!(
            check_shape(in_a_string.as_bytes()).is_ok(),
            "commas in a string are text"
        );
        let escaped = r#"{"t":"\",[[[[", "u": 1}"#;
        assert!(check_shape(escaped.as_bytes()).is_ok());
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert!(check_shape(deep.as_bytes()).is_err());
    }
}
