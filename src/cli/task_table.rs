//! `baton task list` for people: one row per task, its status coloured on a terminal,
//! its id short (the console's 12 characters, which every command takes back), its run
//! time to now while it runs.

use super::table::Table;
use super::when;
use anstyle::{AnsiColor, Style};
use baton_client::Task;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use std::io::Write;

pub const HEADER: [&str; 7] = [
    "ID", "STATUS", "QUEUE", "EXIT", "CREATED", "DURATION", "COMMAND",
];

/// The most of a command a row shows; `baton task get` shows it whole.
const COMMAND_CHARS: usize = 48;

pub(crate) fn colour_of(status: TaskStatus) -> Style {
    let colour = match status {
        TaskStatus::Succeeded => AnsiColor::Green,
        TaskStatus::Failed | TaskStatus::TimedOut | TaskStatus::Expired => AnsiColor::Red,
        TaskStatus::Leased | TaskStatus::Running | TaskStatus::Cancelling => AnsiColor::Yellow,
        TaskStatus::Queued | TaskStatus::Scheduled => AnsiColor::Cyan,
        TaskStatus::Waiting => AnsiColor::Blue,
        TaskStatus::Cancelled | TaskStatus::Skipped => AnsiColor::BrightBlack,
    };
    Style::new().fg_color(Some(colour.into()))
}

/// How long its last run took, or has taken so far at `now`; `-` before it started.
pub fn duration(task: &Task, now: DateTime<Utc>) -> String {
    match (task.started_at, task.finished_at) {
        (Some(start), Some(end)) => when::span(end - start),
        (Some(start), None) if !task.status.is_terminal() => when::span(now - start),
        _ => "-".to_string(),
    }
}

fn command_of(task: &Task) -> String {
    let whole = match (&task.command, &task.script) {
        (Some(argv), _) => argv.join(" "),
        (None, Some(script)) => script.clone(),
        (None, None) => String::new(),
    };
    match whole.char_indices().nth(COMMAND_CHARS) {
        Some((cut, _)) => format!("{}…", &whole[..cut]),
        None => whole,
    }
}

pub fn table(tasks: &[Task], full_ids: bool, now: DateTime<Utc>) -> Table {
    let mut table = Table::new(&HEADER);
    for t in tasks {
        let id = match full_ids {
            true => t.id.to_string(),
            false => baton_client::short_id(t.id),
        };
        let cells = vec![
            id,
            t.status.to_string(),
            t.queue.clone(),
            t.exit_code
                .map_or_else(|| "-".to_string(), |c| c.to_string()),
            when::local(t.created_at),
            duration(t, now),
            command_of(t),
        ];
        table.push_styled(cells, Some((1, colour_of(t.status))));
    }
    table
}

pub fn write(
    out: &mut impl Write,
    tasks: &[Task],
    full_ids: bool,
    colour: bool,
) -> std::io::Result<()> {
    table(tasks, full_ids, Utc::now()).write(out, colour)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(
        status: TaskStatus,
        exit: Option<i32>,
        started: Option<&str>,
        ended: Option<&str>,
    ) -> Task {
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::now_v7(), "queue": "default", "labels": [], "env": {},
            "command": ["sh", "-c", "echo hello; sleep 1000 # a long command that goes on"],
            "priority": 0, "timeout_s": 60, "queue_timeout_s": 60, "max_attempts": 1,
            "status": status, "attempt": 1, "created_at": "2026-12-04T10:00:00Z",
            "updated_at": "2026-12-04T10:00:00Z", "exit_code": exit,
            "started_at": started, "finished_at": ended,
            "log_size": 0, "log_truncated": false, "log_incomplete": false
        }))
        .unwrap()
    }

    fn lines(table: &Table) -> Vec<String> {
        let mut out = Vec::new();
        table.write(&mut out, false).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_row_shows_the_short_id_the_run_time_and_the_command_cut() {
        let now: DateTime<Utc> = "2026-12-04T10:05:00Z".parse().unwrap();
        let done = task(
            TaskStatus::Failed,
            Some(3),
            Some("2026-12-04T10:00:01Z"),
            Some("2026-12-04T10:00:13.500Z"),
        );
        let running = task(
            TaskStatus::Running,
            None,
            Some("2026-12-04T10:01:00Z"),
            None,
        );
        let waiting = task(TaskStatus::Queued, None, None, None);
        let tasks = [done.clone(), running, waiting];
        let shown = lines(&table(&tasks, false, now));
        assert_eq!(
            shown[0].split_whitespace().collect::<Vec<_>>(),
            HEADER.to_vec()
        );
        let short = baton_client::short_id(done.id);
        assert!(
            shown[1].starts_with(&format!("{short}  failed")),
            "{shown:?}"
        );
        assert!(!shown[1].contains(&done.id.to_string()), "{shown:?}");
        assert!(shown[1].contains("  12.5s  "), "{shown:?}");
        assert!(
            shown[2].contains("  4m 00s  "),
            "to now while it runs: {shown:?}"
        );
        assert!(shown[3].contains("  -  "), "{shown:?}");
        assert!(
            shown[1].ends_with("sleep 1000 # a long command th…"),
            "{shown:?}"
        );
        let column = |needle: &str, line: &str| line.find(needle).unwrap();
        let created = when::local(done.created_at);
        assert_eq!(column("CREATED", &shown[0]), column(&created, &shown[1]));

        let whole = lines(&table(&tasks, true, now));
        assert!(whole[1].starts_with(&done.id.to_string()), "{whole:?}");
    }
}
