//! Completion webhooks as they leave the cluster. A `notify_url` is the submitter's
//! choice and the request starts inside the network, so each delivery is held to rules
//! a hostile URL cannot bend:
//!
//! - it reaches only addresses the policy allows ([`guard`]: internal ones are refused
//!   unless listed in `webhook_allow`), checked after resolving and connected to as
//!   checked; no proxy from the environment stands in between (it would resolve the
//!   host itself);
//! - a redirect is not followed: it could point anywhere, and is a failure like any
//!   other non-2xx answer;
//! - it is bounded in time (connect and total timeouts) and in size: the answer's status
//!   is all that is read, never its body;
//! - it is signed ([`signing`]), so a receiver can check it came from this cluster;
//! - its URL's password never shows in a log, an error or a view ([`redact`]).

mod guard;
mod redact;
mod secret;
mod signing;

pub(crate) use guard::{AddressPolicy, GuardedResolver, check_url};
pub(crate) use redact::redacted;
pub(crate) use secret::ClusterSecret;
pub(crate) use signing::SigningKey;

use crate::config::ServeConfig;
use baton_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// The longest a delivery may spend connecting, within its total timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub(crate) struct WebhookSettings {
    pub allow: Vec<String>,
    pub secret: Option<String>,
    /// One delivery, from resolving the name to the answer's status.
    pub timeout: Duration,
}

impl WebhookSettings {
    pub(crate) fn of(config: &ServeConfig) -> Self {
        WebhookSettings {
            allow: config.webhook_allow.clone(),
            secret: config.webhook_secret.clone(),
            timeout: Duration::from_millis(config.timings.webhook_timeout_ms),
        }
    }
}

/// What every delivery of a node shares: the address policy, the signing key and the
/// one HTTP client that enforces the rules above.
pub(crate) struct Webhooks {
    pub policy: Arc<AddressPolicy>,
    pub secret: ClusterSecret,
    http: reqwest::Client,
}

impl Webhooks {
    /// A bad allow-list entry or secret is the operator's to fix: refused at start.
    pub(crate) fn new(settings: &WebhookSettings, store: Store) -> Result<Self, String> {
        let policy = Arc::new(AddressPolicy::new(&settings.allow)?);
        let configured = settings
            .secret
            .as_deref()
            .map(SigningKey::parse)
            .transpose()?;
        let http = reqwest::Client::builder()
            .dns_resolver(GuardedResolver::new(policy.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT.min(settings.timeout))
            .timeout(settings.timeout)
            .user_agent(concat!("baton-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("webhook http client: {e}"))?;
        Ok(Webhooks {
            policy,
            secret: ClusterSecret::new(configured, store),
            http,
        })
    }

    /// POSTs one delivery, signed: `id` is the outbox row's idempotency key (the
    /// `webhook-id` and, as before, `Idempotency-Key`), `body` the exact bytes signed.
    /// The error is what the task shows as its webhook's `last_error`: it never holds
    /// the URL, so never its credentials.
    pub(crate) async fn send(&self, target: &str, id: &str, body: &[u8]) -> Result<(), String> {
        let url = reqwest::Url::parse(target).map_err(|e| format!("not a URL: {e}"))?;
        check_url(&self.policy, &url)
            .map_err(|f| format!("address refused: {f}, which webhooks may not reach"))?;
        let key = self
            .secret
            .get()
            .await
            .map_err(|e| format!("the signing secret could not be read: {e}"))?;
        // Receivers compare it with their own wall clock, so it is this node's, not the
        // cluster's (Redis's) time.
        let timestamp = chrono::Utc::now().timestamp();
        let sent = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", id)
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", key.sign(id, timestamp, body))
            .body(body.to_vec())
            .send()
            .await;
        // The response is dropped unread: its body is never downloaded.
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("receiver answered {}", resp.status())),
            Err(e) => Err(format!("request failed: {}", causes(&e.without_url()))),
        }
    }
}

/// An error and its causes on one line ("error sending request: client error (Connect):
/// dns error: address refused: ..."), each said once.
fn causes(error: &dyn std::error::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}
