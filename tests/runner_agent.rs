//! The runner agent as a real process: timeouts kill the whole process group, SIGTERM
//! drains gracefully, a 401 makes it exit, and the CLI's `--wait` exits with the task's
//! exit code.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;

fn script(s: &str, timeout_s: Option<i64>) -> SubmitTask {
    SubmitTask {
        script: Some(s.into()),
        timeout_s,
        ..Default::default()
    }
}

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Pids a task printed, one per line.
fn pids(log: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(log)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_task_is_killed_with_everything_it_started() {
    let env = TestEnv::new("agent-timeout").await;
    let node = env.node().await;
    let _runner = env.runner_with(&node.url, &[], 1, &[]).await;
    let client = user_client(&node.url);
    // A shell that starts a background child and prints both pids.
    let (task, _) = client
        .submit(&script("sleep 300 & echo $!; echo $$; wait", Some(1)))
        .await
        .unwrap();
    let log = wait_for(
        "the task to print its pids",
        Duration::from_secs(20),
        || async {
            let log = read_log(&client, task.id).await;
            (pids(&log).len() == 2).then_some(log)
        },
    )
    .await;
    let done = env.wait_terminal(&client, task.id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    assert_eq!(done.error.as_deref(), Some("timed out after 1 s"));
    for pid in pids(&log) {
        wait_for(
            &format!("pid {pid} to be gone"),
            Duration::from_secs(10),
            || async { (!process_exists(pid)).then_some(()) },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_short_tasks_finish_and_stops_long_ones_after_the_grace() {
    let env = TestEnv::new("agent-sigterm").await;
    let node = env.node().await;
    let mut runner = env
        .runner_with(&node.url, &[], 2, &["--shutdown-grace-s", "2"])
        .await;
    let client = user_client(&node.url);
    let (short, _) = client
        .submit(&script("echo started; sleep 1; echo finished", None))
        .await
        .unwrap();
    let (long, _) = client
        .submit(&script("echo $$; exec sleep 300", None))
        .await
        .unwrap();
    for id in [short.id, long.id] {
        wait_for("both tasks to print", Duration::from_secs(20), || async {
            (!read_log(&client, id).await.is_empty()).then_some(())
        })
        .await;
    }
    runner.signal("TERM");
    // Work submitted after SIGTERM is not taken.
    let (late, _) = client.submit(&script("true", None)).await.unwrap();

    let code = runner.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(
        code,
        Some(0),
        "a graceful stop exits 0; see {}",
        runner.log.display()
    );
    let short_done = client.task_get(short.id).await.unwrap();
    assert_eq!(short_done.status, TaskStatus::Succeeded);
    assert_eq!(read_log(&client, short.id).await, b"started\nfinished\n");
    let long_done = client.task_get(long.id).await.unwrap();
    assert_eq!(long_done.status, TaskStatus::Failed);
    assert_eq!(
        long_done.error.as_deref(),
        Some("the runner shut down before the task finished")
    );
    let pid = pids(&read_log(&client, long.id).await)[0];
    assert!(!process_exists(pid), "the long task's process was killed");
    assert_eq!(
        client.task_get(late.id).await.unwrap().status,
        TaskStatus::Queued
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_the_server_does_not_know_exits_and_forgets_its_identity() {
    let env = TestEnv::new("agent-401").await;
    let node = env.node().await;
    let state_dir = env.dir.join("forgotten-runner");
    std::fs::create_dir_all(&state_dir).unwrap();
    std::fs::write(
        state_dir.join("runner.json"),
        serde_json::json!({
            "runner_id": uuid::Uuid::new_v4(),
            "token": "brt_0000000000000000000000000000000000000000000000000000000000000000",
            "server": node.url,
        })
        .to_string(),
    )
    .unwrap();
    let out = tokio::process::Command::new(procs::baton_binary())
        .args(["runner", "--server", &node.url])
        .arg("--state-dir")
        .arg(&state_dir)
        .arg("--work-dir")
        .arg(procs::work_dir_of(&state_dir))
        .env_remove("BATON_REGISTRATION_TOKEN")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the runner exits by itself")
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!state_dir.join("runner.json").exists());
}

/// The runner's settings are changed to point it at another server (a typo, or someone
/// who wants its token): the agent refuses to send its token there, and says why.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_told_to_talk_to_another_server_than_it_registered_with_refuses() {
    let env = TestEnv::new("agent-other-server").await;
    let node = env.node().await;
    let elsewhere = env.node().await;
    let state_dir = env.dir.join("moved-runner");
    let mut first = RunnerProc::start(&env, &node.url, &[], 1, &[], Some(&state_dir), &[]).await;
    wait_for(
        "the runner to register",
        Duration::from_secs(30),
        || async { state_dir.join("runner.json").exists().then_some(()) },
    )
    .await;
    first.signal("TERM");
    first.wait_exit(Duration::from_secs(30)).await;
    let out = tokio::process::Command::new(procs::baton_binary())
        .args(["runner", "--server", &elsewhere.url])
        .arg("--state-dir")
        .arg(&state_dir)
        .arg("--work-dir")
        .arg(procs::work_dir_of(&state_dir))
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the runner exits by itself")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--allow-server-change"), "{stderr}");
    assert!(
        state_dir.join("runner.json").exists(),
        "its identity is kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_cannot_start_fails_with_the_reason() {
    let env = TestEnv::new("agent-spawn").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;
    let client = user_client(&node.url);
    let (task, _) = client
        .submit(&SubmitTask {
            command: Some(vec!["/nonexistent/program".into(), "arg".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&client, task.id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    assert_eq!(
        done.exit_code,
        Some(127),
        "the shells' code for a command that cannot start"
    );
    let log = String::from_utf8(read_log(&client, task.id).await).unwrap();
    assert!(
        log.contains("cannot start the command /nonexistent/program: No such file"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_waits_streams_the_output_and_exits_with_the_task_code() {
    let env = TestEnv::new("agent-cli").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &["linux"], 1).await;
    let out = baton_task(
        &node.url,
        &[
            "submit",
            "--label",
            "linux",
            "--env",
            "WHO=cli",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo hi $WHO; exit 7",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi cli\n");

    let listed = baton_task(&node.url, &["list", "--status", "failed"]).await;
    assert!(listed.status.success());
    let listing = String::from_utf8_lossy(&listed.stdout);
    // A header, then the one failed task; piped, so no colour codes.
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 2, "{listing}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "STATUS", "QUEUE", "EXIT", "CREATED", "DURATION", "COMMAND"
        ]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!((row[1], row[3]), ("failed", "7"), "{listing}");
    assert!(!listing.contains('\u{1b}'), "{listing:?}");

    let json = baton_task(
        &node.url,
        &["list", "--status", "failed", "--output", "json"],
    )
    .await;
    let page: baton_client::TaskList = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert_eq!(page.tasks[0].exit_code, Some(7));
}

/// Runs `baton task ARGS...` against `server` with the admin token.
async fn baton_task(server: &str, args: &[&str]) -> std::process::Output {
    let args: Vec<&str> = std::iter::once("task")
        .chain(args.iter().copied())
        .collect();
    procs::baton_cli(server, API_TOKEN, &args).await
}
