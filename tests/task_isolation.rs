//! A task is untrusted code: it must not become its runner. A runner agent started as
//! root runs each slot as a user of its own; these tasks try, from their own shell, every
//! way a task could once reach its runner's identity or a sibling's secrets, and get
//! nothing.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// Prints `<what>: read` when `<command>` succeeds with output, `<what>: denied` otherwise.
fn attempt(what: &str, command: &str) -> String {
    format!(
        "if out=$({command} 2>/dev/null) && [ -n \"$out\" ]; then echo \"{what}: read\"; else echo \"{what}: denied\"; fi\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_reaches_neither_its_runners_identity_nor_its_siblings_secrets() {
    let env = TestEnv::new("task-isolation").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let agent = env.runner(&node.url, &["iso"], 2).await;
    let secret = format!("sibling-secret-{}", Uuid::new_v4().simple());
    let (sibling, _) = user
        .submit(&SubmitTask {
            labels: vec!["iso".into()],
            script: Some("echo started > \"$HOME/marker\"; sleep 30".into()),
            secret_env: [("SIBLING_SECRET".to_string(), secret.clone())].into(),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("the sibling to run", Duration::from_secs(30), || async {
        let t = user.task_get(sibling.id).await.ok()?;
        (t.status == TaskStatus::Running).then_some(())
    })
    .await;

    let state = agent.state_dir.display().to_string();
    let work = procs::work_dir_of(&agent.state_dir).display().to_string();
    let mut script = String::from("echo \"uid: $(id -u)\"\n");
    script += &attempt("the runner token", &format!("cat {state}/runner.json"));
    script += &attempt("the state dir", &format!("ls {state}"));
    script += &attempt("the agent's environment", "cat /proc/$PPID/environ");
    script += &attempt("the agent's memory map", "cat /proc/$PPID/maps");
    script += &attempt("the first process's environment", "cat /proc/1/environ");
    script += &attempt("the work dirs", &format!("ls {work}"));
    script += &attempt("a sibling's work dir", &format!("cat {work}/*/marker"));
    script += &attempt(
        "a sibling's secret",
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep SIBLING_SECRET",
    );
    script += &attempt("the registration token", "env | grep REGISTRATION");
    // The agent runs with RUST_LOG set: the task's environment is an allow-list.
    script += &attempt(
        "the agent's environment, passed on",
        "env | grep -e ^RUST_LOG -e ^BATON_SERVER -e TOKEN",
    );
    let (attacker, _) = user
        .submit(&SubmitTask {
            labels: vec!["iso".into()],
            script: Some(script),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, attacker.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let output = String::from_utf8_lossy(&read_log(&user, attacker.id).await).into_owned();
    assert!(!output.contains(&secret), "the secret leaked:\n{output}");
    let uid: u32 = output
        .lines()
        .find_map(|l| l.strip_prefix("uid: "))
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in:\n{output}"));
    assert_ne!(
        uid, 0,
        "the task runs as another user than the agent:\n{output}"
    );
    let read: Vec<&str> = output.lines().filter(|l| l.ends_with(": read")).collect();
    assert!(read.is_empty(), "a task reached {read:?}:\n{output}");
    assert_eq!(
        output.lines().filter(|l| l.ends_with(": denied")).count(),
        10,
        "every attempt ran:\n{output}"
    );
    user.task_cancel(sibling.id).await.unwrap();
}

/// A task that prints its secret — on purpose, or in a stack trace — leaves `***` in its
/// stored log, not the value.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_a_task_prints_is_masked_in_its_log() {
    let env = TestEnv::new("task-secret-masked").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let _agent = env.runner(&node.url, &["mask"], 1).await;
    let secret = format!("s3cr3t-{}", Uuid::new_v4().simple());
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec!["mask".into()],
            // Half on stdout, whole on stderr, and split across two writes.
            script: Some(
                "echo \"token=$API_KEY\"; echo \"$API_KEY\" >&2; \
                 printf '%s' \"$API_KEY\" | cut -c1-6 | tr -d '\\n'; \
                 printf '%s\\n' \"$API_KEY\" | cut -c7-"
                    .into(),
            ),
            secret_env: [("API_KEY".to_string(), secret.clone())].into(),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let log = String::from_utf8_lossy(&read_log(&user, task.id).await).into_owned();
    assert!(!log.contains(&secret), "the secret is in the log:\n{log}");
    assert!(log.contains("token=***"), "{log}");
    assert!(
        log.matches("***").count() >= 3,
        "every print masked:\n{log}"
    );
}
