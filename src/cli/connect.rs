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

/// How a list prints: a table for people, or the API's own JSON for scripts.
#[derive(Debug, Args)]
pub struct ListOutput {
    /// text: a table under a header, times in local time; json: the API's answer as it
    /// is (RFC 3339 times, whole ids).
    #[arg(long, short, value_enum, default_value_t)]
    pub output: Output,
    /// Show whole ids in the table, not their last 12 characters (which every command
    /// takes too).
    #[arg(long)]
    pub full_ids: bool,
}

impl ListOutput {
    /// Prints `list`: its JSON, or the table `table` draws of it.
    pub fn print<T: serde::Serialize>(
        &self,
        list: &T,
        table: impl FnOnce(&T, &ListOutput) -> super::table::Table,
    ) -> anyhow::Result<()> {
        match self.output {
            Output::Json => print_json(list),
            Output::Text => Ok(table(list, self)
                .write(&mut std::io::stdout().lock(), super::table::colour_wanted())?),
        }
    }

    /// An id as the table shows it.
    pub fn id(&self, id: uuid::Uuid) -> String {
        match self.full_ids {
            true => id.to_string(),
            false => baton_client::short_id(id),
        }
    }
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

/// What to say instead of a transport error that is no server at the address: the
/// address once, why, and the setting that fixes it.
pub fn no_server(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let ClientError::Transport(e) = error.downcast_ref::<ClientError>()? else {
        return None;
    };
    if !e.is_connect() {
        return None;
    }
    let url = e.url().map(|u| u.origin().ascii_serialization());
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    Some(format!(
        "no server at {}: {} — is `baton dev` running? Set BATON_SERVER (or --server) to a node or the load balancer",
        url.as_deref().unwrap_or("the server's address"),
        cause.to_string().to_lowercase()
    ))
}

/// A line naming the fix for a token the server does not take.
pub fn hint(error: &anyhow::Error) -> Option<String> {
    let client = error
        .chain()
        .find_map(|e| e.downcast_ref::<ClientError>())?;
    match client {
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
