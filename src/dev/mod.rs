//! `baton dev`: a local cluster for newcomers.

#[derive(Debug, clap::Args)]
pub struct DevArgs {}

pub async fn run(_args: DevArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("baton dev is being built")
}
