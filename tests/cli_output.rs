//! The command line reads the same everywhere: every list is a table under a header (or,
//! with `--output json`, the API's own answer), a time in a table is local time with its
//! zone, a state has one word (`active`, as the console says), ids are short in tables
//! and taken short (or, for a schedule, by name) wherever an id goes, list flags take
//! repeats and commas alike, and a waited task that timed out ends the command with 124.

use baton_localcluster::testing as support;

use baton_client::{Client, SubmitTask, Task};
use baton_core::TaskStatus;
use std::process::Output;
use std::time::Duration;
use support::procs::baton_binary;
use support::*;

/// `baton ARGS...` against `server` with the admin token, in zone `tz`.
async fn baton_in(tz: &str, server: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(baton_binary())
        .args(args)
        .env("BATON_SERVER", server)
        .env("BATON_TOKEN", API_TOKEN)
        .env("TZ", tz)
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("baton runs")
}

async fn baton(server: &str, args: &[&str]) -> Output {
    baton_in("UTC", server, args).await
}

fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "the command succeeds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json_of<T: serde::de::DeserializeOwned>(out: &Output) -> T {
    serde_json::from_str(&stdout_of(out)).expect("the command prints the API's JSON")
}

/// The table's header, as words, and its rows as lines.
fn table_of(out: &Output) -> (String, Vec<String>) {
    let text = stdout_of(out);
    let mut lines = text.lines().map(str::to_string);
    let header = lines.next().expect("a header");
    (header, lines.collect())
}

fn row_with<'a>(rows: &'a [String], needle: &str) -> &'a str {
    rows.iter()
        .find(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("no row with {needle}: {rows:#?}"))
}

/// The cell under `column` in `row`: columns start where their header word starts.
fn cell<'a>(header: &str, row: &'a str, column: &str) -> &'a str {
    let start = header
        .find(column)
        .unwrap_or_else(|| panic!("no {column} in {header}"));
    let next = header[start + column.len()..]
        .find(|c: char| c != ' ')
        .map(|gap| start + column.len() + gap);
    let end = next.unwrap_or(row.len()).min(row.len());
    row[start..end].trim_end()
}

fn queued_for_nobody(queue: &str) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        labels: vec!["no-runner-has-this".into()],
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_list_is_a_table_with_a_header_or_the_apis_json() {
    let env = TestEnv::new("cli-lists").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &["cli"], 2).await;
    let user = user_client(&node.url);
    user.submit(&queued_for_nobody("waiting")).await.unwrap();
    user.submit(&queued_for_nobody("held")).await.unwrap();
    assert!(
        baton(&node.url, &["queue", "pause", "held"])
            .await
            .status
            .success()
    );

    // Queues: one word for a state, the console's.
    let (header, rows) = table_of(&baton(&node.url, &["queue", "list"]).await);
    assert_eq!(
        header
            .split("  ")
            .filter(|w| !w.is_empty())
            .map(str::trim)
            .collect::<Vec<_>>(),
        [
            "NAME",
            "STATE",
            "DEPTH",
            "RUNNING",
            "OLDEST WAITING",
            "DEFAULTS"
        ]
    );
    assert_eq!(cell(&header, row_with(&rows, "waiting"), "STATE"), "active");
    assert_eq!(cell(&header, row_with(&rows, "held"), "STATE"), "paused");
    assert_eq!(cell(&header, row_with(&rows, "held"), "DEPTH"), "1");
    let queues: baton_client::QueueList =
        json_of(&baton(&node.url, &["queue", "list", "--output", "json"]).await);
    let waiting = queues.queues.iter().find(|q| q.name == "waiting").unwrap();
    assert!(!waiting.paused);

    // Times: local time with its zone in a table, RFC 3339 in JSON, the same moment.
    let oldest = waiting.oldest_waiting.expect("a task waits");
    let utc = cell(&header, row_with(&rows, "waiting"), "OLDEST WAITING").to_string();
    assert_eq!(utc, format!("{} UTC", oldest.format("%Y-%m-%d %H:%M:%S")));
    let (header_in, rows_in) =
        table_of(&baton_in("Asia/Kolkata", &node.url, &["queue", "list"]).await);
    let kolkata = cell(&header_in, row_with(&rows_in, "waiting"), "OLDEST WAITING");
    let there = oldest + chrono::TimeDelta::minutes(5 * 60 + 30);
    assert_eq!(
        kolkata,
        format!("{} +05:30", there.format("%Y-%m-%d %H:%M:%S"))
    );
    let raw: serde_json::Value = json_of(&baton(&node.url, &["queue", "list", "-o", "json"]).await);
    let raw_oldest = raw["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "waiting")
        .unwrap()["oldest_waiting"]
        .as_str()
        .unwrap()
        .to_string();
    chrono::DateTime::parse_from_rfc3339(&raw_oldest).expect("RFC 3339 in JSON");

    // Runners: short ids in the table, taken back by every command on one.
    let runner = wait_for(
        "the runner to be listed online",
        Duration::from_secs(30),
        || async {
            let list: baton_client::RunnerList =
                json_of(&baton(&node.url, &["runners", "list", "-o", "json"]).await);
            list.runners.into_iter().find(|r| r.online)
        },
    )
    .await;
    let short = baton_client::short_id(runner.id.uuid());
    let (header, rows) = table_of(&baton(&node.url, &["runners", "list"]).await);
    assert!(header.starts_with("ID") && header.contains("STATE") && header.contains("LAST SEEN"));
    let row = row_with(&rows, &short);
    assert!(
        !row.contains(&runner.id.to_string()),
        "short by default: {row}"
    );
    assert_eq!(cell(&header, row, "STATE"), "online");
    assert_eq!(cell(&header, row, "RUNNING"), "0/2");
    let paused: serde_json::Value = json_of(&baton(&node.url, &["runners", "pause", &short]).await);
    assert_eq!(paused["paused"], true);
    let (header, rows) = table_of(&baton(&node.url, &["runners", "list", "--full-ids"]).await);
    assert_eq!(
        cell(&header, row_with(&rows, &runner.id.to_string()), "STATE"),
        "paused"
    );

    // Schedules: created with its id alone on stdout, named by its name afterwards.
    let made = baton(
        &node.url,
        &[
            "schedule", "create", "--name", "nightly", "--cron", "@daily", "--", "true",
        ],
    )
    .await;
    let id: uuid::Uuid = stdout_of(&made).trim().parse().expect("the id alone");
    let (header, rows) = table_of(&baton(&node.url, &["schedule", "list"]).await);
    let row = row_with(&rows, &baton_client::short_id(id));
    assert_eq!(cell(&header, row, "NAME"), "nightly");
    assert_eq!(cell(&header, row, "STATE"), "active");
    assert!(cell(&header, row, "NEXT TICK").ends_with(" UTC"), "{row}");
    let paused: baton_client::Schedule =
        json_of(&baton(&node.url, &["schedule", "pause", "nightly"]).await);
    assert_eq!((paused.id, paused.paused), (id, true), "by its name");
    let (header, rows) = table_of(&baton(&node.url, &["schedule", "list"]).await);
    assert_eq!(cell(&header, row_with(&rows, "nightly"), "STATE"), "paused");
    let got: baton_client::Schedule =
        json_of(&baton(&node.url, &["schedule", "get", &baton_client::short_id(id)]).await);
    assert_eq!(got.id, id, "by short id too");
    let unknown = baton(&node.url, &["schedule", "trigger", "weekly"]).await;
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no schedule \"weekly\""),
        "{unknown:?}"
    );
    let listed: baton_client::ScheduleList =
        json_of(&baton(&node.url, &["schedule", "list", "-o", "json"]).await);
    assert_eq!(listed.schedules.len(), 1);

    // Tokens: the secret alone on stdout, a table of them without it.
    let secret = stdout_of(
        &baton(
            &node.url,
            &["token", "create", "--name", "ci", "--scope", "read"],
        )
        .await,
    );
    let secret = secret.trim();
    assert!(
        secret.starts_with("bat_") && !secret.contains(' '),
        "{secret}"
    );
    let read = Client::new(&node.url, Some(secret.into())).unwrap();
    assert_eq!(read.me().await.unwrap().scopes, [baton_client::Scope::Read]);
    let (header, rows) = table_of(&baton(&node.url, &["token", "list"]).await);
    let row = row_with(&rows, "ci");
    assert_eq!(cell(&header, row, "SCOPES"), "read");
    assert_eq!(cell(&header, row, "STATE"), "active");
    assert!(!rows.concat().contains(secret));
    let tokens: baton_client::TokenList =
        json_of(&baton(&node.url, &["token", "list", "-o", "json"]).await);
    let ci = tokens.tokens.iter().find(|t| t.name == "ci").unwrap();
    let revoked = baton(
        &node.url,
        &["token", "revoke", &baton_client::short_id(ci.id)],
    )
    .await;
    assert!(revoked.status.success(), "{revoked:?}");
    let (header, rows) = table_of(&baton(&node.url, &["token", "list"]).await);
    assert_eq!(cell(&header, row_with(&rows, "ci"), "STATE"), "revoked");

    let registration = stdout_of(
        &baton(
            &node.url,
            &["registration-token", "create", "--name", "builders"],
        )
        .await,
    );
    assert!(registration.trim().starts_with("brg_"), "{registration}");
    let (header, rows) = table_of(&baton(&node.url, &["registration-token", "list"]).await);
    let row = row_with(&rows, "builders");
    assert_eq!(cell(&header, row, "USES LEFT"), "1");
    assert_eq!(cell(&header, row, "STATE"), "active");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_is_named_by_its_short_id_wherever_an_id_goes() {
    let env = TestEnv::new("cli-short-ids").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (task, _) = user.submit(&queued_for_nobody("short")).await.unwrap();
    let short = baton_client::short_id(task.id);

    let (header, rows) = table_of(&baton(&node.url, &["task", "list", "--queue", "short"]).await);
    assert_eq!(
        cell(&header, &rows[0], "ID"),
        short,
        "the table's id is the short one"
    );
    let got: Task = json_of(&baton(&node.url, &["task", "get", &short]).await);
    assert_eq!(got.id, task.id);
    let upper: Task = json_of(&baton(&node.url, &["task", "get", &short.to_uppercase()]).await);
    assert_eq!(upper.id, task.id, "in either case");
    let cancelled = baton(&node.url, &["task", "cancel", &short]).await;
    assert_eq!(
        stdout_of(&cancelled).trim(),
        format!("task {} cancelled", task.id)
    );
    assert_eq!(
        user.task_get(task.id).await.unwrap().status,
        TaskStatus::Cancelled
    );
    let logs = baton(&node.url, &["task", "logs", &short]).await;
    assert_eq!(stdout_of(&logs), "", "no output, and no error");

    // Nobody's: the server's 404, said as such.
    let nobody = baton(&node.url, &["task", "get", "0123456789ab"]).await;
    assert_eq!(nobody.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("404"),
        "{nobody:?}"
    );

    // Neither a UUID nor 12 hex digits: refused before any request (no server is asked).
    for bad in ["0123456789a", "not-a-task-id", "0123456789abz"] {
        let out = baton("http://127.0.0.1:1", &["task", "get", bad]).await;
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("not a task id")
                && said.contains("12 hex digits")
                && !said.contains("no server"),
            "{said}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn task_list_filters_by_label_and_text_and_shows_how_long_each_ran() {
    let env = TestEnv::new("cli-list-filters").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &["fast"], 2).await;
    let user = user_client(&node.url);
    let (labelled, _) = user
        .submit(&SubmitTask {
            labels: vec!["fast".into()],
            script: Some("echo Needle-In-Haystack; sleep 0.3".into()),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let (plain, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["echo".into(), "hay".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let waiting = user.submit(&queued_for_nobody("default")).await.unwrap().0;
    let labelled = env.wait_terminal(&user, labelled.id).await;
    env.wait_terminal(&user, plain.id).await;

    let only = |out: &Output| -> Vec<uuid::Uuid> {
        let page: baton_client::TaskList = json_of(out);
        page.tasks.iter().map(|t| t.id).collect()
    };
    let by_label = baton(
        &node.url,
        &["task", "list", "--label", "fast", "-o", "json"],
    )
    .await;
    assert_eq!(only(&by_label), [labelled.id]);
    let by_text = baton(
        &node.url,
        &["task", "list", "--text", "needle-in", "-o", "json"],
    )
    .await;
    assert_eq!(only(&by_text), [labelled.id], "ignoring case");

    let (header, rows) = table_of(&baton(&node.url, &["task", "list"]).await);
    assert!(header.contains("DURATION"), "{header}");
    let ran = row_with(&rows, &baton_client::short_id(labelled.id));
    let took = labelled.finished_at.unwrap() - labelled.started_at.unwrap();
    let shown = cell(&header, ran, "DURATION");
    // Under a minute: `850ms` or `12.3s`.
    let seconds: f64 = match shown.strip_suffix("ms") {
        Some(ms) => ms.parse::<f64>().expect("a number of ms") / 1000.0,
        None => shown
            .strip_suffix('s')
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a run time: {shown:?}")),
    };
    assert!(
        (seconds - took.as_seconds_f64()).abs() <= 0.1,
        "{shown} for a run of {took}"
    );
    let queued = row_with(&rows, &baton_client::short_id(waiting.id));
    assert_eq!(cell(&header, queued, "DURATION"), "-", "never started");
    assert!(cell(&header, ran, "COMMAND").starts_with("echo Needle-In-Haystack"));
}

#[tokio::test(flavor = "multi_thread")]
async fn task_list_watch_draws_the_list_again_as_statuses_change() {
    use tokio::io::AsyncBufReadExt;
    let env = TestEnv::new("cli-list-watch").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (task, _) = user.submit(&queued_for_nobody("watched")).await.unwrap();
    let short = baton_client::short_id(task.id);
    let mut watch = tokio::process::Command::new(baton_binary())
        .args(["task", "list", "--watch", "--queue", "watched"])
        .env("BATON_SERVER", &node.url)
        .env("BATON_TOKEN", API_TOKEN)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut until = async |status: &str| {
        let seen = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let cells: Vec<&str> = line.split_whitespace().collect();
                if cells.first() == Some(&short.as_str()) && cells.get(1) == Some(&status) {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "the watched list shows {short} {status}");
    };
    until("queued").await;
    user.task_cancel(task.id).await.unwrap();
    until("cancelled").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn task_logs_reads_an_attempt_and_its_last_lines() {
    let env = TestEnv::new("cli-logs").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;
    let user = user_client(&node.url);
    let dir = dir_tasks_may_write("cli-logs");
    let flag = dir.join("ran-once");
    let script = format!(
        "if [ -e {flag} ]; then seq 1 5; else touch {flag}; echo first; exit 3; fi",
        flag = flag.display()
    );
    let submitted = baton(
        &node.url,
        &[
            "task",
            "submit",
            "--max-attempts",
            "2",
            "--retry",
            r#"{"backoff_base_s": 0.1}"#,
            "--script",
            &script,
        ],
    )
    .await;
    let id: uuid::Uuid = stdout_of(&submitted).trim().parse().unwrap();
    let done = env.wait_terminal(&user, id).await;
    assert_eq!((done.status, done.attempt), (TaskStatus::Succeeded, 2));
    let short = baton_client::short_id(id);

    let logs = |args: &'static [&'static str]| {
        let short = short.clone();
        let url = node.url.clone();
        async move {
            let mut all = vec!["task", "logs", short.as_str()];
            all.extend_from_slice(args);
            stdout_of(&baton(&url, &all).await)
        }
    };
    assert_eq!(logs(&[]).await, "1\n2\n3\n4\n5\n", "the latest attempt's");
    assert_eq!(logs(&["--attempt", "1"]).await, "first\n");
    assert_eq!(logs(&["--tail", "2"]).await, "4\n5\n");
    assert_eq!(logs(&["-n", "9"]).await, "1\n2\n3\n4\n5\n");
    assert_eq!(logs(&["--attempt", "1", "--tail", "1"]).await, "first\n");
    let _ = std::fs::remove_dir_all(dir);
}

/// Each line's time comes from the log's marks (`GET /v1/tasks/{id}/logs/marks`): when
/// its first byte reached the server, within the run.
#[tokio::test(flavor = "multi_thread")]
async fn task_logs_timestamps_each_line_with_when_it_came() {
    let env = TestEnv::new("cli-logs-times").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;
    let user = user_client(&node.url);
    let (task, _) = user
        .submit(&SubmitTask {
            script: Some("echo one; sleep 2; echo two; printf three".into()),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    let id = task.id.to_string();
    let out = stdout_of(&baton(&node.url, &["task", "logs", &id, "--timestamps"]).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let mut times = Vec::new();
    for (line, text) in lines.iter().zip(["one", "two", "three"]) {
        let (when, rest) = line.split_once("  ").expect("a time, two spaces, the line");
        assert_eq!(rest, text, "{line}");
        let at = chrono::NaiveDateTime::parse_from_str(
            when.trim_end_matches(" UTC"),
            "%Y-%m-%d %H:%M:%S%.3f",
        )
        .unwrap_or_else(|e| panic!("{when:?}: {e}"))
        .and_utc();
        assert!(when.ends_with(" UTC"), "{when}");
        // Shown to the millisecond: within the run, give or take that.
        let slack = chrono::TimeDelta::milliseconds(1);
        assert!(
            at + slack >= done.started_at.unwrap() && at <= done.finished_at.unwrap() + slack,
            "{line} outside the run {:?}..{:?}",
            done.started_at,
            done.finished_at
        );
        times.push(at);
    }
    assert!(
        times[1] - times[0] >= chrono::TimeDelta::milliseconds(1000),
        "the second line came after the sleep: {times:?}"
    );
    let tail = stdout_of(&baton(&node.url, &["task", "logs", &id, "-t", "--tail", "1"]).await);
    assert_eq!(
        tail,
        format!("{}\n", lines[2]),
        "the last line, a newline added"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waited_task_that_timed_out_ends_the_command_with_124() {
    let env = TestEnv::new("cli-wait-timeout").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;
    let out = baton(
        &node.url,
        &[
            "task",
            "submit",
            "--wait",
            "--timeout",
            "1",
            "--",
            "sleep",
            "30",
        ],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{said}");
    assert!(said.contains("timed out"), "{said}");
    let code_three = baton(
        &node.url,
        &["task", "submit", "--wait", "--", "sh", "-c", "exit 3"],
    )
    .await;
    assert_eq!(code_three.status.code(), Some(3), "its own code otherwise");
}

#[tokio::test(flavor = "multi_thread")]
async fn list_flags_take_repeats_and_commas_alike() {
    let env = TestEnv::new("cli-list-flags").await;
    let node = env.node().await;
    let task: Task = json_of(
        &baton(
            &node.url,
            &[
                "task", "submit", "-o", "json", "--label", "a,b", "-l", "c", "--", "true",
            ],
        )
        .await,
    );
    assert_eq!(task.labels, ["a", "b", "c"]);
    let token: serde_json::Value = json_of(
        &baton(
            &node.url,
            &[
                "token",
                "create",
                "-o",
                "json",
                "--name",
                "t",
                "--scope",
                "read,submit",
                "--queues",
                "q1",
                "--queues",
                "q2,q3",
                "--labels",
                "x,y",
            ],
        )
        .await,
    );
    assert_eq!(token["scopes"], serde_json::json!(["read", "submit"]));
    assert_eq!(token["queues"], serde_json::json!(["q1", "q2", "q3"]));
    assert_eq!(token["labels"], serde_json::json!(["x", "y"]));
    let registration: serde_json::Value = json_of(
        &baton(
            &node.url,
            &[
                "registration-token",
                "create",
                "-o",
                "json",
                "--labels",
                "gpu",
                "--labels",
                "linux,arm",
                "--queues",
                "a,b",
            ],
        )
        .await,
    );
    let sorted = |v: &serde_json::Value| {
        let mut items: Vec<String> = serde_json::from_value(v.clone()).unwrap();
        items.sort();
        items
    };
    assert_eq!(sorted(&registration["labels"]), ["arm", "gpu", "linux"]);
    assert_eq!(sorted(&registration["queues"]), ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn task_list_takes_a_time_range_and_an_order() {
    let env = TestEnv::new("cli-list-range").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(user.submit(&queued_for_nobody("dated")).await.unwrap().0);
    }
    let ids = |out: Output| -> Vec<uuid::Uuid> {
        let page: baton_client::TaskList = json_of(&out);
        page.tasks.iter().map(|t| t.id).collect()
    };
    let list = |extra: &[&str]| {
        let mut args = vec!["task", "list", "--queue", "dated", "-o", "json"];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        let url = node.url.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            baton(&url, &args).await
        }
    };
    let oldest_first: Vec<uuid::Uuid> = tasks.iter().map(|t| t.id).collect();
    let newest_first: Vec<uuid::Uuid> = oldest_first.iter().rev().copied().collect();
    assert_eq!(ids(list(&[]).await), newest_first);
    assert_eq!(ids(list(&["--order", "oldest"]).await), oldest_first);

    let middle = tasks[1].created_at.to_rfc3339();
    let from_middle: Vec<uuid::Uuid> = tasks
        .iter()
        .rev()
        .filter(|t| t.created_at >= tasks[1].created_at)
        .map(|t| t.id)
        .collect();
    assert!(from_middle.contains(&tasks[1].id) && !from_middle.contains(&tasks[0].id));
    assert_eq!(ids(list(&["--created-after", &middle]).await), from_middle);
    assert_eq!(
        ids(list(&["--created-before", &middle, "--order", "oldest"]).await),
        [tasks[0].id]
    );
    let bad = list(&["--created-after", "yesterday"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"));
}
