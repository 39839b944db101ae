//! Operations endpoints: liveness and readiness, what a load balancer probes.

use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use serde_json::{Value, json};

/// The process is up and serving HTTP.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Redis and Postgres answer and this node's liveness key is current; 503 with the
/// reason otherwise, so a load balancer sends traffic elsewhere.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::unavailable("node is shutting down"));
    }
    let (redis, postgres) = tokio::join!(state.coord.ping(), state.store.ping());
    redis.map_err(|e| ApiError::unavailable(format!("redis: {e}")))?;
    postgres.map_err(|e| ApiError::unavailable(format!("postgres: {e}")))?;
    if !state.is_registered(Utc::now().timestamp_millis()) {
        return Err(ApiError::unavailable("node liveness key not refreshed"));
    }
    Ok(Json(json!({
        "status": "ready",
        "node": state.node.id,
        "parked_leases": state.wake.parked(),
    })))
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this endpoint",
    )
}
