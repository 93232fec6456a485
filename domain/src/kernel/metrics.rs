//! The domain's Prometheus metrics: one process-wide set of families,
//! recorded where their events happen ([`metrics`]) and exported by the
//! API's registry ([`register`]) at `/metrics`.
//!
//! Invariants:
//! - Labels are bounded sets: plan keys, channels, task statuses, tools,
//!   models, search modes and outcomes. Never ids, tenants, users or text.
//! - Recording is a few atomic operations; nothing here waits or fails.
//! - Names follow Prometheus conventions: the registry adds the
//!   `brainstem_` prefix, counters get `_total`, durations are in seconds.

use std::sync::{LazyLock, atomic::AtomicU64};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub plan: String,
    pub channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskEndLabels {
    pub plan: String,
    pub channel: String,
    /// `COMPLETED`, `FAILED` or `CANCELLED`.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabels {
    pub plan: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub tool: String,
    /// `completed` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelOutcomeLabels {
    pub model: String,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub model: String,
    /// `input`, `output`, or `cached_input` (input tokens the provider kept
    /// from an earlier prompt; also counted in `input`).
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    /// `hybrid`, `keyword` or `semantic`.
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `delivered`, `retry` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// The tenant's slug; past [`TENANT_LABELS`] distinct tenants, `other`.
    pub tenant: String,
}

/// How many tenants get a label of their own in a process's metrics.
pub const TENANT_LABELS: usize = 100;

static LABELLED_TENANTS: LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    LazyLock::new(Default::default);

impl TenantLabels {
    /// The label of the tenant `slug`: its own for the first
    /// [`TENANT_LABELS`] tenants this process labels, `other` after, so a
    /// platform with many tenants keeps a bounded number of series.
    pub fn of(slug: &str) -> Self {
        let mut seen = LABELLED_TENANTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tenant = if seen.contains(slug) || seen.len() < TENANT_LABELS {
            seen.insert(slug.to_owned());
            slug.to_owned()
        } else {
            "other".to_owned()
        };
        Self { tenant }
    }
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, from 1 ms to about 9 hours.
fn long_durations() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 16))
}

/// Seconds, from 0.5 ms to about 16 s.
fn short_durations() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every domain metric.
pub struct DomainMetrics {
    pub tasks_started: Family<TaskLabels, Counter>,
    pub tasks_finished: Family<TaskEndLabels, Counter>,
    pub task_duration: Histograms<PlanLabels>,
    /// Runnable tasks waiting for a worker; set when `/metrics` is read.
    pub queue_depth: Gauge,
    pub claim_latency: Histogram,
    /// Time a task waited in the queue before a slot took it, by tenant.
    pub queue_wait: Histograms<TenantLabels>,
    /// Executor slots of this process driving a task now.
    pub slots_in_use: Gauge,
    pub step_duration: Histograms<StepLabels>,
    pub step_retries: Family<ToolLabels, Counter>,
    pub lease_expiries: Counter,
    pub reviews_opened: Family<PlanLabels, Counter>,
    pub review_wait: Histogram,
    pub llm_calls: Family<ModelOutcomeLabels, Counter>,
    pub llm_tokens: Family<TokenLabels, Counter>,
    pub llm_cost: Family<ModelLabels, Counter<f64, AtomicU64>>,
    pub llm_time_to_first_token: Histograms<ModelLabels>,
    pub memory_search_duration: Histograms<ModeLabels>,
    pub memories_reembedded: Counter,
    pub subscriptions_open: Gauge,
    pub subscription_catch_up_reads: Counter,
    pub webhook_attempts: Family<OutcomeLabels, Counter>,
    pub schedule_runs: Counter,
    pub intent_pattern_compilations: Counter,
    pub replica_lag: Family<super::replicas::ReplicaLabels, Gauge<f64, AtomicU64>>,
    pub replica_in_rotation: Family<super::replicas::ReplicaLabels, Gauge>,
}

static METRICS: LazyLock<DomainMetrics> = LazyLock::new(|| DomainMetrics {
    tasks_started: Family::default(),
    tasks_finished: Family::default(),
    task_duration: Family::new_with_constructor(long_durations),
    queue_depth: Gauge::default(),
    claim_latency: long_durations(),
    queue_wait: Family::new_with_constructor(long_durations),
    slots_in_use: Gauge::default(),
    step_duration: Family::new_with_constructor(short_durations),
    step_retries: Family::default(),
    lease_expiries: Counter::default(),
    reviews_opened: Family::default(),
    review_wait: long_durations(),
    llm_calls: Family::default(),
    llm_tokens: Family::default(),
    llm_cost: Family::default(),
    llm_time_to_first_token: Family::new_with_constructor(short_durations),
    memory_search_duration: Family::new_with_constructor(short_durations),
    memories_reembedded: Counter::default(),
    subscriptions_open: Gauge::default(),
    subscription_catch_up_reads: Counter::default(),
    webhook_attempts: Family::default(),
    schedule_runs: Counter::default(),
    intent_pattern_compilations: Counter::default(),
    replica_lag: Family::default(),
    replica_in_rotation: Family::default(),
});

/// The process's domain metrics.
pub fn metrics() -> &'static DomainMetrics {
    &METRICS
}

/// Add every domain metric to `registry` (families share their values
/// with [`metrics`], so one registration exports all later recordings).
pub fn register(registry: &mut Registry) {
    let m = metrics();
    registry.register(
        "replica_lag_seconds",
        "How far each read replica is behind the primary, by its index in database_read_urls",
        m.replica_lag.clone(),
    );
    registry.register(
        "replica_in_rotation",
        "1 while a read replica serves reads, 0 while it is out (unreachable or lagging)",
        m.replica_in_rotation.clone(),
    );
    registry.register(
        "tasks_started",
        "Tasks that began executing, by plan and channel",
        m.tasks_started.clone(),
    );
    registry.register(
        "tasks_finished",
        "Tasks that ended, by plan, channel and status (COMPLETED, FAILED, CANCELLED)",
        m.tasks_finished.clone(),
    );
    registry.register(
        "task_duration_seconds",
        "Time from a task's creation to its end, by plan",
        m.task_duration.clone(),
    );
    registry.register(
        "queue_depth",
        "Runnable tasks waiting for a worker",
        m.queue_depth.clone(),
    );
    registry.register(
        "claim_latency_seconds",
        "Time a runnable task waited before a worker claimed it",
        m.claim_latency.clone(),
    );
    registry.register(
        "queue_wait_seconds",
        "Time a runnable task waited before a slot took it, by tenant",
        m.queue_wait.clone(),
    );
    registry.register(
        "slots_in_use",
        "Executor slots of this process driving a task",
        m.slots_in_use.clone(),
    );
    registry.register(
        "step_duration_seconds",
        "Step attempts' tool calls, by tool and outcome (completed, failed)",
        m.step_duration.clone(),
    );
    registry.register(
        "step_retries",
        "Failed step attempts that were scheduled again, by tool",
        m.step_retries.clone(),
    );
    registry.register(
        "lease_expiries",
        "Tasks returned to the queue because their worker's lease expired",
        m.lease_expiries.clone(),
    );
    registry.register(
        "reviews_opened",
        "Tasks that stopped for a person's review, by plan",
        m.reviews_opened.clone(),
    );
    registry.register(
        "review_wait_seconds",
        "Time a review waited for its decision",
        m.review_wait.clone(),
    );
    registry.register(
        "llm_calls",
        "Language model calls, by model and outcome (ok, error)",
        m.llm_calls.clone(),
    );
    registry.register(
        "llm_tokens",
        "Language model tokens, by model and kind (input, output, cached_input: input kept from an earlier prompt)",
        m.llm_tokens.clone(),
    );
    registry.register(
        "llm_cost",
        "Language model cost in currency units (llm_prices), by model",
        m.llm_cost.clone(),
    );
    registry.register(
        "llm_time_to_first_token_seconds",
        "Time from sending a model call to its first chunk, by model",
        m.llm_time_to_first_token.clone(),
    );
    registry.register(
        "memory_search_duration_seconds",
        "Memory searches, by mode (hybrid, keyword, vector)",
        m.memory_search_duration.clone(),
    );
    registry.register(
        "memories_reembedded",
        "Memories given a vector of the current embedder by the background re-embedding",
        m.memories_reembedded.clone(),
    );
    registry.register(
        "subscriptions_open",
        "Open GraphQL subscriptions",
        m.subscriptions_open.clone(),
    );
    registry.register(
        "subscription_catch_up_reads",
        "Reads of stored events by subscribers that fell behind the live bus",
        m.subscription_catch_up_reads.clone(),
    );
    registry.register(
        "webhook_attempts",
        "Outbound webhook attempts, by outcome (delivered, retry, failed)",
        m.webhook_attempts.clone(),
    );
    registry.register(
        "schedule_runs",
        "Tasks started by schedules",
        m.schedule_runs.clone(),
    );
    registry.register(
        "intent_pattern_compilations",
        "Plan versions whose intent patterns were compiled (once each while cached)",
        m.intent_pattern_compilations.clone(),
    );
}

/// Seconds between two instants, never negative.
pub fn seconds_between(
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
) -> f64 {
    ((to - from).num_microseconds().unwrap_or(0).max(0) as f64) / 1e6
}
