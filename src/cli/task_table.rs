//! `baton task list` for people: one aligned row per task under a header, the status
//! coloured when the output is a terminal (and `NO_COLOR` is not set), plain when piped.

use anstyle::{AnsiColor, Style};
use baton_client::Task;
use baton_core::TaskStatus;
use std::io::{IsTerminal, Write};

const HEADER: [&str; 5] = ["ID", "STATUS", "QUEUE", "EXIT", "CREATED"];

fn colour_of(status: TaskStatus) -> Style {
    let colour = match status {
        TaskStatus::Succeeded => AnsiColor::Green,
        TaskStatus::Failed | TaskStatus::TimedOut | TaskStatus::Expired => AnsiColor::Red,
        TaskStatus::Leased | TaskStatus::Running | TaskStatus::Cancelling => AnsiColor::Yellow,
        TaskStatus::Queued | TaskStatus::Scheduled => AnsiColor::Cyan,
        TaskStatus::Cancelled => AnsiColor::BrightBlack,
    };
    Style::new().fg_color(Some(colour.into()))
}

/// Whether stdout is a terminal that wants colour.
pub fn colour_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub fn write(out: &mut impl Write, tasks: &[Task], colour: bool) -> std::io::Result<()> {
    let rows: Vec<(TaskStatus, [String; 5])> = tasks
        .iter()
        .map(|t| {
            let exit = t
                .exit_code
                .map_or_else(|| "-".to_string(), |c| c.to_string());
            let created = t.created_at.format("%Y-%m-%d %H:%M:%S").to_string();
            let cells = [
                t.id.to_string(),
                t.status.to_string(),
                t.queue.clone(),
                exit,
                created,
            ];
            (t.status, cells)
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for (_, cells) in &rows {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: [&str; 5], style: Option<Style>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            let last = i + 1 == cells.len();
            let padded = if last {
                cell.to_string()
            } else {
                format!("{cell:<width$}  ")
            };
            match style {
                // Only the status is coloured; the padding stays outside the colour.
                Some(style) if i == 1 => {
                    let pad = padded.len() - cell.len();
                    text.push_str(&format!(
                        "{}{cell}{}{}",
                        style.render(),
                        style.render_reset(),
                        " ".repeat(pad)
                    ));
                }
                _ => text.push_str(&padded),
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, HEADER, None)?;
    for (status, cells) in &rows {
        let cells = [&*cells[0], &*cells[1], &*cells[2], &*cells[3], &*cells[4]];
        line(out, cells, colour.then(|| colour_of(*status)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(status: TaskStatus, queue: &str, exit: Option<i32>) -> Task {
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::nil(), "queue": queue, "labels": [], "env": {},
            "priority": 0, "timeout_s": 60, "queue_timeout_s": 60, "max_attempts": 1,
            "status": status, "attempt": 1, "created_at": "2026-12-04T10:00:00Z",
            "updated_at": "2026-12-04T10:00:00Z", "exit_code": exit,
            "log_size": 0, "log_truncated": false, "log_incomplete": false
        }))
        .unwrap()
    }

    #[test]
    fn columns_line_up_and_piped_output_is_plain() {
        let tasks = [
            task(TaskStatus::Succeeded, "default", Some(0)),
            task(TaskStatus::Running, "a-much-longer-queue", None),
        ];
        let mut out = Vec::new();
        write(&mut out, &tasks, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = |needle: &str, line: &str| line.find(needle).unwrap();
        assert_eq!(column("QUEUE", lines[0]), column("default", lines[1]));
        // The exit code sits between two column gaps (the nil id is all zeros).
        assert_eq!(column("EXIT", lines[0]), column("  0  ", lines[1]) + 2);
        assert_eq!(column("CREATED", lines[0]), column("2026-12-04", lines[2]));
        assert!(
            !text.contains('\u{1b}'),
            "no escape codes when not asked: {text:?}"
        );
    }

    #[test]
    fn on_a_terminal_only_the_status_is_coloured() {
        let mut out = Vec::new();
        write(&mut out, &[task(TaskStatus::Failed, "q", Some(3))], true).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text.lines().nth(1).unwrap();
        assert!(
            row.contains(&format!(
                "{}failed{}",
                colour_of(TaskStatus::Failed).render(),
                colour_of(TaskStatus::Failed).render_reset()
            )),
            "{row:?}"
        );
        assert_eq!(text.lines().next().unwrap().find("QUEUE"), {
            // The escape codes take no room on the screen: columns still line up.
            let plain = row
                .replace(&colour_of(TaskStatus::Failed).render().to_string(), "")
                .replace(
                    &colour_of(TaskStatus::Failed).render_reset().to_string(),
                    "",
                );
            plain.find("q ")
        });
    }
}
