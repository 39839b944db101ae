//! Process-wide log output: human-readable by default, JSON lines with `--log-format json`,
//! filtered by `RUST_LOG` (default `info`).
//!
//! One layer, so the filter is global. (A per-layer `EnvFilter` with mixed levels, e.g.
//! `info,baton=debug`, was seen to drop events here; when trace export joins as a second
//! layer, give it its own filter — deps.md pitfall 7 — and test both with that mix.)

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Human => registry.with(fmt).init(),
        LogFormat::Json => registry.with(fmt.json()).init(),
    }
}
