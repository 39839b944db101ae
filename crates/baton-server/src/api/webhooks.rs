//! The webhook signing secret, for operators: a receiver needs it to check signatures
//! (docs/webhooks.md). Admin only: with it, anyone could forge a delivery.

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use baton_client::WebhookSecret;

/// Reads the secret that signs this cluster's webhook deliveries.
#[utoipa::path(operation_id = "get_webhook_secret", get, path = "/v1/webhooks/secret", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "The key webhooks are signed with (`whsec_` + base64)", body = WebhookSecret), Errors)
)]
pub(super) async fn secret(
    State(state): State<AppState>,
    user: User,
) -> Result<impl IntoResponse, ApiError> {
    user.require_admin()?;
    let key = state.webhooks.secret.get().await?;
    Ok((
        // A secret: no cache along the way keeps a copy.
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(WebhookSecret {
            secret: key.to_whsec(),
        }),
    ))
}
