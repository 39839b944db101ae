//! Who may call: API tokens, their scopes, and the registration tokens runners join with.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What an API token may do. `admin` is everything; `submit` submits tasks and reads and
/// cancels the tasks it submitted; `read` reads everything and changes nothing.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Admin,
    Submit,
    Read,
}

/// `GET /v1/me`: the calling API token and what it may do, so a client (the console)
/// offers only what would be allowed.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    /// `bootstrap` for the token given to the nodes; a created token's id otherwise.
    pub token_id: String,
    pub scopes: Vec<Scope>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// `POST /v1/tokens`.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
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
}

/// An API token as listed: never the secret.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// A new API token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub view: TokenView,
    pub token: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenList {
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
    pub id: Uuid,
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
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new registration token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenCreated {
    #[serde(flatten)]
    pub view: RegistrationTokenView,
    pub token: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenList {
    pub registration_tokens: Vec<RegistrationTokenView>,
}
