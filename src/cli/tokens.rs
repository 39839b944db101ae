//! `baton token …` and `baton registration-token …`: who may call the API, and with what
//! runners join (docs/authorization.md says which token may do what). A secret is printed
//! once, at its creation, alone on stdout so that a script can keep it.

use super::connect::{ClientArgs, ListOutput, Output, print_json};
use super::resolve;
use super::table::Table;
use super::when;
use baton_client::{CreateRegistrationToken, CreateToken, RegistrationTokenList, Scope, TokenList};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use std::io::Write;
use std::process::ExitCode;

// What revoking takes, the same for an API token and a registration token. (No doc
// comment: it would stand for the commands' own in their help.)
#[derive(Debug, Args)]
pub struct TokenIdArgs {
    /// The token's id or short id, as the list shows it (never its secret).
    id: String,
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
        /// admin, submit or read (repeatable, or comma-separated).
        #[arg(long = "scope", value_name = "SCOPE", required = true, value_parser = parse_scope, value_delimiter = ',', action = clap::ArgAction::Append)]
        scopes: Vec<Scope>,
        /// Seconds until it stops working [default: never].
        #[arg(long)]
        expires_in_s: Option<i64>,
        /// The only queues it may submit to (repeatable, or comma-separated) [default: any].
        #[arg(long, value_delimiter = ',', action = clap::ArgAction::Append)]
        queues: Option<Vec<String>>,
        /// The only labels its tasks may carry (repeatable, or comma-separated) [default: any].
        #[arg(long, value_delimiter = ',', action = clap::ArgAction::Append)]
        labels: Option<Vec<String>>,
        /// The highest priority its tasks may carry [default: any].
        #[arg(long, allow_negative_numbers = true)]
        max_priority: Option<i32>,
        /// text: the secret alone (its id on stderr); json: the token with its secret.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List API tokens (never their secrets): scopes, active, revoked or expired, limits.
    List {
        #[command(flatten)]
        output: ListOutput,
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
        /// The labels a runner registering with it may claim (repeatable, or
        /// comma-separated) [default: any].
        #[arg(long, value_delimiter = ',', action = clap::ArgAction::Append)]
        labels: Option<Vec<String>>,
        /// The queues such a runner may serve (repeatable, or comma-separated); it must
        /// name some [default: any, every queue included].
        #[arg(long, value_delimiter = ',', action = clap::ArgAction::Append)]
        queues: Option<Vec<String>>,
        /// text: the secret alone (its id on stderr); json: the token with its secret.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List registration tokens (never their secrets): uses left, expiry, limits.
    List {
        #[command(flatten)]
        output: ListOutput,
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

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Admin => "admin",
        Scope::Submit => "submit",
        Scope::Read => "read",
    }
}

/// A token's state in one word: `revoked`, `expired`, or `active`.
fn state(revoked_at: Option<DateTime<Utc>>, expires_at: Option<DateTime<Utc>>) -> &'static str {
    match (revoked_at, expires_at) {
        (Some(_), _) => "revoked",
        (None, Some(at)) if at <= Utc::now() => "expired",
        _ => "active",
    }
}

fn limits(list: &Option<Vec<String>>) -> String {
    list.as_ref()
        .map_or_else(|| "any".to_string(), |l| l.join(","))
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
            output,
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
            match output {
                Output::Json => print_json(&made)?,
                Output::Text => {
                    writeln!(std::io::stdout(), "{}", made.token)?;
                    eprintln!(
                        "token {} ({:?}) created; its secret, above, is shown this once",
                        made.view.id, made.view.name
                    );
                }
            }
        }
        TokenCommand::List { output, client } => {
            let list = client.client()?.tokens().await?;
            output.print(&list, token_table)?;
        }
        TokenCommand::Revoke(TokenIdArgs { id, client }) => {
            let client = client.client()?;
            let id = resolve::token(&client, &id).await?;
            client.token_revoke(id).await?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn token_table(list: &TokenList, output: &ListOutput) -> Table {
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "SCOPES",
        "STATE",
        "QUEUES",
        "LABELS",
        "MAX PRIORITY",
        "CREATED",
        "EXPIRES",
    ]);
    for t in &list.tokens {
        let scopes: Vec<&str> = t.scopes.iter().map(|s| scope_name(*s)).collect();
        table.push(vec![
            output.id(t.id),
            t.name.clone(),
            scopes.join(","),
            state(t.revoked_at, t.expires_at).to_string(),
            limits(&t.queues),
            limits(&t.labels),
            t.max_priority
                .map_or_else(|| "any".to_string(), |p| p.to_string()),
            when::local(t.created_at),
            when::local_or_dash(t.expires_at),
        ]);
    }
    table
}

pub async fn registration_tokens(cmd: RegistrationTokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RegistrationTokenCommand::Create {
            name,
            expires_in_s,
            uses,
            labels,
            queues,
            output,
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
            match output {
                Output::Json => print_json(&made)?,
                Output::Text => {
                    writeln!(std::io::stdout(), "{}", made.token)?;
                    eprintln!(
                        "registration token {} created; its secret, above, is shown this once",
                        made.view.id
                    );
                }
            }
        }
        RegistrationTokenCommand::List { output, client } => {
            let list = client.client()?.registration_tokens().await?;
            output.print(&list, registration_table)?;
        }
        RegistrationTokenCommand::Revoke(TokenIdArgs { id, client }) => {
            let client = client.client()?;
            let id = resolve::registration_token(&client, &id).await?;
            client.registration_token_revoke(id).await?;
            eprintln!("registration token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn registration_table(list: &RegistrationTokenList, output: &ListOutput) -> Table {
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "STATE",
        "USES LEFT",
        "LABELS",
        "QUEUES",
        "CREATED",
        "EXPIRES",
    ]);
    for t in &list.registration_tokens {
        let state = match (state(t.revoked_at, t.expires_at), t.uses_left) {
            ("active", Some(0)) => "used-up",
            (state, _) => state,
        };
        table.push(vec![
            output.id(t.id),
            t.name.clone().unwrap_or_else(|| "-".to_string()),
            state.to_string(),
            t.uses_left
                .map_or_else(|| "any".to_string(), |n| n.to_string()),
            limits(&t.labels),
            limits(&t.queues),
            when::local(t.created_at),
            when::local_or_dash(t.expires_at),
        ]);
    }
    table
}
