//! Holding a Redis replica back from its master, so a failover loses writes: what the
//! drill needs to show that a Sentinel or Cluster failover losing its master's last,
//! unreplicated writes breaks no promise. Killing a master whose replica is in step loses
//! almost nothing on one machine (the replica has read all but the last microseconds), so
//! the replica is first told a password its master does not know and its link dropped:
//! it cannot sync again, and every write the master takes from then on is its alone.

use anyhow::Context;
use std::time::Duration;

/// A connection to the Redis on `port`, given up after 2 s.
pub async fn connect(port: u16) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .with_context(|| format!("connecting to the redis on port {port}"))?
    .map_err(Into::into)
}

/// The password a held replica offers its master: the master asks for none, so the
/// replica's handshake fails and it tries again, and fails, until it is released.
const WRONG_PASSWORD: &str = "held-back-by-the-drill";

/// Stops the replica on `port` following its master (see the module's doc).
pub async fn hold(replica: u16) -> anyhow::Result<()> {
    let mut conn = connect(replica).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("masterauth")
        .arg(WRONG_PASSWORD)
        .query_async(&mut conn)
        .await?;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("master")
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// Lets the replica on `port` sync with a master again.
pub async fn release(replica: u16) -> anyhow::Result<()> {
    let mut conn = connect(replica).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("masterauth")
        .arg("")
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// How far the server on `port` is in its replication stream (`master_repl_offset`).
pub async fn offset(port: u16) -> anyhow::Result<i64> {
    let mut conn = connect(port).await?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no master_repl_offset in INFO replication")
}
