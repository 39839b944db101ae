//! Runners on demand (docs/dynamic-runners.md), with real nodes and real runner
//! processes: the `process` backend starting one runner per waiting task within its
//! capacity and leaving none behind; the `command` backend's scripts, each create with
//! its delete; a runner that never registers, retried, its token refused; and a node
//! killed while it provisions, its assignments adopted.

use baton_client::{Client, SubmitTask, Task};
use baton_core::TaskStatus;
use baton_localcluster::strays;
use baton_localcluster::testing as support;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// Stops whatever runner a failed test left under its provisioners' folder.
struct Leftovers(PathBuf);

impl Drop for Leftovers {
    fn drop(&mut self) {
        strays::stop_runners_under(&self.0, Duration::from_secs(5));
    }
}

/// A folder outside the test's own, removed when the test ends.
struct RemovedAtEnd(PathBuf);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a node settings file with one provisioner (`entries` are its TOML keys beyond
/// the name and labels), passes every 200 ms.
fn settings(env: &TestEnv, file: &str, entries: &str) -> PathBuf {
    let path = env.dir.join(file);
    std::fs::write(
        &path,
        format!(
            "provision_interval_ms = 200\n\n[[provisioners]]\nname = \"ephemeral\"\n\
             labels = [\"ephemeral\"]\n{entries}"
        ),
    )
    .unwrap();
    path
}

fn with_settings(file: &Path) -> Vec<&str> {
    FAST_HA
        .iter()
        .copied()
        .chain(["--config", file.to_str().unwrap()])
        .collect()
}

/// A task for an ephemeral runner that appends its id to `record`.
fn recorded_task(record: &Path, sleep_s: f64) -> SubmitTask {
    SubmitTask {
        labels: vec!["ephemeral".into()],
        script: Some(format!(
            "echo \"$BATON_TASK_ID\" >> {}; sleep {sleep_s}",
            record.display()
        )),
        ..Default::default()
    }
}

async fn wait_all_terminal(env: &TestEnv, client: &Client, ids: &[Uuid]) -> Vec<Task> {
    let mut out = Vec::new();
    for id in ids {
        out.push(env.wait_terminal(client, *id).await);
    }
    out
}

/// The ids the tasks recorded, each as many times as it ran.
fn runs_recorded(record: &Path) -> Vec<String> {
    std::fs::read_to_string(record)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits until no assignment is open and no runner process is left under `dir`.
async fn wait_nothing_left(client: &Client, dir: &Path) {
    wait_for(
        "every assignment to end and every runner to exit",
        Duration::from_secs(60),
        || async {
            let open: usize = client
                .provisioners()
                .await
                .ok()?
                .provisioners
                .iter()
                .map(|p| p.assignments.len())
                .sum();
            (open == 0 && strays::runners_under(dir).is_empty()).then_some(())
        },
    )
    .await;
}

/// From the runners' own logs: each runner's life, from its first line to the line it
/// writes as it stops (in µs since the epoch).
fn runner_lives(dir: &Path) -> Vec<(i64, i64)> {
    let stamp = |line: &str| {
        let at = line.split_whitespace().next()?;
        chrono::DateTime::parse_from_rfc3339(at)
            .ok()
            .map(|t| t.timestamp_micros())
    };
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let first = text.lines().find_map(stamp).expect("a runner's first line");
            let stopped = text
                .lines()
                .filter(|l| l.contains("runner stopped"))
                .find_map(stamp)
                .unwrap_or_else(|| panic!("{} never stopped", e.path().display()));
            (first, stopped)
        })
        .collect()
}

/// The most intervals overlapping at once.
fn most_at_once(lives: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = lives
        .iter()
        .flat_map(|(from, to)| [(*from, 1), (*to, -1)])
        .collect();
    // An end before a start at the same instant.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The sum of every series of `/metrics` text whose line starts with `prefix`.
fn sum_of(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_tasks_get_a_runner_each_never_past_capacity_and_none_is_left() {
    let env = TestEnv::new("dynamic-process").await;
    let dir = env.dir.join("provisioned");
    let _leftovers = Leftovers(dir.clone());
    let file = settings(
        &env,
        "baton.toml",
        &format!("capacity = 8\nclaim_timeout_s = 60\ndir = {:?}\n", dir),
    );
    // Two nodes admitting at once: the capacity holds across them.
    let a = env.node_with(&with_settings(&file)).await;
    let b = env.node_with(&with_settings(&file)).await;
    let user = user_client(&a.url);
    let record = file_tasks_may_write(&env.dir.join("runs"));
    // One task alone first: what a runner's start costs a task on an idle cluster.
    let lone = user
        .submit(&recorded_task(&record, 0.0))
        .await
        .unwrap()
        .0
        .id;
    let lone = env.wait_terminal(&user, lone).await;
    assert_eq!(lone.status, TaskStatus::Succeeded);
    let lone_wait = (lone.started_at.unwrap() - lone.created_at).as_seconds_f64() * 1000.0;
    wait_nothing_left(&user, &dir).await;
    std::fs::write(&record, b"").unwrap();
    for log in std::fs::read_dir(&dir).unwrap().flatten() {
        std::fs::remove_file(log.path()).unwrap();
    }

    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(
            user.submit(&recorded_task(&record, 0.3))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    let tasks = wait_all_terminal(&env, &user, &ids).await;
    for task in &tasks {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {}", task.id);
        assert_eq!(task.attempt, 1, "task {} ran once", task.id);
    }
    let mut runs = runs_recorded(&record);
    runs.sort();
    let before = runs.len();
    runs.dedup();
    assert_eq!((before, runs.len()), (50, 50), "each task ran exactly once");
    let runners: std::collections::HashSet<_> = tasks.iter().map(|t| t.runner_id).collect();
    assert_eq!(runners.len(), 50, "one runner per task: they are ephemeral");

    wait_nothing_left(&user, &dir).await;
    let listed = user.runners().await.unwrap().runners;
    assert!(
        listed.iter().all(|r| !r.ephemeral),
        "every runner started on demand left: {listed:?}"
    );
    let lives = runner_lives(&dir);
    assert_eq!(lives.len(), 50, "one runner process per task");
    let most = most_at_once(&lives);
    assert!(most <= 8, "{most} runners at once, over the capacity of 8");
    let leftover_folders = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(leftover_folders, 0, "every runner's folder removed");
    // The nodes counted what they did: 51 starts, the claims seen, no failure.
    let mut counted = (0.0, 0.0, 0.0);
    for node in [&a, &b] {
        let text = reqwest::get(format!("{}/metrics", node.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        counted.0 += sum_of(&text, "baton_provision_started_total{");
        counted.1 += sum_of(&text, "baton_provision_claim_seconds_count{");
        counted.2 += sum_of(&text, "baton_provision_failures_total{");
    }
    // A runner seen holding its task counts a claim; the lone one may have run and left
    // between two passes.
    assert_eq!(
        (counted.0, counted.2),
        (51.0, 0.0),
        "(started, failed): {counted:?}"
    );
    assert!(
        counted.1 >= 50.0,
        "every runner of a 0.3 s task was seen at work: {counted:?}"
    );

    let mut waits: Vec<f64> = tasks
        .iter()
        .map(|t| (t.started_at.unwrap() - t.created_at).as_seconds_f64() * 1000.0)
        .collect();
    waits.sort_by(f64::total_cmp);
    println!(
        "process backend: one task alone, submit to start {lone_wait:.0} ms; capacity 8, 50 \
         tasks: submit to start p50 {:.0} ms, p99 {:.0} ms; {most} runners at most at once",
        percentile(&waits, 0.5),
        percentile(&waits, 0.99)
    );
}

/// `create` and `delete` scripts that record each call (as JSON lines in `calls`);
/// `create` starts `baton runner --once` in a session of its own when `starts` is true,
/// and otherwise starts nothing (a backend whose runner never registers).
fn scripts(env: &TestEnv, calls: &Path, runners: &Path, starts: bool) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(runners).unwrap();
    let create = env.dir.join("create.py");
    let delete = env.dir.join("delete.py");
    let baton = support::procs::baton_binary().display().to_string();
    std::fs::write(
        &create,
        format!(
            r#"#!/usr/bin/env python3
import json, os, subprocess, sys
r = json.load(sys.stdin)
with open({calls:?}, "a") as f:
    f.write(json.dumps({{"call": "create", "assignment": r["assignment"], "attempt": r["attempt"],
                        "name": r["name"], "token": r["registration_token"],
                        "labels": r["labels"], "server": r["server_url"]}}) + "\n")
if {starts}:
    d = os.path.join({runners:?}, r["name"])
    os.makedirs(d + "/state", exist_ok=True)
    env = {{k: v for k, v in os.environ.items() if not k.startswith("BATON_")}}
    env["BATON_REGISTRATION_TOKEN"] = r["registration_token"]
    log = open(d + ".log", "w")
    p = subprocess.Popen([{baton:?}, "runner", "--once", "--server", r["server_url"],
                          "--name", r["name"], "--labels", ",".join(r["labels"]),
                          "--state-dir", d + "/state", "--work-dir", d + "/work"],
                         env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    print(p.pid)
else:
    print("vm-" + r["name"])
"#,
            starts = if starts { "True" } else { "False" },
        ),
    )
    .unwrap();
    std::fs::write(
        &delete,
        format!(
            r#"#!/usr/bin/env python3
import json, os, signal, sys
r = json.load(sys.stdin)
with open({calls:?}, "a") as f:
    f.write(json.dumps({{"call": "delete", "assignment": r["assignment"], "attempt": r["attempt"],
                        "handle": r["handle"]}}) + "\n")
if r["handle"] and r["handle"].isdigit():
    try:
        os.kill(int(r["handle"]), signal.SIGTERM)
    except ProcessLookupError:
        pass
"#
        ),
    )
    .unwrap();
    for script in [&create, &delete] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (create, delete)
}

fn calls(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Each (assignment, attempt) created, and each deleted.
fn pairs(calls: &[serde_json::Value], kind: &str) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = calls
        .iter()
        .filter(|c| c["call"] == kind)
        .map(|c| {
            (
                c["assignment"].as_str().unwrap().to_string(),
                c["attempt"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_backend_calls_delete_for_every_create() {
    let env = TestEnv::new("dynamic-command").await;
    let runners = env.dir.join("vms");
    let _leftovers = Leftovers(runners.clone());
    let record = env.dir.join("calls.jsonl");
    let (create, delete) = scripts(&env, &record, &runners, true);
    let file = settings(
        &env,
        "baton.toml",
        &format!("backend = \"command\"\ncapacity = 3\ncreate = {create:?}\ndelete = {delete:?}\n"),
    );
    let node = env.node_with(&with_settings(&file)).await;
    let user = user_client(&node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs"));
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(user.submit(&recorded_task(&runs, 0.1)).await.unwrap().0.id);
    }
    for task in wait_all_terminal(&env, &user, &ids).await {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {}", task.id);
    }
    assert_eq!(runs_recorded(&runs).len(), 5, "each task ran once");
    wait_nothing_left(&user, &runners).await;
    let calls = calls(&record);
    let (created, deleted) = (pairs(&calls, "create"), pairs(&calls, "delete"));
    assert_eq!(created.len(), 5, "one runner per task: {calls:?}");
    assert_eq!(created, deleted, "each create has its delete");
    assert!(
        calls
            .iter()
            .filter(|c| c["call"] == "create")
            .all(|c| c["labels"] == serde_json::json!(["ephemeral"]) && c["server"] == node.url),
        "each runner is told its labels and the server: {calls:?}"
    );
    let log = std::fs::read_to_string(&node.log).unwrap();
    for c in calls.iter().filter(|c| c["call"] == "create") {
        let token = c["token"].as_str().unwrap();
        assert!(
            !log.contains(token),
            "a registration token in the node's log"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_that_never_registers_is_retried_and_its_token_refused() {
    let env = TestEnv::new("dynamic-no-show").await;
    let runners = env.dir.join("vms");
    let record = env.dir.join("calls.jsonl");
    let (create, delete) = scripts(&env, &record, &runners, false);
    let file = settings(
        &env,
        "baton.toml",
        &format!(
            "backend = \"command\"\ncapacity = 2\nclaim_timeout_s = 2\nmax_attempts = 2\n\
             retry_initial_ms = 500\ncreate = {create:?}\ndelete = {delete:?}\n"
        ),
    );
    let node = env.node_with(&with_settings(&file)).await;
    let user = user_client(&node.url);
    let (task, _) = user
        .submit(&recorded_task(&env.dir.join("unused"), 0.0))
        .await
        .unwrap();

    // Attempt 1 times out, is deleted, and attempt 2 follows after the backoff; when it
    // times out too, the assignment gives up.
    let failed = wait_for(
        "the assignment to spend its two attempts",
        Duration::from_secs(30),
        || async {
            let c = calls(&record);
            (pairs(&c, "delete").len() == 2).then_some(c)
        },
    )
    .await;
    let (created, deleted) = (pairs(&failed, "create"), pairs(&failed, "delete"));
    assert_eq!(
        created.len(),
        2,
        "one assignment, started twice: {failed:?}"
    );
    assert_eq!(created[0].0, created[1].0, "the same assignment");
    assert_eq!((created[0].1, created[1].1), (1, 2));
    assert_eq!(created, deleted, "each create has its delete");
    wait_for("no open assignment", Duration::from_secs(10), || async {
        let p = user.provisioners().await.ok()?;
        p.provisioners[0].assignments.is_empty().then_some(())
    })
    .await;

    // The first attempt's token, presented late, is refused.
    let stale = failed[0]["token"].as_str().unwrap();
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/runner/register", node.url))
        .json(&serde_json::json!({
            "registration_token": stale, "name": "late", "labels": ["ephemeral"],
            "capacity": 1, "version": env!("CARGO_PKG_VERSION"),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        401,
        "a timed-out runner's token is refused"
    );
    // Nothing runs the task, and nothing more is started for it.
    let now = user.task_get(task.id).await.unwrap();
    assert_eq!(now.status, TaskStatus::Queued);
    assert_eq!(
        calls(&record).len(),
        4,
        "no third start after the attempts are spent"
    );
    let demand = user.demand(&["ephemeral".into()], &[]).await.unwrap();
    assert_eq!((demand.waiting, demand.demand), (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_while_it_provisions_has_its_assignments_adopted() {
    let env = TestEnv::new("dynamic-adopt").await;
    let dir = env.dir.join("provisioned");
    let _leftovers = Leftovers(dir.clone());
    // B serves the runners and provisions nothing; A starts them and is killed; C, with
    // A's settings, adopts what A left.
    let b = env.node_with(&FAST_HA).await;
    let file = settings(
        &env,
        "provisioner.toml",
        &format!(
            "capacity = 4\nclaim_timeout_s = 10\nretry_initial_ms = 500\ndir = {dir:?}\n\
             server_url = {:?}\n",
            b.url
        ),
    );
    let mut a = env.node_with(&with_settings(&file)).await;
    let user = user_client(&b.url);
    let record = file_tasks_may_write(&env.dir.join("runs"));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            user.submit(&recorded_task(&record, 2.0))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    let on_a = user_client(&a.url);
    wait_for(
        "A to admit three runners",
        Duration::from_secs(20),
        || async {
            let p = on_a.provisioners().await.ok()?;
            (p.provisioners[0].assignments.len() == 3).then_some(())
        },
    )
    .await;
    a.kill();
    let c = env.node_with(&with_settings(&file)).await;
    let on_c = user_client(&c.url);
    wait_for(
        "C to adopt A's assignments",
        Duration::from_secs(30),
        || async {
            let p = on_c.provisioners().await.ok()?;
            let open = &p.provisioners[0].assignments;
            (!open.is_empty() && open.iter().all(|x| x.node_id == c.node_id)).then_some(())
        },
    )
    .await;

    for task in wait_all_terminal(&env, &user, &ids).await {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {}", task.id);
        assert_eq!(task.attempt, 1);
    }
    let mut runs = runs_recorded(&record);
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 3, "each task ran once");
    wait_nothing_left(&on_c, &dir).await;

    // Three assignments, no more: each started once, or again only after its runner
    // failed to claim work (the retry rule).
    let mut db = env.db().await;
    let rows: Vec<(String, i32, String, Option<String>)> =
        sqlx::query_as("SELECT state, attempt, node_id, error FROM runner_assignments ORDER BY id")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(rows.len(), 3, "one assignment per task: {rows:?}");
    for (state, attempt, node, error) in &rows {
        assert_eq!(state, "done", "{rows:?}");
        assert_eq!(node, &c.node_id, "adopted by C: {rows:?}");
        assert!(
            *attempt == 1 || error.is_some(),
            "started again without a failure: {rows:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_task_sees_only_its_folder_and_reaches_only_the_server() {
    let env = TestEnv::new("dynamic-sandbox").await;
    // The relay's socket lives in the runner's folder and a socket's path has at most
    // 107 bytes: a checkout in a deep folder (CI's is) would be refused by the node.
    let dir = std::env::temp_dir().join(format!(
        "baton-sbx-{}",
        &Uuid::new_v4().simple().to_string()[..8]
    ));
    let _removed = RemovedAtEnd(dir.clone());
    let _leftovers = Leftovers(dir.clone());
    let file = settings(
        &env,
        "baton.toml",
        &format!("backend = \"sandbox\"\ncapacity = 2\ndir = {dir:?}\n"),
    );
    let node = env.node_with(&with_settings(&file)).await;
    let user = user_client(&node.url);
    // A host file any user may read: only the sandbox's walls keep it from the task.
    let secret = env.dir.join("host-secret.txt");
    std::fs::write(&secret, "the host's secret\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let node_port = reqwest::Url::parse(&node.url).unwrap().port().unwrap();
    let redis_port = reqwest::Url::parse(&redis_url())
        .unwrap()
        .port()
        .unwrap_or(6379);
    let probe = format!(
        r#"cat {secret} || echo "no host file"
echo "node process seen: $(test -e /proc/{node_pid} && echo yes || echo no)"
python3 - <<'PY'
import socket
for name, port in [("redis", {redis_port}), ("node", {node_port}), ("relay", 80)]:
    s = socket.socket()
    s.settimeout(2)
    print(name, "reached" if s.connect_ex(("127.0.0.1", port)) == 0 else "unreachable")
PY
"#,
        secret = secret.display(),
        node_pid = node.pid(),
    );
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec!["ephemeral".into()],
            script: Some(probe),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    let log = String::from_utf8_lossy(&read_log(&user, task.id).await).into_owned();
    assert_eq!(done.status, TaskStatus::Succeeded, "{log}");
    assert!(
        !log.contains("the host's secret"),
        "read a host file: {log}"
    );
    assert!(log.contains("no host file"), "{log}");
    assert!(
        log.contains("node process seen: no"),
        "saw the host's processes: {log}"
    );
    assert!(log.contains("redis unreachable"), "reached Redis: {log}");
    assert!(
        log.contains("node unreachable"),
        "reached the node other than through the relay: {log}"
    );
    assert!(
        log.contains("relay reached"),
        "the server, through the relay: {log}"
    );
    wait_nothing_left(&user, &dir).await;
    let bwraps = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                c.windows(dir.as_os_str().len())
                    .any(|w| w == dir.as_os_str().as_encoded_bytes())
            })
        })
        .count();
    assert_eq!(bwraps, 0, "no sandbox or relay left");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_queues_tasks_call_for_no_runner_until_it_resumes() {
    let env = TestEnv::new("dynamic-paused").await;
    let dir = env.dir.join("provisioned");
    let _leftovers = Leftovers(dir.clone());
    let file = settings(
        &env,
        "baton.toml",
        &format!("capacity = 2\ndir = {dir:?}\n"),
    );
    let node = env.node_with(&with_settings(&file)).await;
    let user = user_client(&node.url);
    user.queue_pause("held", true).await.unwrap();
    let record = file_tasks_may_write(&env.dir.join("runs"));
    let (task, _) = user
        .submit(&SubmitTask {
            queue: Some("held".into()),
            ..recorded_task(&record, 0.0)
        })
        .await
        .unwrap();
    // Queued, in Redis, and no runner may take it: it calls for none.
    let ephemeral = ["ephemeral".to_string()];
    let demand = user.demand(&ephemeral, &[]).await.unwrap();
    assert_eq!((demand.waiting, demand.demand), (0, 0), "{demand:?}");
    let listed = user.provisioners().await.unwrap().provisioners;
    assert!(listed[0].assignments.is_empty(), "{listed:?}");
    user.queue_pause("held", false).await.unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    wait_nothing_left(&user, &dir).await;
}
