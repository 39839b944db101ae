//! The OTLP trace pipeline: where spans go (gRPC on 4317, or HTTP on 4318 as protobuf or
//! JSON — what Jaeger ingests), how many traces are kept, and who they come from.

use super::Service;
use anyhow::Context;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{ParentBasedSampler, Sampler, SdkTracerProvider};
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
    #[arg(long, env = "BATON_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value_t)]
    pub otlp_protocol: OtlpProtocol,
    /// Share of traces kept, 0.0–1.0, decided from the trace id, so every process of a
    /// trace decides alike.
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", default_value_t = 1.0)]
    pub trace_sample_ratio: f64,
    /// Keep every trace a caller marked sampled (its `traceparent`), past the ratio:
    /// for callers you trust, such as your own services. Otherwise a caller's mark is
    /// judged by the ratio like any trace, so no client can make this process export
    /// all of its requests.
    #[arg(long, env = "BATON_TRACE_TRUST_PARENT")]
    pub trace_trust_parent: bool,
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
            .with_sampler(sampler(args.trace_sample_ratio, args.trace_trust_parent))
            .with_resource(resource)
            .build(),
    ))
}

/// A span follows its parent in this process; a trace begun here, or by a caller whose
/// "sampled" mark is not trusted, is kept at `ratio`. A caller's "not sampled" stands:
/// it can only ask for less.
fn sampler(ratio: f64, trust_parent: bool) -> ParentBasedSampler {
    let by_ratio = || Sampler::TraceIdRatioBased(ratio);
    let sampler = Sampler::parent_based(by_ratio());
    if trust_parent {
        sampler
    } else {
        sampler.with_remote_parent_sampled(by_ratio())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};

    /// What `sampler` decides for a span whose parent is `remote` and marked `sampled`.
    fn decides(sampler: &ParentBasedSampler, remote: bool, sampled: bool) -> SamplingDecision {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        let parent = SpanContext::new(
            trace,
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            flags,
            remote,
            TraceState::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(parent);
        sampler
            .should_sample(Some(&cx), trace, "span", &SpanKind::Server, &[], &[])
            .decision
    }

    #[test]
    fn a_callers_sampled_mark_is_judged_by_the_ratio_unless_trusted() {
        let untrusting = sampler(0.0, false);
        assert_eq!(decides(&untrusting, true, true), SamplingDecision::Drop);
        assert_eq!(decides(&untrusting, true, false), SamplingDecision::Drop);
        let trusting = sampler(0.0, true);
        assert_eq!(
            decides(&trusting, true, true),
            SamplingDecision::RecordAndSample
        );
        // At the default ratio every trace is kept, a caller's included.
        assert_eq!(
            decides(&sampler(1.0, false), true, true),
            SamplingDecision::RecordAndSample
        );
    }

    fn args(endpoint: &str, protocol: OtlpProtocol) -> TraceArgs {
        TraceArgs {
            otlp_endpoint: Some(endpoint.into()),
            otlp_protocol: protocol,
            trace_sample_ratio: 1.0,
            trace_trust_parent: false,
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
