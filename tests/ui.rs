//! The web console (`/ui`) in a real browser: `tests/ui/console.mjs` drives the system's
//! Chromium with playwright-core against a two-node cluster with a runner, as an
//! operator would — signs in, watches tasks change without a reload, follows a log,
//! cancels, and watches a killed node's claims move to the other node; then finds tasks
//! by id (short ids too) and by a bad one, sorts, counts and filters the list by date,
//! searches a log, links to a line and downloads it, reads each line's time and stream,
//! reads a task's attempts, submits a task and makes, changes and deletes a schedule
//! from the console, follows a pipeline's graph as its jobs run and re-runs its failed
//! job, cancels another pipeline, reads the queues' last hour, and checks every page at
//! 390 px wide and in the dark. Screenshots of every page go to `target/ui-screenshots/`.
//!
//! The script and this test talk over its stdin and stdout: it prints `kill <node id>`
//! when the page is ready to watch a node die, we kill that node (SIGKILL, as a crash)
//! and answer `killed`. Every other line it prints is its report, passed on.
//!
//! `scripts/test.sh` installs what the script needs (Node.js, Chromium, and
//! playwright-core into `tests/ui/node_modules`).

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use uuid::Uuid;

/// Nodes that notice a dead peer within seconds (a 1.5 s liveness TTL, the cleaner every
/// 300 ms), but runners kept for the defaults' minutes: the task held on the doomed node
/// must still be running, its runner silent, when the node dies.
const QUICK_ADOPTION: &[&str] = &[
    "--node-ttl-ms",
    "1500",
    "--cleaner-interval-ms",
    "300",
    "--reconcile-interval-ms",
    "300",
    "--ui-trace-url",
    "https://jaeger.example/trace/{trace_id}",
];

/// The whole browser session's bound: each step inside waits with its own deadline.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ui_dir() -> PathBuf {
    repo_root().join("tests/ui")
}

/// Says what is missing, and how to get it, rather than failing somewhere inside node.
fn check_tools() {
    let node = std::process::Command::new("node").arg("--version").output();
    let version = match node {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => panic!("node (Node.js 20 or later) is not installed: scripts/test.sh installs it"),
    };
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 20,
        "playwright-core needs Node.js 20 or later, found {version}"
    );
    assert!(
        ui_dir().join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci` in tests/ui (scripts/test.sh does)"
    );
    assert!(
        Path::new(&chromium()).exists(),
        "no Chromium at {}: scripts/test.sh installs Debian's `chromium`",
        chromium()
    );
}

fn chromium() -> String {
    std::env::var("BATON_UI_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

#[test]
fn the_consoles_pure_parts_pass_their_unit_tests() {
    check_tools();
    let out = std::process::Command::new("node")
        .args(["--test", "unit.test.mjs"])
        .current_dir(ui_dir())
        .output()
        .expect("run node --test");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_watches_and_steers_the_cluster_from_the_console() {
    check_tools();
    let env = TestEnv::new("ui-console").await;
    // The browser talks to the survivor; the doomed node holds one claim when it dies.
    let mut doomed = env.node_with(QUICK_ADOPTION).await;
    // The survivor has a provisioner, which the runners page shows with its demand; it
    // serves a label no task here asks for, so it starts nothing.
    let provisioners = env.dir.join("provisioners.toml");
    std::fs::write(
        &provisioners,
        "[[provisioners]]\nname = \"on-demand\"\nlabels = [\"gpu-on-demand\"]\n\
         backend = \"command\"\ncreate = \"/bin/false\"\ndelete = \"/bin/true\"\n",
    )
    .unwrap();
    let survivor_args: Vec<&str> = QUICK_ADOPTION
        .iter()
        .copied()
        .chain(["--config", provisioners.to_str().unwrap()])
        .collect();
    let survivor = env.node_with(&survivor_args).await;
    let _runner = env.runner(&survivor.url, &[], 4).await;
    let user = user_client(&survivor.url);

    // The held task: a runner of our own leases it through the doomed node and starts
    // it, then stays silent, so the doomed node's claim holds it until the node dies.
    let (_, silent_runner) = register_runner(&doomed.url, &["held"], 1).await;
    let (held, _) = user
        .submit(&SubmitTask {
            labels: vec!["held".into()],
            command: Some(vec!["sleep".into(), "600".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let boot = Uuid::new_v4();
    let leased = wait_for("the held task's lease", Duration::from_secs(10), || async {
        let leases = silent_runner.lease(&lease_now(boot, 1)).await.ok()?;
        leases.tasks.into_iter().find(|t| t.id == held.id)
    })
    .await;
    silent_runner.start(held.id, leased.lease_id).await.unwrap();

    let screenshots = repo_root().join("target/ui-screenshots");
    // This run's pictures only: an earlier run's failure shots would mislead.
    let _ = std::fs::remove_dir_all(&screenshots);
    std::fs::create_dir_all(&screenshots).unwrap();
    let mut script = tokio::process::Command::new("node")
        .arg("console.mjs")
        .current_dir(ui_dir())
        .env("BATON_UI_URL", &survivor.url)
        .env("BATON_UI_TOKEN", API_TOKEN)
        .env("BATON_UI_CHROMIUM", chromium())
        .env("BATON_UI_SCREENSHOTS", &screenshots)
        .env("BATON_UI_DOOMED_NODE", &doomed.node_id)
        .env("BATON_UI_SURVIVOR_NODE", &survivor.node_id)
        .env("BATON_UI_HELD_TASK", held.id.to_string())
        .env("BATON_UI_SHARED_DIR", dir_tasks_may_write("ui-shared"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node console.mjs");
    let mut answers = script.stdin.take().unwrap();
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let mut report = Vec::new();
    let finished = tokio::time::timeout(SCRIPT_DEADLINE, async {
        while let Some(line) = lines.next_line().await.expect("the script's output") {
            println!("console.mjs: {line}");
            if line == format!("kill {}", doomed.node_id) {
                doomed.kill();
                answers.write_all(b"killed\n").await.unwrap();
            }
            report.push(line);
        }
        script.wait().await.expect("the script's exit")
    })
    .await;
    let status = finished.unwrap_or_else(|_| {
        panic!(
            "the browser session did not finish within {SCRIPT_DEADLINE:?}; so far:\n{report:#?}"
        )
    });
    assert!(
        status.success(),
        "a console scenario failed (screenshots in {}; node logs in {}):\n{}",
        screenshots.display(),
        env.dir.display(),
        report.join("\n")
    );
}
