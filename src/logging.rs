//! Process-wide log output: human-readable by default, JSON lines with `--log-format json`.
//! Filtered by `RUST_LOG` (default `info`), per layer, so later layers (traces) keep their
//! own filters.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

pub fn init(format: LogFormat) {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Human => fmt.with_filter(filter()).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter()).boxed(),
    };
    tracing_subscriber::registry().with(layer).init();
}
