//! The event stream from the client's side: `GET /v1/events` read as Server-Sent Events,
//! one frame at a time. The caller keeps the last `id` it saw and passes it back when it
//! reconnects (to any node) to get every event since.

use crate::client::{Client, ClientError};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::Method;
use serde::Serialize;
use std::time::Duration;
use uuid::Uuid;

/// What to subscribe to; `None` everywhere: everything the token may see.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EventFilter {
    /// Only events of tasks in this queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Only events of this task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Uuid>,
    /// Comma-separated kinds: `task`, `runner`, `node`, `schedule`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// One frame: its id (the position to resume after; none for a `resync` made for this
/// subscriber), its kind (`task`, …, `resync`) and its JSON data. A frame with an id and
/// no data is a place only (the stream's first frame says where it starts): nothing
/// happened, but it is where to resume from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFrame {
    /// Where to resume after this frame (as `Last-Event-ID`); `None` for a `resync` made
    /// for this subscriber alone.
    pub id: Option<String>,
    /// Its kind: `task`, `runner`, `node`, `schedule`, or `resync` (events were lost: read
    /// the state again).
    pub event: String,
    /// The event's JSON, as text; empty for a frame that only marks a place.
    pub data: String,
}

impl EventFrame {
    /// Whether the frame only marks where the stream stands: nothing happened, but its id
    /// is a place to resume from.
    pub fn is_place_only(&self) -> bool {
        self.data.is_empty()
    }

    /// The data, parsed; a [`ClientError::Protocol`] when it is not JSON.
    pub fn json(&self) -> Result<serde_json::Value, ClientError> {
        serde_json::from_str(&self.data)
            .map_err(|e| ClientError::Protocol(format!("event data is not JSON: {e}")))
    }
}

/// The stream lives as long as the subscriber wants it.
const STREAM_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

impl Client {
    /// Subscribes; with `last_event_id`, starting with every event after it.
    pub async fn events(
        &self,
        filter: &EventFilter,
        last_event_id: Option<&str>,
    ) -> Result<impl Stream<Item = Result<EventFrame, ClientError>> + use<>, ClientError> {
        let mut req = self
            .request(Method::GET, "/v1/events")
            .query(filter)
            .header("accept", "text/event-stream")
            .timeout(STREAM_TIMEOUT);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = Client::send(req).await?;
        Ok(frames(resp.bytes_stream()))
    }
}

/// SSE frames out of a byte stream: `field: value` lines, a blank line ends a frame,
/// `:` lines are comments (keep-alives).
pub fn frames(
    bytes: impl Stream<Item = Result<Bytes, reqwest::Error>>,
) -> impl Stream<Item = Result<EventFrame, ClientError>> {
    let state = (Box::pin(bytes), String::new(), false);
    futures::stream::unfold(state, |(mut bytes, mut buffer, ended)| async move {
        if ended {
            return None;
        }
        loop {
            if let Some(frame) = take_frame(&mut buffer) {
                match frame {
                    Some(frame) => return Some((Ok(frame), (bytes, buffer, false))),
                    None => continue,
                }
            }
            match bytes.next().await {
                Some(Ok(chunk)) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Some(Err(e)) => return Some((Err(e.into()), (bytes, buffer, true))),
                None => return None,
            }
        }
    })
}

/// The first whole frame in `buffer`, removed from it: `Some(None)` for one with neither
/// data nor id (a comment), `None` when no frame is whole yet.
fn take_frame(buffer: &mut String) -> Option<Option<EventFrame>> {
    let normalized = buffer.replace("\r\n", "\n");
    if normalized.len() != buffer.len() {
        *buffer = normalized;
    }
    let end = buffer.find("\n\n")?;
    let block: String = buffer.drain(..end + 2).collect();
    let (mut id, mut event, mut data) = (None, String::from("message"), Vec::new());
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_string()),
            "event" => event = value.to_string(),
            "data" => data.push(value),
            _ => {}
        }
    }
    if data.is_empty() {
        return Some(id.map(|id| EventFrame {
            id: Some(id),
            event: String::new(),
            data: String::new(),
        }));
    }
    Some(Some(EventFrame {
        id,
        event,
        data: data.join("\n"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_at_blank_lines_and_comments_skipped() {
        let mut buffer = String::from(
            ": ping\n\nid: 0-0\n\nid: 1-0:0\nevent: task\ndata: {\"a\":1}\n\nid: 1-0:1\nev",
        );
        assert_eq!(take_frame(&mut buffer), Some(None));
        let place = take_frame(&mut buffer).flatten().unwrap();
        assert!(place.is_place_only() && place.id.as_deref() == Some("0-0"));
        assert_eq!(
            take_frame(&mut buffer),
            Some(Some(EventFrame {
                id: Some("1-0:0".into()),
                event: "task".into(),
                data: "{\"a\":1}".into(),
            }))
        );
        assert_eq!(take_frame(&mut buffer), None, "the rest is not whole yet");
        buffer.push_str("ent: node\r\ndata: x\r\n\r\n");
        assert_eq!(
            take_frame(&mut buffer).flatten().map(|f| (f.id, f.event)),
            Some((Some("1-0:1".into()), "node".into()))
        );
    }
}
