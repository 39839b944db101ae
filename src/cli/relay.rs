//! `baton relay` (hidden): a sandboxed runner's one way out (docs/dynamic-runners.md).
//! A sandbox has a network of its own with nothing in it; one relay inside listens on its
//! loopback and passes each connection through a Unix socket in the runner's folder to a
//! relay outside, which passes it on to the server's address and nowhere else. The bytes
//! are passed as they are: TLS, if any, runs end to end.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;

#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// Inside the sandbox: accept TCP connections here...
    #[arg(long, requires = "to_unix", conflicts_with = "listen_unix")]
    listen_tcp: Option<SocketAddr>,
    /// ...and pass each to this Unix socket.
    #[arg(long)]
    to_unix: Option<PathBuf>,
    /// Outside: accept connections on this Unix socket...
    #[arg(long, requires = "to_tcp")]
    listen_unix: Option<PathBuf>,
    /// ...and pass each to this address (`host:port`).
    #[arg(long)]
    to_tcp: Option<String>,
}

pub async fn run(args: RelayArgs) -> anyhow::Result<ExitCode> {
    match args {
        RelayArgs {
            listen_tcp: Some(listen),
            to_unix: Some(to),
            ..
        } => {
            let listener = TcpListener::bind(listen).await?;
            let room = Arc::new(Semaphore::new(MAX_CONNECTIONS));
            loop {
                // A connection waits in the backlog until one closes: a task opening
                // connections without end holds the relay's descriptors no further.
                let turn = room.clone().acquire_owned().await?;
                let Some(inbound) = accepted(listener.accept().await).await else {
                    continue;
                };
                let to = to.clone();
                tokio::spawn(async move {
                    pass(inbound, UnixStream::connect(to).await).await;
                    drop(turn);
                });
            }
        }
        RelayArgs {
            listen_unix: Some(listen),
            to_tcp: Some(to),
            ..
        } => {
            let _ = std::fs::remove_file(&listen);
            let listener = UnixListener::bind(&listen)?;
            // Its owner's alone: the runner inside is root, a task is not.
            std::fs::set_permissions(&listen, std::fs::Permissions::from_mode(0o600))?;
            loop {
                let Some(inbound) = accepted(listener.accept().await).await else {
                    continue;
                };
                let to = to.clone();
                tokio::spawn(async move { pass(inbound, TcpStream::connect(to).await).await });
            }
        }
        _ => anyhow::bail!("give --listen-tcp with --to-unix, or --listen-unix with --to-tcp"),
    }
}

/// The most connections the relay inside passes at once: the runner needs a few.
const MAX_CONNECTIONS: usize = 64;

/// An accepted connection; a failed accept (out of file descriptors: a task opening
/// connections without end) is waited out, never the relay's end.
async fn accepted<S, A>(accept: std::io::Result<(S, A)>) -> Option<S> {
    match accept {
        Ok((stream, _)) => Some(stream),
        Err(e) => {
            tracing::warn!(error = %e, "relay: accept failed");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            None
        }
    }
}

/// Copies both ways until either side closes; a failed connect drops the inbound one.
async fn pass<A, B>(mut inbound: A, outbound: std::io::Result<B>)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    if let Ok(mut outbound) = outbound {
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    }
}
