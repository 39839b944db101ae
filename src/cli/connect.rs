//! What every API command needs: where the cluster is, which token to present, how to
//! print an answer, and what to say when the cluster cannot be reached.

use baton_client::{Client, ClientError, StatusCode};
use clap::Args;
use std::io::Write;

/// How a command prints its answer: for people, or for scripts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Any node, or the load balancer.
    #[arg(
        long,
        env = "BATON_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    server: String,
    /// API token.
    #[arg(long, env = "BATON_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
}

impl ClientArgs {
    pub fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(&self.server, self.token.clone())?)
    }
}

/// A line naming the fix, for the errors a newcomer meets first: no server where the CLI
/// looks, or a token the server does not take.
pub fn hint(error: &anyhow::Error) -> Option<String> {
    let client = error
        .chain()
        .find_map(|e| e.downcast_ref::<ClientError>())?;
    match client {
        ClientError::Transport(e) if e.is_connect() => {
            let url = e.url().map(|u| u.origin().ascii_serialization());
            Some(format!(
                "no server at {} — is `baton dev` running? Set BATON_SERVER (or --server) to a node or the load balancer",
                url.as_deref().unwrap_or("the server's address")
            ))
        }
        ClientError::Api(e) if e.status == StatusCode::UNAUTHORIZED => Some(
            "the server did not take the token — set BATON_TOKEN (or --token) to an API token; `baton dev` prints its own"
                .to_string(),
        ),
        _ => None,
    }
}

pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(value)?
    )?;
    Ok(())
}
