//! Operations endpoints: liveness and readiness, what a load balancer probes.

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::ErrorCode;
use baton_client::{NodeList, NodeView};
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};

/// The process is up and serving HTTP.
#[utoipa::path(operation_id = "get_health", get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is up", body = Object))
)]
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Redis and Postgres answer and this node's liveness key is current; 503 with the
/// reason otherwise, so a load balancer sends traffic elsewhere.
#[utoipa::path(operation_id = "get_readiness", get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "Ready to serve", body = Object), Errors)
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.draining.is_cancelled() {
        return Err(ApiError::unavailable("node is draining"));
    }
    let (redis, postgres) = tokio::join!(state.coord.ping(), state.store.ping());
    redis.map_err(|e| ApiError::unavailable(crate::dispatch::logged("redis unavailable", &e)))?;
    postgres
        .map_err(|e| ApiError::unavailable(crate::dispatch::logged("postgres unavailable", &e)))?;
    if !state.identity.is_live() {
        return Err(ApiError::unavailable("node liveness key not refreshed"));
    }
    Ok(Json(json!({
        "status": "ready",
        "node": state.node_id(),
        "parked_leases": state.wake.parked(),
    })))
}

/// Live nodes and how many dispatched tasks each owns.
#[utoipa::path(operation_id = "list_nodes", get, path = "/v1/nodes", tag = "operations", security(("bearer" = [])),
    responses((status = 200, description = "Live nodes and their claims", body = NodeList), Errors)
)]
pub(super) async fn nodes(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<NodeList>, ApiError> {
    user.require_read()?;
    let mut nodes = Vec::new();
    for info in state.coord.nodes_live().await? {
        let claims = state.coord.claims_count(&info.id).await?;
        nodes.push(NodeView {
            started_at: Utc
                .timestamp_millis_opt(info.started_at_ms)
                .single()
                .unwrap_or_default(),
            id: info.id,
            addr: info.addr,
            claims,
        });
    }
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Json(NodeList { nodes }))
}

pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        "method not allowed on this endpoint",
    )
}
