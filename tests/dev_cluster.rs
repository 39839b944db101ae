//! The newcomer's command: `baton dev` brings up Redis, Postgres, three nodes behind nginx
//! and two runners, runs a demo task through the load balancer, and tears it all down; a
//! member killed by hand is started again, and the cluster carries on whole.

use baton_localcluster::testing as support;

use baton_client::{Client, SubmitTask};
use baton_core::TaskStatus;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::wait_for;

#[test]
fn baton_dev_brings_up_a_cluster_runs_the_demo_and_stops_everything() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Inside a folder only its owner may enter, as a checkout under /root or any
    // `mktemp -d` is: the runners' tasks run as other users, and still get in.
    let private = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "baton-dev-private-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = private.join("checkout/.baton-dev");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["dev", "--smoke", "--port", &port.to_string()])
        .arg("--dir")
        .arg(&dir)
        .env_remove("BATON_DATABASE_URL")
        .env_remove("BATON_REDIS_URL")
        .output()
        .expect("run baton dev");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "baton dev --smoke failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("demo task succeeded"), "{stdout}");
    for member in [
        "runner-1", "runner-2", "node-1", "node-2", "node-3", "nginx", "postgres", "redis",
    ] {
        assert!(
            stdout.contains(&format!("stopped {member}")),
            "{member} not stopped:\n{stdout}"
        );
    }
    // Nothing it started still listens on the load balancer's port.
    assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    let _ = std::fs::remove_dir_all(private);
}

const BATON: &str = env!("CARGO_BIN_EXE_baton");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `baton dev`, stopped with Ctrl-C (SIGINT) however the test ends: its members
/// live in process groups of their own, which only its own stop reaches.
struct Dev {
    child: Child,
    out: PathBuf,
}

impl Dev {
    fn interrupt(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "baton dev did not stop on Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.interrupt();
        }
    }
}

fn dev_cmd(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BATON)
        .arg("dev")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// `baton dev status`, as (name, pid, state) per member.
fn status(dir: &Path) -> Vec<(String, i32, String)> {
    let out = dev_cmd(dir, &["status"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (
                cells[0].to_string(),
                cells[2].parse().unwrap(),
                cells[3].to_string(),
            )
        })
        .collect()
}

/// Where the cluster's node events stand now: a stream's first frame is its place.
async fn node_news_place(client: &Client) -> String {
    use futures::StreamExt;
    let news = client.events(&node_events(), None).await.unwrap();
    let mut news = std::pin::pin!(news);
    let first = news.next().await.expect("a first frame").unwrap();
    first.id.expect("the first frame is a place")
}

fn node_events() -> baton_client::EventFilter {
    baton_client::EventFilter {
        kind: Some("node".into()),
        ..Default::default()
    }
}

/// The `lost` event of `node`, read from `from` on: the stream goes through the load
/// balancer, and a stream served by the node that was killed is resumed on another.
async fn node_lost(client: &Client, from: &str, node: &str) -> serde_json::Value {
    use futures::StreamExt;
    let mut place = from.to_string();
    loop {
        let Ok(news) = client.events(&node_events(), Some(&place)).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut news = std::pin::pin!(news);
        while let Some(Ok(frame)) = news.next().await {
            if let Some(id) = &frame.id {
                place = id.clone();
            }
            let Ok(data) = frame.json() else {
                continue;
            };
            if data["event"] == "lost" && data["node_id"] == node {
                return data;
            }
        }
    }
}

/// Where `baton dev status` says a member serves its Prometheus metrics.
fn metrics_of(dir: &Path, name: &str) -> String {
    let out = dev_cmd(dir, &["status"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    let column = header
        .iter()
        .position(|c| *c == "METRICS")
        .expect("a METRICS column");
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    row.split_whitespace().nth(column).unwrap().to_string()
}

fn pid_of(dir: &Path, name: &str) -> i32 {
    status(dir)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .unwrap()
        .1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_by_hand_is_started_again_and_its_running_task_succeeds() {
    let port = free_port();
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("baton-dev-break-{}", uuid::Uuid::new_v4().simple()));
    let dir = base.join("dev");
    std::fs::create_dir_all(&base).unwrap();
    let out = base.join("dev.out");
    let child = Command::new(BATON)
        .args([
            "dev",
            "--nodes",
            "2",
            "--runners",
            "1",
            "--restart-after-s",
            "1",
        ])
        .args(["--port", &port.to_string()])
        .arg("--dir")
        .arg(&dir)
        .env_remove("BATON_DATABASE_URL")
        .env_remove("BATON_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(base.join("dev.err")).unwrap())
        .spawn()
        .unwrap();
    let mut dev = Dev { child, out };
    wait_for("the cluster to be up", Duration::from_secs(240), || {
        let up = dev.said().contains("The cluster is up.");
        async move { up.then_some(()) }
    })
    .await;
    let members = status(&dir);
    for name in ["node-1", "node-2", "runner-1", "nginx", "redis", "postgres"] {
        let member = members.iter().find(|(n, _, _)| n == name);
        assert!(
            member.is_some_and(|(_, _, state)| state == "up"),
            "{name}: {members:?}"
        );
    }

    baton_client::install_tls_provider();
    // Every runner and node serves its metrics where status says, for a scraper to find.
    let runner_metrics = metrics_of(&dir, "runner-1");
    assert!(
        runner_metrics.starts_with("http://127.0.0.1:") && runner_metrics.ends_with("/metrics"),
        "{runner_metrics}"
    );
    assert!(
        dev.said().contains(&runner_metrics),
        "said at start: {}",
        dev.said()
    );
    let scraped = reqwest::get(&runner_metrics).await.unwrap();
    assert_eq!(scraped.status(), 200);
    let scraped = scraped.text().await.unwrap();
    assert!(
        scraped.contains("baton_runner_slots_total 2"),
        "the runner's own metrics, its two slots:\n{scraped}"
    );
    let node_metrics = reqwest::get(metrics_of(&dir, "node-1")).await.unwrap();
    assert!(
        node_metrics
            .text()
            .await
            .unwrap()
            .contains("baton_build_info")
    );
    assert_eq!(metrics_of(&dir, "redis"), "-");

    let lb = format!("http://127.0.0.1:{port}");
    // The console, through the load balancer, at the address it printed.
    assert!(dev.said().contains(&format!("{lb}/ui/")), "{}", dev.said());
    let console = reqwest::get(format!("{lb}/ui/")).await.unwrap();
    assert_eq!(console.status(), 200);
    assert!(console.text().await.unwrap().contains("<title>"));
    let client = Client::new(&lb, Some("dev-admin-token".into())).unwrap();
    let task = SubmitTask {
        // Longer than the killed node's liveness lasts and its claims take to be adopted.
        script: Some("sleep 20; echo survived".into()),
        ..Default::default()
    };
    let (task, _) = client.submit(&task).await.unwrap();
    wait_for("the task to run", Duration::from_secs(60), || async {
        let now = client.task_get(task.id).await.unwrap();
        (now.status == TaskStatus::Running).then_some(())
    })
    .await;
    // The node that owns the running task is the one to kill.
    let owner = client
        .nodes()
        .await
        .unwrap()
        .nodes
        .into_iter()
        .find(|n| n.claims > 0)
        .expect("a node owns the running task")
        .id;
    let before = pid_of(&dir, &owner);
    // The cluster's news of its nodes, from before the kill: the adoption must be told.
    let from = node_news_place(&client).await;
    let killed = dev_cmd(&dir, &["kill", &owner]);
    assert!(killed.status.success(), "{killed:?}");
    // Its claims are adopted by the other node while it is down: it is started again only
    // after (started again at once, under its own id, it took them back unseen).
    let lost = tokio::time::timeout(Duration::from_secs(60), node_lost(&client, &from, &owner))
        .await
        .expect("the killed node's loss and adoption told within 60 s");
    assert_ne!(lost["adopted_by"], owner.as_str(), "{lost}");
    assert_eq!(
        lost["claims"], 1,
        "the running task's claim adopted: {lost}"
    );
    assert_eq!(
        pid_of(&dir, &owner),
        before,
        "not started again before its claims were adopted"
    );

    let after = wait_for(
        "the killed node to run again",
        Duration::from_secs(60),
        || {
            let again = status(&dir)
                .into_iter()
                .find(|(n, pid, state)| n == &owner && *pid != before && state == "up")
                .map(|(_, pid, _)| pid);
            async move { again }
        },
    )
    .await;
    assert_ne!(after, before);
    let done = wait_for("the task to end", Duration::from_secs(90), || async {
        let t = client.task_get(task.id).await.unwrap();
        t.status.is_terminal().then_some(t)
    })
    .await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    assert_eq!(done.attempt, 1, "not run twice");
    wait_for(
        "the cluster to be whole again",
        Duration::from_secs(60),
        || async {
            let nodes = client.nodes().await.map(|n| n.nodes.len()).unwrap_or(0);
            (nodes >= 2).then_some(())
        },
    )
    .await;
    let said = dev.said();
    assert!(
        said.contains(&format!("baton dev: {owner} died"))
            && said.contains(&format!("{owner} is running again")),
        "{said}"
    );

    // A graceful restart by hand.
    let runner_before = pid_of(&dir, "runner-1");
    let restarted = dev_cmd(&dir, &["restart", "runner-1"]);
    assert!(restarted.status.success(), "{restarted:?}");
    assert_ne!(pid_of(&dir, "runner-1"), runner_before);

    let stopped = dev.interrupt();
    assert!(stopped.success(), "{}", dev.said());
    assert!(dev.said().contains(&format!("stopped {owner}")));
    assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    let _ = std::fs::remove_dir_all(base);
}
