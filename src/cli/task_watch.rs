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
fn for_good(e: &ClientError) -> bool {
    e.status()
        .is_some_and(|s| s.is_client_error() && s != StatusCode::TOO_MANY_REQUESTS)
}

/// Calls `each` with every event `filter` selects, for ever (or until `each` says
/// stop), taking the stream up again after the last id whenever it breaks. Refusals
/// for good end it with the error.
pub async fn follow_events(
    client: &Client,
    filter: &EventFilter,
    mut each: impl FnMut(&EventFrame) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut last_id: Option<String> = None;
    let mut pause = RECONNECT_FIRST;
    loop {
        match client.events(filter, last_id.as_deref()).await {
            Ok(frames) => {
                let mut frames = std::pin::pin!(frames);
                while let Some(Ok(frame)) = frames.next().await {
                    pause = RECONNECT_FIRST;
                    if let Some(id) = &frame.id {
                        last_id = Some(id.clone());
                    }
                    if !frame.is_place_only() && !each(&frame)? {
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
        let mut last_id: Option<String> = None;
        let mut frames = Some(Box::pin(frames));
        let mut pause = RECONNECT_FIRST;
        loop {
            if tx.borrow().status.is_terminal() {
                return;
            }
            let mut stream = match frames.take() {
                Some(stream) => stream,
                None => match client.events(&filter, last_id.as_deref()).await {
                    Ok(stream) if last_id.is_none() => {
                        // Nothing to resume from (the last stream broke before its first
                        // frame): what happened meanwhile, from the task, now that the
                        // new stream has its place.
                        if let Some(news) = now_of(&client, id).await {
                            tx.send_replace(news);
                        }
                        Box::pin(stream)
                    }
                    Ok(stream) => Box::pin(stream),
                    Err(e) if for_good(&e) => return,
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(RECONNECT_MAX);
                        continue;
                    }
                },
            };
            while let Some(Ok(frame)) = stream.next().await {
                pause = RECONNECT_FIRST;
                if let Some(id) = &frame.id {
                    last_id = Some(id.clone());
                }
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
                    if tx.borrow().status.is_terminal() {
                        return;
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RECONNECT_MAX);
        }
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
        assert!(line.contains("running") && line.contains("attempt=2"), "{line}");
    }
}
