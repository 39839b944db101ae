//! The HTTP server's own bounds, under a slowloris attack: connections that send a
//! request head a byte at a time, or part of one and then nothing, are closed once
//! `--http-header-read-timeout-ms` has passed; a kept-alive connection left idle is
//! closed the same way; no more than `--http-max-connections` are open at once (the rest
//! wait in the kernel's backlog), so the node's memory stays bounded while an honest
//! client is still served.

use baton_localcluster::testing as support;

use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CAP: usize = 32;
const HEADER_TIMEOUT_MS: u64 = 1000;
const ATTACKERS: usize = 400;

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The node's `baton_http_open_connections` gauge.
async fn open_connections(url: &str) -> f64 {
    scraped(url, "baton_http_open_connections").await
}

/// Whether the server closed `stream` (EOF or reset) within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // Whatever it says (a 408, say), it must then close.
            Ok(Ok(_)) => continue,
        }
    }
}

/// A slowloris connection: part of a head, then a byte now and then, never the end.
async fn slowloris(addr: String, stop: tokio::sync::watch::Receiver<bool>) -> Option<Duration> {
    let mut stream = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(&addr))
        .await
        .ok()?
        .ok()?;
    let opened = Instant::now();
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .is_err()
    {
        return Some(opened.elapsed());
    }
    let mut buf = [0u8; 256];
    loop {
        if *stop.borrow() {
            return None;
        }
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Some(opened.elapsed()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(Duration::from_millis(300)) => {
                if stream.write_all(b"X").await.is_err() {
                    return Some(opened.elapsed());
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slowloris_attack_is_dropped_and_bounded() {
    let env = TestEnv::new("http-limits").await;
    let node = env
        .node_with(&[
            "--http-max-connections",
            &CAP.to_string(),
            "--http-header-read-timeout-ms",
            &HEADER_TIMEOUT_MS.to_string(),
        ])
        .await;
    let pid = node.pid();
    let before_kib = rss_kib(pid);

    // A kept-alive connection that goes quiet after its answer is closed too.
    let mut idle = TcpStream::connect(addr(&node.url)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 512];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"),
        "answered first"
    );
    assert!(
        closed_within(&mut idle, Duration::from_millis(HEADER_TIMEOUT_MS * 5)).await,
        "an idle kept-alive connection is closed after the header timeout"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let attackers: Vec<_> = (0..ATTACKERS)
        .map(|_| tokio::spawn(slowloris(addr(&node.url), stop_rx.clone())))
        .collect();

    // While the attack goes on: never more open than the cap, and an honest client is
    // served (its connection waits for a place, as the attackers' are dropped).
    let mut most_open = 0.0f64;
    let mut peak_kib = 0;
    let honest = tokio::spawn({
        let url = node.url.clone();
        async move {
            let started = Instant::now();
            let status = reqwest::Client::new()
                .get(format!("{url}/healthz"))
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .map(|r| r.status().as_u16());
            (status, started.elapsed())
        }
    });
    // Sampled until the honest request is answered (at most a minute).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        // The metrics request itself waits for a place, and is counted.
        most_open = most_open.max(open_connections(&node.url).await);
        peak_kib = peak_kib.max(rss_kib(pid));
        if honest.is_finished() || tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    let (status, took) = honest.await.unwrap();
    assert_eq!(status.ok(), Some(200), "the honest client is served");
    assert!(
        most_open <= CAP as f64,
        "at most {CAP} connections open at once, saw {most_open}"
    );

    // Every attacker is dropped by the server, a wave per header timeout.
    let mut dropped = 0;
    let mut longest = Duration::ZERO;
    let deadline = Duration::from_secs(60);
    for attacker in attackers {
        if let Ok(Ok(Some(held))) = tokio::time::timeout(deadline, attacker).await {
            dropped += 1;
            longest = longest.max(held);
        }
    }
    let _ = stop_tx.send(true);
    assert_eq!(
        dropped, ATTACKERS,
        "every slowloris connection was closed by the server"
    );
    let grown_kib = peak_kib.saturating_sub(before_kib);
    println!(
        "{ATTACKERS} slowloris connections, cap {CAP}, header timeout {HEADER_TIMEOUT_MS} ms: \
         the honest request took {took:?}, most open {most_open}, the slowest attacker was \
         dropped after {longest:?}, the node's memory grew by {grown_kib} KiB \
         (from {before_kib} KiB)"
    );
    assert!(
        grown_kib < 64 * 1024,
        "the node's memory stays bounded: grew {grown_kib} KiB"
    );
}

/// A body sent a byte at a time, each in good time, still has to arrive whole within
/// `--http-body-read-timeout-ms`: the request is answered 408 then, and nothing is
/// written. Before this bound, such a request held its connection (and its handler) for
/// as long as the client kept dripping.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_sent_a_byte_at_a_time_is_answered_408_in_time() {
    let env = TestEnv::new("http-slow-body").await;
    let node = env
        .node_with(&["--http-body-read-timeout-ms", "1000"])
        .await;
    let mut stream = TcpStream::connect(addr(&node.url)).await.unwrap();
    let head = format!(
        "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let drip = tokio::spawn(async move {
        // 4 KiB at a byte per 100 ms would take seven minutes.
        while writer.write_all(b" ").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !String::from_utf8_lossy(&answer).contains("body_timeout") {
        match tokio::time::timeout_at(deadline, reader.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            other => panic!(
                "no answer after {:?} ({other:?}): {}",
                started.elapsed(),
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    let took = started.elapsed();
    drip.abort();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        took < Duration::from_secs(5),
        "answered after {took:?}, the bound is 1 s"
    );
    assert_eq!(env.count_tasks().await, 0, "nothing written");
    // An honest submit on the same node is unaffected.
    user_client(&node.url)
        .submit(&baton_client::SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
}
