//! Runners die: killed mid-task (restarted, or gone for good), or cut off from the
//! server. A killed runner's tasks die with it (each runs under a guard that holds a pipe
//! from the agent); a restart proves the runner lost its tasks (a new boot id); a runner
//! gone for good is declared lost; a runner that cannot reach the server kills its own
//! tasks before they are given away, also when the node it reaches has lost Redis.

use baton_localcluster::fault_proxy as proxy;
use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use baton_core::after_run::FORGOTTEN_ERROR;
use std::time::Duration;
use support::*;
use uuid::Uuid;

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
    let node = env.node_with(&FAST_HA).await;
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

    restarted.kill();
    vanished.kill();
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
    let _again = RunnerProc::start(
        &env,
        &node.url,
        &["a"],
        2,
        &fast,
        Some(&restarted.state_dir),
        &[],
    )
    .await;
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
    let supervisor = runner.pid().to_string();
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
    let node = env.node_with(&FAST_HA).await;
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
    let mut node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
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

/// `FAST_HA` with the runner lost threshold raised to `lost_after_s`.
fn fast_ha_lost_after(lost_after_s: &'static str) -> Vec<&'static str> {
    let mut args = FAST_HA.to_vec();
    let at = args
        .iter()
        .position(|a| *a == "--runner-lost-after-s")
        .expect("FAST_HA sets it");
    args[at + 1] = lost_after_s;
    args
}

/// Each run's ticks, by attempt, from a file its task appends `<attempt> <ns>` to.
fn ticks_by_attempt(runs: &std::path::Path) -> std::collections::BTreeMap<u32, Vec<u128>> {
    let mut by_attempt = std::collections::BTreeMap::<u32, Vec<u128>>::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        let mut fields = line.split_whitespace();
        if let (Some(Ok(attempt)), Some(Ok(at))) =
            (fields.next().map(str::parse), fields.next().map(str::parse))
        {
            by_attempt.entry(attempt).or_default().push(at);
        }
    }
    by_attempt
}

/// A runner whose only node lost Redis (the link cut, the node itself up and answering
/// from Postgres) must stop its task before the node that adopts the claim declares the
/// runner lost and the retry starts elsewhere. Before nodes said whether they could
/// vouch for a runner's presence, their answers counted as contact: the cut-off runner
/// kept its task running beside the retry.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_stuck_to_a_node_that_lost_redis_stops_before_its_task_runs_elsewhere() {
    let env = TestEnv::new("runner-node-lost-redis").await;
    let link = proxy::FaultProxy::in_front_of(&env.redis_url)
        .await
        .unwrap();
    let through_proxy = format!("redis://127.0.0.1:{}", link.port());
    let timings = fast_ha_lost_after("12");
    let mut cut_args = timings.clone();
    cut_args.extend(["--redis-url", through_proxy.as_str()]);
    let stuck_node = env.node_with(&cut_args).await;
    let other_node = env.node_with(&timings).await;
    let _stuck = env
        .runner_with(
            &stuck_node.url,
            &["sticky"],
            1,
            &[
                "--heartbeat-s",
                "1",
                "--fence-after-s",
                "5",
                "--wait-s",
                "2",
            ],
        )
        .await;
    let user = user_client(&other_node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let script = format!(
        "while true; do echo \"$BATON_ATTEMPT $(date +%s%N)\" >> {}; sleep 0.1; done",
        runs.display()
    );
    let (submitted, _) = user.submit(&task(&script, "sticky", 2)).await.unwrap();
    wait_for("the first run to tick", Duration::from_secs(20), || async {
        ticks_by_attempt(&runs).contains_key(&1).then_some(())
    })
    .await;

    link.set(proxy::Link::Cut);
    // It parks 2 s at a time: a task handed out at the end of a park is judged against
    // the presence stamped when the park began, so a park must stay well below the lost
    // threshold (12 s here).
    let _replacement = env
        .runner_with(
            &other_node.url,
            &["sticky"],
            1,
            &["--heartbeat-s", "1", "--wait-s", "2"],
        )
        .await;
    wait_for(
        "the retry to run for a second on the other node's runner",
        Duration::from_secs(60),
        || async { (ticks_by_attempt(&runs).get(&2)?.len() >= 10).then_some(()) },
    )
    .await;
    let ticks = ticks_by_attempt(&runs);
    let first_ended = ticks[&1].iter().max().unwrap();
    let retry_started = ticks[&2].iter().min().unwrap();
    assert!(
        first_ended < retry_started,
        "the first run ({} ticks) still ran {} ms into the retry",
        ticks[&1].len(),
        (first_ended - retry_started) / 1_000_000
    );
    let task = user.task_get(submitted.id).await.unwrap();
    assert_eq!(task.attempt, 2, "{task:?}");
}

/// A runner's link is cut while its poll is parked; the node hands it a task, and the
/// answer waits in the network until the cut heals — long after the node called the runner
/// lost and ended the task. The runner must not start a task from an answer that came
/// back after its fence. Before, it ran the task the server had already ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_in_an_answer_that_came_back_after_the_fence_is_not_started() {
    let env = TestEnv::new("runner-late-answer").await;
    let node = env.node_with(&FAST_HA).await;
    let link = proxy::FaultProxy::in_front_of(&node.url).await.unwrap();
    let _runner = env
        .runner_with(
            &format!("http://127.0.0.1:{}", link.port()),
            &["late"],
            1,
            &[
                "--heartbeat-s",
                "1",
                "--fence-after-s",
                "3",
                "--wait-s",
                "20",
            ],
        )
        .await;
    node.wait_parked("the runner to park", |n| n >= 1).await;
    link.set(proxy::Link::Cut);
    let user = user_client(&node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let script = format!("echo ran >> {}", runs.display());
    let (submitted, _) = user.submit(&task(&script, "late", 1)).await.unwrap();
    // Leased to the parked runner, its answer held in the cut link; then the runner's
    // silence outlasts runner_lost_after and the task ends.
    let ended = env.wait_terminal(&user, submitted.id).await;
    assert_eq!(ended.status, TaskStatus::Failed, "{ended:?}");
    assert_eq!(ended.attempt, 1, "it was leased and started: {ended:?}");

    link.set(proxy::Link::Open);
    // The answer arrives now. Give the runner the time to act on it, watching its log for
    // the refusal, and the run file for the run it must not make.
    let refused = wait_for(
        "the runner to take the late answer",
        Duration::from_secs(30),
        || async {
            let log = std::fs::read_to_string(&_runner.log).ok()?;
            if std::fs::metadata(&runs).is_ok_and(|m| m.len() > 0) {
                return Some(false);
            }
            log.contains("its tasks are not started").then_some(true)
        },
    )
    .await;
    assert!(
        refused,
        "the runner ran a task the server had already ended"
    );
}

/// A one-task runner's answer comes back after its fence, so it does not start that
/// answer's task; it takes another, runs it and unregisters, all well before the server
/// would end the dropped run as forgotten (only a list made 15 s after a start may). Its
/// leaving says what it holds — nothing — so the dropped run ends as forgotten, before the
/// runner is deleted. Before, it ended "runner deleted", as if the runner had been taken
/// away while it ran (the drill's "every run's end has a cause" found it).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_a_leaving_runner_never_started_ends_as_forgotten_not_as_a_deleted_runners() {
    let env = TestEnv::new("runner-leaves-dropped").await;
    // Its idle polls carry its empty list, but no list can call the dropped run forgotten
    // for 300 s: only its leaving can end it so.
    let mut args = fast_ha_lost_after("10");
    args.extend(["--forgotten-run-after-s", "300"]);
    let node = env.node_with(&args).await;
    let link = proxy::FaultProxy::in_front_of(&node.url).await.unwrap();
    let mut runner = env
        .runner_with(
            &format!("http://127.0.0.1:{}", link.port()),
            &["leaving"],
            1,
            &[
                "--once",
                "--heartbeat-s",
                "1",
                "--fence-after-s",
                "3",
                "--wait-s",
                "20",
            ],
        )
        .await;
    node.wait_parked("the runner to park", |n| n >= 1).await;
    link.set(proxy::Link::Cut);
    let user = user_client(&node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let (dropped, _) = user
        .submit(&task(
            &format!("echo dropped >> {}", runs.display()),
            "leaving",
            1,
        ))
        .await
        .unwrap();
    let started = wait_for(
        "the node to start it for the parked runner",
        Duration::from_secs(10),
        || async {
            let task = user.task_get(dropped.id).await.ok()?;
            (task.status == TaskStatus::Running).then_some(task.started_at?)
        },
    )
    .await;
    // The cut outlasts the runner's fence (3 s from the poll's send, before the start),
    // not its lost threshold: the answer arrives late, and the runner is still counted
    // alive.
    wait_for(
        "the cut to outlast the runner's fence",
        Duration::from_secs(10),
        || async { (chrono::Utc::now() - started > chrono::Duration::seconds(4)).then_some(()) },
    )
    .await;
    link.set(proxy::Link::Open);
    wait_for(
        "the runner to drop the late answer",
        Duration::from_secs(15),
        || async {
            let log = std::fs::read_to_string(&runner.log).ok()?;
            log.contains("its tasks are not started").then_some(())
        },
    )
    .await;
    let (ran, _) = user
        .submit(&task(
            &format!("echo ran >> {}", runs.display()),
            "leaving",
            1,
        ))
        .await
        .unwrap();
    assert_eq!(runner.wait_exit(Duration::from_secs(30)).await, Some(0));
    assert_eq!(
        env.wait_terminal(&user, ran.id).await.status,
        TaskStatus::Succeeded
    );
    let dropped = env.wait_terminal(&user, dropped.id).await;
    assert_eq!(
        (dropped.status, dropped.error.as_deref()),
        (TaskStatus::Failed, Some(FORGOTTEN_ERROR)),
        "{dropped:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "ran\n",
        "the dropped task never ran"
    );
    assert!(
        user.runners().await.unwrap().runners.is_empty(),
        "it unregistered"
    );
}

/// A one-task runner is stopped while its result is held on its way (`--fault
/// hold-results`): it keeps the result on disk, and leaves. The run ran, so its leaving
/// lists it as reporting and the run is not called forgotten: it stays the server's to
/// judge, and ends as a deleted runner's once the runner has been silent past its lost
/// threshold (a result on its way may land until then). Left out, it ended as forgotten at
/// once.
#[tokio::test(flavor = "multi_thread")]
async fn a_leaving_runner_s_kept_result_is_not_called_forgotten() {
    let env = TestEnv::new("runner-leaves-reporting").await;
    let mut args = fast_ha_lost_after("10");
    args.extend(["--fault", "hold-results:120"]);
    let node = env.node_with(&args).await;
    let user = user_client(&node.url);
    let mut runner = env
        .runner_with(
            &node.url,
            &["leaving"],
            1,
            &["--once", "--shutdown-grace-s", "1"],
        )
        .await;
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec!["leaving".into()],
            script: Some("echo done".into()),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("its result to be held", Duration::from_secs(30), || async {
        let log = std::fs::read_to_string(&node.log).ok()?;
        log.contains("holding an exchange that carries results")
            .then_some(())
    })
    .await;
    runner.signal("TERM");
    assert_eq!(runner.wait_exit(Duration::from_secs(30)).await, Some(0));
    let log = std::fs::read_to_string(&runner.log).unwrap();
    assert!(log.contains("kept on disk"), "{log}");
    assert!(
        user.runners().await.unwrap().runners.is_empty(),
        "it unregistered"
    );
    let left = user.task_get(task.id).await.unwrap();
    assert_eq!(
        (left.status, left.error.as_deref()),
        (TaskStatus::Running, None),
        "not ended as forgotten as its runner left: {left:?}"
    );
    let ended = env.wait_terminal(&user, task.id).await;
    assert_eq!(
        (ended.status, ended.error.as_deref()),
        (TaskStatus::Failed, Some("runner deleted")),
        "{ended:?}"
    );
}

/// A task finished while no node could be reached, and the agent stopped before one came
/// back: its result was kept on disk, and the agent's next start hands it over before
/// anything else — the task succeeds, rather than ending as a run its restarted runner
/// lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_result_no_node_heard_is_delivered_by_the_agents_next_start() {
    let env = TestEnv::new("runner-kept-result").await;
    let mut first_node = env.node().await;
    let user = user_client(&first_node.url);
    let mut agent = env
        .runner_with(&first_node.url, &["kept"], 1, &["--shutdown-grace-s", "1"])
        .await;
    // The task marks its start in a world-writable place the test sees (it may run as a
    // user of its own, with a /tmp of its own): `running` in Postgres comes before the
    // runner has the start's answer, and a node killed in between leaves the runner never
    // starting it.
    let mark = dir_tasks_may_write("kept").join(format!("baton-kept-{}", Uuid::new_v4()));
    let (task, _) = user
        .submit(&SubmitTask {
            labels: vec!["kept".into()],
            script: Some(format!("touch {}; sleep 1; echo done", mark.display())),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("the task to run", Duration::from_secs(30), || async {
        let t = user.task_get(task.id).await.ok()?;
        (t.status == TaskStatus::Running && mark.exists()).then_some(())
    })
    .await;
    let _ = std::fs::remove_file(&mark);
    // The only node dies; the task ends with nobody to tell.
    first_node.kill();
    let results = agent.state_dir.join("results");
    wait_for(
        "the result kept on disk",
        Duration::from_secs(30),
        || async {
            let kept = std::fs::read_dir(&results).ok()?.flatten().count();
            (kept > 0).then_some(())
        },
    )
    .await;
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(Duration::from_secs(30)).await, Some(0));
    assert_eq!(
        std::fs::read_dir(&results).unwrap().flatten().count(),
        1,
        "still kept after the agent stopped"
    );

    let second_node = env.node().await;
    let _agent = RunnerProc::start(
        &env,
        &second_node.url,
        &["kept"],
        1,
        &["--allow-server-change"],
        Some(&agent.state_dir),
        &[],
    )
    .await;
    let user = user_client(&second_node.url);
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    wait_for("the kept result to go", Duration::from_secs(10), || async {
        (std::fs::read_dir(&results).ok()?.flatten().count() == 0).then_some(())
    })
    .await;
}

/// A runner's parked poll is answered with a task the node has already started, but the
/// answer is held up (a node frozen after its commit, a link that holds its bytes) for
/// longer than `forgotten_run_after_s`, while the runner's other lane — its heartbeats —
/// is answered at once. Before, those heartbeats were taken as of their newest answer,
/// left out the task still on its way, and the server ended it as forgotten and retried
/// it on another runner; when the held answer arrived, the first runner started attempt 1
/// beside attempt 2. A heartbeat now counts only as of before the exchange still out was
/// sent, so the task is not called forgotten, and it runs once, where it was handed.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_held_up_on_its_way_is_not_ended_as_forgotten_nor_run_twice() {
    let env = TestEnv::new("runner-held-start").await;
    let mut args = FAST_HA.clone();
    args.extend([
        "--forgotten-run-after-s",
        "2",
        "--fault",
        "hold-answer:held:8",
    ]);
    let node = env.node_with(&args).await;
    let user = user_client(&node.url);
    let fast = ["--heartbeat-s", "1"];
    let first = env.runner_with(&node.url, &["a"], 2, &fast).await;
    // A long run keeps the first runner heartbeating while the next answer is held.
    let (long, _) = user.submit(&task(SLEEPER, "a", 1)).await.unwrap();
    assert!(alive(pid_of(&user, long.id).await));

    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let script = format!("echo $BATON_ATTEMPT >> {}; sleep 1", runs.display());
    let (held, _) = user
        .submit(&SubmitTask {
            queue: Some("held".into()),
            ..task(&script, "a", 2)
        })
        .await
        .unwrap();
    wait_for(
        "the held task's start to commit",
        Duration::from_secs(20),
        || async {
            let t = user.task_get(held.id).await.ok()?;
            (t.status == TaskStatus::Running).then_some(())
        },
    )
    .await;
    // A second runner is there to take a retry, if the server ends the run.
    let _second = env.runner_with(&node.url, &["a"], 1, &fast).await;

    let ended = env.wait_terminal(&user, held.id).await;
    let ran = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(
        (ended.status, ended.attempt, ran.as_str()),
        (TaskStatus::Succeeded, 1, "1\n"),
        "the held task ran once, as attempt 1, on the runner it was handed to: {ended:?}"
    );
    drop(first);
}

/// Whether `pid` has exited (gone, or a zombie its stopped parent has not reaped).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 2..].starts_with('Z')))
        .unwrap_or(true)
}

/// A run ends in time while its agent is stopped (as cut off) for longer than the
/// timeout grace, and shorter than its fence. Before, the server ended the run
/// `timed_out` as its deadline passed with no report, and the success the agent then
/// reported was refused; now only a runner heard since the deadline can have let it pass,
/// and a silent one is left to the lost-runner rule: the run ends `succeeded`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ended_in_time_while_its_runner_was_silent_is_not_called_timed_out() {
    let env = TestEnv::new("runner-silent-past-grace").await;
    let node = patient_node(&env, &[]).await;
    let user = user_client(&node.url);
    let runner = env
        .runner_with(
            &node.url,
            &["silent"],
            1,
            &["--heartbeat-s", "1", "--fence-after-s", "40"],
        )
        .await;
    let run = a_short_run(&user, "silent").await;
    let agent = agent_of(&runner);
    let stop = |signal| nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent as i32), signal);
    stop(nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Through the deadline and a few reconcile passes after.
    exits_in_time_and_outlives_its_deadline(&user, run, 4 + 2 + 3).await;
    stop(nix::sys::signal::Signal::SIGCONT).unwrap();
    succeeded(&env, &user, run.0).await;
}

/// A run that ends in time — 2 s of its 4 s timeout — on the runner of `label`: its id
/// and its process's pid, once it runs.
async fn a_short_run(user: &baton_client::Client, label: &str) -> (Uuid, u32) {
    let (submitted, _) = user
        .submit(&SubmitTask {
            timeout_s: Some(4),
            ..task("echo $$; sleep 2", label, 1)
        })
        .await
        .unwrap();
    (submitted.id, pid_of(user, submitted.id).await)
}

/// With its runner silenced: the run exits in time, then its deadline (start + 4 s
/// timeout + 2 s grace) passes, and `past_s` seconds after its start the task is still
/// `running` — it stayed so all along.
async fn exits_in_time_and_outlives_its_deadline(
    user: &baton_client::Client,
    (id, pid): (Uuid, u32),
    past_s: i64,
) {
    wait_for(
        "the run to exit, in time",
        Duration::from_secs(10),
        || async { exited(pid).then_some(()) },
    )
    .await;
    let started = user.task_get(id).await.unwrap().started_at.unwrap();
    let judged_by = started + chrono::Duration::seconds(past_s);
    wait_for(
        "the deadline to be long past",
        Duration::from_secs(30),
        || async {
            let task = user.task_get(id).await.unwrap();
            assert_eq!(
                task.status,
                TaskStatus::Running,
                "ended before its runner's result could land: {task:?}"
            );
            (chrono::Utc::now() > judged_by).then_some(())
        },
    )
    .await;
}

/// The run ended as it ran: exit 0.
async fn succeeded(env: &TestEnv, user: &baton_client::Client, id: Uuid) {
    let ended = env.wait_terminal(user, id).await;
    assert_eq!(
        (ended.status, ended.exit_code),
        (TaskStatus::Succeeded, Some(0)),
        "{ended:?}"
    );
}

/// A node for the silent-runner stories, with `extra` flags: a runner silent this long is
/// neither offline nor lost, and a run's timeout grace is 2 s.
async fn patient_node(env: &TestEnv, extra: &[&str]) -> NodeProc {
    let mut args = baton_localcluster::timings::NodeTimings {
        runner_offline_after_s: 30,
        runner_lost_after_s: 60,
        timeout_grace_s: 2,
        ..baton_localcluster::timings::NodeTimings::FAST_HA
    }
    .args();
    args.extend(extra.iter().map(|a| a.to_string()));
    env.node_with(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await
}

/// A runner that reaches no node while its run ends in time, for longer than the timeout
/// grace: as the link heals its heartbeat reaches the server at once, and its result —
/// waiting out a backoff grown through the outage — only later. Before, that heartbeat told the server the
/// runner was back, and the run was ended `timed_out` before the success arrived; now the
/// first answer after the failures sends the waiting result at once, and it lands first.
#[tokio::test(flavor = "multi_thread")]
async fn a_result_held_through_an_outage_lands_before_the_heartbeat_can_time_it_out() {
    let env = TestEnv::new("runner-cut-past-grace").await;
    let node = patient_node(&env, &[]).await;
    let link = proxy::FaultProxy::in_front_of(&node.url).await.unwrap();
    let _runner = env
        .runner_with(
            &format!("http://127.0.0.1:{}", link.port()),
            &["cut"],
            1,
            &["--heartbeat-s", "1", "--fence-after-s", "40"],
        )
        .await;
    let user = user_client(&node.url);
    let run = a_short_run(&user, "cut").await;
    // No node answers (its port refuses, as a restarting load balancer's does): every
    // call fails at once, and the runner backs off. The outage outlasts the deadline by
    // far: the result's backoff grows meanwhile.
    link.set(proxy::Link::Refuse);
    exits_in_time_and_outlives_its_deadline(&user, run, 14).await;
    link.set(proxy::Link::Open);
    succeeded(&env, &user, run.0).await;
}

/// A runner parked for a while is handed a task, started with its lease: the task's time
/// runs from when the server started it, not from when the poll was sent. Counted from
/// the send, the park was taken off its timeout, and a task with a timeout shorter than
/// the park was killed as it began.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_handed_out_at_the_end_of_a_park_keeps_its_whole_timeout() {
    let env = TestEnv::new("runner-park-timeout").await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env
        .runner_with(&node.url, &["parked"], 1, &["--wait-s", "20"])
        .await;
    node.wait_parked("the runner to park", |n| n >= 1).await;
    let parked_at = std::time::Instant::now();
    wait_for(
        "the runner to have parked 4 s",
        Duration::from_secs(10),
        || async { (parked_at.elapsed() > Duration::from_secs(4)).then_some(()) },
    )
    .await;
    let user = user_client(&node.url);
    let (submitted, _) = user
        .submit(&SubmitTask {
            timeout_s: Some(3),
            ..task("sleep 1", "parked", 1)
        })
        .await
        .unwrap();
    let ended = env.wait_terminal(&user, submitted.id).await;
    assert_eq!(
        (ended.status, ended.exit_code),
        (TaskStatus::Succeeded, Some(0)),
        "{ended:?}"
    );
}

/// A run ends in time and its result is held on its way (`--fault hold-results`: every
/// exchange carrying it waits 20 s), while the runner's heartbeats, sent alone, are
/// answered at once long past the run's deadline. Before, hearing the runner since the
/// deadline was enough for the reconciler to end the run `timed_out`, and the success
/// that then landed was refused (Known limit 11, found by the model). The heartbeat lists
/// the run as `reporting`, whose end is the runner's to say: it ends `succeeded`.
#[tokio::test(flavor = "multi_thread")]
async fn a_success_held_on_its_way_while_its_runner_is_heard_is_not_called_timed_out() {
    let env = TestEnv::new("runner-result-held").await;
    let node = patient_node(&env, &["--fault", "hold-results:20"]).await;
    let user = user_client(&node.url);
    // A short fence makes a short exchange timeout: the held exchange is given up on, and
    // heartbeats go meanwhile.
    let _runner = env
        .runner_with(
            &node.url,
            &["held"],
            1,
            &["--heartbeat-s", "1", "--fence-after-s", "6"],
        )
        .await;
    let run = a_short_run(&user, "held").await;
    exits_in_time_and_outlives_its_deadline(&user, run, 4 + 2 + 3).await;
    succeeded(&env, &user, run.0).await;
}

/// A runner busy with a long run is handed a second task, started, in an answer held 40 s
/// (`--fault hold-answer-refusing-resends`), and every resend of that exchange is refused
/// meanwhile, while its heartbeats are answered. The task never runs. Before, the
/// reconciler, hearing the runner past the task's timeout and grace, ended it `timed_out`
/// (Known limit 12, found by the model); a run that never ran has not timed out. Its
/// runner never lists it, so once the answer is past the runner's fence (it will not
/// start it) the run is ended as forgotten — 12 s after its exchange was sent, well after
/// the reconciler's old verdict at 4 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_whose_answer_never_arrives_is_not_called_timed_out() {
    let env = TestEnv::new("runner-answer-lost").await;
    let node = patient_node(
        &env,
        &[
            "--forgotten-run-after-s",
            "2",
            "--fault",
            "hold-answer-refusing-resends:held:40",
        ],
    )
    .await;
    let user = user_client(&node.url);
    let _runner = env
        .runner_with(
            &node.url,
            &["a"],
            2,
            &["--heartbeat-s", "1", "--fence-after-s", "12"],
        )
        .await;
    // A long run keeps the runner heartbeating while the answer is held.
    let (long, _) = user.submit(&task(SLEEPER, "a", 1)).await.unwrap();
    assert!(alive(pid_of(&user, long.id).await));

    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let (held, _) = user
        .submit(&SubmitTask {
            queue: Some("held".into()),
            timeout_s: Some(2),
            ..task(&format!("echo ran >> {}", runs.display()), "a", 1)
        })
        .await
        .unwrap();
    let ended = env.wait_terminal(&user, held.id).await;
    assert_eq!(
        (ended.status, ended.error.as_deref()),
        (TaskStatus::Failed, Some("the runner no longer runs it")),
        "a run its runner never began is ended as forgotten, not timed out: {ended:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap_or_default(),
        "",
        "the held task ran"
    );
}

/// A runner cut off past its fence kills its run and comes back idle, under the same
/// boot, long before it could be called lost: it heartbeated no list of runs while busy
/// with none. Before, the run it forgot stayed `running` until its timeout (an hour
/// here) and then timed out (Known limit 2). An idle runner that lately dropped runs now
/// carries its empty list on its polls when a heartbeat is due, and the run is ended as
/// forgotten.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_a_runner_forgot_is_ended_once_it_is_back_idle() {
    let env = TestEnv::new("runner-idle-forgot").await;
    let node = patient_node(&env, &["--forgotten-run-after-s", "2"]).await;
    let link = proxy::FaultProxy::in_front_of(&node.url).await.unwrap();
    let runner = env
        .runner_with(
            &format!("http://127.0.0.1:{}", link.port()),
            &["idle"],
            1,
            &[
                "--heartbeat-s",
                "1",
                "--fence-after-s",
                "3",
                "--wait-s",
                "2",
            ],
        )
        .await;
    let user = user_client(&node.url);
    let (forgotten, _) = user
        .submit(&SubmitTask {
            timeout_s: Some(3600),
            ..task(SLEEPER, "idle", 1)
        })
        .await
        .unwrap();
    let pid = pid_of(&user, forgotten.id).await;
    link.set(proxy::Link::Cut);
    wait_for(
        "the runner to fence itself and kill its run",
        Duration::from_secs(20),
        || async { (!alive(pid)).then_some(()) },
    )
    .await;
    link.set(proxy::Link::Open);
    let ended = env.wait_terminal(&user, forgotten.id).await;
    assert_eq!(
        (ended.status, ended.error.as_deref()),
        (TaskStatus::Failed, Some("the runner no longer runs it")),
        "{ended:?}"
    );
    drop(runner);
}

/// A run prints 1.2 MB (five chunks), sleeps a second and exits 0, well within its 3 s
/// timeout, while the node takes 2 s to store each chunk of output (`--fault
/// hold-logs:2`, within the runner's request timeout) and answers the runner's heartbeats
/// at once: shipping its output takes far longer than the timeout. Before, the agent awaited each shipment before it looked at the process
/// again, so its heartbeats went on listing the run as running past its deadline and the
/// server ended it `timed_out`, though it had exited in time (found by reading). The exit
/// is seen as it comes now: the run is listed `reporting`, and ends `succeeded`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_exits_while_its_output_ships_slowly_is_not_called_timed_out() {
    let env = TestEnv::new("runner-slow-output").await;
    let node = patient_node(&env, &["--fault", "hold-logs:2"]).await;
    let _runner = env
        .runner_with(
            &node.url,
            &["verbose"],
            1,
            &["--heartbeat-s", "1", "--fence-after-s", "30"],
        )
        .await;
    let user = user_client(&node.url);
    let (submitted, _) = user
        .submit(&SubmitTask {
            timeout_s: Some(3),
            ..task(
                "head -c 1200000 /dev/zero | tr '\\0' x; sleep 1",
                "verbose",
                1,
            )
        })
        .await
        .unwrap();
    succeeded(&env, &user, submitted.id).await;
}
