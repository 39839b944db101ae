//! The demo task: proof that the whole path works (submit through the load balancer, a
//! runner leases and runs it, its log ships back, the result is recorded).

use anyhow::Context;
use baton_client::{Client, SubmitTask};
use baton_core::TaskStatus;
use std::io::Write;
use std::time::Duration;
use tokio::time::Instant;

/// Covers a runner's first registration and lease, with room for a slow machine.
const FINISH_WITHIN: Duration = Duration::from_secs(60);
const POLL_EVERY: Duration = Duration::from_millis(200);
const GREETING: &str = "hello from baton task";

/// Submits the demo task, prints its log as it comes, and checks it succeeded with the
/// expected output.
pub async fn run(client: &Client) -> anyhow::Result<()> {
    let submit = SubmitTask {
        script: Some(format!("echo \"{GREETING} $BATON_TASK_ID\"; uname -sr")),
        ..Default::default()
    };
    let (task, _) = client
        .submit(&submit)
        .await
        .context("submitting the demo task")?;
    println!("\nsubmitted demo task {}; its log:", task.id);

    let deadline = Instant::now() + FINISH_WITHIN;
    let mut log = Vec::new();
    let mut offset = 0;
    loop {
        let slice = client
            .task_logs(task.id, offset)
            .await
            .context("reading the demo task's log")?;
        if !slice.bytes.is_empty() {
            for line in String::from_utf8_lossy(&slice.bytes).lines() {
                println!("  | {line}");
            }
            std::io::stdout().flush()?;
            log.extend_from_slice(&slice.bytes);
            offset = slice.next_offset;
            continue;
        }
        if slice.status.is_terminal() {
            break;
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the demo task {} is still {} after {}s; see the runner and node logs",
                task.id,
                slice.status,
                FINISH_WITHIN.as_secs()
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }

    let done = client.task_get(task.id).await?;
    let exit = done
        .exit_code
        .map_or(String::new(), |c| format!(", exit code {c}"));
    println!("demo task {}{exit}", done.status);
    anyhow::ensure!(
        done.status == TaskStatus::Succeeded,
        "the demo task ended {} ({})",
        done.status,
        done.error.as_deref().unwrap_or("no error recorded")
    );
    let expected = format!("{GREETING} {}", task.id);
    anyhow::ensure!(
        String::from_utf8_lossy(&log).contains(&expected),
        "the demo task's log lacks {expected:?}"
    );
    Ok(())
}
