//! What the drill's processes recorded of themselves: each task's runs (its own record of
//! starts, ticks and ends) and what each runner was told of its results (its log).

use std::collections::HashMap;
use std::path::Path;
use uuid::Uuid;

/// One run of a task, from its own record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub(super) attempt: i32,
    pub(super) start: i128,
    pub(super) end: Option<i128>,
    /// Its exit code, when it ended by itself.
    pub(super) exit_code: Option<i32>,
    /// The last time the run was seen alive (its start, or its latest tick).
    pub(super) seen: i128,
}

impl Run {
    /// When it was last known to run: its end, or for a run killed without one, its
    /// last tick.
    pub(super) fn last(&self) -> i128 {
        self.end.unwrap_or(self.seen)
    }
}

pub(super) fn runs_from(executions: &Path) -> HashMap<Uuid, Vec<Run>> {
    let mut starts: HashMap<(Uuid, i32, u32), Run> = HashMap::new();
    for line in std::fs::read_to_string(executions)
        .unwrap_or_default()
        .lines()
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, id, attempt, at, execution, rc) = match parts[..] {
            [kind, id, attempt, at, execution] => (kind, id, attempt, at, execution, None),
            [kind, id, attempt, at, execution, rc] => {
                (kind, id, attempt, at, execution, rc.parse::<i32>().ok())
            }
            _ => continue,
        };
        let (Ok(id), Ok(attempt), Ok(at), Ok(execution)) = (
            id.parse::<Uuid>(),
            attempt.parse::<i32>(),
            at.parse::<i128>(),
            execution.parse::<u32>(),
        ) else {
            continue;
        };
        let key = (id, attempt, execution);
        match kind {
            "S" => {
                starts.insert(
                    key,
                    Run {
                        attempt,
                        start: at,
                        end: None,
                        exit_code: None,
                        seen: at,
                    },
                );
            }
            "E" => {
                if let Some(run) = starts.get_mut(&key) {
                    run.end = Some(at);
                    run.exit_code = rc;
                    run.seen = run.seen.max(at);
                }
            }
            "T" => {
                if let Some(run) = starts.get_mut(&key) {
                    run.seen = run.seen.max(at);
                }
            }
            _ => {}
        }
    }
    let mut by_task: HashMap<Uuid, Vec<Run>> = HashMap::new();
    for ((id, _, _), run) in starts {
        by_task.entry(id).or_default().push(run);
    }
    by_task
}

/// What runners were told of their results: every `task reported` line of their logs
/// whose status is final, as (task, status).
pub(super) fn acknowledged(logs: &Path) -> Vec<(Uuid, String)> {
    let mut told = Vec::new();
    let Ok(entries) = std::fs::read_dir(logs) else {
        return told;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("runner-") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())
            .unwrap_or_default()
            .lines()
        {
            let Some(rest) = line.split("task reported task.id=").nth(1) else {
                continue;
            };
            let id = rest
                .split_whitespace()
                .next()
                .and_then(|i| i.parse::<Uuid>().ok());
            let status = rest
                .split("status=Some(")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .and_then(|s| match s {
                    "Succeeded" => Some("succeeded"),
                    "Failed" => Some("failed"),
                    "Cancelled" => Some("cancelled"),
                    "TimedOut" => Some("timed_out"),
                    _ => None, // not final (a retry)
                });
            if let (Some(id), Some(status)) = (id, status) {
                told.push((id, status.to_string()));
            }
        }
    }
    told
}
