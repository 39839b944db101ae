//! `baton pipeline`, as a user drives it: a pipeline written as a YAML file, submitted and
//! watched to its end by a real runner with the command's exit code saying how it ended,
//! then shown, listed, a failed job re-run and watched again, a pipeline cancelled; and
//! files that are wrong refused with the job at fault named and nothing written. Its help
//! is held to the snapshots in `tests/cli_help/` as `tests/cli.rs` holds the others'
//! (`BATON_UPDATE_SNAPSHOTS=1 cargo test --test pipeline_cli` rewrites them).

use baton_client::{Pipeline, PipelineStatus};
use baton_core::TaskStatus;
use baton_localcluster::testing as support;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;
use support::procs::{baton_binary, baton_cli};
use support::*;
use uuid::Uuid;

/// Long enough for a few short jobs on a shared machine; a watch that outlives it hangs.
const WATCH_LIMIT: Duration = Duration::from_secs(120);

async fn baton(server: &str, args: &[&str]) -> Output {
    tokio::time::timeout(WATCH_LIMIT, baton_cli(server, API_TOKEN, args))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "`baton {}` still running after {WATCH_LIMIT:?}",
                args.join(" ")
            )
        })
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn printed(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn file(env: &TestEnv, name: &str, text: &str) -> PathBuf {
    let path = env.dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The id in `submitted pipeline <id> (...)`, which a submit says on stderr.
fn submitted_id(out: &Output) -> Uuid {
    let text = said(out);
    let rest = text
        .split("submitted pipeline ")
        .nth(1)
        .unwrap_or_else(|| panic!("no submit line: {text}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// `baton pipeline get ID -o json`.
async fn pipeline(server: &str, id: Uuid) -> Pipeline {
    let out = baton(server, &["pipeline", "get", &id.to_string(), "-o", "json"]).await;
    assert!(out.status.success(), "{}", said(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn status_of(pipeline: &Pipeline, job: &str) -> TaskStatus {
    pipeline.jobs.iter().find(|j| j.name == job).unwrap().status
}

const RELEASE: &str = r#"
name: release
jobs:
  build:
    script: echo built
  test:
    needs: [build]
    command: [sh, -c, "echo tested"]
  deploy:
    needs: [test]
    when: on_success
    env: {TARGET: prod}
    script: test "$TARGET" = prod
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_file_runs_to_its_end_and_reads_back() {
    let env = TestEnv::new("pipeline-cli-runs").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let release = file(&env, "release.yaml", RELEASE);

    let out = baton(&node.url, &["pipeline", "submit", "--watch", arg(&release)]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let id = submitted_id(&out);
    assert!(said(&out).contains("(release, 3 jobs)"), "{}", said(&out));
    assert!(
        said(&out).contains(&format!("pipeline {id} succeeded in")),
        "{}",
        said(&out)
    );
    // A line for each job's end, in the order they ended.
    let lines = printed(&out);
    let ended: Vec<&str> = lines
        .lines()
        .filter(|l| l.contains(" succeeded "))
        .map(|l| {
            ["build", "test", "deploy"]
                .into_iter()
                .find(|j| l.contains(&format!("  {j} ")))
                .unwrap_or_else(|| panic!("no job in {l}"))
        })
        .collect();
    assert_eq!(ended, ["build", "test", "deploy"], "{lines}");

    // `get` by short id: the header, then a row per job by layer.
    let short = baton_client::short_id(id);
    let out = baton(&node.url, &["pipeline", "get", &short]).await;
    assert!(out.status.success(), "{}", said(&out));
    let text = printed(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("pipeline  {id}"), "{text}");
    assert_eq!(lines[2], "status    succeeded", "{text}");
    let header: Vec<&str> = lines[6].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "LAYER", "NAME", "STATUS", "NEEDS", "EXIT", "DURATION", "TASK", "ERROR"
        ]
    );
    let rows: Vec<Vec<&str>> = lines[7..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let layers: Vec<(&str, &str, &str, &str)> =
        rows.iter().map(|r| (r[0], r[1], r[2], r[3])).collect();
    assert_eq!(
        layers,
        [
            ("0", "build", "succeeded", "-"),
            ("1", "test", "succeeded", "build"),
            ("2", "deploy", "succeeded", "test"),
        ],
        "{text}"
    );
    let read = pipeline(&node.url, id).await;
    assert_eq!(read.status, PipelineStatus::Succeeded);
    for job in &read.jobs {
        assert_eq!(job.status, TaskStatus::Succeeded, "{job:?}");
        assert_eq!(job.exit_code, Some(0), "{job:?}");
    }

    // `list`: its row, its jobs counted.
    let out = baton(&node.url, &["pipeline", "list"]).await;
    assert!(out.status.success(), "{}", said(&out));
    let text = printed(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with(&short))
        .unwrap_or_else(|| panic!("no row for {short}: {text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[1..5],
        ["release", "succeeded", "3", "succeeded=3"],
        "{row}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_job_ends_the_watch_with_its_code_and_its_rerun_the_next() {
    let env = TestEnv::new("pipeline-cli-fails").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 2).await;
    // Fails the first time it runs, succeeds the next.
    let marker = dir_tasks_may_write("pipeline-cli").join("ran-once");
    let marker = marker.display();
    let flaky = file(
        &env,
        "flaky.yaml",
        &format!(
            r#"
name: flaky
jobs:
  prepare:
    script: "true"
  flaky:
    needs: [prepare]
    script: "test -e {marker} || {{ touch {marker}; exit 3; }}"
  after:
    needs: [flaky]
    script: "true"
  cleanup:
    needs: [flaky]
    when: always
    script: "true"
"#
        ),
    );

    let out = baton(&node.url, &["pipeline", "submit", "-w", arg(&flaky)]).await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "the job's own code: {}",
        said(&out)
    );
    let id = submitted_id(&out);
    assert!(
        said(&out).contains("failed in") && said(&out).contains("flaky failed (exit code 3)"),
        "{}",
        said(&out)
    );
    let read = pipeline(&node.url, id).await;
    assert_eq!(read.status, PipelineStatus::Failed);
    assert_eq!(status_of(&read, "flaky"), TaskStatus::Failed);
    assert_eq!(status_of(&read, "after"), TaskStatus::Skipped);
    assert_eq!(status_of(&read, "cleanup"), TaskStatus::Succeeded);

    let short = baton_client::short_id(id);
    let out = baton(&node.url, &["pipeline", "retry", &short, "flaky"]).await;
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!("job flaky of pipeline {id} re-run as task")),
        "{}",
        said(&out)
    );
    let out = baton(&node.url, &["pipeline", "watch", &short]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let read = pipeline(&node.url, id).await;
    assert_eq!(read.status, PipelineStatus::Succeeded);
    let flaky = read.jobs.iter().find(|j| j.name == "flaky").unwrap();
    assert_eq!((flaky.status, flaky.runs), (TaskStatus::Succeeded, 2));
    assert_eq!(
        status_of(&read, "after"),
        TaskStatus::Succeeded,
        "released again"
    );
}

/// A submit that failed: exit code 1, nothing on stdout; what it said on stderr.
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", said(out));
    assert!(out.stdout.is_empty(), "{}", printed(out));
    said(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_file_names_the_job_and_writes_nothing() {
    let env = TestEnv::new("pipeline-cli-refused").await;
    let node = env.node().await;
    let user = user_client(&node.url);

    // `c` is behind the cycle, not on it.
    let cycle = file(
        &env,
        "cycle.yaml",
        "jobs:\n  a:\n    needs: [b]\n    script: x\n  b:\n    needs: [a]\n    script: x\n  c:\n    needs: [a]\n    script: x\n",
    );
    let text = refused(&baton(&node.url, &["pipeline", "submit", arg(&cycle)]).await);
    assert!(
        text.contains(&format!("{}:", arg(&cycle))) && text.contains("is on a cycle of needs"),
        "{text}"
    );
    assert!(
        text.contains("jobs.a.needs") || text.contains("jobs.b.needs"),
        "a job on the cycle: {text}"
    );

    let unknown = file(
        &env,
        "unknown.yaml",
        "jobs:\n  build:\n    script: make\n  test:\n    needs: [biuld]\n    script: make test\n",
    );
    let text = refused(&baton(&node.url, &["pipeline", "submit", "--watch", arg(&unknown)]).await);
    assert!(
        text.contains(&format!("{}:4:3: jobs.test.needs", arg(&unknown)))
            && text.contains("\"biuld\""),
        "{text}"
    );

    let misspelt = file(&env, "misspelt.yaml", "jobs:\n  build:\n    scritp: make\n");
    let text = refused(&baton(&node.url, &["pipeline", "submit", arg(&misspelt)]).await);
    assert!(
        text.contains(&format!("{}:3:", arg(&misspelt))) && text.contains("`scritp`"),
        "{text}"
    );

    // Refused by the server rather than by the file's check: still nothing written.
    let when = file(
        &env,
        "when.yaml",
        "jobs:\n  build:\n    when: always\n    script: make\n",
    );
    let text = refused(&baton(&node.url, &["pipeline", "submit", arg(&when)]).await);
    assert!(text.contains("jobs.build.when"), "{text}");

    assert!(
        user.pipeline_list(None, None)
            .await
            .unwrap()
            .pipelines
            .is_empty(),
        "no pipeline written"
    );
    assert_eq!(env.count_tasks().await, 0, "no task written");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_read_from_stdin_is_cancelled_whole() {
    let env = TestEnv::new("pipeline-cli-cancel").await;
    let node = env.node().await;
    // No runner has the label: the first job stays queued, the second waits for it.
    let yaml = "\
name: held
jobs:
  first:
    labels: [no-runner-has-this]
    script: \"true\"
  second:
    needs: [first]
    script: \"true\"
";
    let mut child = tokio::process::Command::new(baton_binary())
        .args(["pipeline", "submit", "-"])
        .env("BATON_SERVER", &node.url)
        .env("BATON_TOKEN", API_TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(yaml.as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let id = submitted_id(&out);
    let text = printed(&out);
    assert!(text.starts_with(&format!("pipeline  {id}\n")), "{text}");
    assert!(text.contains("status    running"), "{text}");
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("first")[2], "queued");
    assert_eq!(row("second")[2], "waiting");

    let out = baton(&node.url, &["pipeline", "cancel", &id.to_string()]).await;
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("2 jobs cancelled"), "{}", said(&out));
    assert!(
        printed(&out).contains("status    cancelled"),
        "{}",
        printed(&out)
    );

    // Watching an ended pipeline says its end at once, and it is no success.
    let out = baton(&node.url, &["pipeline", "watch", &id.to_string()]).await;
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("cancelled in"), "{}", said(&out));
    let read = pipeline(&node.url, id).await;
    assert_eq!(status_of(&read, "first"), TaskStatus::Cancelled);
    assert_eq!(status_of(&read, "second"), TaskStatus::Cancelled);
}

/// A single task waits too: `task submit --depends-on` (short ids taken) and `--when`.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_submitted_to_wait_for_another_waits() {
    let env = TestEnv::new("pipeline-cli-depends").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let first = user
        .submit(&baton_client::SubmitTask {
            labels: vec!["no-runner-has-this".into()],
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap()
        .0;
    let short = baton_client::short_id(first.id);
    let out = baton(
        &node.url,
        &[
            "task",
            "submit",
            "--depends-on",
            &short,
            "--when",
            "on_failure",
            "--",
            "true",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", said(&out));
    let after: Uuid = printed(&out).trim().parse().unwrap();
    let task = user.task_get(after).await.unwrap();
    assert_eq!(task.status, TaskStatus::Waiting);
    assert_eq!(
        task.when,
        Some(baton_core::pipeline::ReleaseRule::OnFailure)
    );

    // Its rule is met once the first (named by its short id) ends otherwise than succeeded.
    user.task_cancel(first.id).await.unwrap();
    let released = wait_for(
        "the waiting task released",
        Duration::from_secs(20),
        || async {
            let task = user.task_get(after).await.unwrap();
            (task.status != TaskStatus::Waiting).then_some(task.status)
        },
    )
    .await;
    assert_eq!(released, TaskStatus::Queued);

    let out = baton(
        &node.url,
        &["task", "submit", "--when", "always", "--", "true"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "--when needs --depends-on: {}",
        said(&out)
    );
}

#[test]
fn help_matches_its_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli_help");
    let update = std::env::var_os("BATON_UPDATE_SNAPSHOTS").is_some();
    for command in [&["pipeline"][..], &["pipeline", "submit"]] {
        // Nothing from the caller's environment but the path: no `BATON_*` value shown.
        let out = std::process::Command::new(baton_binary())
            .args(command)
            .arg("--help")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap();
        assert!(out.status.success(), "{command:?}: {out:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        let file = dir.join(format!("baton-{}.txt", command.join("-")));
        if update {
            std::fs::write(&file, &help).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (BATON_UPDATE_SNAPSHOTS=1 writes it)",
                file.display()
            )
        });
        assert_eq!(
            help,
            expected,
            "`baton {} --help` changed; if on purpose, run with BATON_UPDATE_SNAPSHOTS=1",
            command.join(" ")
        );
    }
}
