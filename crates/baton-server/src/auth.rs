//! Who is calling. Tokens are random and stored only as SHA-256 hashes; a lookup hashes
//! the presented token, so comparing stored hashes leaks nothing useful through timing.
//!
//! Two kinds of bearer: API tokens (users, CI) for the user API, runner tokens for the
//! runner API. Each kind presented to the other API is refused with 403, an unknown token
//! with 401. Runner tokens are cached in the node so an idle runner's polls cost no
//! Postgres query (design.md invariant 6): an entry is dropped on every node when its
//! runner is deleted, paused or resumed (a revocation through Redis), and every cached
//! runner is read again in one query per refresh interval, so the cost stays flat
//! however many runners there are.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use baton_client::Scope;
use baton_core::LabelSet;
use baton_core::RunnerId;
use baton_store::{Store, StoreError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

pub(crate) type TokenHash = [u8; 32];

pub(crate) fn hash_token(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// A fresh 256-bit secret, hex-encoded behind a prefix that tells its kind at a glance.
pub(crate) fn new_token(kind_prefix: &str) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{kind_prefix}{}", hex::encode(bytes))
}

/// Equality that takes the same time wherever the first difference is.
pub(crate) fn hashes_equal(a: &TokenHash, b: &TokenHash) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A caller of the user API.
#[derive(Debug, Clone)]
pub(crate) struct User {
    /// The bootstrap token's id is `bootstrap`; created tokens use their uuid.
    pub token_id: String,
    pub scopes: Vec<Scope>,
    /// The only queues it may submit to; `None`: any.
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    pub labels: Option<Vec<String>>,
    /// The highest priority its tasks may carry; `None`: any.
    pub max_priority: Option<i32>,
}

impl User {
    /// An admin token: it may name what is shared (concurrency groups) as it is.
    pub(crate) fn is_admin(&self) -> bool {
        self.scopes.contains(&Scope::Admin)
    }

    fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }

    fn refuse(what: &str) -> ApiError {
        ApiError::forbidden(format!("this token's scopes do not allow {what}"))
    }

    pub(crate) fn require_admin(&self) -> Result<(), ApiError> {
        if self.scopes.contains(&Scope::Admin) {
            Ok(())
        } else {
            Err(Self::refuse("administration"))
        }
    }

    /// A task this token may submit: to one of its queues, with only its labels, at no
    /// priority above its ceiling (a token made without limits may submit anything).
    pub(crate) fn may_submit_to(
        &self,
        queue: &str,
        labels: &[String],
        priority: i32,
    ) -> Result<(), ApiError> {
        if let Some(max) = self.max_priority
            && priority > max
        {
            return Err(ApiError::forbidden(format!(
                "this token may submit tasks of priority {max} or lower, not {priority}"
            )));
        }
        if let Some(queues) = &self.queues
            && !queues.iter().any(|q| q == queue)
        {
            return Err(ApiError::forbidden(format!(
                "this token may submit to queues {} only, not to {queue}",
                queues.join(", ")
            )));
        }
        if let Some(allowed) = &self.labels
            && let Some(label) = labels.iter().find(|l| !allowed.contains(l))
        {
            return Err(ApiError::forbidden(format!(
                "this token may submit tasks with labels {} only, not {label}",
                if allowed.is_empty() {
                    "(none)".to_string()
                } else {
                    allowed.join(", ")
                }
            )));
        }
        Ok(())
    }

    /// Submitting tasks: `submit` or `admin`.
    pub(crate) fn require_submit(&self) -> Result<(), ApiError> {
        if self.has(Scope::Submit) {
            Ok(())
        } else {
            Err(Self::refuse("submitting or cancelling tasks"))
        }
    }

    /// Reading the cluster (runners, nodes): `read` or `admin`.
    pub(crate) fn require_read(&self) -> Result<(), ApiError> {
        if self.has(Scope::Read) {
            Ok(())
        } else {
            Err(Self::refuse("reading the cluster's state"))
        }
    }

    /// Which tasks this caller may see: all of them (`None`) for `read` and `admin`; only
    /// those it submitted for a `submit`-only token. Anything else is refused outright.
    pub(crate) fn task_scope(&self) -> Result<Option<&str>, ApiError> {
        if self.has(Scope::Read) {
            Ok(None)
        } else if self.has(Scope::Submit) {
            Ok(Some(&self.token_id))
        } else {
            Err(Self::refuse("reading tasks"))
        }
    }

    /// Which tasks this caller may change (cancel): all of them (`None`) for `admin` only;
    /// those it submitted for a `submit` token, whether or not it may also `read` them
    /// all — seeing a task is not owning it.
    pub(crate) fn task_change_scope(&self) -> Result<Option<&str>, ApiError> {
        if self.scopes.contains(&Scope::Admin) {
            Ok(None)
        } else if self.scopes.contains(&Scope::Submit) {
            Ok(Some(&self.token_id))
        } else {
            Err(Self::refuse("submitting or cancelling tasks"))
        }
    }
}

/// A caller of the runner API, as registered.
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    pub id: RunnerId,
    pub labels: LabelSet,
    pub queues: Vec<String>,
    /// A paused runner leases nothing.
    pub paused: bool,
}

#[derive(Debug, Clone)]
enum Bearer {
    User(User),
    Runner(Runner),
}

/// Runner lookups by token hash.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    entries: Mutex<HashMap<TokenHash, Runner>>,
    /// When each runner was last revoked here: a lookup that began before must not put
    /// the runner back (it read the row before the delete committed).
    revoked_at: Mutex<HashMap<RunnerId, std::time::Instant>>,
}

/// How long a revocation is remembered against lookups that raced it: far longer than
/// any lookup takes.
const RACING_LOOKUP: std::time::Duration = std::time::Duration::from_secs(60);

impl TokenCache {
    fn get(&self, hash: &TokenHash) -> Option<Runner> {
        let entries = self.entries.lock().expect("token cache lock");
        entries.get(hash).cloned()
    }

    /// Forgets a runner's token, so its next request reads the runner again (deleted,
    /// paused, resumed): every node hears of it through Redis.
    pub(crate) fn forget_runner(&self, id: RunnerId) {
        let now = std::time::Instant::now();
        {
            let mut revoked = self.revoked_at.lock().expect("token cache lock");
            revoked.retain(|_, at| now.duration_since(*at) < RACING_LOOKUP);
            revoked.insert(id, now);
        }
        let mut entries = self.entries.lock().expect("token cache lock");
        entries.retain(|_, runner| runner.id != id);
    }

    /// Caches `runner`, read by a lookup that began at `looked_up`, unless it was revoked
    /// since: then the next request reads it again.
    fn put(&self, hash: TokenHash, runner: Runner, looked_up: std::time::Instant) {
        let revoked = self
            .revoked_at
            .lock()
            .expect("token cache lock")
            .get(&runner.id)
            .is_some_and(|at| *at >= looked_up);
        if revoked {
            return;
        }
        let mut entries = self.entries.lock().expect("token cache lock");
        if entries.len() >= MAX_CACHED_RUNNERS {
            // A bound on memory, not a policy: the next lookups read their runner again.
            entries.clear();
        }
        entries.insert(hash, runner);
    }

    fn runner_ids(&self) -> Vec<RunnerId> {
        let entries = self.entries.lock().expect("token cache lock");
        let mut ids: Vec<RunnerId> = entries.values().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Replaces each cached runner with its row as read (`None`: deleted or gone), but
    /// only where it is still cached: one a revocation dropped meanwhile stays dropped.
    fn refreshed(&self, rows: &HashMap<RunnerId, Option<Runner>>) {
        let mut entries = self.entries.lock().expect("token cache lock");
        entries.retain(|_, runner| match rows.get(&runner.id) {
            Some(Some(fresh)) => {
                *runner = fresh.clone();
                true
            }
            Some(None) => false,
            None => true,
        });
    }
}

/// How many runner tokens a node caches at most.
const MAX_CACHED_RUNNERS: usize = 100_000;

impl TokenCache {
    /// Reads every cached runner again, in one query; returns how many were read.
    pub(crate) async fn refresh(&self, store: &Store) -> Result<usize, StoreError> {
        let ids = self.runner_ids();
        if ids.is_empty() {
            return Ok(0);
        }
        let mut rows: HashMap<RunnerId, Option<Runner>> =
            ids.iter().map(|id| (*id, None)).collect();
        for record in store.runners_by_ids(&ids).await? {
            if record.deleted_at.is_none()
                && let Ok(runner) = runner_of(record.clone())
            {
                rows.insert(record.id, Some(runner));
            }
        }
        self.refreshed(&rows);
        Ok(ids.len())
    }
}

/// Deletes a runner, whoever asks (an operator, or an ephemeral runner leaving after its
/// task): its row, its token on every node, and the news of it. Its next request gets
/// 401; the reconciler requeues its unstarted tasks and ends its running ones.
pub(crate) async fn delete_runner(state: &AppState, id: RunnerId) -> Result<(), StoreError> {
    let provisioner = state.store.runner_delete(id, state.clock.now()).await?;
    revoke_everywhere(state, id).await;
    state
        .events
        .runner_provisioned(
            crate::events::RunnerChange::Deleted,
            id,
            provisioned_by(state, provisioner),
        )
        .await;
    Ok(())
}

/// The provisioner named, with its backend as this node's settings have it: what a
/// runner event says of a runner started on demand.
pub(crate) fn provisioned_by(
    state: &AppState,
    provisioner: Option<String>,
) -> Option<(String, String)> {
    let name = provisioner?;
    let backend = state
        .config
        .provisioners
        .iter()
        .find(|p| p.name == name)
        .map_or("unknown", |p| p.backend.as_str());
    Some((name, backend.to_string()))
}

/// A runner was deleted, paused or resumed: this node forgets its cached token at once,
/// and every other node when the announcement reaches it through Redis (their parked
/// leases of it answer then). When Redis cannot take the announcement now, it is sent
/// again until it can, for up to a minute: past that, each node's own refresh of its
/// cached runners catches it.
pub(crate) async fn revoke_everywhere(state: &AppState, id: RunnerId) {
    state.tokens.forget_runner(id);
    if state
        .coord
        .publish(&baton_coord::Wake::Revoke(id))
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(runner.id = %id, "revocation not announced yet; trying again");
    let coord = state.coord.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if coord.publish(&baton_coord::Wake::Revoke(id)).await.is_ok() {
                return;
            }
        }
        tracing::warn!(runner.id = %id, "revocation never announced; other nodes learn it at their next refresh");
    });
}

fn runner_of(record: baton_store::RunnerRecord) -> Result<Runner, ApiError> {
    Ok(Runner {
        id: record.id,
        labels: LabelSet::new(record.labels).map_err(|e| {
            ApiError::from(StoreError::Internal(format!("stored runner labels: {e}")))
        })?,
        queues: record.queues,
        paused: record.paused,
    })
}

pub(crate) fn parse_scope(s: &str) -> Option<Scope> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
}

pub(crate) fn scope_name(scope: Scope) -> String {
    serde_json::to_value(scope)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn bearer_token(parts: &Parts) -> Result<&str, ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    header
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("the Authorization header must be Bearer <token>"))
}

/// Runner tokens carry this prefix, so a token's kind is known before any lookup and
/// each request costs at most one (cached, for runners) query.
pub(crate) const RUNNER_TOKEN_PREFIX: &str = "brt_";
/// Registration tokens created through the API, or by a provisioner, carry this one.
pub(crate) const REGISTRATION_TOKEN_PREFIX: &str = "brg_";
/// API tokens created through the API carry this one.
pub(crate) const API_TOKEN_PREFIX: &str = "bat_";

async fn identify(state: &AppState, token: &str) -> Result<Option<Bearer>, ApiError> {
    let hash = hash_token(token);
    if let Some(bootstrap) = &state.bootstrap_api_token
        && hashes_equal(&hash, bootstrap)
    {
        return Ok(Some(Bearer::User(User {
            token_id: "bootstrap".into(),
            scopes: vec![Scope::Admin],
            queues: None,
            labels: None,
            max_priority: None,
        })));
    }
    if token.starts_with(RUNNER_TOKEN_PREFIX) {
        return runner_by_hash(state, hash)
            .await
            .map(|r| r.map(Bearer::Runner));
    }
    match state
        .store
        .api_token_by_hash(&hash, state.clock.now())
        .await
    {
        Ok(record) => Ok(Some(Bearer::User(User {
            token_id: record.id.to_string(),
            scopes: record
                .scopes
                .iter()
                .filter_map(|s| parse_scope(s))
                .collect(),
            queues: record.queues,
            labels: record.labels,
            max_priority: record.max_priority,
        }))),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn runner_by_hash(state: &AppState, hash: TokenHash) -> Result<Option<Runner>, ApiError> {
    if let Some(runner) = state.tokens.get(&hash) {
        return Ok(Some(runner));
    }
    let looked_up = std::time::Instant::now();
    let record = match state.store.runner_by_token_hash(&hash).await {
        Ok(record) => record,
        Err(StoreError::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let runner = runner_of(record)?;
    state.tokens.put(hash, runner.clone(), looked_up);
    Ok(Some(runner))
}

impl FromRequestParts<AppState> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match identify(state, bearer_token(parts)?).await? {
            Some(Bearer::User(user)) => Ok(user),
            Some(Bearer::Runner(_)) => Err(ApiError::forbidden(
                "a runner token cannot use the user API",
            )),
            None => Err(ApiError::unauthorized("unknown or revoked token")),
        }
    }
}

impl FromRequestParts<AppState> for Runner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match identify(state, bearer_token(parts)?).await? {
            Some(Bearer::Runner(runner)) => Ok(runner),
            Some(Bearer::User(_)) => Err(ApiError::forbidden(
                "an API token cannot use the runner API",
            )),
            None => Err(ApiError::unauthorized(
                "unknown runner token: the runner is not registered",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hash_stably() {
        let a = new_token("brt_");
        let b = new_token("brt_");
        assert_ne!(a, b);
        assert!(a.starts_with("brt_") && a.len() == 4 + 64);
        assert!(hashes_equal(&hash_token(&a), &hash_token(&a)));
        assert!(!hashes_equal(&hash_token(&a), &hash_token(&b)));
    }
}
