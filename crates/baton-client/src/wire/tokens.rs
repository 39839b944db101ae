//! Who may call: API tokens, their scopes, and the registration tokens runners join with.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What an API token may do. `admin` is everything; `submit` submits tasks and reads and
/// cancels the tasks it submitted; `read` reads everything and changes nothing.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Everything on the user API: tokens, runners, queues' pauses and defaults, and any
    /// task or schedule.
    Admin,
    /// Submits tasks and creates schedules (within the token's `queues` and `labels`), and
    /// sees, changes, cancels and re-runs only its own.
    Submit,
    /// Sees every task, its logs, every schedule, the runners, the queues and the nodes;
    /// changes nothing.
    Read,
}

/// `GET /v1/me`: the calling API token and what it may do, so a client (the console)
/// offers only what would be allowed.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    /// `bootstrap` for the token given to the nodes; a created token's id otherwise.
    pub token_id: String,
    /// What it may do. Scopes add up, but only `admin` changes a task another token
    /// submitted.
    pub scopes: Vec<Scope>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The highest priority its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
}

/// `POST /v1/tokens`.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What it is for, shown in listings; printable text, not unique.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
    /// What it may do: at least one (see [`Scope`]).
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// Seconds until it stops working (default: never; at most ten years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_s: Option<i64>,
    /// The only queues it may submit to (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry, each one of these (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The highest priority its tasks may carry (default: any): within a priority, owners
    /// take turns (fair shares); above it a token would go ahead of every other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = -1000, maximum = 1000)]
    pub max_priority: Option<i32>,
}

/// An API token as listed: never the secret.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenView {
    /// Names it in `DELETE /v1/tokens/{id}`; not the secret.
    pub id: Uuid,
    /// What it is for, as given at creation.
    pub name: String,
    /// Fixed at creation: to change what a caller may do, make a new token and revoke this
    /// one.
    pub scopes: Vec<Scope>,
    /// When it was made: the secret's age, as a token is never rotated in place.
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked; a revoked token is refused (401) from then on, but stays
    /// listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The highest priority its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
}

/// A new API token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenCreated {
    /// The token as listings will show it.
    #[serde(flatten)]
    pub view: TokenView,
    /// The secret (`bat_` and 64 hex digits) to send as `Authorization: Bearer`: shown this
    /// once, the server keeps only its hash.
    pub token: String,
}

/// `GET /v1/tokens`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenList {
    /// Every API token, newest first, revoked and expired ones included; never their
    /// secrets.
    pub tokens: Vec<TokenView>,
}

/// `POST /v1/registration-tokens`. Left out, a token lets one runner register within a
/// day, with any labels and queues.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRegistrationToken {
    /// What it is for, shown in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seconds until it expires (default: 86,400, a day; at most ten years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_s: Option<i64>,
    /// How many runners may register with it (default: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub uses: Option<i32>,
    /// The labels a runner registering with it may claim, each one of these (default:
    /// any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The queues a runner registering with it may serve: it must name some, each one of
    /// these (default: any, every queue included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
}

/// A registration token as operators see it, never its secret.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegistrationTokenView {
    /// Names it in `DELETE /v1/registration-tokens/{id}`; not the secret.
    pub id: Uuid,
    /// What it is for, as given at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `None`: never expires (tokens of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// `None`: any number (tokens of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<i32>,
    /// `None`: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// `None`: any queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// When it was made (the default expiry, a day, counts from here).
    pub created_at: DateTime<Utc>,
    /// When it was revoked: no runner registers with it from then on; runners that already
    /// did keep their own tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new registration token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenCreated {
    /// The token as listings will show it.
    #[serde(flatten)]
    pub view: RegistrationTokenView,
    /// The secret (`brg_` and 64 hex digits) a runner registers with, as
    /// [`crate::RegisterRunner::registration_token`]: shown this once, the server keeps
    /// only its hash.
    pub token: String,
}

/// `GET /v1/registration-tokens`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenList {
    /// Every registration token, newest first, revoked, expired and used-up ones included;
    /// never their secrets.
    pub registration_tokens: Vec<RegistrationTokenView>,
}
