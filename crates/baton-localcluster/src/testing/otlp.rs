//! An in-process OTLP receiver standing in for Jaeger's intake: gRPC (`TraceService/
//! Export`, Jaeger's port 4317) and HTTP `POST /v1/traces` with protobuf or JSON bodies
//! (port 4318), on free loopback ports. Every span received is kept, flattened, with the
//! `service.name` of the process that sent it.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A span as the receiver got it, its ids in hex and its attributes as strings, so a
/// test compares the three transports alike.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    /// How it arrived: `grpc`, `http/protobuf` or `http/json`.
    pub transport: &'static str,
    /// The span's name.
    pub name: String,
    /// 32 hex digits; what a `traceparent` carries across processes.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// The span's own attributes.
    pub attributes: BTreeMap<String, String>,
    /// Its resource's attributes: which process sent it.
    pub resource: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<ReceivedSpan>>>);

fn flatten(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

impl Spans {
    fn keep(&self, request: ExportTraceServiceRequest, transport: &'static str) {
        let mut spans = self.0.lock().unwrap();
        for resource_spans in request.resource_spans {
            let resource = flatten(
                &resource_spans
                    .resource
                    .map(|r| r.attributes)
                    .unwrap_or_default(),
            );
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(ReceivedSpan {
                        service: service.clone(),
                        transport,
                        name: span.name.clone(),
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: flatten(&span.attributes),
                        resource: resource.clone(),
                    });
                }
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Spans {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn http_export(
    axum::extract::State(spans): axum::extract::State<Spans>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let decoded = if json {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| e.to_string())
    } else {
        ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string())
    };
    match decoded {
        Ok(request) => {
            spans.keep(request, if json { "http/json" } else { "http/protobuf" });
            if json {
                ([("content-type", "application/json")], "{}").into_response()
            } else {
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
                    .into_response()
            }
        }
        Err(e) => {
            eprintln!("otlp sink: refused an export: {e}");
            (axum::http::StatusCode::BAD_REQUEST, e).into_response()
        }
    }
}

/// An OTLP trace receiver on two loopback ports, HTTP and gRPC, keeping every span.
pub struct OtlpSink {
    /// Base URL of the HTTP receiver (exporters append `/v1/traces`).
    pub http_url: String,
    /// URL of the gRPC receiver.
    pub grpc_url: String,
    spans: Spans,
}

impl OtlpSink {
    /// Starts both receivers on free ports; they run until the test's runtime ends.
    pub async fn start() -> OtlpSink {
        let spans = Spans::default();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_url = format!("http://{}", http.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(http_export))
            .with_state(spans.clone());
        tokio::spawn(async move { axum::serve(http, app).await });
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_url = format!("http://{}", grpc.local_addr().unwrap());
        let service = TraceServiceServer::new(spans.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc))
                .await
        });
        OtlpSink {
            http_url,
            grpc_url,
            spans,
        }
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.0.lock().unwrap().clone()
    }
}
