//! `baton runners …`, `baton token …`, `baton registration-token …`: the operator's
//! side of the API (docs/authorization.md says which token may do what).

use super::connect::{ClientArgs, print_json};
use baton_client::{CreateRegistrationToken, CreateToken, Scope};
use clap::{Args, Subcommand};
use std::io::Write;
use std::process::ExitCode;
use uuid::Uuid;

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// List registered runners: online or not, paused or not, tasks running.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a runner leasing new tasks; what it runs carries on.
    Pause(RunnerIdArgs),
    /// Let a paused runner lease again.
    Resume(RunnerIdArgs),
    /// Delete a runner: its token stops working and its running tasks are ended as lost
    /// (and retried if they may) once it is surely gone.
    Delete(RunnerIdArgs),
}

// What each command on one runner takes, so its id is asked and described the same way
// in each. (No doc comment: it would stand for the commands' own in their help.)
#[derive(Debug, Args)]
pub struct RunnerIdArgs {
    /// The runner's id.
    id: Uuid,
    #[command(flatten)]
    client: ClientArgs,
}

// What revoking takes, the same for an API token and a registration token. (No doc
// comment: it would stand for the commands' own in their help.)
#[derive(Debug, Args)]
pub struct TokenIdArgs {
    /// The token's id (from the list; never its secret).
    id: Uuid,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token; the secret is printed this once.
    Create {
        /// What the token is for, shown in listings.
        #[arg(long)]
        name: String,
        /// admin, submit or read (repeatable).
        #[arg(long = "scope", required = true, value_parser = parse_scope)]
        scopes: Vec<Scope>,
        /// Seconds until it stops working [default: never].
        #[arg(long)]
        expires_in_s: Option<i64>,
        /// The only queues it may submit to, comma-separated [default: any].
        #[arg(long, value_delimiter = ',')]
        queues: Option<Vec<String>>,
        /// The only labels its tasks may carry, comma-separated [default: any].
        #[arg(long, value_delimiter = ',')]
        labels: Option<Vec<String>>,
        /// The highest priority its tasks may carry [default: any].
        #[arg(long, allow_negative_numbers = true)]
        max_priority: Option<i32>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List API tokens (never their secrets).
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Revoke an API token: refused on its next request, on every node.
    Revoke(TokenIdArgs),
}

#[derive(Debug, Subcommand)]
pub enum RegistrationTokenCommand {
    /// Create a token runners register with; the secret is printed this once.
    Create {
        /// What it is for, shown in listings.
        #[arg(long)]
        name: Option<String>,
        /// Seconds until it expires [default: 86400, a day].
        #[arg(long)]
        expires_in_s: Option<i64>,
        /// How many runners may register with it [default: 1].
        #[arg(long)]
        uses: Option<i32>,
        /// The labels a runner registering with it may claim, comma-separated
        /// [default: any].
        #[arg(long, value_delimiter = ',')]
        labels: Option<Vec<String>>,
        /// The queues such a runner may serve, comma-separated; it must name some
        /// [default: any, every queue included].
        #[arg(long, value_delimiter = ',')]
        queues: Option<Vec<String>>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List registration tokens (never their secrets): uses left, expiry, limits.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Revoke a registration token: no runner registers with it any more.
    Revoke(TokenIdArgs),
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?} is not a scope: admin, submit or read"))
}

pub async fn runners(cmd: RunnersCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RunnersCommand::List { client } => {
            let list = client.client()?.runners().await?;
            let mut out = std::io::stdout().lock();
            for r in &list.runners {
                let state = match (r.online, r.paused) {
                    (true, false) => "online",
                    (true, true) => "paused",
                    (false, false) => "offline",
                    (false, true) => "offline,paused",
                };
                writeln!(
                    out,
                    "{}  {:<20}  {:<14}  running={}/{}  labels={}",
                    r.id,
                    r.name,
                    state,
                    r.running,
                    r.capacity,
                    r.labels.join(",")
                )?;
            }
        }
        RunnersCommand::Pause(RunnerIdArgs { id, client }) => {
            print_json(&client.client()?.runner_pause(id.into(), true).await?)?;
        }
        RunnersCommand::Resume(RunnerIdArgs { id, client }) => {
            print_json(&client.client()?.runner_pause(id.into(), false).await?)?;
        }
        RunnersCommand::Delete(RunnerIdArgs { id, client }) => {
            client.client()?.runner_delete(id.into()).await?;
            eprintln!("runner {id} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn tokens(cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TokenCommand::Create {
            name,
            scopes,
            expires_in_s,
            queues,
            labels,
            max_priority,
            client,
        } => {
            let made = client
                .client()?
                .token_create(&CreateToken {
                    name,
                    scopes,
                    expires_in_s,
                    queues,
                    labels,
                    max_priority,
                })
                .await?;
            print_json(&made)?;
        }
        TokenCommand::List { client } => print_json(&client.client()?.tokens().await?)?,
        TokenCommand::Revoke(TokenIdArgs { id, client }) => {
            client.client()?.token_revoke(id).await?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn registration_tokens(cmd: RegistrationTokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RegistrationTokenCommand::Create {
            name,
            expires_in_s,
            uses,
            labels,
            queues,
            client,
        } => {
            let made = client
                .client()?
                .registration_token_create(&CreateRegistrationToken {
                    name,
                    expires_in_s,
                    uses,
                    labels,
                    queues,
                })
                .await?;
            print_json(&made)?;
        }
        RegistrationTokenCommand::List { client } => {
            print_json(&client.client()?.registration_tokens().await?)?;
        }
        RegistrationTokenCommand::Revoke(TokenIdArgs { id, client }) => {
            client.client()?.registration_token_revoke(id).await?;
            eprintln!("registration token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}
