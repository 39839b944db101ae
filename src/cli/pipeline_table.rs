//! Pipelines for people: one pipeline as a header over a table of its jobs (in the
//! pipeline's order: by layer, then name), and a page of pipelines as a table. Statuses
//! are coloured on a terminal as the task tables colour them, ids are short unless
//! `--full-ids` is given, and run times count to now while they run.

use super::connect::ListOutput;
use super::table::{Table, printable};
use super::{task_table, when};
use anstyle::{AnsiColor, Style};
use baton_client::{Pipeline, PipelineJob, PipelineList, PipelineStatus};
use chrono::{DateTime, Utc};
use std::io::Write;

pub const JOB_HEADER: [&str; 8] = [
    "LAYER", "NAME", "STATUS", "NEEDS", "EXIT", "DURATION", "TASK", "ERROR",
];

pub const LIST_HEADER: [&str; 7] = [
    "ID", "NAME", "STATUS", "JOBS", "COUNTS", "CREATED", "DURATION",
];

/// The most of a job's error a row shows; `baton task get` on its task shows it whole.
const ERROR_CHARS: usize = 60;

/// A pipeline's status in the colour of the task status it stands for.
pub fn colour_of(status: PipelineStatus) -> Style {
    let colour = match status {
        PipelineStatus::Running => AnsiColor::Yellow,
        PipelineStatus::Succeeded => AnsiColor::Green,
        PipelineStatus::Failed => AnsiColor::Red,
        PipelineStatus::Cancelled => AnsiColor::BrightBlack,
    };
    Style::new().fg_color(Some(colour.into()))
}

/// How long the pipeline took, from its submit to its last job's end, or so far at `now`.
pub fn pipeline_duration(
    created_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> String {
    when::span(finished_at.unwrap_or(now) - created_at)
}

/// How long a job's run took, or has taken so far at `now`; `-` before it started (and
/// for a job skipped without running).
pub fn job_duration(job: &PipelineJob, now: DateTime<Utc>) -> String {
    match (job.started_at, job.finished_at) {
        (Some(start), Some(end)) => when::span(end - start),
        (Some(start), None) if !job.status.is_terminal() => when::span(now - start),
        _ => "-".to_string(),
    }
}

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

fn id(id: uuid::Uuid, full_ids: bool) -> String {
    match full_ids {
        true => id.to_string(),
        false => baton_client::short_id(id),
    }
}

pub fn jobs_table(pipeline: &Pipeline, full_ids: bool, now: DateTime<Utc>) -> Table {
    let mut table = Table::new(&JOB_HEADER);
    for j in &pipeline.jobs {
        let cells = vec![
            j.layer.to_string(),
            j.name.clone(),
            j.status.to_string(),
            match j.needs.is_empty() {
                true => "-".to_string(),
                false => j.needs.join(","),
            },
            j.exit_code
                .map_or_else(|| "-".to_string(), |c| c.to_string()),
            job_duration(j, now),
            id(j.task_id, full_ids),
            j.error
                .as_deref()
                .map_or_else(|| "-".to_string(), |e| cut(e, ERROR_CHARS)),
        ];
        table.push_styled(cells, Some((2, task_table::colour_of(j.status))));
    }
    table
}

/// The pipeline: its id, name, status, times, then its jobs' table.
pub fn write(
    out: &mut impl Write,
    pipeline: &Pipeline,
    full_ids: bool,
    colour: bool,
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    let status = match colour {
        true => {
            let style = colour_of(pipeline.status);
            format!(
                "{}{}{}",
                style.render(),
                pipeline.status.as_str(),
                style.render_reset()
            )
        }
        false => pipeline.status.as_str().to_string(),
    };
    // The whole id: the one to copy into the next command. The name is the user's, and
    // is shown as the table shows a cell (no control characters).
    writeln!(out, "pipeline  {}", pipeline.id)?;
    writeln!(out, "name      {}", printable(&pipeline.name))?;
    writeln!(out, "status    {status}")?;
    writeln!(out, "created   {}", when::local(pipeline.created_at))?;
    writeln!(
        out,
        "duration  {}",
        pipeline_duration(pipeline.created_at, pipeline.finished_at, now)
    )?;
    if let Some(schedule) = pipeline.schedule_id {
        writeln!(out, "schedule  {schedule}")?;
    }
    writeln!(out)?;
    jobs_table(pipeline, full_ids, now).write(out, colour)
}

pub fn list_table(list: &PipelineList, output: &ListOutput) -> Table {
    let now = Utc::now();
    let mut table = Table::new(&LIST_HEADER);
    for p in &list.pipelines {
        let counts: Vec<String> = p.counts.iter().map(|(s, n)| format!("{s}={n}")).collect();
        let cells = vec![
            output.id(p.id),
            p.name.clone(),
            p.status.as_str().to_string(),
            p.jobs.to_string(),
            counts.join(" "),
            when::local(p.created_at),
            pipeline_duration(p.created_at, p.finished_at, now),
        ];
        table.push_styled(cells, Some((2, colour_of(p.status))));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pipeline() -> Pipeline {
        serde_json::from_value(json!({
            "id": "019afc6e-0000-7000-8000-aaaaaaaaaaaa", "name": "release",
            "status": "failed", "created_at": "2026-12-04T10:00:00Z",
            "finished_at": "2026-12-04T10:00:30Z",
            "jobs": [
                {"name": "build", "needs": [], "when": "on_success", "layer": 0,
                 "task_id": "019afc6e-0000-7000-8000-bbbbbbbbbbbb", "status": "succeeded",
                 "attempt": 1, "runs": 1, "exit_code": 0,
                 "started_at": "2026-12-04T10:00:01Z", "finished_at": "2026-12-04T10:00:13.500Z"},
                {"name": "test", "needs": ["build"], "when": "on_success", "layer": 1,
                 "task_id": "019afc6e-0000-7000-8000-cccccccccccc", "status": "failed",
                 "attempt": 1, "runs": 1, "exit_code": 2,
                 "started_at": "2026-12-04T10:00:14Z", "finished_at": "2026-12-04T10:00:20Z"},
                {"name": "deploy", "needs": ["build", "test"], "when": "on_success", "layer": 2,
                 "task_id": "019afc6e-0000-7000-8000-dddddddddddd", "status": "skipped",
                 "attempt": 0, "runs": 1,
                 "error": "skipped: a job it needs did not succeed, and it runs only when all of them do"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn a_pipeline_shows_its_header_then_a_row_per_job() {
        let now: DateTime<Utc> = "2026-12-04T11:00:00Z".parse().unwrap();
        let mut out = Vec::new();
        write(&mut out, &pipeline(), false, false, now).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0], "pipeline  019afc6e-0000-7000-8000-aaaaaaaaaaaa",
            "{text}"
        );
        assert_eq!(lines[2], "status    failed", "{text}");
        assert_eq!(lines[4], "duration  30.0s", "ended: not to now: {text}");
        assert_eq!(lines[5], "", "{text}");
        assert_eq!(
            lines[6].split_whitespace().collect::<Vec<_>>(),
            JOB_HEADER.to_vec()
        );
        let row = |i: usize| lines[7 + i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(
            row(0),
            [
                "0",
                "build",
                "succeeded",
                "-",
                "0",
                "12.5s",
                "bbbbbbbbbbbb",
                "-"
            ]
        );
        assert_eq!(
            row(1)[..7],
            ["1", "test", "failed", "build", "2", "6.0s", "cccccccccccc"]
        );
        assert_eq!(
            row(2)[..6],
            ["2", "deploy", "skipped", "build,test", "-", "-"]
        );
        assert!(lines[9].ends_with('…'), "the error cut: {text}");
        assert!(!text.contains("all of them do"), "the error cut: {text}");
        assert!(
            !text.contains('\u{1b}'),
            "no colour when not asked: {text:?}"
        );

        let mut out = Vec::new();
        write(&mut out, &pipeline(), true, true, now).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("019afc6e-0000-7000-8000-cccccccccccc"),
            "{text}"
        );
        let red = colour_of(PipelineStatus::Failed);
        assert!(
            text.contains(&format!("{}failed{}", red.render(), red.render_reset())),
            "{text:?}"
        );
    }

    #[test]
    fn a_running_job_counts_to_now() {
        let mut p = pipeline();
        p.jobs[1].status = baton_core::TaskStatus::Running;
        p.jobs[1].finished_at = None;
        let now: DateTime<Utc> = "2026-12-04T10:01:14Z".parse().unwrap();
        assert_eq!(job_duration(&p.jobs[1], now), "1m 00s");
        assert_eq!(job_duration(&p.jobs[2], now), "-");
    }
}
