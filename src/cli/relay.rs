//! `baton relay` (hidden): a sandboxed runner's one way out (docs/dynamic-runners.md).
//! A sandbox has a network of its own with nothing in it; one relay inside listens on its
//! loopback and passes each connection through a Unix socket in the runner's folder to a
//! relay outside, which passes it on to the server's address and nowhere else. The bytes
//! are passed as they are: TLS, if any, runs end to end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

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
            loop {
                let (inbound, _) = listener.accept().await?;
                let to = to.clone();
                tokio::spawn(async move { pass(inbound, UnixStream::connect(to).await).await });
            }
        }
        RelayArgs {
            listen_unix: Some(listen),
            to_tcp: Some(to),
            ..
        } => {
            let _ = std::fs::remove_file(&listen);
            let listener = UnixListener::bind(&listen)?;
            loop {
                let (inbound, _) = listener.accept().await?;
                let to = to.clone();
                tokio::spawn(async move { pass(inbound, TcpStream::connect(to).await).await });
            }
        }
        _ => anyhow::bail!("give --listen-tcp with --to-unix, or --listen-unix with --to-tcp"),
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
