//! A pipeline through faults (docs/pipelines.md): 200 jobs in 20 layers run by real
//! agents through nginx and three nodes, while the nodes are SIGKILLed (and started again
//! where nginx expects them) and Redis forgets everything, again and again. Every job
//! ends once, each starts only after every job it needs ended — by the jobs' own records
//! — and no job is counted off more often than it has needs.

use baton_client::{PipelineJobSpec, PipelineStatus, SubmitPipeline, SubmitTask};
use baton_core::TaskStatus;
use baton_localcluster::testing as support;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::nginx::{NginxProc, conf};
use support::services::{RedisProc, free_port};
use support::*;

const LAYERS: usize = 20;
const WIDTH: usize = 10;

/// A node on `port`, with the tests' fast thresholds.
async fn node_on(env: &TestEnv, port: u16) -> NodeProc {
    let listen = format!("127.0.0.1:{port}");
    let mut args: Vec<&str> = vec!["--listen", &listen];
    args.extend(FAST_HA.iter());
    env.node_with(&args).await
}

/// Job `l-i` needs two jobs of the layer before (a fixed, scattered choice).
fn graph(record: &std::path::Path) -> Vec<PipelineJobSpec> {
    let mut jobs = Vec::new();
    for layer in 0..LAYERS {
        for i in 0..WIDTH {
            let name = format!("j{layer}-{i}");
            let needs = if layer == 0 {
                vec![]
            } else {
                let a = (i * 7 + layer) % WIDTH;
                let b = (i * 3 + 1) % WIDTH;
                let mut needs = vec![format!("j{}-{a}", layer - 1)];
                if b != a {
                    needs.push(format!("j{}-{b}", layer - 1));
                }
                needs
            };
            jobs.push(PipelineJobSpec {
                name: name.clone(),
                needs,
                task: SubmitTask {
                    script: Some(format!(
                        "echo \"start {name} $(date +%s%N)\" >> {r}\nsleep 0.{d}\n\
                         echo \"end {name} $(date +%s%N)\" >> {r}",
                        r = record.display(),
                        d = (i % 5) + 3
                    )),
                    ..Default::default()
                },
            });
        }
    }
    jobs
}

#[tokio::test(flavor = "multi_thread")]
async fn every_job_ends_once_after_its_needs_through_node_kills_and_redis_losses() {
    let base = std::env::temp_dir().join(format!(
        "baton-pipeline-faults-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let redis = RedisProc::start(&base).await;
    let env = TestEnv::with_servers("pipeline-faults", &admin_database_url(), &redis.url()).await;
    let ports = [free_port(), free_port(), free_port()];
    let mut nodes = Vec::new();
    for port in ports {
        nodes.push(node_on(&env, port).await);
    }
    let lb = NginxProc::start(&env.dir, &conf::site(conf::PRODUCTION, "{listen}", &ports)).await;
    let _runners = [
        env.runner_with(&lb.url, &[], 8, &["--heartbeat-s", "1"])
            .await,
        env.runner_with(&lb.url, &[], 8, &["--heartbeat-s", "1"])
            .await,
    ];
    let user = user_client(&lb.url);
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let jobs = graph(&record);
    let (pipeline, _) = user
        .pipeline_submit(&SubmitPipeline {
            name: Some("faults".into()),
            jobs: jobs.clone(),
            ..Default::default()
        })
        .await
        .unwrap();

    // Faults until it ends: a node killed and started again every cycle, Redis flushed
    // every second.
    let deadline = Instant::now() + Duration::from_secs(400);
    let (mut kills, mut flushes, mut cycle) = (0, 0, 0);
    let done = loop {
        assert!(
            Instant::now() < deadline,
            "the pipeline did not end in time"
        );
        if let Ok(p) = user.pipeline_get(pipeline.id).await
            && p.status != PipelineStatus::Running
        {
            break p;
        }
        let victim = cycle % nodes.len();
        nodes[victim].kill();
        kills += 1;
        nodes[victim] = node_on(&env, ports[victim]).await;
        if cycle % 2 == 1 {
            let mut conn = env.redis().await;
            let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
            flushes += 1;
        }
        cycle += 1;
        tokio::time::sleep(Duration::from_millis(1000)).await;
    };
    assert!(
        kills >= 3 && flushes >= 1,
        "{kills} kills, {flushes} flushes: too few to mean anything"
    );
    assert_eq!(done.status, PipelineStatus::Succeeded, "{done:#?}");
    assert_eq!(done.jobs.len(), LAYERS * WIDTH);
    for job in &done.jobs {
        assert_eq!(
            (job.status, job.runs),
            (TaskStatus::Succeeded, 1),
            "{}",
            job.name
        );
    }

    // The jobs' own records: each started once, and after each of its needs ended.
    let text = std::fs::read_to_string(&record).unwrap();
    let mut starts: HashMap<&str, Vec<u128>> = HashMap::new();
    let mut ends: HashMap<&str, Vec<u128>> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [what, name, at] = parts[..] else {
            continue;
        };
        let at: u128 = at.parse().unwrap();
        match what {
            "start" => starts.entry(name).or_default().push(at),
            _ => ends.entry(name).or_default().push(at),
        }
    }
    for job in &jobs {
        let started = &starts[job.name.as_str()];
        assert_eq!(
            started.len(),
            1,
            "{} started {} times",
            job.name,
            started.len()
        );
        for need in &job.needs {
            let ended = ends[need.as_str()].iter().max().unwrap();
            assert!(
                started[0] > *ended,
                "{} started before {need} ended",
                job.name
            );
        }
    }
    // Counted off exactly as often as each has needs: never twice for one need.
    let mut db = env.db().await;
    let miscounted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE pipeline_id = $1 AND (needs_pending <> 0 OR needs_unmet <> 0)",
    )
    .bind(pipeline.id)
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(miscounted, 0);
    println!(
        "pipeline of {} jobs in {LAYERS} layers: {kills} node kills, {flushes} redis flushes",
        done.jobs.len()
    );
}
