//! Process-wide telemetry: log output (human by default, JSON lines with `--log-format
//! json`, filtered by `RUST_LOG`, default `info`) and, when an OTLP endpoint is set, trace
//! export. With no endpoint there is no OpenTelemetry layer at all: nothing is exported
//! and nothing slows down.
//!
//! Filters: with traces exported, one global filter passes what either output wants —
//! `RUST_LOG`, plus Baton's spans at info (shared/deps.md pitfall 7: `RUST_LOG=warn`
//! alone would export no spans) — and the log output skips the events `RUST_LOG` does not
//! ask for. Both are static `Targets` filters: `RUST_LOG` takes `target=level`
//! directives. No per-layer filter anywhere: under them, layers that disagree were seen
//! to drop events and to lose spans at random (their close never reached the trace
//! layer), and even one filtered layer dropped events (`events_only.rs`).

mod events_only;
mod json_log;
mod traces;

pub use traces::TraceArgs;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

impl LogFormat {
    /// `BATON_LOG_FORMAT` for the commands that take no telemetry flags (the CLI, `dev`,
    /// `chaos`), so one setting in a shell's environment covers them too. Anything
    /// unreadable is `human`.
    pub fn from_env() -> LogFormat {
        std::env::var("BATON_LOG_FORMAT")
            .ok()
            .and_then(|v| clap::ValueEnum::from_str(&v, true).ok())
            .unwrap_or_default()
    }
}

/// How a long-running process (`serve`, `runner`) logs and exports traces: flags of those
/// commands only, under a heading of their own, out of the way of the CLI's.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Telemetry")]
pub struct TelemetryArgs {
    /// Log output format.
    #[arg(long, env = "BATON_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub traces: TraceArgs,
}

/// Who is exporting: `service.name` and the instance (a node id, a runner name).
pub struct Service<'a> {
    pub name: &'a str,
    pub instance: &'a str,
}

/// Keeps the trace pipeline alive; flushes what is buffered when dropped (shutdown).
#[must_use = "traces are flushed when the guard is dropped"]
pub struct TelemetryGuard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Flushes buffered spans off the async workers (the export blocks until sent).
    pub async fn flush(self) {
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Blocking: it waits for the batch exporter's last send — bounded, so a
            // collector that is gone cannot hold the exit past the orchestrator's grace.
            if let Err(e) = provider.shutdown_with_timeout(std::time::Duration::from_secs(3)) {
                eprintln!("baton: flushing traces: {e}");
            }
        }
    }
}

fn log_filter() -> Targets {
    let default = || Targets::new().with_default(LevelFilter::INFO);
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse().unwrap_or_else(|e| {
            eprintln!("baton: RUST_LOG={spec:?} is not a list of target=level directives ({e}); logging at info");
            default()
        }),
        _ => default(),
    }
}

/// The log output, in `format`, its events narrowed to what `RUST_LOG` asks for
/// ([`events_only`]).
fn log_layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    events_only::EventsOnly {
        inner: fmt_layer(format),
        filter: log_filter(),
    }
    .boxed()
}

/// The log output in `format`, unfiltered.
fn fmt_layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Human => layer.boxed(),
        LogFormat::Json => layer.event_format(json_log::JsonWithTrace).boxed(),
    }
}

/// Logs only: the commands that serve nothing (task, runners, dev, chaos...), and a node
/// that exports no traces. With one output the filter is global, not the log layer's
/// own: a per-layer filter was seen to drop events at random (a node's "rejoining under
/// a new id" warning, a runner's "task started"), its per-thread filter state left
/// behind by another event (tokio-rs/tracing#2704).
pub fn init_logs(format: LogFormat) {
    let _ = tracing_subscriber::registry()
        .with(log_filter())
        .with(fmt_layer(format))
        .try_init();
}

/// The global filter when traces are exported: what the log output sees (a trace layer
/// seeing less than another layer was seen to lose spans), plus Baton's spans at info
/// whatever `RUST_LOG` says.
fn exported_filter(logs: Targets) -> Targets {
    const TRACED: [&str; 5] = [
        "baton",
        "baton_server",
        "baton_runner",
        "baton_client",
        "tower_http",
    ];
    TRACED.into_iter().fold(logs.clone(), |filter, target| {
        if logs.would_enable(target, &tracing::Level::INFO) {
            filter
        } else {
            filter.with_target(target, LevelFilter::INFO)
        }
    })
}

/// Logs, and traces when `traces` names an endpoint. Call from within the Tokio runtime
/// (the gRPC exporter's channel lives on it).
pub fn init(
    format: LogFormat,
    traces: &TraceArgs,
    service: Service<'_>,
) -> anyhow::Result<TelemetryGuard> {
    let Some(provider) = traces::provider(traces, &service)? else {
        init_logs(format);
        return Ok(TelemetryGuard { provider: None });
    };
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "baton");
    // One global filter (what either output wants), so no span exists that one layer
    // sees and the other does not; the log output narrows it down for itself.
    tracing_subscriber::registry()
        .with(exported_filter(log_filter()))
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .with(log_layer(format))
        .try_init()?;
    tracing::info!(endpoint = %traces.endpoint_display(), service.name = service.name, "exporting traces");
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}
