//! `baton task list`: a page of tasks as a table or as the API's JSON, and with
//! `--watch` the same page kept current — drawn again whenever the event stream tells of
//! a task's change (and, on a terminal, each second, for the run times).

use super::connect::{ClientArgs, ListOutput, Output, print_json};
use super::task_watch::{follow_events, for_good};
use super::when::parse_time;
use super::{resolve, table, task_table, when};
use baton_client::{Client, EventFilter, TaskList, TaskOrder, TaskQuery};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only tasks in this status (queued, running, succeeded, failed, ...).
    #[arg(long)]
    status: Option<String>,
    /// Only tasks of this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only tasks carrying this label.
    #[arg(long)]
    label: Option<String>,
    /// Only tasks whose command or script holds this text, ignoring case.
    #[arg(long)]
    text: Option<String>,
    /// Only the tasks this schedule made: its id, short id or name.
    #[arg(long)]
    schedule: Option<String>,
    /// Only tasks created at or after this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Only tasks created before this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Which first: newest or oldest [default: newest].
    #[arg(long, value_enum)]
    order: Option<Order>,
    /// How many tasks to show, at most.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Continue after this task id (from a previous page).
    #[arg(long, conflicts_with = "watch")]
    cursor: Option<String>,
    /// Keep the list on screen, drawn again as tasks change, until Ctrl-C.
    #[arg(long, short)]
    watch: bool,
    #[command(flatten)]
    output: ListOutput,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Order {
    Newest,
    Oldest,
}

pub async fn run(args: ListArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    let schedule_id = match &args.schedule {
        Some(given) => Some(resolve::schedule(&client, given).await?),
        None => None,
    };
    let query = TaskQuery {
        status: args.status,
        queue: args.queue,
        limit: Some(args.limit),
        cursor: args.cursor,
        schedule_id,
        label: args.label,
        text: args.text,
        created_after: args.created_after,
        created_before: args.created_before,
        order: args.order.map(|o| match o {
            Order::Newest => TaskOrder::Newest,
            Order::Oldest => TaskOrder::Oldest,
        }),
    };
    if args.watch {
        watch_list(&client, &query, &args.output).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let page = client.task_list(&query).await?;
    if args.output.output == Output::Json {
        print_json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let colour = table::colour_wanted();
    task_table::write(
        &mut std::io::stdout().lock(),
        &page.tasks,
        args.output.full_ids,
        colour,
    )?;
    if let Some(next) = page.next_cursor {
        eprintln!("more: --cursor {next}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The least time between two reads of the page: a burst of events is a read or two,
/// not one each.
const READ_PACE: Duration = Duration::from_millis(250);

/// What a redraw is for: the tasks and their statuses. Run times tick on their own.
fn fingerprint(page: &TaskList) -> Vec<(uuid::Uuid, baton_core::TaskStatus, Option<i32>)> {
    page.tasks
        .iter()
        .map(|t| (t.id, t.status, t.exit_code))
        .collect()
}

/// Reads the page, draws it, and again each time a task event comes; on a terminal the
/// screen is cleared first and redrawn each second, piped each change is a new table
/// after an empty line (or, as JSON, a page on a line).
async fn watch_list(client: &Client, query: &TaskQuery, output: &ListOutput) -> anyhow::Result<()> {
    let filter = EventFilter {
        queue: query.queue.clone(),
        kind: Some("task".into()),
        ..EventFilter::default()
    };
    let (told, mut news) = watch::channel(0u64);
    let events = client.clone();
    let mut watcher = tokio::spawn(async move {
        follow_events(&events, &filter, None, |_| {
            told.send_modify(|n| *n += 1);
            async { Ok(true) }
        })
        .await
    });
    let terminal = std::io::stdout().is_terminal();
    let colour = table::colour_wanted();
    let mut shown: Option<TaskList> = None;
    let mut drawn = None;
    let mut read_needed = true;
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        let mut changed = false;
        if read_needed {
            if let Some(at) = last_read {
                tokio::time::sleep_until(at + READ_PACE).await;
            }
            last_read = Some(tokio::time::Instant::now());
            // News that comes while the page is read calls for another read.
            news.mark_unchanged();
            match client.task_list(query).await {
                Ok(page) => {
                    let now = fingerprint(&page);
                    changed = drawn.as_ref() != Some(&now);
                    drawn = Some(now);
                    shown = Some(page);
                    read_needed = false;
                }
                Err(e) if for_good(&e) => return Err(e.into()),
                // No node answered: the page stays as it was until one does.
                Err(_) => {}
            }
        }
        if let Some(page) = &shown
            && (terminal || changed)
        {
            draw(page, output, terminal, colour)?;
        }
        tokio::select! {
            told = news.changed() => {
                if told.is_err() {
                    // The stream was refused for good: say why.
                    return match (&mut watcher).await {
                        Ok(Err(e)) => Err(e),
                        _ => Err(anyhow::anyhow!("the event stream ended")),
                    };
                }
                read_needed = true;
            }
            // A terminal's run times tick; a read that failed is tried again.
            () = tokio::time::sleep(Duration::from_secs(1)), if terminal || read_needed => {}
        }
    }
}

fn draw(page: &TaskList, output: &ListOutput, terminal: bool, colour: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match output.output {
        Output::Json => writeln!(out, "{}", serde_json::to_string(page)?)?,
        Output::Text if terminal => {
            // Home, clear: the page replaces the last one in place.
            write!(out, "\x1b[H\x1b[2J")?;
            writeln!(
                out,
                "{} tasks, as of {} (Ctrl-C to stop)\n",
                page.tasks.len(),
                when::local(chrono::Utc::now())
            )?;
            task_table::write(&mut out, &page.tasks, output.full_ids, colour)?;
        }
        Output::Text => {
            writeln!(out)?;
            task_table::write(&mut out, &page.tasks, output.full_ids, colour)?;
        }
    }
    out.flush()?;
    Ok(())
}
