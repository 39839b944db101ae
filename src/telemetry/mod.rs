//! Process-wide telemetry: log output (human by default, JSON lines with `--log-format
//! json`, filtered by `RUST_LOG`, default `info`) and, when an OTLP endpoint is set, trace
//! export. With no endpoint there is no OpenTelemetry layer at all: nothing is exported
//! and nothing slows down.
//!
//! Filters: the log output and the trace export each get their own (shared/deps.md
//! pitfall 7: a global filter set to `warn` would export no spans at all). Both are
//! static `Targets` filters: `RUST_LOG` takes `target=level` directives. A per-layer
//! `EnvFilter` with mixed levels (`info,baton=debug`) was seen to drop events and to
//! lose spans at random (their close never reached the trace layer).

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

/// Logs only: the commands that serve nothing (task, runners, dev, chaos...).
pub fn init_logs(format: LogFormat) {
    let registry = tracing_subscriber::registry();
    let _ = match format {
        LogFormat::Human => registry
            .with(fmt_layer().with_filter(log_filter()))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt_layer()
                    .event_format(json_log::JsonWithTrace)
                    .with_filter(log_filter()),
            )
            .try_init(),
    };
}

/// What the trace layer sees: everything the log output sees (a trace layer seeing less
/// than another layer was seen to lose spans), plus Baton's spans at info and above
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
        let level = [LevelFilter::TRACE, LevelFilter::DEBUG]
            .into_iter()
            .find(|level| {
                level
                    .into_level()
                    .is_some_and(|l| logs.would_enable(target, &l))
            })
            .unwrap_or(LevelFilter::INFO);
        filter.with_target(target, level)
    })
}

fn fmt_layer<S>() -> tracing_subscriber::fmt::Layer<
    S,
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format,
    fn() -> std::io::Stderr,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer().with_writer(std::io::stderr as fn() -> std::io::Stderr)
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
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "baton");
    let exported = exported_filter(log_filter());
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);
    // One global filter (what either output wants), so no span exists that one layer
    // sees and the other does not; the log output narrows it down for itself.
    let registry = tracing_subscriber::registry().with(exported).with(otel);
    match format {
        LogFormat::Human => registry
            .with(fmt_layer().with_filter(log_filter()))
            .try_init()?,
        LogFormat::Json => registry
            .with(
                fmt_layer()
                    .event_format(json_log::JsonWithTrace)
                    .with_filter(log_filter()),
            )
            .try_init()?,
    }
    tracing::info!(endpoint = %traces.endpoint_display(), service.name = service.name, "exporting traces");
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}
