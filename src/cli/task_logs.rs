//! `baton task logs`, and the following of a task's output that `task submit --wait`
//! shares: an attempt's log as stored, its last lines, each line with its time, or the
//! output as it arrives until the task ends.

use super::connect::ClientArgs;
use super::log_lines::{self, LineCutter};
use super::task_watch;
use anyhow::Context;
use baton_client::{Client, LogMarks, Task, TaskRef};
use clap::Args;
use futures::StreamExt;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The task's id, or its short id (the last 12 characters tables show).
    id: TaskRef,
    /// Keep printing new output until the task finishes, each new attempt's in turn.
    #[arg(long, short, conflicts_with = "attempt")]
    follow: bool,
    /// This attempt's output, 1 being the first run [default: the latest].
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    attempt: Option<i32>,
    /// Only the last N lines (with --follow: then what comes).
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<usize>,
    /// Put the time each line was written in front of it, in local time to the
    /// millisecond (with --follow a line is printed once it is whole).
    #[arg(long, short)]
    timestamps: bool,
    #[command(flatten)]
    client: ClientArgs,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    if !args.follow {
        let (attempt, bytes) = read_whole(&client, &args.id, args.attempt).await?;
        let start = args.tail.map_or(0, |n| log_lines::tail_start(&bytes, n));
        let mut printer = Printer::new(&client, args.id.clone(), args.timestamps);
        printer
            .write(attempt, start as i64, &bytes[start..])
            .await?;
        printer.end_attempt().await?;
        return Ok(ExitCode::SUCCESS);
    }
    // The event stream follows a task by its whole id.
    let id = match &args.id {
        TaskRef::Id(id) => *id,
        short => client.task_get(short.clone()).await?.id,
    };
    let mut printer = Printer::new(&client, id.into(), args.timestamps);
    let from = match args.tail {
        None => FollowFrom::Start,
        Some(n) => {
            // What is there now, its last lines; then what comes after it.
            let (attempt, bytes) = read_whole(&client, &id.into(), None).await?;
            let start = log_lines::tail_start(&bytes, n);
            printer
                .write(attempt, start as i64, &bytes[start..])
                .await?;
            FollowFrom::At {
                attempt,
                offset: bytes.len() as i64,
            }
        }
    };
    follow_printing(&client, id, from, &mut printer).await?;
    Ok(ExitCode::SUCCESS)
}

/// One attempt's whole log as stored now (the latest attempt's when `None`), and which
/// attempt it is. The attempt is pinned after the first read, so a retry starting
/// meanwhile cannot splice two attempts' output.
async fn read_whole(
    client: &Client,
    id: &TaskRef,
    attempt: Option<i32>,
) -> anyhow::Result<(i32, Vec<u8>)> {
    let mut attempt = attempt;
    let mut bytes = Vec::new();
    loop {
        let slice = client
            .task_logs_of(id.clone(), attempt, bytes.len() as i64)
            .await?;
        attempt = Some(slice.attempt);
        if slice.bytes.is_empty() {
            return Ok((slice.attempt, bytes));
        }
        bytes.extend_from_slice(&slice.bytes);
    }
}

/// Where following starts.
#[derive(Debug, Clone, Copy)]
pub enum FollowFrom {
    /// The latest attempt's first byte.
    Start,
    /// This attempt's byte `offset` (what came before was printed).
    At { attempt: i32, offset: i64 },
}

/// Prints output as it arrives until the task is terminal, then returns the final task.
pub async fn follow(client: &Client, id: Uuid, from: FollowFrom) -> anyhow::Result<Task> {
    let mut printer = Printer::new(client, id.into(), false);
    follow_printing(client, id, from, &mut printer).await
}

/// With no output and no news for this long, the task itself is read: a change the event
/// stream could not tell (a node killed between a commit and its event) is not waited
/// for for ever.
const QUIET_CHECK: Duration = Duration::from_secs(30);

/// The server streams the output (following it on any node); each attempt has its own
/// log, and a retry's output follows a marker line on stderr. Which attempt is the last
/// and when the task has ended, the event stream tells (`task_watch`); a log stream
/// cut short (its node went away) is picked up again from where it stopped.
async fn follow_printing(
    client: &Client,
    id: Uuid,
    from: FollowFrom,
    printer: &mut Printer,
) -> anyhow::Result<Task> {
    let (mut news, watcher) = task_watch::watch_task(client, id).await?;
    let (mut attempt, mut offset) = match from {
        FollowFrom::Start => (None, 0),
        FollowFrom::At { attempt, offset } => (Some(attempt), offset),
    };
    let mut quiet_since = Instant::now();
    loop {
        let mut received = false;
        match client.task_logs_follow(id, attempt, offset).await {
            Ok((followed, stream)) => {
                attempt = Some(followed);
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(bytes)) = stream.next().await {
                    printer.write(followed, offset, &bytes).await?;
                    offset += bytes.len() as i64;
                    received = true;
                }
            }
            Err(e) if e.status().is_some() => return Err(e.into()),
            // No node answered: a moment before asking again.
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
        let mut now = *news.borrow();
        if news.has_changed().is_err() || quiet_since.elapsed() >= QUIET_CHECK {
            // The watcher has given up, or nothing was heard for long: ask the task.
            let task = client.task_get(id).await.context("reading the task")?;
            (now.status, now.attempt) = (task.status, task.attempt);
            quiet_since = Instant::now();
        }
        match attempt {
            Some(followed) if now.attempt > followed => {
                printer.end_attempt().await?;
                if followed > 0 {
                    eprintln!("--- attempt {} ---", now.attempt);
                }
                attempt = Some(now.attempt);
                offset = 0;
                continue;
            }
            _ if now.status.is_terminal() => break,
            _ => {}
        }
        if received {
            quiet_since = Instant::now();
        } else if let Ok(Ok(())) =
            tokio::time::timeout(Duration::from_secs(1), news.changed()).await
        {
            // Nothing came: news was waited for rather than asking again at once (a
            // stream cut by its node is taken up again within the second).
            quiet_since = Instant::now();
        }
    }
    printer.end_attempt().await?;
    watcher.abort();
    client.task_get(id).await.context("reading the task")
}

/// Writes output to stdout as it comes, or, with timestamps, line by line with each
/// line's time, reading the log's marks when a line starts past those it has.
struct Printer {
    client: Client,
    task: TaskRef,
    stamps: Option<Stamps>,
}

struct Stamps {
    attempt: i32,
    cutter: LineCutter,
    marks: LogMarks,
    /// The marks read cover the bytes before this offset: every byte received by then.
    marks_cover: i64,
}

impl Printer {
    fn new(client: &Client, task: TaskRef, timestamps: bool) -> Printer {
        Printer {
            client: client.clone(),
            task,
            stamps: timestamps.then(|| Stamps {
                attempt: 0,
                cutter: LineCutter::default(),
                marks: LogMarks {
                    attempt: 0,
                    marks: Vec::new(),
                },
                marks_cover: 0,
            }),
        }
    }

    /// Bytes of `attempt`'s log from `offset`.
    async fn write(&mut self, attempt: i32, offset: i64, bytes: &[u8]) -> anyhow::Result<()> {
        let Some(stamps) = &mut self.stamps else {
            return print(bytes);
        };
        if stamps.attempt != attempt {
            *stamps = Stamps {
                attempt,
                cutter: LineCutter::at(offset),
                marks: LogMarks {
                    attempt,
                    marks: Vec::new(),
                },
                marks_cover: offset,
            };
        }
        let received_to = offset + bytes.len() as i64;
        for (start, line) in stamps.cutter.feed(bytes) {
            self.print_stamped(start, &line, received_to).await?;
        }
        Ok(())
    }

    /// The attempt's output has all come: a last line without a newline is printed.
    async fn end_attempt(&mut self) -> anyhow::Result<()> {
        let Some(stamps) = &mut self.stamps else {
            return Ok(());
        };
        if let Some((start, line)) = stamps.cutter.finish() {
            // Its last byte is the last received.
            let received_to = start + line.len() as i64;
            self.print_stamped(start, &line, received_to).await?;
        }
        Ok(())
    }

    /// A line of the current attempt, stamped; `received_to` is the end of what has
    /// been received, which marks read now cover.
    async fn print_stamped(
        &mut self,
        start: i64,
        line: &[u8],
        received_to: i64,
    ) -> anyhow::Result<()> {
        let stamps = self.stamps.as_mut().expect("stamping");
        if start >= stamps.marks_cover {
            stamps.marks = self
                .client
                .task_log_marks(self.task.clone(), Some(stamps.attempt))
                .await
                .context("reading when the log's lines were written")?;
            stamps.marks_cover = received_to;
        }
        print(&log_lines::stamped(start, line, &stamps.marks))
    }
}

fn print(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(())
}
