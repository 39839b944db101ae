//! `GET /v1/events`: the event stream as Server-Sent Events, from any node, resumable on
//! any node with `Last-Event-ID` (docs/events.md).

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::events::subscription::{self, Filter, Sent};
use crate::events::{Event, Kind, Position};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use baton_core::validate::{self, Invalid};
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;
use uuid::Uuid;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct EventsQuery {
    /// Only events of this queue's tasks (and its schedules' fires).
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    queue: Option<String>,
    /// Only the events of this task.
    task: Option<Uuid>,
    /// Only the events of this pipeline's jobs (docs/pipelines.md).
    pipeline: Option<Uuid>,
    /// Only these kinds, comma-separated: `task`, `runner`, `node`, `schedule`.
    #[param(pattern = r"^(task|runner|node|schedule)(,(task|runner|node|schedule))*$")]
    kind: Option<String>,
}

/// Keep-alive comments this often: proxies and idle reapers leave the stream open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events waiting to be written to one slow client before its subscription waits.
const OUTBOX: usize = 256;

/// Follows the cluster's events as Server-Sent Events, resumable on any node.
#[utoipa::path(operation_id = "stream_events", get, path = "/v1/events", tag = "events", security(("bearer" = [])),
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this place (the last `id` received): every event since is sent first, or a `resync` event when the history no longer holds them. The stream's first frame is an `id` alone: the place it starts from"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `event` is the kind, `id` the position to resume from, `data` the event", content_type = "text/event-stream", body = Event),
        Errors
    )
)]
pub(super) async fn events(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let owner = user.task_scope()?.map(str::to_string);
    if let Some(queue) = &q.queue {
        validate::check_queue(queue)?;
    }
    let kinds = q.kind.as_deref().map(parse_kinds).transpose()?;
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(Position::parse).ok_or_else(|| {
            Invalid::new(
                "Last-Event-ID",
                "must be an id the stream sent (<ms>-<seq>:<index> or <ms>-<seq>)",
            )
        })?),
    };
    let limit = state.config.limits.max_follows_per_token;
    let held = state
        .subscriptions
        .take(user.token_id.clone(), limit)
        .ok_or_else(|| {
            ApiError::too_many(format!(
                "this token already has {limit} event streams open on this node \
                 (max_follows_per_token); close one first"
            ))
        })?;
    let filter = Filter {
        queue: q.queue,
        task: q.task,
        pipeline: q.pipeline,
        kinds,
        owner,
    };
    // The place is taken before the answer goes out: whatever happens once the client
    // has its 200 is in the stream.
    let start = subscription::start(&state.events, resume)
        .await
        .map_err(|e| ApiError::unavailable(format!("the event history cannot be read: {e}")))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Sent>(OUTBOX);
    tokio::spawn(subscription::run(
        state.events.clone(),
        filter,
        start,
        tx,
        state.draining.clone(),
        subscription::Reader {
            catch_ups: state.catch_ups.clone(),
            token: user.token_id.clone(),
            _held: held,
        },
    ));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let sent = rx.recv().await?;
        Some((Ok::<_, Infallible>(frame(sent)), rx))
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // nginx would otherwise hold events back to fill its buffer.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

fn frame(sent: Sent) -> sse::Event {
    let frame = match sent.id {
        Some(id) => sse::Event::default().id(id),
        None => sse::Event::default(),
    };
    match sent.event {
        Some(event) => frame
            .event(event.name())
            .json_data(&event)
            .expect("events serialize to JSON"),
        // Only a place to resume from.
        None => frame,
    }
}

fn parse_kinds(list: &str) -> Result<Vec<Kind>, Invalid> {
    list.split(',')
        .map(|name| {
            Kind::parse(name.trim()).ok_or_else(|| {
                Invalid::new(
                    "kind",
                    format!(
                        "unknown kind {name:?}; the kinds are {}",
                        Kind::NAMES.join(", ")
                    ),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_a_comma_separated_list_of_known_names() {
        assert_eq!(
            parse_kinds("task,node").unwrap(),
            vec![Kind::Task, Kind::Node]
        );
        let e = parse_kinds("task,nope").unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
