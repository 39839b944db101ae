//! `GET /v1/queues/trends`: each queue's last minutes — accepted, succeeded, failed,
//! depth — from the cluster's per-minute counts in Redis (`baton_coord::trends`), for
//! the console's charts; and the queues with recent history, which `GET /v1/queues`
//! keeps listing after their backlog drained.

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_client::{QueueTrend, QueueTrends, TrendPoint};
use baton_coord::QueueMinute;
use baton_core::trend_tally::QueueTally;
use baton_core::validate;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// The most minutes one read covers: what Redis keeps, less the minute being written.
pub(crate) const MAX_MINUTES: i64 = baton_coord::TREND_KEEP_S / 60 - 1;
const DEFAULT_MINUTES: i64 = 60;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct TrendsQuery {
    /// How many minutes back, this one included (default 60).
    #[param(minimum = 1, maximum = 119)]
    minutes: Option<i64>,
}

/// Reads each queue's counts, minute by minute, over the last hour (or `minutes`).
#[utoipa::path(operation_id = "get_queue_trends", get, path = "/v1/queues/trends", tag = "admin", security(("bearer" = [])),
    params(TrendsQuery),
    responses((status = 200, description = "One point per minute per queue, oldest first", body = QueueTrends), Errors)
)]
pub(super) async fn trends(
    State(state): State<AppState>,
    user: User,
    ApiQuery(q): ApiQuery<TrendsQuery>,
) -> Result<Json<QueueTrends>, ApiError> {
    user.require_read()?;
    let minutes = q.minutes.unwrap_or(DEFAULT_MINUTES);
    validate::check_range("minutes", minutes, 1, MAX_MINUTES)?;
    let to = state.clock.now().timestamp().div_euclid(60);
    let from = to - minutes + 1;
    let read = state.coord.trends_read(from, to).await?;
    Ok(Json(QueueTrends {
        step_s: 60,
        queues: series(from, to, &read),
    }))
}

/// Every queue seen in `read`, with a point for each minute `from..=to`.
fn series(
    from: i64,
    to: i64,
    read: &BTreeMap<i64, BTreeMap<String, QueueMinute>>,
) -> Vec<QueueTrend> {
    let names: BTreeSet<&String> = read.values().flat_map(BTreeMap::keys).collect();
    names
        .into_iter()
        .map(|queue| QueueTrend {
            queue: queue.clone(),
            points: (from..=to)
                .map(|minute| {
                    let seen = read
                        .get(&minute)
                        .and_then(|queues| queues.get(queue))
                        .copied()
                        .unwrap_or_default();
                    TrendPoint {
                        at: DateTime::<Utc>::from_timestamp(minute * 60, 0).unwrap_or_default(),
                        submitted: seen.counts.submitted,
                        succeeded: seen.counts.succeeded,
                        failed: seen.counts.failed,
                        cancelled: seen.counts.cancelled,
                        depth: seen.depth,
                    }
                })
                .collect(),
        })
        .collect()
}

/// The queues something happened to in the last hour: those `GET /v1/queues` lists
/// even when nothing waits or runs in them. Redis out of reach: none (the list still
/// answers from Postgres).
pub(super) async fn recently_busy(state: &AppState) -> BTreeSet<String> {
    let to = state.clock.now().timestamp().div_euclid(60);
    match state.coord.trends_read(to - DEFAULT_MINUTES + 1, to).await {
        Ok(read) => read
            .into_values()
            .flat_map(|queues| {
                queues
                    .into_iter()
                    .filter(|(name, m)| {
                        validate::check_queue(name).is_ok() && m.counts != QueueTally::default()
                    })
                    .map(|(name, _)| name)
            })
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "queue trends unread; listing queues without them");
            BTreeSet::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_minute_of_the_window_has_a_point_and_gaps_are_zero() {
        let mut read = BTreeMap::new();
        read.insert(
            11,
            BTreeMap::from([(
                "builds".to_string(),
                QueueMinute {
                    counts: QueueTally {
                        submitted: 3,
                        succeeded: 2,
                        failed: 1,
                        cancelled: 0,
                    },
                    depth: Some(4),
                },
            )]),
        );
        let out = series(10, 12, &read);
        assert_eq!(out.len(), 1);
        let points = &out[0].points;
        assert_eq!(points.len(), 3);
        assert_eq!(points[0].at.timestamp(), 600);
        assert_eq!((points[0].submitted, points[0].depth), (0, None));
        assert_eq!(
            (
                points[1].submitted,
                points[1].succeeded,
                points[1].failed,
                points[1].depth
            ),
            (3, 2, 1, Some(4))
        );
    }
}
