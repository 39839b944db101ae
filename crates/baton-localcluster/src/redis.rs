//! A private, throwaway `redis-server`: loopback only, no persistence.

use super::processes::{StopPolicy, Supervised};
use super::readiness::wait_until;
use super::workdir::WorkDir;
use nix::sys::signal::Signal;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

const READY_WITHIN: Duration = Duration::from_secs(15);

/// The URL of the Redis on `port`.
pub fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Starts `redis-server` on `port`, its folder and log in `work`.
pub fn spawn(work: &WorkDir, port: u16) -> anyhow::Result<Supervised> {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Nothing here is worth keeping between runs, and snapshots would only slow it.
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(work.join("redis"));
    Supervised::spawn(
        "redis",
        command,
        &work.log("redis"),
        StopPolicy::signal(Signal::SIGTERM),
    )
    .map_err(|e| e.context("is redis-server installed? ./scripts/dev.sh installs it"))
}

/// Waits until it answers PING: only then does a node's first connection succeed.
pub async fn wait_ready(redis: &mut Supervised, port: u16) -> anyhow::Result<()> {
    wait_until(redis, "redis to answer PING", READY_WITHIN, || ping(port)).await
}

/// One inline PING; true on `+PONG`. Raw RESP keeps the redis crate out of the binary.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).await?;
        std::io::Result::Ok(&answer == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

/// Whether a write to `key` goes through on `conn`: what says a failover is over, from
/// the side of a client (a master that answers reads may still refuse writes).
pub async fn takes_a_write(conn: &mut impl redis::aio::ConnectionLike, key: &str) -> bool {
    redis::cmd("SET")
        .arg(key)
        .arg(1)
        .query_async::<()>(conn)
        .await
        .is_ok()
}
