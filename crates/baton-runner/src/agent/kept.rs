//! Results an earlier run of this agent could not deliver: sent first, in this boot's
//! first exchange, and what does not get through then is sent again on the side.

use crate::exchanger;
use crate::results::ResultSpool;
use crate::retry::{CallError, OnStop, Retrier, classify};
use baton_client::{Client, CompletionItem, Exchange, ItemResult};
use baton_core::backoff::Backoff;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How long an agent's start waits to hand an earlier run's results over before it gets
/// on with its work (and sends them on the side).
const KEPT_FIRST_TRY: Duration = Duration::from_secs(30);

/// Results an earlier run of this agent could not deliver, sent before anything else: in
/// this boot's first exchange, so they are recorded before any node can judge that
/// run's tasks by the new boot (a restart: their runs ended). Returns what could not be
/// delivered yet.
pub(super) async fn deliver_kept(
    client: &Client,
    boot_id: Uuid,
    results: &ResultSpool,
    backoff: Backoff,
    shutdown: &CancellationToken,
) -> Vec<CompletionItem> {
    let mut kept = results.pending();
    if kept.is_empty() {
        return kept;
    }
    tracing::info!(
        results = kept.len(),
        "sending results an earlier run of this agent could not deliver"
    );
    // One pacing for every batch: their failures add up towards the one deadline. A stop
    // cuts a wait short for a last try.
    let mut retrier = Retrier::new(backoff)
        .until(Instant::now() + KEPT_FIRST_TRY)
        .stopped_by(shutdown.clone(), OnStop::LastTry);
    let mut undelivered = Vec::new();
    while !kept.is_empty() {
        let take = kept.len().min(crate::config::MAX_EXCHANGE_ITEMS);
        let batch: Vec<CompletionItem> = kept.drain(..take).collect();
        let exchange = Exchange {
            request_id: Uuid::new_v4(),
            boot_id,
            completions: batch.clone(),
            ..Exchange::default()
        };
        let exchange = &exchange;
        let answer = retrier
            .call(move || async move { client.exchange(exchange).await.map_err(classify) })
            .await;
        match answer {
            Ok(answer) => {
                for (item, answered) in batch.iter().zip(&answer.completions) {
                    match answered.result {
                        ItemResult::Retry => undelivered.push(item.clone()),
                        // Recorded, or the server ended the run otherwise.
                        _ => results.taken(item.lease_id),
                    }
                }
            }
            // The agent learns it from its first poll, and stops.
            Err(CallError::Stop(_)) => return Vec::new(),
            Err(error) => {
                tracing::warn!(error = %error, "earlier results not delivered yet; sent again on the side");
                undelivered.extend(batch);
                undelivered.append(&mut kept);
                return undelivered;
            }
        }
    }
    undelivered
}

/// Sends results still undelivered alongside the agent's work, until each is taken or the
/// agent stops (they stay on disk then).
pub(super) async fn resend_kept(
    reports: exchanger::Reports,
    results: ResultSpool,
    undelivered: Vec<CompletionItem>,
    backoff: Backoff,
    stop: CancellationToken,
) {
    for item in undelivered {
        // The stop ends a call as well as a wait: each item is retried until then.
        let mut retrier = Retrier::new(backoff);
        let answer = tokio::select! {
            answer = retrier.call(|| reports.complete(item.clone())) => answer,
            _ = stop.cancelled() => return,
        };
        match answer {
            Ok(_) | Err(CallError::Stop(_)) => results.taken(item.lease_id),
            // The agent is stopping.
            Err(_) => return,
        }
    }
}
