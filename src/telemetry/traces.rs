//! The OTLP trace pipeline: where spans go (gRPC on 4317, or HTTP on 4318 as protobuf or
//! JSON — what Jaeger ingests), how many traces are kept, and who they come from.

use super::Service;
use anyhow::Context;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum OtlpProtocol {
    #[value(name = "grpc")]
    Grpc,
    #[default]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    #[value(name = "http/json")]
    HttpJson,
}

/// Trace export settings; the standard `OTEL_*` variables work as well as Baton's own.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// OTLP collector to send traces to, e.g. http://jaeger:4317 (gRPC) or
    /// http://jaeger:4318 (HTTP; `/v1/traces` is appended). Unset: no traces. Falls back
    /// to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), then OTEL_EXPORTER_OTLP_ENDPOINT.
    #[arg(long, env = "BATON_OTLP_ENDPOINT", global = true)]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        value_enum,
        default_value_t,
        global = true
    )]
    pub otlp_protocol: OtlpProtocol,
    /// Share of traces kept, 0.0–1.0; a trace begun elsewhere keeps its caller's choice.
    #[arg(
        long,
        env = "OTEL_TRACES_SAMPLER_ARG",
        default_value_t = 1.0,
        global = true
    )]
    pub trace_sample_ratio: f64,
}

impl TraceArgs {
    /// The collector URL for the chosen transport, if any is configured: the flag (a
    /// base URL), else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is, as the OTLP
    /// spec says), else `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL).
    fn endpoint(&self) -> Option<String> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let flag = self.otlp_endpoint.clone().filter(|v| !v.trim().is_empty());
        if flag.is_none()
            && let Some(exact) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        {
            return Some(exact);
        }
        let base = flag.or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
        Some(match self.otlp_protocol {
            OtlpProtocol::Grpc => base,
            _ if base.trim_end_matches('/').ends_with("/v1/traces") => base,
            _ => format!("{}/v1/traces", base.trim_end_matches('/')),
        })
    }

    pub fn endpoint_display(&self) -> String {
        self.endpoint().unwrap_or_default()
    }
}

/// The tracer provider, or `None` when no endpoint is configured.
pub fn provider(
    args: &TraceArgs,
    service: &Service<'_>,
) -> anyhow::Result<Option<SdkTracerProvider>> {
    let Some(endpoint) = args.endpoint() else {
        return Ok(None);
    };
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.trace_sample_ratio),
        "--trace-sample-ratio must be within 0.0 and 1.0, not {}",
        args.trace_sample_ratio
    );
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let exporter = match args.otlp_protocol {
        OtlpProtocol::Grpc => builder.with_tonic().with_endpoint(&endpoint).build(),
        OtlpProtocol::HttpProtobuf => builder
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&endpoint)
            .build(),
        OtlpProtocol::HttpJson => builder
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(&endpoint)
            .build(),
    }
    .with_context(|| format!("OTLP exporter for {endpoint}"))?;
    let name = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.name.to_string());
    let resource = Resource::builder()
        .with_service_name(name)
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", service.instance.to_string()),
        ])
        .build();
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                args.trace_sample_ratio,
            ))))
            .with_resource(resource)
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(endpoint: &str, protocol: OtlpProtocol) -> TraceArgs {
        TraceArgs {
            otlp_endpoint: Some(endpoint.into()),
            otlp_protocol: protocol,
            trace_sample_ratio: 1.0,
        }
    }

    #[test]
    fn http_endpoints_get_the_traces_path_once() {
        let http = OtlpProtocol::HttpProtobuf;
        assert_eq!(
            args("http://c:4318", http).endpoint().unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            args("http://c:4318/", http).endpoint().unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            args("http://c:4318/v1/traces", http).endpoint().unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            args("http://c:4317", OtlpProtocol::Grpc)
                .endpoint()
                .unwrap(),
            "http://c:4317"
        );
    }
}
