//! `baton serve` and `baton migrate`.

use crate::settings;
use baton_server::ServeConfig;
use baton_store::{Store, StoreOptions};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Every setting of the node; unset ones come from the file or the defaults.
#[derive(Debug, clap::Args, Serialize)]
pub struct ServeArgs {
    /// TOML settings file (keys as in `ServeConfig`, e.g. `node_ttl_ms`, `[limits]`).
    #[arg(long, env = "BATON_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "BATON_LISTEN")]
    listen: Option<SocketAddr>,
    /// Postgres URL [default: postgres://postgres@127.0.0.1:5432/baton].
    #[arg(long, env = "BATON_DATABASE_URL")]
    database_url: Option<String>,
    /// Redis URL [default: redis://127.0.0.1:6379].
    #[arg(long, env = "BATON_REDIS_URL")]
    redis_url: Option<String>,
    /// Prefix of every Redis key [default: {baton}:].
    #[arg(long, env = "BATON_REDIS_PREFIX")]
    redis_prefix: Option<String>,
    /// This node's id [default: random per start].
    #[arg(long, env = "BATON_NODE_ID")]
    node_id: Option<String>,
    /// Bootstrap API token (all scopes).
    #[arg(long, env = "BATON_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Bootstrap registration token for runners.
    #[arg(long, env = "BATON_REGISTRATION_TOKEN", hide_env_values = true)]
    registration_token: Option<String>,
    /// Do not apply migrations at start.
    #[arg(long, env = "BATON_NO_MIGRATE", num_args = 0..=1, default_missing_value = "true")]
    no_migrate: Option<bool>,
    /// Liveness key TTL in milliseconds [default: 10000].
    #[arg(long, env = "BATON_NODE_TTL_MS")]
    node_ttl_ms: Option<u64>,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config: ServeConfig = settings::load(args.config.as_deref(), &args)?;
    let node = baton_server::start(config).await?;
    println!(
        "baton node {} listening on http://{}",
        node.node_id, node.addr
    );
    let stop = node.shutdown_token();
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutdown requested");
        stop.cancel();
    });
    node.wait().await?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[arg(
        long,
        env = "BATON_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/baton"
    )]
    database_url: String,
}

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    Store::database_create_if_missing(&args.database_url).await?;
    let store = Store::connect_lazy(&args.database_url, &StoreOptions::default())?;
    store.migrate().await?;
    println!("migrations applied");
    Ok(ExitCode::SUCCESS)
}
