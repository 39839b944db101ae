//! A runner that speaks the protocol and runs nothing: each exchange completes the tasks
//! the previous one leased (started, `start_leased`, as the agent asks) and asks for as
//! many more as it has slots — the runner side of a drain, with no process spawned, so
//! what is measured is the scheduler. Runs as a process of its own
//! (`throughput --protocol-runner URL TOKEN SLOTS`), as a real runner would.
//!
//! With [`SLOW_EXCHANGES`] set to a file, it appends to it each exchange that reported
//! work and took over 100 ms: `<unix ms> <ms>`. An exchange with nothing to report
//! parks until work comes (on purpose), so its time says nothing of a stall and it is
//! not recorded — a stall on the way to an idle runner shows in the pickup, not here.
//!
//! With `BATON_BENCH_START_ITEMS=1` it acknowledges each lease with a start item
//! instead, one exchange later, and completes it the exchange after: the protocol
//! without `start_leased`, for comparison.

use baton_client::{Client, CompletionItem, Exchange, ItemResult, StartItem};
use std::time::Duration;
use uuid::Uuid;

/// Exchanges in flight at once, each for its share of the slots. One: the fewer lanes,
/// the more each exchange carries, and the cheaper each task (two lanes halve the
/// batches and cost more than they overlap, measured).
const LANES: u32 = 1;

/// The environment variable naming the file slow exchanges are appended to.
pub(crate) const SLOW_EXCHANGES: &str = "BATON_BENCH_SLOW_EXCHANGES";
const SLOW: Duration = Duration::from_millis(100);

pub async fn run(url: &str, token: &str, slots: u32) {
    let client = Client::new(url, Some(token.to_string())).unwrap();
    let boot_id = Uuid::new_v4();
    let lanes: Vec<_> = (0..LANES)
        .map(|_| tokio::spawn(lane(client.clone(), boot_id, slots / LANES)))
        .collect();
    for lane in lanes {
        lane.await.unwrap();
    }
}

async fn lane(client: Client, boot_id: Uuid, slots: u32) {
    let start_items = std::env::var_os("BATON_BENCH_START_ITEMS").is_some();
    let slow_log = std::env::var_os(SLOW_EXCHANGES);
    let mut leased: Vec<StartItem> = Vec::new();
    let mut started: Vec<CompletionItem> = Vec::new();
    let mut resend: Option<Exchange> = None;
    loop {
        let exchange = match resend.take() {
            Some(again) => again,
            None => {
                let starts: Vec<StartItem> = std::mem::take(&mut leased);
                let completions: Vec<CompletionItem> = std::mem::take(&mut started);
                let idle = starts.is_empty() && completions.is_empty();
                Exchange {
                    request_id: Uuid::new_v4(),
                    boot_id,
                    max: slots - starts.len() as u32,
                    wait_s: if idle { 5 } else { 0 },
                    starts,
                    completions,
                    start_leased: !start_items,
                    ..Exchange::default()
                }
            }
        };
        let sent = std::time::Instant::now();
        let answered = client.exchange(&exchange).await;
        if let Some(log) = &slow_log {
            note_if_slow(log, &exchange, sent.elapsed());
        }
        match answered {
            Ok(answer) => {
                for (item, result) in exchange.starts.iter().zip(&answer.starts) {
                    if result.result == ItemResult::Done {
                        started.push(CompletionItem::succeeded(item.task_id, item.lease_id));
                    }
                }
                for task in &answer.tasks {
                    if task.started {
                        started.push(CompletionItem::succeeded(task.id, task.lease_id));
                    } else {
                        leased.push(StartItem {
                            task_id: task.id,
                            lease_id: task.lease_id,
                            traceparent: None,
                        });
                    }
                }
            }
            Err(e) => {
                eprintln!("protocol runner: exchange failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                resend = Some(Exchange {
                    retry: true,
                    ..exchange
                });
            }
        }
    }
}

/// Appends an exchange that carried work and took longer than [`SLOW`] to `log`.
fn note_if_slow(log: &std::ffi::OsStr, exchange: &Exchange, took: Duration) {
    if exchange.wait_s > 0 || took < SLOW {
        return;
    }
    use std::io::Write;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // One write per line: the runners append to the same file, and an append of one
    // buffer is not interleaved with another's.
    let line = format!("{} {}\n", now.as_millis(), took.as_millis());
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = file.write_all(line.as_bytes());
    }
}
