//! A TCP fault proxy: one process's link to another (a node to Redis, a node to Postgres,
//! a runner to the load balancer) runs through one of these, and the drill cuts, half-cuts
//! or slows that link alone while everything else keeps talking.
//!
//! Why a proxy and not network namespaces with nftables rules: every process of the drill
//! shares this machine's loopback, and a proxy per link cuts exactly that link without
//! root, without moving processes into namespaces, and the same way on a laptop and in CI.
//! It behaves as a partition does to the processes on either side: nothing they send
//! arrives and no error says why, so only their own timeouts tell them. Bytes held while
//! a link is cut are delivered when it heals, as TCP would retransmit them; a connection
//! either side gave up on meanwhile is closed on to the other.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the process that connects to the one it connects to.
    ToUpstream,
    /// The answers.
    ToClient,
}

/// What the link does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Everything gets through, at once.
    Open,
    /// Nothing gets through either way. Connections stay open, and new ones are accepted
    /// and held, as when packets are dropped: the processes find out by timing out.
    Cut,
    /// Only one way gets through: requests arrive and answers are lost, or the reverse.
    OnlyTo(Direction),
    /// Nobody is there: connections are closed as they arrive, and open ones as soon as
    /// either side moves, as when the server is down and its port refuses. Clients find
    /// out at once, and back off.
    Refuse,
    /// Every chunk waits `delay`, plus up to `jitter` more, in order.
    Slow {
        /// What every chunk waits at least.
        delay: Duration,
        /// The most a chunk waits beyond `delay`, drawn anew for each.
        jitter: Duration,
    },
}

impl Link {
    fn passes(self, direction: Direction) -> bool {
        match self {
            Link::Open | Link::Slow { .. } => true,
            Link::Cut | Link::Refuse => false,
            Link::OnlyTo(way) => way == direction,
        }
    }

    fn delay(self) -> Duration {
        match self {
            Link::Slow { delay, jitter } => delay + jitter.mul_f64(rand::random::<f64>()),
            _ => Duration::ZERO,
        }
    }
}

/// A TCP proxy on a loopback port, in front of one server, whose [`Link`] the drill sets.
pub struct FaultProxy {
    port: u16,
    link: Arc<watch::Sender<Link>>,
    /// Counts every change, so a heal planned for one fault leaves a later one alone;
    /// held while the link changes, so a heal and a new fault cannot interleave.
    changes: Mutex<u64>,
    accepting: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: String) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let link = Arc::new(watch::Sender::new(Link::Open));
        let accepting = tokio::spawn(accept(listener, upstream, link.clone()));
        Ok(FaultProxy {
            port,
            link,
            changes: Mutex::new(0),
            accepting,
        })
    }

    /// A proxy in front of the server a URL names (`redis://`, `postgres://`, `http://`).
    pub async fn in_front_of(url: &str) -> std::io::Result<FaultProxy> {
        FaultProxy::start(authority(url)?).await
    }

    /// The loopback port it listens on: what a client connects to instead of the server.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the link; returns the change's number, for [`FaultProxy::open_if_still`].
    pub fn set(&self, link: Link) -> u64 {
        let mut changes = self.changes.lock().expect("proxy lock");
        *changes += 1;
        self.link.send_replace(link);
        *changes
    }

    /// Opens the link, unless it changed again after change `change`.
    pub fn open_if_still(&self, change: u64) {
        let mut changes = self.changes.lock().expect("proxy lock");
        if *changes == change {
            *changes += 1;
            self.link.send_replace(Link::Open);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// `host:port` of a URL, the scheme's usual port when it names none.
fn authority(url: &str) -> std::io::Result<String> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| invalid(format!("{url} names no host")))?;
    let port = parsed.port_or_known_default().or(match parsed.scheme() {
        "redis" => Some(6379),
        "postgres" | "postgresql" => Some(5432),
        _ => None,
    });
    let port = port.ok_or_else(|| invalid(format!("{url} names no port")))?;
    Ok(format!("{host}:{port}"))
}

async fn accept(listener: TcpListener, upstream: String, link: Arc<watch::Sender<Link>>) {
    while let Ok((client, _)) = listener.accept().await {
        if *link.borrow() == Link::Refuse {
            drop(client);
            continue;
        }
        let (upstream, link) = (upstream.clone(), link.clone());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pump(
                    client_read,
                    server_write,
                    Direction::ToUpstream,
                    link.subscribe()
                ),
                pump(
                    server_read,
                    client_write,
                    Direction::ToClient,
                    link.subscribe()
                ),
            );
        });
    }
}

/// Copies one way, each chunk only once the link lets it through.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            },
            // Dropping both halves closes the connection.
            _ = link.wait_for(|l| *l == Link::Refuse) => return,
        };
        let Ok(now) = link
            .wait_for(|l| l.passes(direction) || *l == Link::Refuse)
            .await
            .map(|l| *l)
        else {
            return;
        };
        if now == Link::Refuse {
            return;
        }
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        let delay = now.delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
