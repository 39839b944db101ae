//! Following tasks through the event stream: `baton task watch` prints events as they
//! come, and `task submit --wait` / `task logs --follow` learn of a new attempt or the
//! end from it rather than by asking again and again. A stream cut short (its node went
//! away) is taken up again, on whichever node answers, after the last event received.

use anyhow::Context;
use baton_client::{Client, ClientError, EventFilter, EventFrame, StatusCode};
use baton_core::TaskStatus;
use futures::StreamExt;
use std::io::Write;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// Pause before subscribing again after the stream broke or ended, doubling to a cap:
/// a node that cannot read the history answers at once, and is not asked in a loop.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Whether a refusal is for good: a 4xx other than 429 (a bad filter, a token that may
/// not). Anything else — no answer, 429, 5xx — may pass, on this node or another.
pub fn for_good(e: &ClientError) -> bool {
    e.status()
        .is_some_and(|s| s.is_client_error() && s != StatusCode::TOO_MANY_REQUESTS)
}

/// An open event stream.
pub type Frames =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<EventFrame, ClientError>> + Send>>;

/// Calls `each` with every event `filter` selects (starting with `first`, a stream
/// already open, if given), for ever or until `each` says stop, taking the stream up
/// again after the last id whenever it breaks. A stream taken up with no id to resume
/// from (the last broke before its first frame) may have missed events: `each` is told
/// so with a `resync`. Refusals for good end it with the error.
pub async fn follow_events<F>(
    client: &Client,
    filter: &EventFilter,
    first: Option<Frames>,
    mut each: impl FnMut(EventFrame) -> F,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<bool>>,
{
    let mut last_id: Option<String> = None;
    let mut pause = RECONNECT_FIRST;
    let mut first = first;
    let mut opened = 0;
    loop {
        let frames = match first.take() {
            Some(frames) => Ok(frames),
            None => client
                .events(filter, last_id.as_deref())
                .await
                .map(|frames| Box::pin(frames) as Frames),
        };
        match frames {
            Ok(mut frames) => {
                let mut blind = last_id.is_none() && opened > 0;
                opened += 1;
                while let Some(Ok(frame)) = frames.next().await {
                    pause = RECONNECT_FIRST;
                    if let Some(id) = &frame.id {
                        last_id = Some(id.clone());
                    }
                    if std::mem::take(&mut blind) && !each(blind_resync()).await? {
                        return Ok(());
                    }
                    if !frame.is_place_only() && !each(frame).await? {
                        return Ok(());
                    }
                }
            }
            Err(e) if for_good(&e) => return Err(e.into()),
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// What a stream taken up with nothing to resume from tells its reader.
fn blind_resync() -> EventFrame {
    EventFrame {
        id: None,
        event: "resync".into(),
        data: r#"{"kind":"resync","reason":"the stream broke before saying where it stood: events may have been missed"}"#.into(),
    }
}

/// One line for a person: time, kind and what changed.
pub fn describe(frame: &EventFrame) -> anyhow::Result<String> {
    let v = frame.json()?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("-").to_string();
    // Local time with its zone, as in every table; as sent if it is not a time.
    let at = match s("at").parse::<chrono::DateTime<chrono::Utc>>() {
        Ok(at) => super::when::local(at),
        Err(_) => s("at"),
    };
    Ok(match frame.event.as_str() {
        "task" => format!(
            "{at}  task      {}  {:<10} queue={} attempt={} runner={} node={}",
            s("task_id"),
            s("status"),
            s("queue"),
            v.get("attempt").and_then(|a| a.as_i64()).unwrap_or(0),
            s("runner_id"),
            s("node_id"),
        ),
        "runner" => format!(
            "{at}  runner    {}  {} (heard on {})",
            s("runner_id"),
            s("event"),
            s("node_id")
        ),
        "node" => match v.get("adopted_by").and_then(|x| x.as_str()) {
            Some(by) => format!(
                "{at}  node      {}  {}; {} claims adopted by {by}",
                s("node_id"),
                s("event"),
                v.get("claims").and_then(|c| c.as_u64()).unwrap_or(0)
            ),
            None => format!("{at}  node      {}  {}", s("node_id"), s("event")),
        },
        "schedule" => format!(
            "{at}  schedule  {}  fired task {} on queue {}",
            s("schedule_id"),
            s("task_id"),
            s("queue")
        ),
        "resync" => format!("resync: {}", s("reason")),
        other => format!("{other}: {}", frame.data),
    })
}

/// `baton task watch`: prints events until interrupted.
pub async fn watch(client: &Client, filter: EventFilter, json: bool) -> anyhow::Result<()> {
    follow_events(client, &filter, None, |frame| async move {
        let mut out = std::io::stdout().lock();
        if json {
            writeln!(out, "{}", frame.data)?;
        } else {
            writeln!(out, "{}", describe(&frame)?)?;
        }
        out.flush()?;
        Ok(true)
    })
    .await
}

/// Where one task stands, as its events tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskNews {
    pub status: TaskStatus,
    pub attempt: i32,
    /// Its place in the task's life (`step` of the event); `None` when read from the task.
    pub step: Option<i64>,
}

/// Watches task `id` through the event stream: the receiver holds its latest status
/// and attempt, and the watcher ends once the task has (or once the stream refuses it
/// for good: the receiver then says no more, and the caller reads the task itself).
/// Subscribes before reading the task once — the stream's place is taken before its
/// answer comes — so no change between the two is missed.
pub async fn watch_task(
    client: &Client,
    id: Uuid,
) -> anyhow::Result<(watch::Receiver<TaskNews>, tokio::task::JoinHandle<()>)> {
    let filter = EventFilter {
        task: Some(id),
        kind: Some("task".into()),
        ..EventFilter::default()
    };
    let frames = client
        .events(&filter, None)
        .await
        .context("subscribing to the task's events")?;
    let task = client.task_get(id).await.context("reading the task")?;
    let (tx, rx) = watch::channel(TaskNews {
        status: task.status,
        attempt: task.attempt,
        step: None,
    });
    let client = client.clone();
    let watcher = tokio::spawn(async move {
        let first = Some(Box::pin(frames) as Frames);
        let tx = std::sync::Arc::new(tx);
        // A refusal for good ends the watcher: the receiver then says no more.
        let _ = follow_events(&client.clone(), &filter, first, |frame| {
            let (client, tx) = (client.clone(), tx.clone());
            async move {
                let news = match frame.event.as_str() {
                    "task" => news_of(&frame),
                    // Events were lost: the task as it stands now.
                    "resync" => now_of(&client, id).await,
                    _ => None,
                };
                if let Some(news) = news {
                    // A change two nodes made at once may arrive after a later one.
                    let newer = match (tx.borrow().step, news.step) {
                        (Some(seen), Some(step)) => step > seen,
                        _ => true,
                    };
                    if newer {
                        tx.send_replace(news);
                    }
                }
                Ok(!tx.borrow().status.is_terminal())
            }
        })
        .await;
    });
    Ok((rx, watcher))
}

async fn now_of(client: &Client, id: Uuid) -> Option<TaskNews> {
    let t = client.task_get(id).await.ok()?;
    Some(TaskNews {
        status: t.status,
        attempt: t.attempt,
        step: None,
    })
}

fn news_of(frame: &EventFrame) -> Option<TaskNews> {
    let v = frame.json().ok()?;
    Some(TaskNews {
        status: serde_json::from_value(v.get("status")?.clone()).ok()?,
        attempt: v.get("attempt")?.as_i64()? as i32,
        step: v.get("step").and_then(|s| s.as_i64()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_events_read_as_news_and_lines() {
        let frame = EventFrame {
            id: Some("1-0:0".into()),
            event: "task".into(),
            data: r#"{"kind":"task","task_id":"t","queue":"q","status":"running","attempt":2,"step":19,"runner_id":null,"node_id":"n","at":"now"}"#.into(),
        };
        assert_eq!(
            news_of(&frame),
            Some(TaskNews {
                status: TaskStatus::Running,
                attempt: 2,
                step: Some(19),
            })
        );
        let line = describe(&frame).unwrap();
        assert!(
            line.contains("running") && line.contains("attempt=2"),
            "{line}"
        );
        let at = "2026-12-07T04:40:21.5Z";
        let timed = EventFrame {
            data: frame
                .data
                .replace(r#""at":"now""#, &format!(r#""at":"{at}""#)),
            ..frame
        };
        let line = describe(&timed).unwrap();
        let local = super::super::when::local(at.parse().unwrap());
        assert!(line.starts_with(&format!("{local}  task")), "{line}");
    }
}
