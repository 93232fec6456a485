//! Logging and traces: `tracing` to stderr, as text or JSON, and, when
//! `otlp_endpoint` is set, spans exported over OTLP (HTTP, JSON) with the
//! OpenTelemetry SDK.
//!
//! Invariants:
//! - Exporting is off unless `otlp_endpoint` is set; off, no span is
//!   recorded for export (the log filter alone decides what is built).
//! - An exported span of a request, a task's step or a model call is in
//!   the trace whose id it carries (the id `Task.traceId` shows): the
//!   domain asks [`OtelLink`] to adopt it (`origin::adopt`). A span without
//!   an exported parent hangs under a parent id derived from its trace id,
//!   so a task's steps are siblings in its trace.
//! - Spans are exported in batches from a thread of the SDK, never on the
//!   request or step that made them.

use std::sync::OnceLock;

use brainstem_domain::origin::{self, TraceLink};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    EnvFilter, Layer, filter::Targets, fmt, layer::SubscriberExt, util::SubscriberInitExt,
};

use crate::config::{Config, LogFormat};

static TRACES: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Install the global subscriber. `RUST_LOG` overrides the configured
/// filter of the logs. A second call (e.g. in tests) keeps the first.
pub fn init(config: &Config) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = match config.log_format {
        LogFormat::Json => logs.json().boxed(),
        LogFormat::Text => logs.boxed(),
    }
    .with_filter(filter);
    let traces = config
        .otlp_endpoint
        .as_deref()
        .filter(|e| !e.trim().is_empty())
        .and_then(|endpoint| match exporter(endpoint) {
            Ok(provider) => Some(provider),
            Err(err) => {
                eprintln!("traces are not exported: {err}");
                None
            }
        });
    let installed = match traces {
        Some(provider) => {
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("brainstem"))
                .with_filter(
                    Targets::new()
                        .with_target("brainstem", tracing::Level::INFO)
                        .with_target("brainstem_api", tracing::Level::INFO)
                        .with_target("brainstem_domain", tracing::Level::INFO),
                );
            let installed = tracing_subscriber::registry()
                .with(logs)
                .with(layer)
                .try_init()
                .is_ok();
            if installed {
                let _ = TRACES.set(provider);
                origin::install_trace_link(Box::new(OtelLink));
            }
            installed
        }
        None => tracing_subscriber::registry().with(logs).try_init().is_ok(),
    };
    if !installed {
        tracing::debug!("a subscriber was already installed; keeping it");
    }
}

/// Export every finished span now (tests; shutdown). Blocks until the
/// exporter has answered.
pub fn flush_traces() {
    if let Some(provider) = TRACES.get()
        && let Err(err) = provider.force_flush()
    {
        tracing::warn!(%err, "exporting traces failed");
    }
}

/// The tracer provider exporting to `endpoint` (`…/v1/traces` is added
/// unless it is there).
fn exporter(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    // Before the exporter's HTTP client is built.
    brainstem_domain::http_client::install_tls_provider();
    let endpoint = endpoint.trim().trim_end_matches('/');
    let url = if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(url)
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("brainstem").build())
        .build())
}

/// Puts the domain's spans in the traces they name.
struct OtelLink;

impl TraceLink for OtelLink {
    fn adopt(&self, span: &tracing::Span, trace_id: &str, parent: Option<&str>) {
        let Ok(trace) = TraceId::from_hex(trace_id) else {
            return;
        };
        // Without a known parent: one derived from the trace id, the same
        // for every root span of the trace.
        let parent = parent
            .and_then(|p| SpanId::from_hex(p).ok())
            .filter(|p| *p != SpanId::INVALID)
            .or_else(|| {
                SpanId::from_hex(&trace_id[trace_id.len().saturating_sub(16)..])
                    .ok()
                    .filter(|p| *p != SpanId::INVALID)
            })
            .unwrap_or_else(|| SpanId::from(1u64));
        let remote = SpanContext::new(
            trace,
            parent,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let context = opentelemetry::Context::new().with_remote_span_context(remote);
        let _ = span.set_parent(context);
    }

    fn current_span_id(&self) -> Option<String> {
        let context = tracing::Span::current().context();
        let span = context.span();
        let span_context = span.span_context();
        span_context
            .is_valid()
            .then(|| span_context.span_id().to_string())
    }
}
