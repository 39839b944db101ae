//! Operators' endpoints: runners (list, delete, pause, resume), API tokens and
//! registration tokens. Changing a runner drops its token from every node's cache through
//! Redis, so the change holds on its very next request.

use super::openapi::Errors;
use crate::auth::{API_TOKEN_PREFIX, User, hash_token, new_token, parse_scope, scope_name};
use crate::error::ApiError;
use crate::events::RunnerChange;
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::{
    Caller, CreateRegistrationToken, CreateToken, RegistrationTokenCreated, RegistrationTokenList,
    RegistrationTokenView, RunnerList, RunnerView, Scope, TokenCreated, TokenList, TokenView,
};
use baton_coord::Wake;
use baton_core::LabelSet;
use baton_core::RunnerId;
use baton_core::validate::{self, Invalid};
use baton_store::{
    ApiTokenRecord, NewApiToken, NewRegistrationToken, RegistrationTokenRecord, RunnerRecord,
    StoreError,
};
use chrono::{Duration, TimeZone, Utc};
use uuid::Uuid;

/// Longest token name, in characters.
pub(crate) const MAX_TOKEN_NAME: usize = 128;
/// The longest a token may be made to live: ten years, "never" without an overflow.
pub(crate) const MAX_EXPIRY_S: i64 = 10 * 365 * 86_400;

fn runner_view(
    state: &AppState,
    r: RunnerRecord,
    running: i64,
    seen_ms: Option<i64>,
) -> RunnerView {
    let seen = seen_ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single());
    let last_seen = seen.max(r.last_seen);
    let offline_after = Duration::seconds(state.config.timings.runner_offline_after_s as i64);
    RunnerView {
        online: last_seen.is_some_and(|at| state.clock.now() - at < offline_after),
        id: r.id,
        name: r.name,
        labels: r.labels,
        queues: r.queues,
        capacity: r.capacity,
        version: r.version,
        paused: r.paused,
        last_seen,
        running,
        created_at: r.created_at,
        ephemeral: r.provisioner.is_some(),
        provisioner: r.provisioner,
    }
}

/// Lists the registered runners, online or not.
#[utoipa::path(operation_id = "list_runners", get, path = "/v1/runners", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "Registered runners", body = RunnerList), Errors)
)]
pub(super) async fn runners(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<RunnerList>, ApiError> {
    user.require_read()?;
    let rows = state.store.runners_list().await?;
    let ids: Vec<RunnerId> = rows.iter().map(|(r, _)| r.id).collect();
    let presence = state.coord.presence_get(&ids).await?;
    let runners = rows
        .into_iter()
        .zip(presence)
        .map(|((r, running), seen)| runner_view(&state, r, running, seen.map(|(at, _)| at)))
        .collect();
    Ok(Json(RunnerList { runners }))
}

/// Deletes a runner: its next request gets 401 and the agent exits; the reconciler
/// requeues its unstarted tasks and ends its running ones.
#[utoipa::path(operation_id = "delete_runner", delete, path = "/v1/runners/{id}", tag = "admin", security(("bearer" = [])),
    params(("id" = RunnerId, Path, description = "Runner id")),
    responses((status = 204, description = "Deleted: its next request gets 401"), Errors)
)]
pub(super) async fn runner_delete(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<RunnerId>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    crate::auth::delete_runner(&state, id)
        .await
        .map_err(not_found("runner"))?;
    tracing::info!(runner.id = %id, "runner deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    state: AppState,
    user: User,
    id: RunnerId,
    paused: bool,
) -> Result<Json<RunnerView>, ApiError> {
    user.require_admin()?;
    let runner = state
        .store
        .runner_set_paused(id, paused)
        .await
        .map_err(not_found("runner"))?;
    crate::auth::revoke_everywhere(&state, id).await;
    // A paused runner's parked lease answers now; a resumed one looks for work at once.
    let _ = state.coord.publish(&Wake::Runner(id)).await;
    tracing::info!(runner.id = %id, paused, "runner paused or resumed");
    let change = if paused {
        RunnerChange::Paused
    } else {
        RunnerChange::Resumed
    };
    state.events.runner(change, id).await;
    Ok(Json(runner_view(&state, runner, 0, None)))
}

/// Pauses a runner: it leases nothing until it is resumed.
#[utoipa::path(operation_id = "pause_runner", post, path = "/v1/runners/{id}/pause", tag = "admin", security(("bearer" = [])),
    params(("id" = RunnerId, Path, description = "Runner id")),
    responses((status = 200, description = "Paused: it leases nothing", body = RunnerView), Errors)
)]
pub(super) async fn runner_pause(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<RunnerId>,
) -> Result<Json<RunnerView>, ApiError> {
    set_paused(state, user, id, true).await
}

/// Resumes a paused runner.
#[utoipa::path(operation_id = "resume_runner", post, path = "/v1/runners/{id}/resume", tag = "admin", security(("bearer" = [])),
    params(("id" = RunnerId, Path, description = "Runner id")),
    responses((status = 200, description = "Resumed", body = RunnerView), Errors)
)]
pub(super) async fn runner_resume(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<RunnerId>,
) -> Result<Json<RunnerView>, ApiError> {
    set_paused(state, user, id, false).await
}

fn not_found(what: &'static str) -> impl Fn(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound => ApiError::not_found(format!("no such {what}")),
        other => other.into(),
    }
}

fn token_view(t: ApiTokenRecord) -> TokenView {
    TokenView {
        id: t.id,
        name: t.name,
        scopes: t.scopes.iter().filter_map(|s| parse_scope(s)).collect(),
        created_at: t.created_at,
        expires_at: t.expires_at,
        revoked_at: t.revoked_at,
        queues: t.queues,
        labels: t.labels,
        max_priority: t.max_priority,
    }
}

/// A token's queues or labels: `None` allows any.
type Limit = Option<Vec<String>>;

/// A token's name: what operators read in listings.
fn check_token_name(name: &str) -> Result<(), Invalid> {
    if name.trim().is_empty()
        || name.chars().count() > MAX_TOKEN_NAME
        || name.chars().any(char::is_control)
    {
        return Err(Invalid::new("name", "must be 1-128 printable characters"));
    }
    Ok(())
}

/// A token's limits to queues and labels, checked: `None` allows any; a list must name
/// at least one queue, each valid, and valid labels (kept sorted and deduplicated).
fn token_limits(queues: Limit, labels: Limit) -> Result<(Limit, Limit), Invalid> {
    if let Some(queues) = &queues {
        if queues.is_empty() {
            return Err(Invalid::new(
                "queues",
                "name at least one queue, or leave it out to allow any",
            ));
        }
        for queue in queues {
            validate::check_queue(queue)?;
        }
    }
    let labels = labels
        .map(|labels| LabelSet::new(labels).map(Vec::from))
        .transpose()?;
    Ok((queues, labels))
}

/// Creates an API token, shown once, with the scopes given.
#[utoipa::path(operation_id = "create_token", post, path = "/v1/tokens", tag = "admin", security(("bearer" = [])),
    request_body = CreateToken,
    responses((status = 201, description = "The token, shown this once", body = TokenCreated), Errors)
)]
pub(super) async fn token_create(
    State(state): State<AppState>,
    user: User,
    ApiJson(req): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    user.require_admin()?;
    check_token_name(&req.name)?;
    if req.scopes.is_empty() {
        return Err(Invalid::new("scopes", "give at least one of admin, submit, read").into());
    }
    if let Some(s) = req.expires_in_s {
        validate::check_seconds("expires_in_s", s, MAX_EXPIRY_S)?;
    }
    let (queues, labels) = token_limits(req.queues, req.labels)?;
    if let Some(max) = req.max_priority {
        validate::check_range(
            "max_priority",
            max,
            validate::PRIORITY_MIN,
            validate::PRIORITY_MAX,
        )?;
    }
    // An admin token makes tokens: its limits would bind nothing.
    let limited = [
        ("queues", queues.is_some() || labels.is_some()),
        ("max_priority", req.max_priority.is_some()),
    ]
    .into_iter()
    .find(|(_, set)| *set);
    if let Some((field, _)) = limited
        && req.scopes.contains(&Scope::Admin)
    {
        return Err(Invalid::new(
            field,
            "an admin token cannot be limited to queues, labels or a priority ceiling (it could \
             make an unlimited token)",
        )
        .into());
    }
    let now = state.clock.now();
    let new = NewApiToken {
        expires_at: req.expires_in_s.map(|s| now + Duration::seconds(s)),
        scopes: req.scopes.iter().map(|s| scope_name(*s)).collect(),
        name: req.name,
        queues,
        labels,
        max_priority: req.max_priority,
    };
    let token = new_token(API_TOKEN_PREFIX);
    let record = state
        .store
        .api_token_insert(&new, &hash_token(&token), now)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            view: token_view(record),
            token,
        }),
    ))
}

/// The calling token: any API token may ask.
#[utoipa::path(operation_id = "get_me", get, path = "/v1/me", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "The calling token and what it may do", body = Caller), Errors)
)]
pub(super) async fn me(user: User) -> Json<Caller> {
    Json(Caller {
        token_id: user.token_id,
        scopes: user.scopes,
        queues: user.queues,
        labels: user.labels,
        max_priority: user.max_priority,
    })
}

/// Lists the API tokens (never their secrets).
#[utoipa::path(operation_id = "list_tokens", get, path = "/v1/tokens", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "API tokens, never their secrets", body = TokenList), Errors)
)]
pub(super) async fn tokens(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<TokenList>, ApiError> {
    user.require_admin()?;
    let tokens = state
        .store
        .api_tokens()
        .await?
        .into_iter()
        .map(token_view)
        .collect();
    Ok(Json(TokenList { tokens }))
}

/// Revokes an API token at once: API tokens are not cached, so its next use is refused.
#[utoipa::path(operation_id = "revoke_token", delete, path = "/v1/tokens/{id}", tag = "admin", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Token id")),
    responses((status = 204, description = "Revoked"), Errors)
)]
pub(super) async fn token_revoke(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let now = state.clock.now();
    revoke(&user, "token", state.store.api_token_revoke(id, now)).await
}

/// A registration token left without limits lets one runner register within a day.
const REGISTRATION_DEFAULT_USES: i32 = 1;
const REGISTRATION_DEFAULT_EXPIRY_S: i64 = 86_400;

fn registration_token_view(t: RegistrationTokenRecord) -> RegistrationTokenView {
    RegistrationTokenView {
        id: t.id,
        name: t.name,
        expires_at: t.expires_at,
        uses_left: t.uses_left,
        labels: t.labels,
        queues: t.queues,
        created_at: t.created_at,
        revoked_at: t.revoked_at,
    }
}

/// The limits of a new registration token, checked, with the defaults filled in.
fn registration_limits(
    req: CreateRegistrationToken,
    now: chrono::DateTime<Utc>,
) -> Result<NewRegistrationToken, Invalid> {
    if let Some(name) = &req.name {
        check_token_name(name)?;
    }
    let expires_in_s = req.expires_in_s.unwrap_or(REGISTRATION_DEFAULT_EXPIRY_S);
    validate::check_seconds("expires_in_s", expires_in_s, MAX_EXPIRY_S)?;
    let uses = req.uses.unwrap_or(REGISTRATION_DEFAULT_USES);
    if uses < 1 {
        return Err(Invalid::new("uses", "must be at least 1"));
    }
    let (queues, labels) = token_limits(req.queues, req.labels)?;
    Ok(NewRegistrationToken {
        name: req.name,
        expires_at: Some(now + Duration::seconds(expires_in_s)),
        uses: Some(uses),
        labels,
        queues,
        provisioner: None,
    })
}

/// Creates a registration token, shown once, for runners to register with.
#[utoipa::path(operation_id = "create_registration_token", post, path = "/v1/registration-tokens", tag = "admin", security(("bearer" = [])),
    request_body = CreateRegistrationToken,
    responses((status = 201, description = "The token, shown this once", body = RegistrationTokenCreated), Errors)
)]
pub(super) async fn registration_token_create(
    State(state): State<AppState>,
    user: User,
    ApiJson(req): ApiJson<CreateRegistrationToken>,
) -> Result<(StatusCode, Json<RegistrationTokenCreated>), ApiError> {
    user.require_admin()?;
    let now = state.clock.now();
    let limits = registration_limits(req, now)?;
    let token = new_token(crate::auth::REGISTRATION_TOKEN_PREFIX);
    let record = state
        .store
        .registration_token_insert(&hash_token(&token), &limits, now)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(RegistrationTokenCreated {
            view: registration_token_view(record),
            token,
        }),
    ))
}

/// Lists the registration tokens (never their secrets).
#[utoipa::path(operation_id = "list_registration_tokens", get, path = "/v1/registration-tokens", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "Registration tokens, never their secrets", body = RegistrationTokenList), Errors)
)]
pub(super) async fn registration_tokens(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<RegistrationTokenList>, ApiError> {
    user.require_admin()?;
    let registration_tokens = state
        .store
        .registration_tokens()
        .await?
        .into_iter()
        .map(registration_token_view)
        .collect();
    Ok(Json(RegistrationTokenList {
        registration_tokens,
    }))
}

/// Revokes a registration token: no runner registers with it any more. Runners that
/// already did keep their own tokens (delete them to stop them).
#[utoipa::path(operation_id = "revoke_registration_token", delete, path = "/v1/registration-tokens/{id}", tag = "admin", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Registration token id")),
    responses((status = 204, description = "Revoked"), Errors)
)]
pub(super) async fn registration_token_revoke(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let now = state.clock.now();
    let revoking = state.store.registration_token_revoke(id, now);
    revoke(&user, "registration token", revoking).await
}

/// An admin's revoke: runs `revoking` (a store revoke, not yet started) for an admin
/// only, and answers 204, or 404 naming `what` when there is no such unrevoked token.
async fn revoke(
    user: &User,
    what: &'static str,
    revoking: impl Future<Output = Result<(), StoreError>>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    revoking.await.map_err(not_found(what))?;
    Ok(StatusCode::NO_CONTENT)
}
