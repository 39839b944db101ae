//! Runners die: killed mid-task (restarted, or gone for good), or cut off from the
//! server. A killed runner's tasks die with it (each runs under a guard that holds a pipe
//! from the agent); a restart proves the runner lost its tasks (a new boot id); a runner
//! gone for good is declared lost; a runner that cannot reach the server kills its own
//! tasks before they are given away.

mod support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;

fn task(script: &str, label: &str, max_attempts: i32) -> SubmitTask {
    SubmitTask {
        script: Some(script.into()),
        labels: vec![label.into()],
        max_attempts: Some(max_attempts),
        ..Default::default()
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

async fn pid_of(client: &baton_client::Client, id: uuid::Uuid) -> u32 {
    wait_for(
        "the task to print its pid",
        Duration::from_secs(20),
        || async {
            let log = read_log(client, id).await;
            String::from_utf8_lossy(&log)
                .lines()
                .next()?
                .trim()
                .parse()
                .ok()
        },
    )
    .await
}

const SLEEPER: &str = "echo $$; exec sleep 300";

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_runner_restarts_clean_and_a_vanished_one_is_declared_lost() {
    let env = TestEnv::new("runner-kill").await;
    let node = env.node_with(FAST_HA).await;
    let user = user_client(&node.url);
    let fast = ["--heartbeat-s", "1"];
    let mut restarted = env.runner_with(&node.url, &["a"], 2, &fast).await;
    let mut vanished = env.runner_with(&node.url, &["b"], 1, &fast).await;

    let retried_script =
        "if [ \"$BATON_ATTEMPT\" = 1 ]; then echo $$; exec sleep 300; fi; echo second try";
    let (retried, _) = user.submit(&task(retried_script, "a", 2)).await.unwrap();
    let (failed, _) = user.submit(&task(SLEEPER, "a", 1)).await.unwrap();
    let (lost, _) = user.submit(&task(SLEEPER, "b", 1)).await.unwrap();
    let pids = [
        pid_of(&user, retried.id).await,
        pid_of(&user, failed.id).await,
        pid_of(&user, lost.id).await,
    ];

    restarted.child.kill().unwrap();
    restarted.child.wait().unwrap();
    vanished.child.kill().unwrap();
    vanished.child.wait().unwrap();
    // The agent hears its supervisor is gone and kills every task's group.
    for pid in pids {
        wait_for(
            &format!("task process {pid} to die with its runner"),
            Duration::from_secs(10),
            || async { (!alive(pid)).then_some(()) },
        )
        .await;
    }

    // Same state dir, new process: a new boot id.
    let _again =
        RunnerProc::start_in(&env, &node.url, &["a"], 2, &fast, &restarted.state_dir).await;
    let failed_done = env.wait_terminal(&user, failed.id).await;
    assert_eq!(failed_done.status, TaskStatus::Failed);
    assert_eq!(failed_done.error.as_deref(), Some("runner restarted"));
    let retried_done = env.wait_terminal(&user, retried.id).await;
    assert_eq!(
        retried_done.status,
        TaskStatus::Succeeded,
        "{retried_done:?}"
    );
    assert_eq!(retried_done.attempt, 2);
    assert_eq!(read_log(&user, retried.id).await, b"second try\n");

    let lost_done = env.wait_terminal(&user, lost.id).await;
    assert_eq!(lost_done.status, TaskStatus::Failed);
    assert_eq!(lost_done.error.as_deref(), Some("runner lost"));
}

/// The agent process under `runner`'s supervisor.
fn agent_of(runner: &RunnerProc) -> u32 {
    let supervisor = runner.child.id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| Some(s[s.rfind(')')? + 2..].split_whitespace().nth(1)? == supervisor))
                .unwrap_or(false)
        })
        .expect("the runner's agent")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agent_takes_its_tasks_with_it_even_those_that_left_their_group() {
    let env = TestEnv::new("runner-agent-kill").await;
    let node = env.node_with(FAST_HA).await;
    let user = user_client(&node.url);
    let mut runner = env.runner(&node.url, &["k"], 1).await;
    // The task starts a process in a session (and group) of its own, then waits.
    let (t, _) = user
        .submit(&task(
            "setsid sleep 300 & echo $!; echo $$; exec sleep 300",
            "k",
            1,
        ))
        .await
        .unwrap();
    let pids: Vec<u32> = wait_for("the task's pids", Duration::from_secs(20), || async {
        let log = read_log(&user, t.id).await;
        let pids: Vec<u32> = String::from_utf8_lossy(&log)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;
    let agent = agent_of(&runner);
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &agent.to_string()])
            .status()
            .unwrap()
            .success()
    );
    for pid in pids {
        wait_for(
            &format!("{pid} to die with the agent"),
            Duration::from_secs(10),
            || async { (!alive(pid)).then_some(()) },
        )
        .await;
    }
    // The supervisor leaves with its agent, and says how it went.
    let code = runner.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(128 + 9), "killed by SIGKILL");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_cut_off_from_the_server_kills_its_tasks_before_they_are_given_away() {
    let env = TestEnv::new("runner-fence").await;
    let mut node_a = env.node_with(FAST_HA).await;
    let node_b = env.node_with(FAST_HA).await;
    let user = user_client(&node_b.url);
    let _runner = env
        .runner_with(
            &node_a.url,
            &[],
            1,
            &["--heartbeat-s", "1", "--fence-after-s", "2"],
        )
        .await;
    let (t, _) = user
        .submit(&SubmitTask {
            script: Some(SLEEPER.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let pid = pid_of(&user, t.id).await;

    node_a.kill(); // the runner's only server
    wait_for(
        "the runner to kill its own task",
        Duration::from_secs(15),
        || async { (!alive(pid)).then_some(()) },
    )
    .await;
    // Node B finds the runner lost and ends the task: it ran once, and is not running now.
    let done = env.wait_terminal(&user, t.id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    assert_eq!(done.error.as_deref(), Some("runner lost"));
}
