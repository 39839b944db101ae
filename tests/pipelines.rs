//! Pipelines (docs/pipelines.md) with real nodes and real runner agents: a diamond whose
//! jobs each start after what they need ended, outputs reaching the jobs after them, a
//! failure that skips what needed it while an `always` job still runs, a re-run of the
//! failed job that releases what it had skipped, a fan-out of a thousand jobs with its
//! fan-in, tasks waiting on existing tasks, a cancel, and bad graphs refused with nothing
//! written.

use baton_client::{
    CreateToken, PipelineJobSpec, PipelineStatus, Scope, SubmitPipeline, SubmitTask,
};
use baton_core::TaskStatus;
use baton_core::pipeline::ReleaseRule;
use baton_localcluster::testing as support;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// A job running `body` between two lines of `record`: `start <job> <ns>` and
/// `end <job> <ns>` (the machine's clock, one for every job here).
fn job(name: &str, needs: &[&str], record: &Path, body: &str) -> PipelineJobSpec {
    let record = record.display();
    PipelineJobSpec {
        name: name.into(),
        needs: needs.iter().map(|n| n.to_string()).collect(),
        task: SubmitTask {
            script: Some(format!(
                "echo \"start {name} $(date +%s%N)\" >> {record}\n{body}\nstatus=$?\n\
                 echo \"end {name} $(date +%s%N)\" >> {record}\nexit $status"
            )),
            ..Default::default()
        },
    }
}

fn when(mut job: PipelineJobSpec, rule: ReleaseRule) -> PipelineJobSpec {
    job.task.when = Some(rule);
    job
}

/// Each job's start and end times as it recorded them, and how many times it started.
fn recorded(record: &Path) -> (HashMap<String, (u128, u128)>, HashMap<String, usize>) {
    let text = std::fs::read_to_string(record).unwrap();
    let mut times: HashMap<String, (u128, u128)> = HashMap::new();
    let mut starts: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [what, name, at] = parts[..] else {
            continue;
        };
        let at: u128 = at.parse().unwrap();
        let entry = times.entry(name.to_string()).or_insert((0, 0));
        match what {
            "start" => {
                entry.0 = at;
                *starts.entry(name.to_string()).or_default() += 1;
            }
            "end" => entry.1 = at,
            _ => {}
        }
    }
    (times, starts)
}

/// Every job of `jobs` that ran started after each job it needs that ran had ended (by
/// their own records).
fn each_after_its_needs(jobs: &[PipelineJobSpec], times: &HashMap<String, (u128, u128)>) {
    for job in jobs {
        let Some((start, _)) = times.get(&job.name) else {
            continue;
        };
        for need in &job.needs {
            // A need that never ran was skipped: there is no end to be after.
            let Some((_, ended)) = times.get(need).copied() else {
                continue;
            };
            assert!(
                ended > 0 && *start > ended,
                "{} started at {start}, before {need} ended at {ended}",
                job.name
            );
        }
    }
}

async fn settled(
    user: &baton_client::Client,
    id: Uuid,
    within: Duration,
) -> baton_client::Pipeline {
    wait_for("the pipeline to end", within, || async {
        let p = user.pipeline_get(id).await.unwrap();
        (p.status != PipelineStatus::Running).then_some(p)
    })
    .await
}

fn status_of(p: &baton_client::Pipeline, name: &str) -> TaskStatus {
    p.jobs.iter().find(|j| j.name == name).unwrap().status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_diamond_runs_each_job_after_what_it_needs_with_their_outputs() {
    let env = TestEnv::new("pipeline-diamond").await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env.runner(&node.url, &[], 4).await;
    let user = user_client(&node.url);
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let seen = file_tasks_may_write(&env.dir.join("seen.log"));
    let jobs = vec![
        job("a", &[], &record, "echo version=1.2.3 >> \"$BATON_OUTPUT\""),
        job(
            "b",
            &["a"],
            &record,
            "sleep 0.2; echo image=b-$BATON_NEEDS_A_VERSION >> \"$BATON_OUTPUT\"",
        ),
        job("c", &["a"], &record, "sleep 0.1"),
        job(
            "d",
            &["b", "c"],
            &record,
            &format!(
                "echo \"$BATON_NEEDS_B_IMAGE ${{BATON_NEEDS_A_VERSION:-none}}\" >> {}",
                seen.display()
            ),
        ),
    ];
    let (pipeline, created) = user
        .pipeline_submit(&SubmitPipeline {
            name: Some("diamond".into()),
            jobs: jobs.clone(),
            idempotency_key: Some("diamond-1".into()),
        })
        .await
        .unwrap();
    assert!(created);
    assert_eq!(status_of(&pipeline, "a"), TaskStatus::Queued);
    assert_eq!(status_of(&pipeline, "d"), TaskStatus::Waiting);
    let layers: Vec<(String, usize)> = pipeline
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.layer))
        .collect();
    assert_eq!(
        layers,
        [("a", 0), ("b", 1), ("c", 1), ("d", 2)].map(|(n, l)| (n.to_string(), l))
    );
    // The same key answers the same pipeline, writing nothing.
    let (again, created) = user
        .pipeline_submit(&SubmitPipeline {
            name: Some("diamond".into()),
            jobs: jobs.clone(),
            idempotency_key: Some("diamond-1".into()),
        })
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.id, pipeline.id);
    assert_eq!(
        again.jobs, pipeline.jobs,
        "the first pipeline, its graph whole"
    );
    let done = settled(&user, pipeline.id, Duration::from_secs(60)).await;
    assert_eq!(done.status, PipelineStatus::Succeeded, "{done:#?}");
    let (times, starts) = recorded(&record);
    assert!(
        starts.values().all(|n| *n == 1),
        "each job ran once: {starts:?}"
    );
    assert_eq!(starts.len(), 4);
    each_after_its_needs(&jobs, &times);
    // d gets only what it needs itself: b's image (made from a's version), not a's.
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim(),
        "b-1.2.3 none"
    );
    let d = user.task_get(done.jobs[3].task_id).await.unwrap();
    assert_eq!(
        d.env.get("BATON_NEEDS_B_IMAGE").map(String::as_str),
        Some("b-1.2.3")
    );
    assert_eq!(d.pipeline_id, Some(pipeline.id));
    assert_eq!(d.job.as_deref(), Some("d"));
    assert_eq!(d.outputs, None, "a job that wrote no outputs reports none");
    let a = user.task_get(done.jobs[0].task_id).await.unwrap();
    assert_eq!(a.outputs, Some(serde_json::json!({"version": "1.2.3"})));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_skips_what_needed_it_an_always_job_runs_and_a_rerun_releases_them() {
    let env = TestEnv::new("pipeline-failure").await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env.runner(&node.url, &[], 4).await;
    let user = user_client(&node.url);
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let marker = env.dir.join("fixed");
    let jobs = vec![
        job("build", &[], &record, "true"),
        // Fails until the marker exists: the fix lands between the run and its re-run.
        job(
            "test",
            &["build"],
            &record,
            &format!("test -e {}", marker.display()),
        ),
        job("package", &["test"], &record, "true"),
        job("deploy", &["package"], &record, "true"),
        when(
            job("cleanup", &["test"], &record, "true"),
            ReleaseRule::Always,
        ),
        when(
            job("notify", &["test"], &record, "true"),
            ReleaseRule::OnFailure,
        ),
        when(
            job("celebrate", &["deploy"], &record, "true"),
            ReleaseRule::OnFailure,
        ),
    ];
    let (pipeline, _) = user
        .pipeline_submit(&SubmitPipeline {
            jobs: jobs.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = settled(&user, pipeline.id, Duration::from_secs(60)).await;
    assert_eq!(done.status, PipelineStatus::Failed, "{done:#?}");
    let statuses: Vec<(&str, TaskStatus)> = done
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.status))
        .collect();
    for (name, expected) in [
        ("build", TaskStatus::Succeeded),
        ("test", TaskStatus::Failed),
        ("package", TaskStatus::Skipped),
        ("deploy", TaskStatus::Skipped),
        ("cleanup", TaskStatus::Succeeded),
        ("notify", TaskStatus::Succeeded),
        // Its need was skipped, which is no success: on_failure releases it.
        ("celebrate", TaskStatus::Succeeded),
    ] {
        assert!(
            statuses.contains(&(name, expected)),
            "{name} {expected}: {statuses:?}"
        );
    }
    let skipped = done.jobs.iter().find(|j| j.name == "deploy").unwrap();
    assert!(skipped.error.as_deref().unwrap().starts_with("skipped"));
    assert!(skipped.started_at.is_none(), "a skipped job never ran");
    let (times, _) = recorded(&record);
    assert!(!times.contains_key("package") && !times.contains_key("deploy"));
    each_after_its_needs(&jobs, &times);

    // The fix lands; the failed job is re-run, and what it had skipped is released after it.
    std::fs::write(&marker, "").unwrap();
    let (rerun, created) = user.pipeline_retry_job(pipeline.id, "test").await.unwrap();
    assert!(created);
    let test = rerun.jobs.iter().find(|j| j.name == "test").unwrap();
    // The failed task's re-run is one, however it is asked for again.
    let failed_test = done.jobs.iter().find(|j| j.name == "test").unwrap().task_id;
    let (again, created_again) = user.task_retry(failed_test).await.unwrap();
    assert!(!created_again, "one re-run of a task, however often asked");
    assert_eq!(again.id, test.task_id);
    assert_eq!(test.runs, 2);
    let done = wait_for("the re-run to end", Duration::from_secs(60), || async {
        let p = user.pipeline_get(pipeline.id).await.unwrap();
        let deploy = p.jobs.iter().find(|j| j.name == "deploy").unwrap();
        (p.status != PipelineStatus::Running && deploy.runs == 2).then_some(p)
    })
    .await;
    assert_eq!(done.status, PipelineStatus::Succeeded, "{done:#?}");
    for name in ["test", "package", "deploy"] {
        let j = done.jobs.iter().find(|j| j.name == name).unwrap();
        assert_eq!((j.status, j.runs), (TaskStatus::Succeeded, 2), "{name}");
    }
    for name in ["build", "cleanup", "notify"] {
        let j = done.jobs.iter().find(|j| j.name == name).unwrap();
        assert_eq!(j.runs, 1, "{name} is not re-run");
    }
    // celebrate's need (deploy) now succeeded, but celebrate ran already: its run stands.
    let (_, starts) = recorded(&record);
    assert_eq!(starts["test"], 2);
    assert_eq!(starts["deploy"], 1);
    assert_eq!(starts["build"], 1);
    let test_task = user.task_get(test.task_id).await.unwrap();
    assert!(test_task.retry_of.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_of_a_thousand_jobs_and_its_fan_in_each_run_once() {
    let env = TestEnv::new("pipeline-fan").await;
    let node = env.node_with(&FAST_HA).await;
    let _runners = [
        env.runner(&node.url, &[], 16).await,
        env.runner(&node.url, &[], 16).await,
    ];
    let user = user_client(&node.url);
    let mut jobs = vec![PipelineJobSpec {
        name: "root".into(),
        task: SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        },
        ..Default::default()
    }];
    for i in 0..1000 {
        jobs.push(PipelineJobSpec {
            name: format!("leaf-{i}"),
            needs: vec!["root".into()],
            task: SubmitTask {
                command: Some(vec!["true".into()]),
                ..Default::default()
            },
        });
    }
    jobs.push(PipelineJobSpec {
        name: "join".into(),
        needs: (0..1000).map(|i| format!("leaf-{i}")).collect(),
        task: SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        },
    });
    let (pipeline, _) = user
        .pipeline_submit(&SubmitPipeline {
            jobs,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pipeline.jobs.len(), 1002);
    let done = settled(&user, pipeline.id, Duration::from_secs(300)).await;
    assert_eq!(done.status, PipelineStatus::Succeeded);
    assert!(done.jobs.iter().all(|j| j.runs == 1 && j.attempt == 1));
    let join = done.jobs.iter().find(|j| j.name == "join").unwrap();
    let last_leaf = done
        .jobs
        .iter()
        .filter(|j| j.name.starts_with("leaf-"))
        .map(|j| j.finished_at.unwrap())
        .max()
        .unwrap();
    assert!(
        join.queued_at.unwrap() >= last_leaf,
        "join released before its last need ended"
    );
    assert_eq!(join.layer, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_waits_for_existing_tasks_it_may_read() {
    let env = TestEnv::new("pipeline-depends").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let simple = SubmitTask {
        command: Some(vec!["true".into()]),
        ..Default::default()
    };
    let (first, _) = user.submit(&simple).await.unwrap();
    let (waiting, _) = user
        .submit(&SubmitTask {
            depends_on: vec![first.id],
            ..simple.clone()
        })
        .await
        .unwrap();
    assert_eq!(waiting.status, TaskStatus::Waiting);
    assert_eq!(waiting.when, Some(ReleaseRule::OnSuccess));
    // Only the first is handed out; its success releases the second.
    let boot = Uuid::now_v7();
    let leased = runner.lease(&lease_now(boot, 4)).await.unwrap().tasks;
    assert_eq!(
        leased.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![first.id]
    );
    runner.start(first.id, leased[0].lease_id).await.unwrap();
    runner
        .complete(
            first.id,
            &baton_client::CompleteTask::succeeded(leased[0].lease_id),
        )
        .await
        .unwrap();
    let released = wait_for(
        "the second to be handed out",
        Duration::from_secs(10),
        || async {
            let got = runner.lease(&lease_now(boot, 4)).await.unwrap().tasks;
            (!got.is_empty()).then_some(got)
        },
    )
    .await;
    assert_eq!(released[0].id, waiting.id);
    // On a task already failed, an on_success task is skipped at once, an always one queued.
    let (failing, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["false".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    user.task_cancel(failing.id).await.unwrap();
    let (skipped, _) = user
        .submit(&SubmitTask {
            depends_on: vec![failing.id],
            ..simple.clone()
        })
        .await
        .unwrap();
    assert_eq!(skipped.status, TaskStatus::Skipped);
    let (always, _) = user
        .submit(&SubmitTask {
            depends_on: vec![failing.id],
            when: Some(ReleaseRule::Always),
            ..simple.clone()
        })
        .await
        .unwrap();
    assert_eq!(always.status, TaskStatus::Queued);
    // Another tenant's task cannot be named, nor can a task that does not exist.
    let tenant = baton_client::Client::new(
        &node.url,
        Some(
            user.token_create(&CreateToken {
                name: "tenant".into(),
                scopes: vec![Scope::Submit],
                ..Default::default()
            })
            .await
            .unwrap()
            .token,
        ),
    )
    .unwrap();
    let before = env.count_tasks().await;
    for need in [first.id, Uuid::now_v7()] {
        let refused = tenant
            .submit(&SubmitTask {
                depends_on: vec![need],
                ..simple.clone()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.status().map(|s| s.as_u16()), Some(422), "{refused}");
        assert!(refused.to_string().contains("depends_on"), "{refused}");
    }
    assert_eq!(env.count_tasks().await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_pipeline_ends_every_job_and_releases_none() {
    let env = TestEnv::new("pipeline-cancel").await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let user = user_client(&node.url);
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let jobs = vec![
        job("long", &[], &record, "sleep 30"),
        job("after", &["long"], &record, "true"),
        when(
            job("finally", &["after"], &record, "true"),
            ReleaseRule::Always,
        ),
    ];
    let (pipeline, _) = user
        .pipeline_submit(&SubmitPipeline {
            jobs,
            ..Default::default()
        })
        .await
        .unwrap();
    wait_for("the long job to run", Duration::from_secs(30), || async {
        let p = user.pipeline_get(pipeline.id).await.unwrap();
        (status_of(&p, "long") == TaskStatus::Running).then_some(())
    })
    .await;
    let cancelled = user.pipeline_cancel(pipeline.id).await.unwrap();
    assert_eq!((cancelled.cancelled, cancelled.cancelling), (2, 1));
    let done = settled(&user, pipeline.id, Duration::from_secs(30)).await;
    assert_eq!(done.status, PipelineStatus::Cancelled);
    assert!(
        done.jobs.iter().all(|j| j.status == TaskStatus::Cancelled),
        "{done:#?}"
    );
    let (_, starts) = recorded(&record);
    assert_eq!(starts.keys().collect::<Vec<_>>(), vec!["long"]);
    let listed = user.pipeline_list(None, None).await.unwrap();
    assert_eq!(listed.pipelines[0].id, pipeline.id);
    assert_eq!(listed.pipelines[0].counts.get("cancelled"), Some(&3));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_graphs_are_refused_naming_the_job_with_nothing_written() {
    let env = TestEnv::new("pipeline-bad").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let plain = |name: &str, needs: &[&str]| PipelineJobSpec {
        name: name.into(),
        needs: needs.iter().map(|s| s.to_string()).collect(),
        task: SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        },
    };
    let too_many: Vec<PipelineJobSpec> =
        (0..10_001).map(|i| plain(&format!("j{i}"), &[])).collect();
    let cases: Vec<(Vec<PipelineJobSpec>, &str)> = vec![
        (
            vec![plain("a", &["c"]), plain("b", &["a"]), plain("c", &["b"])],
            "cycle",
        ),
        (vec![plain("a", &["nope"])], "jobs.a.needs"),
        (vec![plain("a", &[]), plain("a", &[])], "jobs.a"),
        (vec![plain("Build", &[])], "jobs.Build"),
        (vec![], "jobs"),
        (too_many, "over the limit of 10000"),
        (
            vec![PipelineJobSpec {
                task: SubmitTask {
                    depends_on: vec![Uuid::now_v7()],
                    ..plain("a", &[]).task
                },
                ..plain("a", &[])
            }],
            "jobs.a.depends_on",
        ),
        (
            vec![when(plain("a", &[]), ReleaseRule::Always)],
            "jobs.a.when",
        ),
        (
            vec![
                plain("a", &[]),
                PipelineJobSpec {
                    task: SubmitTask {
                        command: None,
                        ..Default::default()
                    },
                    ..plain("b", &["a"])
                },
            ],
            "jobs.b",
        ),
    ];
    for (jobs, named) in cases {
        let err = user
            .pipeline_submit(&SubmitPipeline {
                jobs,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.status().map(|s| s.as_u16()),
            Some(422),
            "{named}: {err}"
        );
        assert!(err.to_string().contains(named), "{named}: {err}");
    }
    // Malformed: an unknown field of a job's task is named, not ignored.
    let raw = reqwest::Client::new()
        .post(format!("{}/v1/pipelines", node.url))
        .bearer_auth(API_TOKEN)
        .json(&serde_json::json!({"jobs": [{"name": "a", "scritp": "true"}]}))
        .send()
        .await
        .unwrap();
    assert!(raw.status().is_client_error());
    let body: serde_json::Value = raw.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("scritp"),
        "{body}"
    );
    assert_eq!(env.count_tasks().await, 0);
    let mut db = env.db().await;
    let pipelines: i64 = sqlx::query_scalar("SELECT count(*) FROM pipelines")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(pipelines, 0);
    let missing = user.pipeline_get(Uuid::now_v7()).await.unwrap_err();
    assert_eq!(missing.status().map(|s| s.as_u16()), Some(404), "{missing}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_fires_a_pipeline_once_per_tick() {
    let env = TestEnv::new("pipeline-schedule").await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env.runner(&node.url, &[], 4).await;
    let user = user_client(&node.url);
    let plain = |name: &str, needs: &[&str]| PipelineJobSpec {
        name: name.into(),
        needs: needs.iter().map(|s| s.to_string()).collect(),
        task: SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        },
    };
    let pipeline = SubmitPipeline {
        name: Some("nightly".into()),
        jobs: vec![plain("build", &[]), plain("test", &["build"])],
        idempotency_key: None,
    };
    // A task and a pipeline at once is refused, with nothing written.
    let both = user
        .schedule_create(&baton_client::CreateSchedule {
            name: "both".into(),
            cron: "* * * * * *".into(),
            task: SubmitTask {
                command: Some(vec!["true".into()]),
                ..Default::default()
            },
            pipeline: Some(pipeline.clone()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(both.status().map(|s| s.as_u16()), Some(422), "{both}");
    // A tick's task cannot wait for tasks: it would wait forever.
    let waiting = user
        .schedule_create(&baton_client::CreateSchedule {
            name: "waits".into(),
            cron: "* * * * * *".into(),
            task: SubmitTask {
                command: Some(vec!["true".into()]),
                depends_on: vec![Uuid::now_v7()],
                ..Default::default()
            },
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(waiting.status().map(|s| s.as_u16()), Some(422), "{waiting}");
    assert!(waiting.to_string().contains("task.depends_on"), "{waiting}");
    let schedule = user
        .schedule_create(&baton_client::CreateSchedule {
            name: "every-second".into(),
            cron: "* * * * * *".into(),
            pipeline: Some(pipeline),
            overlap: Some("allow".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(schedule.pipeline.as_ref().map(|p| p.jobs.len()), Some(2));
    let mut db = env.db().await;
    let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
    wait_for("three ticks' pipelines", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pipelines WHERE schedule_id = $1")
                    .bind(schedule.id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            (n >= 3).then_some(())
        }
    })
    .await;
    user.schedule_action(schedule.id, "pause").await.unwrap();
    user.schedule_action(schedule.id, "trigger").await.unwrap();
    // One pipeline per tick, its jobs the schedule's runs; the trigger made one more.
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT scheduled_for FROM pipelines WHERE schedule_id = $1
                               GROUP BY scheduled_for HAVING count(*) > 1) d",
    )
    .bind(schedule.id)
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(doubled, 0);
    let (pipelines, jobs, loose): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pipelines WHERE schedule_id = $1),
                (SELECT count(*) FROM tasks WHERE schedule_id = $1),
                (SELECT count(*) FROM tasks WHERE schedule_id = $1 AND pipeline_id IS NULL)",
    )
    .bind(schedule.id)
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!((jobs, loose), (2 * pipelines, 0));
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM pipelines WHERE schedule_id = $1")
        .bind(schedule.id)
        .fetch_all(&mut db)
        .await
        .unwrap();
    for id in ids {
        let done = settled(&user, id, Duration::from_secs(30)).await;
        assert_eq!(done.status, PipelineStatus::Succeeded, "{done:#?}");
        assert_eq!(done.schedule_id, Some(schedule.id));
    }
}
