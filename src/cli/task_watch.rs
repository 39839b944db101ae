//! Following tasks through the event stream: `baton task watch` prints events as they
//! come, and `task submit --wait` / `task logs --follow` learn of a new attempt or the
//! end from it rather than by asking again and again. A stream cut short (its node went
//! away) is taken up again, on whichever node answers, after the last event received.

use anyhow::Context;
use baton_client::{Client, EventFilter, EventFrame};
use baton_core::TaskStatus;
use futures::StreamExt;
use std::io::Write;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// Pause before subscribing again after the stream broke.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// Calls `each` with every event `filter` selects, for ever (or until `each` says
/// stop), taking the stream up again after the last id whenever it breaks. Refusals
/// (a bad filter, a token that may not) end it with the error.
pub async fn follow_events(
    client: &Client,
    filter: &EventFilter,
    mut each: impl FnMut(&EventFrame) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut last_id: Option<String> = None;
    loop {
        match client.events(filter, last_id.as_deref()).await {
            Ok(frames) => {
                let mut frames = std::pin::pin!(frames);
                while let Some(Ok(frame)) = frames.next().await {
                    if let Some(id) = &frame.id {
                        last_id = Some(id.clone());
                    }
                    if !each(&frame)? {
                        return Ok(());
                    }
                }
            }
            Err(e) if e.status().is_some() => return Err(e.into()),
            Err(_) => {}
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}

/// One line for a person: time, kind and what changed.
pub fn describe(frame: &EventFrame) -> anyhow::Result<String> {
    let v = frame.json()?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("-").to_string();
    let at = s("at");
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
    follow_events(client, &filter, |frame| {
        let mut out = std::io::stdout().lock();
        if json {
            writeln!(out, "{}", frame.data)?;
        } else {
            writeln!(out, "{}", describe(frame)?)?;
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
}

/// Watches task `id` through the event stream: the receiver holds its latest status
/// and attempt, and the watcher ends once the task has. Subscribes before reading the
/// task once, so no change between the two is missed.
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
    });
    let client = client.clone();
    let watcher = tokio::spawn(async move {
        let mut last_id: Option<String> = None;
        let mut frames = Some(Box::pin(frames));
        loop {
            if tx.borrow().status.is_terminal() {
                return;
            }
            let stream = match frames.take() {
                Some(stream) => stream,
                None => match client.events(&filter, last_id.as_deref()).await {
                    Ok(stream) => Box::pin(stream),
                    Err(_) => {
                        tokio::time::sleep(RECONNECT_AFTER).await;
                        continue;
                    }
                },
            };
            let mut stream = stream;
            while let Some(Ok(frame)) = stream.next().await {
                if let Some(id) = &frame.id {
                    last_id = Some(id.clone());
                }
                let news = match frame.event.as_str() {
                    "task" => news_of(&frame),
                    // Events were lost: the task as it stands now.
                    "resync" => client.task_get(id).await.ok().map(|t| TaskNews {
                        status: t.status,
                        attempt: t.attempt,
                    }),
                    _ => None,
                };
                if let Some(news) = news {
                    tx.send_replace(news);
                    if news.status.is_terminal() {
                        return;
                    }
                }
            }
        }
    });
    Ok((rx, watcher))
}

fn news_of(frame: &EventFrame) -> Option<TaskNews> {
    let v = frame.json().ok()?;
    Some(TaskNews {
        status: serde_json::from_value(v.get("status")?.clone()).ok()?,
        attempt: v.get("attempt")?.as_i64()? as i32,
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
            data: r#"{"kind":"task","task_id":"t","queue":"q","status":"running","attempt":2,"runner_id":null,"node_id":"n","at":"now"}"#.into(),
        };
        assert_eq!(
            news_of(&frame),
            Some(TaskNews {
                status: TaskStatus::Running,
                attempt: 2
            })
        );
        let line = describe(&frame).unwrap();
        assert!(line.contains("running") && line.contains("attempt=2"), "{line}");
    }
}
