//! Prometheus metrics, served at `/metrics` in the text exposition format.
//! Labels use the matched route, never the raw path, so their number stays
//! bounded.

use std::sync::Mutex;

use brainstem_domain::{
    db::StatementCounter,
    row_security::{self, Bypass},
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, text::encode},
    metrics::{
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Mutex<Registry>,
    pub http_requests: Family<RequestLabels, Counter>,
    pub http_duration: HistogramFamily,
    pub websocket_connections: Gauge,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("brainstem");
        let http_requests = Family::<RequestLabels, Counter>::default();
        let http_duration: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let websocket_connections = Gauge::default();
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            http_duration.clone(),
        );
        registry.register(
            "websocket_connections",
            "Open GraphQL WebSocket connections",
            websocket_connections.clone(),
        );
        registry.register_collector(Box::new(RowSecurityBypasses));
        brainstem_domain::metrics::register(&mut registry);
        Self {
            registry: Mutex::new(registry),
            http_requests,
            http_duration,
            websocket_connections,
        }
    }

    /// Export the domain's count of SQL statements, read at each scrape.
    pub fn count_statements(&self, statements: StatementCounter) {
        if let Ok(mut registry) = self.registry.lock() {
            registry.register_collector(Box::new(Statements(statements)));
        }
    }

    /// Export the WebSocket fan-out's counters: payloads rendered and
    /// `next` messages sent (their ratio is how much rendering is shared).
    pub fn count_fanout(&self, renders: Counter, sent: Counter) {
        if let Ok(mut registry) = self.registry.lock() {
            registry.register(
                "websocket_event_renders",
                "Task-event payloads rendered for WebSocket subscribers (one serves every subscriber of its shape)",
                renders,
            );
            registry.register(
                "websocket_event_frames",
                "Task events sent to WebSocket subscribers",
                sent,
            );
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            // Writing into a String cannot fail.
            let _ = encode(&mut out, &registry);
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `db_statements_total`: SQL statements sent since start.
#[derive(Debug)]
struct Statements(StatementCounter);

impl Collector for Statements {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(self.0.get());
        let metric = encoder.encode_descriptor(
            "db_statements",
            "SQL statements sent to the database",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

/// `row_security_bypass_total{reason}`: how often work has crossed tenants
/// under an explicit bypass of PostgreSQL's row-level security, by reason.
#[derive(Debug)]
struct RowSecurityBypasses;

impl Collector for RowSecurityBypasses {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "row_security_bypass",
            "Work that crossed tenants under an explicit row-security bypass, by reason",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for reason in Bypass::ALL {
            let labels = [("reason", reason.as_str())];
            let counter = ConstCounter::new(row_security::bypass_count(reason));
            counter.encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
