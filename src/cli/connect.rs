//! What every API command needs: where the cluster is, which token to present, and how
//! to print an answer.

use baton_client::Client;
use clap::Args;
use std::io::Write;

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

pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(value)?
    )?;
    Ok(())
}
