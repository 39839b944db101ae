//! `baton schedule create | list | get | pause | resume | trigger | delete`.

use super::connect::{ClientArgs, ListOutput, Output, print_json};
use super::resolve;
use super::table::Table;
use super::task::TaskArgs;
use super::when::{self, parse_time};
use baton_client::{CreateSchedule, ScheduleList};
use clap::{Args, Subcommand};
use std::io::Write;
use std::process::ExitCode;

// Parsed once per process and matched at once, as `TaskCommand`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule: `baton schedule create --name N --cron '*/5 * * * *' [task options] -- CMD ARGS...`
    Create(CreateArgs),
    /// List schedules by name: active or paused, expression, zone, next tick.
    List {
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one schedule as JSON: its next ticks and its latest runs.
    Get(ScheduleIdArgs),
    /// Stop firing until resumed.
    Pause(ScheduleIdArgs),
    /// Fire again, from the next tick after now.
    Resume(ScheduleIdArgs),
    /// Make a task from the schedule now, outside its ticks.
    Trigger(ScheduleIdArgs),
    /// Delete a schedule (the tasks it made stay).
    Delete(ScheduleIdArgs),
}

// What each command on one schedule takes, so its id is asked and described the same way
// in each. (No doc comment: it would stand for the commands' own in their help.)
#[derive(Debug, Args)]
pub struct ScheduleIdArgs {
    /// The schedule's id, short id (the last 12 characters the list shows) or name.
    schedule: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Unique among your schedules.
    #[arg(long)]
    name: String,
    /// Five fields (minute hour day month weekday), six with seconds first, or @hourly,
    /// @daily, @weekly, @monthly, @yearly.
    #[arg(long)]
    cron: String,
    /// IANA time zone the expression is read in [default: UTC].
    #[arg(long)]
    timezone: Option<String>,
    /// While the previous run is unfinished: allow, skip, cancel or queue [default: skip].
    #[arg(long)]
    overlap: Option<String>,
    /// Ticks missed while no node was up: skip, latest or all [default: latest].
    #[arg(long)]
    catch_up: Option<String>,
    /// Missed ticks older than this many seconds never fire [default: 86400].
    #[arg(long)]
    catch_up_window_s: Option<i64>,
    /// Start each tick's task up to this many seconds late, spread per tick.
    #[arg(long)]
    jitter_s: Option<i64>,
    /// No tick before this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    start_at: Option<chrono::DateTime<chrono::Utc>>,
    /// No tick after this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    end_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Create it paused.
    #[arg(long)]
    paused: bool,
    /// text: the schedule's id; json: the whole schedule.
    #[arg(long, short, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    task: TaskArgs,
    #[command(flatten)]
    client: ClientArgs,
}

pub async fn run(cmd: ScheduleCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ScheduleCommand::Create(args) => {
            let request = CreateSchedule {
                name: args.name,
                cron: args.cron,
                timezone: args.timezone,
                task: args.task.request()?,
                overlap: args.overlap,
                catch_up: args.catch_up,
                catch_up_window_s: args.catch_up_window_s,
                paused: args.paused,
                start_at: args.start_at,
                end_at: args.end_at,
                jitter_s: args.jitter_s,
                pipeline: None,
            };
            let made = args.client.client()?.schedule_create(&request).await?;
            match args.output {
                Output::Text => {
                    writeln!(std::io::stdout(), "{}", made.id)?;
                    eprintln!(
                        "schedule {:?} created; next tick {}",
                        made.name,
                        when::local_or_dash(made.next_fire_at)
                    );
                }
                Output::Json => print_json(&made)?,
            }
        }
        ScheduleCommand::List { output, client } => {
            let list = client.client()?.schedules().await?;
            output.print(&list, table)?;
        }
        ScheduleCommand::Get(ScheduleIdArgs { schedule, client }) => {
            let client = client.client()?;
            let id = resolve::schedule(&client, &schedule).await?;
            print_json(&client.schedule_get(id).await?)?;
        }
        ScheduleCommand::Pause(schedule) => action(schedule, "pause").await?,
        ScheduleCommand::Resume(schedule) => action(schedule, "resume").await?,
        ScheduleCommand::Trigger(schedule) => action(schedule, "trigger").await?,
        ScheduleCommand::Delete(ScheduleIdArgs { schedule, client }) => {
            let client = client.client()?;
            let id = resolve::schedule(&client, &schedule).await?;
            client.schedule_delete(id).await?;
            writeln!(std::io::stdout(), "schedule {id} deleted")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn table(list: &ScheduleList, output: &ListOutput) -> Table {
    let mut table = Table::new(&["ID", "NAME", "STATE", "CRON", "ZONE", "NEXT TICK"]);
    for s in &list.schedules {
        table.push(vec![
            output.id(s.id),
            s.name.clone(),
            // The console's words: a schedule that fires is active.
            if s.paused { "paused" } else { "active" }.to_string(),
            s.cron.clone(),
            s.timezone.clone(),
            // None left: past its end.
            when::local_or_dash(s.next_fire_at),
        ]);
    }
    table
}

async fn action(
    ScheduleIdArgs { schedule, client }: ScheduleIdArgs,
    what: &str,
) -> anyhow::Result<()> {
    let client = client.client()?;
    let id = resolve::schedule(&client, &schedule).await?;
    print_json(&client.schedule_action(id, what).await?)
}
