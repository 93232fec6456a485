//! Tasks: starting them, reading them and their events, and the lifecycle
//! operations a client can ask for (cancel, retry, resume, reject, complete a
//! delegation). The executor ([`crate::runtime::executor`]) moves them forward.
//!
//! **Events.** Every change of a task is recorded as a [`TaskEvent`] with a
//! per-task sequence number, inserted in the same transaction as the change
//! ([`mutate`] does both). The sequence comes from `tasks.last_seq`, bumped
//! by the same `UPDATE … RETURNING` that changes the task, so concurrent
//! writers are serialised by the row lock.
//!
//! **Who may write.** While a worker holds a task's lease, only that worker
//! changes it (every executor write is guarded by `lease_owner`); the API
//! changes a task only when no lease is held, except `cancelTask`, which
//! sets a flag the worker honours before its next step.

use std::{collections::HashMap, fmt, str::FromStr, sync::Arc};

use brainstem_entity::{
    PlanId, TaskId, TenantId, TenantOwned, TenantScope, artifact, delegation, review, task,
    task_event, task_step,
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, QueryTrait, Statement, TransactionTrait,
    sea_query::{Expr, SimpleExpr},
};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::{
    Error, Principal, Result,
    catalogue::plans::{Plans, StepDef},
    kernel::{
        audit::sha256_hex,
        page::{self, Page, PageRequest},
        redact::redact,
    },
    models::usage::Usage,
};

mod lifecycle;
mod log;
mod reads;

pub use log::*;
pub use reads::*;

pub const DEFAULT_MAX_STEPS: u32 = 50;
pub const DEFAULT_CONFIDENCE_THRESHOLD: f64 = 0.8;
/// The review step id used for the intent-confidence gate.
pub const INTENT_REVIEW_STEP: &str = "intent_detection";

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($text => Ok($name::$variant),)*
                    other => Err(Error::internal(format!(
                        concat!("unknown ", stringify!($name), " `{}`"), other
                    ))),
                }
            }
        }
    };
}

string_enum!(
    /// Where a task is in its life.
    TaskStatus {
        Pending => "PENDING",
        DetectingIntent => "DETECTING_INTENT",
        Planning => "PLANNING",
        Executing => "EXECUTING",
        NeedsReview => "NEEDS_REVIEW",
        Delegated => "DELEGATED",
        Completed => "COMPLETED",
        Failed => "FAILED",
        Cancelled => "CANCELLED",
    }
);

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

string_enum!(
    /// Where a task came from.
    Channel {
        Web => "WEB",
        Api => "API",
        Webhook => "WEBHOOK",
        Email => "EMAIL",
        System => "SYSTEM",
    }
);

string_enum!(
    /// What a task event records.
    EventKind {
        StatusChanged => "StatusChanged",
        StepStarted => "StepStarted",
        StepCompleted => "StepCompleted",
        StepFailed => "StepFailed",
        StepSkipped => "StepSkipped",
        StepsInjected => "StepsInjected",
        ReviewRequested => "ReviewRequested",
        Delegated => "Delegated",
        TokenDelta => "TokenDelta",
        MemoryRecalled => "MemoryRecalled",
    }
);

string_enum!(
    ReviewStatus {
        Pending => "PENDING",
        Approved => "APPROVED",
        Rejected => "REJECTED",
    }
);

/// A task as clients and the executor see it.
#[derive(Clone, Debug)]
pub struct Task {
    pub id: TaskId,
    pub tenant: TenantId,
    pub parent: Option<TaskId>,
    pub channel: Channel,
    pub status: TaskStatus,
    pub idempotency_key: Option<String>,
    pub input: String,
    pub payload: Value,
    pub subject_id: Option<Uuid>,
    pub intent: Option<String>,
    pub confidence: f64,
    pub confidence_threshold: f64,
    pub intent_reviewed: bool,
    pub plan_id: Option<PlanId>,
    pub plan_key: Option<String>,
    pub plan_version: Option<i32>,
    pub frozen_plan: Vec<StepDef>,
    pub settled_step_ids: Vec<String>,
    pub reviewed_step_ids: Vec<String>,
    pub attempts: Map<String, Value>,
    pub current_step_id: Option<String>,
    pub state: Value,
    pub step_outputs: Map<String, Value>,
    pub max_steps: u32,
    pub error: Option<String>,
    pub trace_id: String,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub run_after: DateTime<Utc>,
    pub cancel_requested: bool,
    pub last_seq: i64,
    pub usage: Usage,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl TryFrom<task::Model> for Task {
    type Error = Error;

    fn try_from(m: task::Model) -> Result<Self> {
        Ok(Self {
            id: m.id.into(),
            tenant: m.tenant_id.into(),
            parent: m.parent_task_id.map(TaskId::from),
            channel: m.channel.parse()?,
            status: m.status.parse()?,
            idempotency_key: m.idempotency_key,
            input: m.input_text,
            payload: m.payload,
            subject_id: m.subject_id,
            intent: m.intent,
            confidence: m.confidence,
            confidence_threshold: m.confidence_threshold,
            intent_reviewed: m.intent_reviewed,
            plan_id: m.plan_id.map(PlanId::from),
            plan_key: m.plan_key,
            plan_version: m.plan_version,
            frozen_plan: serde_json::from_value(m.frozen_plan)
                .map_err(|e| Error::internal(format!("task plan is unreadable: {e}")))?,
            settled_step_ids: strings(&m.settled_step_ids),
            reviewed_step_ids: strings(&m.reviewed_step_ids),
            attempts: m.attempts.as_object().cloned().unwrap_or_default(),
            current_step_id: m.current_step_id,
            state: m.state,
            step_outputs: m.step_outputs.as_object().cloned().unwrap_or_default(),
            max_steps: u32::try_from(m.max_steps).unwrap_or(DEFAULT_MAX_STEPS),
            error: m.error_message,
            trace_id: m.trace_id,
            lease_owner: m.lease_owner,
            lease_expires_at: m.lease_expires_at,
            run_after: m.run_after,
            cancel_requested: m.cancel_requested,
            last_seq: m.last_seq,
            usage: Usage::from_json(&m.usage),
            created_by: m.created_by,
            created_at: m.created_at,
            updated_at: m.updated_at,
            started_at: m.started_at,
            completed_at: m.completed_at,
        })
    }
}

impl Task {
    pub fn scope(&self) -> TenantScope {
        TenantScope::new(self.tenant)
    }

    pub fn attempts_of(&self, step_id: &str) -> u32 {
        self.attempts
            .get(step_id)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    }

    /// The template context of this task.
    pub fn template_context(&self, tenant_slug: &str) -> Value {
        let steps: Map<String, Value> = self
            .step_outputs
            .iter()
            .map(|(k, v)| (k.clone(), json!({"output": v})))
            .collect();
        let mut ctx = json!({
            "input": {"text": self.input, "payload": self.payload},
            "state": self.state,
            "steps": steps,
            "tenant": {"id": self.tenant.to_string(), "slug": tenant_slug},
            "task": {"id": self.id.to_string(), "trace_id": self.trace_id},
        });
        let alias = ctx.clone();
        if let Value::Object(map) = &mut ctx {
            map.insert("context".into(), alias);
        }
        ctx
    }
}

/// A stored task event.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskEvent {
    pub id: Uuid,
    pub tenant: TenantId,
    pub task_id: TaskId,
    pub seq: i64,
    pub kind: EventKind,
    pub step_id: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub summary: String,
    pub error: Option<String>,
    pub data_keys: Vec<String>,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<task_event::Model> for TaskEvent {
    type Error = Error;

    fn try_from(m: task_event::Model) -> Result<Self> {
        Ok(Self {
            id: m.id,
            tenant: m.tenant_id.into(),
            task_id: m.task_id.into(),
            seq: m.seq,
            kind: m.kind.parse()?,
            step_id: m.step_id,
            tool: m.tool,
            status: m.status,
            summary: m.summary,
            error: m.error,
            data_keys: strings(&m.data_keys),
            data: m.data,
            created_at: m.created_at,
        })
    }
}

/// Which events of a task to read: sequence numbers in `(after, until]`.
/// Sequence numbers have no gaps, so "the first N after X" is
/// `(X, X + N]` and "the last N" of a task whose latest is L is
/// `(L - N, L]`; windows of many tasks are read in one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventWindow {
    pub after: i64,
    pub until: i64,
}

impl EventWindow {
    /// Up to `n` events after `after`.
    pub fn first(after: i64, n: u64) -> Self {
        Self {
            after,
            until: after.saturating_add(i64::try_from(n).unwrap_or(i64::MAX)),
        }
    }

    /// The last `n` events of `task` (as of its snapshot) after `after`.
    pub fn last(task: &Task, after: i64, n: u64) -> Self {
        let from = task
            .last_seq
            .saturating_sub(i64::try_from(n).unwrap_or(i64::MAX));
        Self {
            after: after.max(from),
            until: task.last_seq,
        }
    }
}

/// An event about to be written.
#[derive(Clone, Debug, Default)]
pub struct NewEvent {
    pub kind: Option<EventKind>,
    pub step_id: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub summary: String,
    pub error: Option<String>,
    pub data_keys: Vec<String>,
    pub data: Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, summary: impl Into<String>) -> Self {
        Self {
            kind: Some(kind),
            summary: summary.into(),
            data: json!({}),
            ..Self::default()
        }
    }

    pub fn status(to: TaskStatus, summary: impl Into<String>) -> Self {
        let mut e = Self::new(EventKind::StatusChanged, summary);
        e.status = Some(to.as_str().to_owned());
        e
    }

    pub fn step(mut self, step_id: &str, tool: &str) -> Self {
        self.step_id = Some(step_id.to_owned());
        self.tool = Some(tool.to_owned());
        self
    }

    pub fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }

    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
}

/// Publishes committed events to whoever listens (live subscriptions).
pub trait EventSink: Send + Sync + 'static {
    fn publish(&self, events: &[TaskEvent]);

    /// Resolves once the live-only events published so far are on their
    /// way to every listener. The executor awaits it before committing a
    /// step, so the step's token deltas arrive before its completion.
    fn flush(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Drops events; the default until a bus is attached.
pub struct NoSink;

impl EventSink for NoSink {
    fn publish(&self, _events: &[TaskEvent]) {}
}

/// What a client asks for when starting a task.
#[derive(Clone, Debug, Default)]
pub struct NewTask {
    pub input: String,
    pub payload: Value,
    pub subject_id: Option<Uuid>,
    pub plan_key: Option<String>,
    pub intent: Option<String>,
    pub idempotency_key: Option<String>,
    pub channel: Option<Channel>,
    pub max_steps: Option<u32>,
    pub confidence_threshold: Option<f64>,
}

/// A child task started by a tool.
#[derive(Clone, Debug)]
pub struct NewChildTask {
    pub tenant: TenantId,
    pub parent: TaskId,
    pub idempotency_key: String,
    pub input: String,
    pub payload: Value,
    pub plan_key: Option<String>,
    pub intent: Option<String>,
}

/// Token deltas are published on the bus only: the step's final text is
/// stored as its output.
impl crate::catalogue::tool::LiveEvents for Tasks {
    fn token_delta(
        &self,
        tenant: TenantId,
        task: TaskId,
        step_id: &str,
        offset: usize,
        delta: &str,
    ) {
        let event = TaskEvent {
            id: Uuid::now_v7(),
            tenant,
            task_id: task,
            // Live-only events carry the sequence of the last stored event.
            seq: 0,
            kind: EventKind::TokenDelta,
            step_id: Some(step_id.to_owned()),
            tool: None,
            status: None,
            summary: String::new(),
            error: None,
            data_keys: Vec::new(),
            data: json!({"offset": offset, "text": delta}),
            created_at: Utc::now(),
        };
        self.sink.publish(&[event]);
    }
}

/// A subject's tasks, from [`Tasks::of_subject`].
#[derive(Clone, Debug, Default)]
pub struct SubjectTasks {
    /// Newest first.
    pub recent: Vec<Task>,
    /// Tasks not finished (any status but COMPLETED, FAILED, CANCELLED).
    pub open: u64,
}

/// Filter for listing tasks.
#[derive(Clone, Debug, Default)]
pub struct TaskFilter {
    pub statuses: Vec<TaskStatus>,
    pub intent: Option<String>,
    pub channel: Option<Channel>,
    pub parent: Option<TaskId>,
}

/// One attempt of one step.
#[derive(Clone, Debug)]
pub struct StepAttempt {
    pub id: Uuid,
    pub step_id: String,
    pub tool: String,
    pub attempt: i32,
    pub status: String,
    pub args: Value,
    pub output: Value,
    pub summary: String,
    pub error: Option<String>,
    pub idempotency_key: String,
    pub usage: Usage,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: i64,
}

impl From<task_step::Model> for StepAttempt {
    fn from(m: task_step::Model) -> Self {
        Self {
            id: m.id,
            step_id: m.step_id,
            tool: m.tool,
            attempt: m.attempt,
            status: m.status,
            args: m.args,
            output: m.output,
            summary: m.summary,
            error: m.error,
            idempotency_key: m.idempotency_key,
            usage: Usage::from_json(&m.usage),
            started_at: m.started_at,
            finished_at: m.finished_at,
            duration_ms: m.duration_ms,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Review {
    pub id: Uuid,
    pub task_id: TaskId,
    pub step_id: String,
    pub reason: String,
    pub confidence: Option<f64>,
    pub proposed: Value,
    pub status: ReviewStatus,
    pub corrections: Value,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<review::Model> for Review {
    type Error = Error;

    fn try_from(m: review::Model) -> Result<Self> {
        Ok(Self {
            id: m.id,
            task_id: m.task_id.into(),
            step_id: m.step_id,
            reason: m.reason,
            confidence: m.confidence,
            proposed: m.proposed,
            status: m.status.parse()?,
            corrections: m.corrections,
            resolved_by: m.resolved_by,
            resolved_at: m.resolved_at,
            created_at: m.created_at,
        })
    }
}

#[derive(Clone, Debug)]
pub struct Artifact {
    pub id: Uuid,
    pub task_id: TaskId,
    pub step_id: String,
    pub tool: String,
    pub kind: String,
    pub role: String,
    pub reference: String,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
}

impl From<artifact::Model> for Artifact {
    fn from(m: artifact::Model) -> Self {
        Self {
            id: m.id,
            task_id: m.task_id.into(),
            step_id: m.step_id,
            tool: m.tool,
            kind: m.kind,
            role: m.role,
            reference: m.reference,
            metadata: m.metadata,
            created_at: m.created_at,
        }
    }
}

/// The outcome a delegated system reports.
#[derive(Clone, Debug)]
pub struct DelegationOutcome {
    pub success: bool,
    pub data: Value,
    pub error: Option<String>,
}

#[derive(Clone)]
pub struct Tasks {
    db: DatabaseConnection,
    plans: Plans,
    wake: Arc<Notify>,
    sink: Arc<dyn EventSink>,
}

fn forbid_unless_writable(principal: &Principal) -> Result<TenantScope> {
    principal.require_scope("tasks:write")
}

impl Tasks {
    pub fn new(db: DatabaseConnection, plans: Plans, sink: Arc<dyn EventSink>) -> Self {
        Self {
            db,
            plans,
            wake: Arc::new(Notify::new()),
            sink,
        }
    }

    /// Woken whenever a task becomes runnable in this process.
    pub fn wake_signal(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    pub fn sink(&self) -> Arc<dyn EventSink> {
        self.sink.clone()
    }

    /// One task became runnable: wake one idle worker (a permit is kept
    /// if none is idle), not the whole pool.
    fn runnable(&self) {
        self.wake.notify_one();
    }

    /// Start a task. A repeated idempotency key returns the existing task.
    pub async fn start(&self, principal: &Principal, new: NewTask) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        self.insert(scope, None, principal.actor.to_string(), new)
            .await
    }

    /// Start a child task for a tool, keyed by the step's idempotency key.
    pub async fn start_child(&self, child: NewChildTask) -> Result<TaskId> {
        let scope = TenantScope::new(child.tenant);
        let task = self
            .insert(
                scope,
                Some(child.parent),
                format!("task:{}", child.parent),
                NewTask {
                    input: child.input,
                    payload: child.payload,
                    plan_key: child.plan_key,
                    intent: child.intent,
                    idempotency_key: Some(child.idempotency_key),
                    channel: Some(Channel::System),
                    ..NewTask::default()
                },
            )
            .await?;
        Ok(task.id)
    }

    async fn insert(
        &self,
        scope: TenantScope,
        parent: Option<TaskId>,
        created_by: String,
        new: NewTask,
    ) -> Result<Task> {
        if let Some(key) = &new.idempotency_key {
            if key.is_empty() || key.len() > 255 {
                return Err(Error::validation(
                    "idempotencyKey must have 1-255 characters",
                ));
            }
            if let Some(existing) = self.by_idempotency_key(scope, key).await? {
                return Ok(existing);
            }
        }
        let max_steps = new.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        if max_steps == 0 || max_steps > 10_000 {
            return Err(Error::validation("maxSteps must be between 1 and 10000"));
        }
        let threshold = new
            .confidence_threshold
            .unwrap_or(DEFAULT_CONFIDENCE_THRESHOLD);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(Error::validation(
                "confidenceThreshold must be between 0 and 1",
            ));
        }
        let now = Utc::now();
        // A named plan must exist now, not fail later in a worker; one a
        // capability brings needs a subscription (FORBIDDEN, naming it).
        let plan = match &new.plan_key {
            Some(key) => Some(self.plans.for_start(scope, key, now).await.map_err(
                |e| match e {
                    Error::NotFound(_) => Error::validation(format!("unknown plan `{key}`")),
                    other => other,
                },
            )?),
            None => None,
        };
        let intent = plan
            .as_ref()
            .map(|p| p.intent.clone())
            .or(new.intent.clone());
        if let Some(i) = &intent
            && (i.is_empty() || i.len() > 100)
        {
            return Err(Error::validation("intent must have 1-100 characters"));
        }
        if plan.is_none()
            && let Some(i) = &intent
        {
            self.plans.check_intent(scope, i, now).await?;
        }
        if let Some(plan) = &plan {
            crate::catalogue::capabilities::check_quota(&self.db, scope, plan, now).await?;
        }
        let id = TaskId::new();
        let given_intent = intent.is_some();
        let model = task::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            parent_task_id: Set(parent.map(TaskId::uuid)),
            channel: Set(new.channel.unwrap_or(Channel::Api).as_str().to_owned()),
            status: Set(TaskStatus::Pending.as_str().to_owned()),
            idempotency_key: Set(new.idempotency_key.clone()),
            input_text: Set(new.input),
            payload: Set(if new.payload.is_null() {
                json!({})
            } else {
                new.payload
            }),
            subject_id: Set(new.subject_id),
            intent: Set(intent),
            // An intent the client named needs no detection.
            confidence: Set(if given_intent { 1.0 } else { 0.0 }),
            confidence_threshold: Set(threshold),
            intent_reviewed: Set(false),
            plan_id: Set(plan.as_ref().map(|p| p.id.uuid())),
            plan_key: Set(None),
            plan_version: Set(None),
            frozen_plan: Set(json!([])),
            settled_step_ids: Set(json!([])),
            reviewed_step_ids: Set(json!([])),
            attempts: Set(json!({})),
            current_step_id: Set(None),
            state: Set(json!({})),
            step_outputs: Set(json!({})),
            max_steps: Set(i32::try_from(max_steps).unwrap_or(i32::MAX)),
            error_message: Set(None),
            trace_id: Set(Uuid::now_v7().simple().to_string()),
            lease_owner: Set(None),
            lease_expires_at: Set(None),
            run_after: Set(now),
            cancel_requested: Set(false),
            // Its first event, "task created", is stored with it.
            last_seq: Set(1),
            usage: Set(Usage::default().to_json()),
            created_by: Set(created_by),
            created_at: Set(now),
            updated_at: Set(now),
            started_at: Set(None),
            completed_at: Set(None),
        };
        let txn = self.db.begin().await?;
        let inserted = match model.insert(&txn).await {
            Ok(row) => row,
            Err(err) => {
                drop(txn);
                return match (Error::from(err), &new.idempotency_key) {
                    // Lost a race on the same idempotency key: return the winner.
                    (Error::Conflict(_), Some(key)) => self
                        .by_idempotency_key(scope, key)
                        .await?
                        .ok_or_else(|| Error::internal("idempotent task vanished")),
                    (other, _) => Err(other),
                };
            }
        };
        let task = Task::try_from(inserted)?;
        let events = insert_events(
            &txn,
            &task,
            1,
            vec![NewEvent::status(TaskStatus::Pending, "task created")],
            now,
            Vec::new(),
        )
        .await?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }

    async fn by_idempotency_key(&self, scope: TenantScope, key: &str) -> Result<Option<Task>> {
        task::Entity::find_in(scope)
            .filter(task::Column::IdempotencyKey.eq(key))
            .one(&self.db)
            .await?
            .map(Task::try_from)
            .transpose()
    }
}
