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

/// Columns to change in one task update; `None` leaves a column alone.
#[derive(Clone, Debug, Default)]
pub struct TaskChanges {
    pub status: Option<TaskStatus>,
    pub intent: Option<Option<String>>,
    pub confidence: Option<f64>,
    pub intent_reviewed: Option<bool>,
    pub plan: Option<(PlanId, String, i32)>,
    pub frozen_plan: Option<Vec<StepDef>>,
    pub settled_step_ids: Option<Vec<String>>,
    pub reviewed_step_ids: Option<Vec<String>>,
    pub attempts: Option<Map<String, Value>>,
    pub current_step_id: Option<Option<String>>,
    pub state: Option<Value>,
    pub step_outputs: Option<Map<String, Value>>,
    pub error: Option<Option<String>>,
    pub lease: Option<Option<(String, DateTime<Utc>)>>,
    pub run_after: Option<DateTime<Utc>>,
    pub cancel_requested: Option<bool>,
    pub usage: Option<Usage>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// Which writer may apply a change.
#[derive(Clone, Debug)]
pub enum Guard {
    /// The worker holding the lease.
    Lease(String),
    /// Nobody holds a lease and the task is in one of these statuses.
    Unleased(Vec<TaskStatus>),
    /// This owner's lease has expired before the given instant (the reaper).
    Expired(String, DateTime<Utc>),
}

fn json_of<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(Error::internal)
}

/// Apply `changes` to a task if `guard` holds, and append `events` in the
/// same statement's transaction. Returns `None` when the guard failed.
pub async fn mutate<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: TaskId,
    guard: &Guard,
    changes: TaskChanges,
    events: Vec<NewEvent>,
) -> Result<Option<(Task, Vec<TaskEvent>)>> {
    mutate_with(db, scope, id, guard, changes, events, Vec::new()).await
}

/// [`mutate`], also running `also` (inserts of rows that go with the
/// change, built for `db`'s backend) when the guard holds: on PostgreSQL
/// in the same statement as the events, elsewhere right after them.
pub async fn mutate_with<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: TaskId,
    guard: &Guard,
    changes: TaskChanges,
    events: Vec<NewEvent>,
    also: Vec<Statement>,
) -> Result<Option<(Task, Vec<TaskEvent>)>> {
    use sea_orm::sea_query::ExprTrait;
    use task::Column as C;
    let now = Utc::now();
    let n = events.len() as i64;
    let mut update = task::Entity::update_many_in(scope)
        .filter(C::Id.eq(id.uuid()))
        .col_expr(C::UpdatedAt, Expr::value(now))
        .col_expr(C::LastSeq, Expr::col(C::LastSeq).add(n));
    update = match guard {
        Guard::Lease(owner) => update.filter(C::LeaseOwner.eq(owner.as_str())),
        Guard::Unleased(statuses) => update
            .filter(C::LeaseOwner.is_null())
            .filter(C::Status.is_in(statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())),
        Guard::Expired(owner, now) => update
            .filter(C::LeaseOwner.eq(owner.as_str()))
            .filter(C::LeaseExpiresAt.lt(*now)),
    };
    let mut cols: Vec<(C, SimpleExpr)> = Vec::new();
    let mut set = |col: C, value: SimpleExpr| cols.push((col, value));
    if let Some(s) = changes.status {
        set(C::Status, Expr::value(s.as_str()));
    }
    if let Some(v) = changes.intent {
        set(C::Intent, Expr::value(v));
    }
    if let Some(v) = changes.confidence {
        set(C::Confidence, Expr::value(v));
    }
    if let Some(v) = changes.intent_reviewed {
        set(C::IntentReviewed, Expr::value(v));
    }
    if let Some((plan_id, key, version)) = changes.plan {
        set(C::PlanId, Expr::value(plan_id.uuid()));
        set(C::PlanKey, Expr::value(key));
        set(C::PlanVersion, Expr::value(version));
    }
    if let Some(v) = changes.frozen_plan {
        set(C::FrozenPlan, Expr::value(json_of(&v)?));
    }
    if let Some(v) = changes.settled_step_ids {
        set(C::SettledStepIds, Expr::value(json!(v)));
    }
    if let Some(v) = changes.reviewed_step_ids {
        set(C::ReviewedStepIds, Expr::value(json!(v)));
    }
    if let Some(v) = changes.attempts {
        set(C::Attempts, Expr::value(Value::Object(v)));
    }
    if let Some(v) = changes.current_step_id {
        set(C::CurrentStepId, Expr::value(v));
    }
    if let Some(v) = changes.state {
        set(C::State, Expr::value(v));
    }
    if let Some(v) = changes.step_outputs {
        set(C::StepOutputs, Expr::value(Value::Object(v)));
    }
    if let Some(v) = changes.error {
        set(C::ErrorMessage, Expr::value(v));
    }
    if let Some(lease) = changes.lease {
        let (owner, until) = match lease {
            Some((o, u)) => (Some(o), Some(u)),
            None => (None, None),
        };
        set(C::LeaseOwner, Expr::value(owner));
        set(C::LeaseExpiresAt, Expr::value(until));
    }
    if let Some(v) = changes.run_after {
        set(C::RunAfter, Expr::value(v));
    }
    if let Some(v) = changes.cancel_requested {
        set(C::CancelRequested, Expr::value(v));
    }
    if let Some(v) = changes.usage {
        set(C::Usage, Expr::value(v.to_json()));
    }
    if let Some(v) = changes.started_at {
        set(C::StartedAt, Expr::value(v));
    }
    if let Some(v) = changes.completed_at {
        set(C::CompletedAt, Expr::value(v));
    }
    for (col, value) in cols {
        update = update.col_expr(col, value);
    }
    let mut rows = update.exec_with_returning(db).await?;
    let Some(row) = rows.pop() else {
        return Ok(None);
    };
    let task = Task::try_from(row)?;
    let first = task.last_seq - n + 1;
    let stored = insert_events(db, &task, first, events, now, also).await?;
    Ok(Some((task, stored)))
}

/// Store `events` as the task's events `first`, `first + 1`, … in one
/// statement, and return them as committed.
async fn insert_events<C: ConnectionTrait>(
    db: &C,
    task: &Task,
    first: i64,
    events: Vec<NewEvent>,
    now: DateTime<Utc>,
    rows: Vec<Statement>,
) -> Result<Vec<TaskEvent>> {
    if events.is_empty() {
        for row in rows {
            db.execute_raw(row).await?;
        }
        return Ok(Vec::new());
    }
    let models: Vec<task_event::Model> = events
        .into_iter()
        .enumerate()
        .map(|(i, event)| task_event::Model {
            id: Uuid::now_v7(),
            tenant_id: task.tenant.uuid(),
            task_id: task.id.uuid(),
            seq: first + i as i64,
            kind: event
                .kind
                .unwrap_or(EventKind::StatusChanged)
                .as_str()
                .to_owned(),
            step_id: event.step_id,
            tool: event.tool,
            status: event.status,
            summary: event.summary,
            error: event.error,
            data_keys: json!(event.data_keys),
            data: redact(&event.data),
            created_at: now,
        })
        .collect();
    let insert = task_event::Entity::insert_many(
        models
            .iter()
            .cloned()
            .map(task_event::ActiveModel::from)
            .collect::<Vec<_>>(),
    );
    let stored = models
        .into_iter()
        .map(TaskEvent::try_from)
        .collect::<Result<Vec<_>>>()?;
    let backend = db.get_database_backend();
    let mut payloads = crate::runtime::events::notification_payloads(backend, &stored);
    if payloads.len() == 1 {
        // One round trip for all: the inserts as data-modifying CTEs (each
        // runs to completion whatever the outer query reads) and the
        // notification.
        let mut sql = String::from("WITH ");
        let mut values: Vec<sea_orm::Value> = Vec::new();
        for (i, statement) in std::iter::once(insert.build(backend))
            .chain(rows)
            .enumerate()
        {
            if i > 0 {
                sql.push_str(", ");
            }
            let shifted = shift_placeholders(&statement.sql, values.len());
            sql.push_str(&format!("w{i} AS ({shifted})"));
            values.extend(statement.values.map(|v| v.0).unwrap_or_default());
        }
        let n = values.len();
        sql.push_str(&format!(" SELECT pg_notify(${}, ${})", n + 1, n + 2));
        values.push(crate::runtime::events::CHANNEL.into());
        values.extend(payloads.pop().map(Into::into));
        db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    } else {
        insert.exec_without_returning(db).await?;
        for row in rows {
            db.execute_raw(row).await?;
        }
        crate::runtime::events::notify(db, payloads).await?;
    }
    Ok(stored)
}

/// `sql` (PostgreSQL syntax) with every `$N` placeholder renumbered
/// `$(N + by)`, so statements can be joined into one; quoted identifiers
/// and string literals are left alone.
fn shift_placeholders(sql: &str, by: usize) -> String {
    if by == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                let n: usize = digits.parse().unwrap_or(0);
                out.push_str(&format!("${}", n + by));
            }
            None => out.push(c),
        }
    }
    out
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

    pub async fn get(&self, scope: TenantScope, id: TaskId) -> Result<Task> {
        get_task(&self.db, scope, id).await
    }

    /// Several tasks at once (for batch loading); missing ids are absent.
    pub async fn get_many(&self, scope: TenantScope, ids: &[TaskId]) -> Result<Vec<Task>> {
        task::Entity::find_in(scope)
            .filter(task::Column::Id.is_in(ids.iter().map(|i| i.uuid()).collect::<Vec<_>>()))
            .all(&self.db)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    pub async fn list(
        &self,
        scope: TenantScope,
        filter: TaskFilter,
        request: PageRequest,
    ) -> Result<Page<Task>> {
        let mut select = task::Entity::find_in(scope);
        if !filter.statuses.is_empty() {
            select = select.filter(
                task::Column::Status.is_in(
                    filter
                        .statuses
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>(),
                ),
            );
        }
        if let Some(intent) = filter.intent {
            select = select.filter(task::Column::Intent.eq(intent));
        }
        if let Some(channel) = filter.channel {
            select = select.filter(task::Column::Channel.eq(channel.as_str()));
        }
        if let Some(parent) = filter.parent {
            select = select.filter(task::Column::ParentTaskId.eq(parent.uuid()));
        }
        let page = page::fetch(&self.db, select, task::Column::Id, request).await?;
        let items = page
            .items
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            has_next_page: page.has_next_page,
            has_previous_page: page.has_previous_page,
        })
    }

    /// Stored events with `seq > after`, oldest first, at most `limit`.
    pub async fn events(
        &self,
        scope: TenantScope,
        task_id: TaskId,
        after: i64,
        limit: u64,
    ) -> Result<Vec<TaskEvent>> {
        events_after(&self.db, scope, task_id, after, limit).await
    }

    /// A subject's tasks for its dossier: the newest `limit` and how many
    /// are not finished (its pending work), leaving out `except` (the task
    /// asking).
    pub async fn of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<SubjectTasks> {
        Ok(SubjectTasks {
            recent: self
                .recent_of_subject(scope, subject, except, limit)
                .await?,
            open: self.open_of_subject(scope, subject, except).await?,
        })
    }

    /// Up to `limit` of a subject's tasks (not `except`), newest first.
    pub async fn recent_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<Vec<Task>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        task::Entity::find_in(scope)
            .filter(about_subject(subject, except))
            .order_by_desc(task::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    /// How many of a subject's tasks (not `except`) are unfinished.
    pub async fn open_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
    ) -> Result<u64> {
        let open: Vec<&str> = TaskStatus::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        Ok(task::Entity::find_in(scope)
            .filter(about_subject(subject, except))
            .filter(task::Column::Status.is_in(open))
            .count(&self.db)
            .await?)
    }

    /// Every attempt of every step, in the order they ran.
    pub async fn steps(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<StepAttempt>> {
        Ok(task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(task_step::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(StepAttempt::from)
            .collect())
    }

    pub async fn reviews(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<Review>> {
        review::Entity::find_in(scope)
            .filter(review::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(review::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Review::try_from)
            .collect()
    }

    pub async fn artifacts(&self, scope: TenantScope, task_id: TaskId) -> Result<Vec<Artifact>> {
        Ok(artifact::Entity::find_in(scope)
            .filter(artifact::Column::TaskId.eq(task_id.uuid()))
            .order_by_asc(artifact::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Artifact::from)
            .collect())
    }

    /// The events of several tasks at once, each window oldest first: one
    /// statement for any number of tasks (for batch loading).
    pub async fn events_of_many(
        &self,
        scope: TenantScope,
        windows: &[(TaskId, EventWindow)],
    ) -> Result<HashMap<(TaskId, EventWindow), Vec<TaskEvent>>> {
        let mut out: HashMap<(TaskId, EventWindow), Vec<TaskEvent>> =
            windows.iter().map(|w| (*w, Vec::new())).collect();
        let windows: Vec<&(TaskId, EventWindow)> =
            windows.iter().filter(|(_, w)| w.until > w.after).collect();
        if windows.is_empty() {
            return Ok(out);
        }
        let mut any = Condition::any();
        for (task, window) in &windows {
            any = any.add(
                Condition::all()
                    .add(task_event::Column::TaskId.eq(task.uuid()))
                    .add(task_event::Column::Seq.gt(window.after))
                    .add(task_event::Column::Seq.lte(window.until)),
            );
        }
        let rows = task_event::Entity::find_in(scope)
            .filter(any)
            .order_by_asc(task_event::Column::TaskId)
            .order_by_asc(task_event::Column::Seq)
            .all(&self.db)
            .await?;
        for row in rows {
            let event = TaskEvent::try_from(row)?;
            // Windows of one task may overlap; an event goes to each.
            for (task, window) in &windows {
                if *task == event.task_id
                    && event.seq > window.after
                    && event.seq <= window.until
                    && let Some(list) = out.get_mut(&(*task, *window))
                {
                    list.push(event.clone());
                }
            }
        }
        Ok(out)
    }

    /// Every attempt of every step of several tasks at once, by task.
    pub async fn steps_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<StepAttempt>>> {
        let rows = task_step::Entity::find_in(scope)
            .filter(task_step::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(task_step::Column::Id)
            .all(&self.db)
            .await?;
        Ok(group(ids, rows, |r| r.task_id.into(), StepAttempt::from))
    }

    /// The reviews of several tasks at once, by task.
    pub async fn reviews_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<Review>>> {
        let rows = review::Entity::find_in(scope)
            .filter(review::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(review::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Review::try_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(group(ids, rows, |r| r.task_id, |r| r))
    }

    /// The artifacts of several tasks at once, by task.
    pub async fn artifacts_of_many(
        &self,
        scope: TenantScope,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<Artifact>>> {
        let rows = artifact::Entity::find_in(scope)
            .filter(artifact::Column::TaskId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(artifact::Column::Id)
            .all(&self.db)
            .await?;
        Ok(group(ids, rows, |r| r.task_id.into(), Artifact::from))
    }

    /// Cancel a task. An idle task (pending, in review, delegated) is
    /// cancelled at once; a running one before its next step.
    pub async fn cancel(&self, principal: &Principal, id: TaskId) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let task = self.get(scope, id).await?;
        if task.status.is_terminal() {
            return Err(Error::InvalidTransition(format!(
                "task is already {}; only unfinished tasks can be cancelled",
                task.status
            )));
        }
        let idle = vec![
            TaskStatus::Pending,
            TaskStatus::NeedsReview,
            TaskStatus::Delegated,
        ];
        let txn = self.db.begin().await?;
        let done = mutate(
            &txn,
            scope,
            id,
            &Guard::Unleased(idle),
            TaskChanges {
                status: Some(TaskStatus::Cancelled),
                completed_at: Some(Utc::now()),
                error: Some(Some(format!("cancelled by {}", principal.actor))),
                ..TaskChanges::default()
            },
            vec![
                NewEvent::status(TaskStatus::Cancelled, "cancelled")
                    .data(json!({"by": principal.actor.to_string()})),
            ],
        )
        .await?;
        if let Some((task, events)) = done {
            txn.commit().await?;
            self.sink.publish(&events);
            return Ok(task);
        }
        drop(txn);
        // Running: ask the worker to stop before its next step.
        task::Entity::update_many_in(scope)
            .col_expr(task::Column::CancelRequested, Expr::value(true))
            .filter(task::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        self.get(scope, id).await
    }

    /// Run a failed task again from the step that failed; settled steps are
    /// not run again.
    pub async fn retry(&self, principal: &Principal, id: TaskId) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let task = self.get(scope, id).await?;
        if task.status != TaskStatus::Failed {
            return Err(Error::InvalidTransition(format!(
                "task is {}; only FAILED tasks can be retried",
                task.status
            )));
        }
        // The failed step gets a fresh retry budget.
        let mut attempts = task.attempts.clone();
        if let Some(step) = &task.current_step_id {
            attempts.remove(step);
        }
        let txn = self.db.begin().await?;
        let (task, events) = mutate(
            &txn,
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::Failed]),
            TaskChanges {
                status: Some(TaskStatus::Pending),
                error: Some(None),
                completed_at: None,
                attempts: Some(attempts),
                run_after: Some(Utc::now()),
                ..TaskChanges::default()
            },
            vec![
                NewEvent::status(TaskStatus::Pending, "retry requested")
                    .data(json!({"by": principal.actor.to_string()})),
            ],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task changed meanwhile; try again".into()))?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }

    /// Claim a pending review atomically: exactly one caller wins.
    async fn claim_review(
        txn: &DatabaseTransaction,
        scope: TenantScope,
        task: TaskId,
        review_id: Uuid,
        decision: ReviewStatus,
        corrections: &Value,
        by: &str,
    ) -> Result<Review> {
        let claimed = review::Entity::update_many_in(scope)
            .col_expr(review::Column::Status, Expr::value(decision.as_str()))
            .col_expr(
                review::Column::Corrections,
                Expr::value(redact(corrections)),
            )
            .col_expr(review::Column::ResolvedBy, Expr::value(by))
            .col_expr(review::Column::ResolvedAt, Expr::value(Utc::now()))
            .filter(review::Column::Id.eq(review_id))
            .filter(review::Column::TaskId.eq(task.uuid()))
            .filter(review::Column::Status.eq(ReviewStatus::Pending.as_str()))
            .exec_with_returning(txn)
            .await?;
        match claimed.into_iter().next() {
            Some(r) => Review::try_from(r),
            None => {
                let exists = review::Entity::find_by_id_in(scope, review_id)
                    .filter(review::Column::TaskId.eq(task.uuid()))
                    .one(txn)
                    .await?;
                Err(match exists {
                    None => Error::not_found("review"),
                    Some(_) => Error::Conflict("this review has already been resolved".into()),
                })
            }
        }
    }

    /// Approve the named pending review; `corrections` are merged into the
    /// task's state (a correction named `intent` also sets the intent).
    pub async fn resume(
        &self,
        principal: &Principal,
        id: TaskId,
        review_id: Uuid,
        corrections: Value,
    ) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let corrections_map = match &corrections {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            _ => return Err(Error::validation("corrections must be a JSON object")),
        };
        // Check existence first so another tenant's task is NOT_FOUND.
        let current = self.get(scope, id).await?;
        if current.status != TaskStatus::NeedsReview {
            return Err(Error::Conflict(format!(
                "task is {}, not NEEDS_REVIEW; there is nothing to resume",
                current.status
            )));
        }
        let by = principal.actor.to_string();
        let txn = self.db.begin().await?;
        let review = Self::claim_review(
            &txn,
            scope,
            id,
            review_id,
            ReviewStatus::Approved,
            &corrections,
            &by,
        )
        .await?;
        let task = get_task(&txn, scope, id).await?;
        let mut state = task.state.as_object().cloned().unwrap_or_default();
        for (k, v) in &corrections_map {
            state.insert(k.clone(), v.clone());
        }
        let mut changes = TaskChanges {
            status: Some(TaskStatus::Pending),
            state: Some(Value::Object(state)),
            run_after: Some(Utc::now()),
            ..TaskChanges::default()
        };
        if review.step_id == INTENT_REVIEW_STEP {
            changes.intent_reviewed = Some(true);
            if let Some(intent) = corrections_map.get("intent").and_then(Value::as_str) {
                changes.intent = Some(Some(intent.to_owned()));
                changes.confidence = Some(1.0);
            }
        } else {
            let mut reviewed = task.reviewed_step_ids.clone();
            reviewed.push(review.step_id.clone());
            changes.reviewed_step_ids = Some(reviewed);
        }
        let keys: Vec<String> = corrections_map.keys().cloned().collect();
        let mut event = NewEvent::status(TaskStatus::Pending, "review approved").data(json!({
            "review_id": review_id.to_string(),
            "decision": "APPROVED",
            "by": by,
            "corrections_applied": keys,
        }));
        event.data_keys = keys;
        let (task, events) = mutate(
            &txn,
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::NeedsReview]),
            changes,
            vec![event],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task is no longer awaiting review".into()))?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }

    /// Reject the named pending review: the task is cancelled with the reason.
    pub async fn reject(
        &self,
        principal: &Principal,
        id: TaskId,
        review_id: Uuid,
        reason: &str,
    ) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        let current = self.get(scope, id).await?;
        if current.status != TaskStatus::NeedsReview {
            return Err(Error::Conflict(format!(
                "task is {}, not NEEDS_REVIEW; there is nothing to reject",
                current.status
            )));
        }
        let by = principal.actor.to_string();
        let txn = self.db.begin().await?;
        Self::claim_review(
            &txn,
            scope,
            id,
            review_id,
            ReviewStatus::Rejected,
            &json!({"reason": reason}),
            &by,
        )
        .await?;
        let message = format!("rejected in review: {reason}");
        let (task, events) = mutate(
            &txn,
            scope,
            id,
            &Guard::Unleased(vec![TaskStatus::NeedsReview]),
            TaskChanges {
                status: Some(TaskStatus::Cancelled),
                error: Some(Some(message.clone())),
                completed_at: Some(Utc::now()),
                ..TaskChanges::default()
            },
            vec![
                NewEvent::status(TaskStatus::Cancelled, message).data(json!({
                    "review_id": review_id.to_string(),
                    "decision": "REJECTED",
                    "by": by,
                })),
            ],
        )
        .await?
        .ok_or_else(|| Error::Conflict("the task is no longer awaiting review".into()))?;
        txn.commit().await?;
        self.sink.publish(&events);
        Ok(task)
    }

    /// The callback of a delegated step, authenticated by the task's
    /// single-use token alone. A wrong, reused or foreign token is refused
    /// the same way as an unknown task (`NOT_FOUND`), so it reveals nothing.
    pub async fn complete_delegation(
        &self,
        task_id: TaskId,
        token: &str,
        outcome: DelegationOutcome,
    ) -> Result<Task> {
        let refused = || Error::not_found("delegated task or token");
        let hash = sha256_hex(token.as_bytes());
        let txn = self.db.begin().await?;
        // unscoped: the token names its tenant; the task id must match it.
        let claimed = delegation::Entity::update_many()
            .col_expr(
                delegation::Column::Status,
                Expr::value(if outcome.success {
                    "COMPLETED"
                } else {
                    "FAILED"
                }),
            )
            .col_expr(
                delegation::Column::Result,
                Expr::value(redact(&outcome.data)),
            )
            .col_expr(
                delegation::Column::Error,
                Expr::value(outcome.error.clone()),
            )
            .col_expr(delegation::Column::ResolvedAt, Expr::value(Utc::now()))
            .filter(delegation::Column::TokenHash.eq(hash))
            .filter(delegation::Column::TaskId.eq(task_id.uuid()))
            .filter(delegation::Column::Status.eq("PENDING"))
            .exec_with_returning(&txn)
            .await?;
        let Some(delegation) = claimed.into_iter().next() else {
            return Err(refused());
        };
        let scope = TenantScope::new(delegation.tenant_id.into());
        let task = get_task(&txn, scope, task_id).await?;
        let step = task
            .frozen_plan
            .iter()
            .find(|s| s.id == delegation.step_id)
            .cloned()
            .ok_or_else(|| Error::internal("delegated step is not in the plan"))?;
        let mut state = task.state.as_object().cloned().unwrap_or_default();
        let mut outputs = task.step_outputs.clone();
        let mut settled = task.settled_step_ids.clone();
        let mut events = vec![NewEvent::default()];
        let (status, error, completed_at);
        if outcome.success {
            if let Value::Object(data) = &outcome.data {
                for (k, v) in data {
                    state.insert(k.clone(), v.clone());
                }
            }
            outputs.insert(step.id.clone(), outcome.data.clone());
            settled.push(step.id.clone());
            let mut e = NewEvent::new(EventKind::StepCompleted, "the delegated work completed")
                .step(&step.id, &step.tool)
                .data(json!({"external_ref": delegation.external_ref}));
            e.status = Some("COMPLETED".into());
            e.data_keys = outcome
                .data
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            events[0] = e;
            (status, error, completed_at) = (TaskStatus::Pending, None, None);
            events.push(NewEvent::status(
                TaskStatus::Pending,
                "delegation completed; continuing",
            ));
        } else {
            let message = outcome
                .error
                .clone()
                .unwrap_or_else(|| "the delegated work failed".to_owned());
            let mut e = NewEvent::new(EventKind::StepFailed, "the delegated work failed")
                .step(&step.id, &step.tool)
                .error(message.clone())
                .data(json!({"external_ref": delegation.external_ref}));
            e.status = Some("FAILED".into());
            events[0] = e;
            if step.stop_on_failure {
                (status, error, completed_at) =
                    (TaskStatus::Failed, Some(message.clone()), Some(Utc::now()));
                events.push(NewEvent::status(TaskStatus::Failed, message));
            } else {
                settled.push(step.id.clone());
                (status, error, completed_at) = (TaskStatus::Pending, None, None);
                events.push(NewEvent::status(
                    TaskStatus::Pending,
                    "delegation failed; continuing",
                ));
            }
        }
        let (task, events) = mutate(
            &txn,
            scope,
            task_id,
            &Guard::Unleased(vec![TaskStatus::Delegated]),
            TaskChanges {
                status: Some(status),
                state: Some(Value::Object(state)),
                step_outputs: Some(outputs),
                settled_step_ids: Some(settled),
                error: Some(error),
                completed_at,
                current_step_id: Some(if status == TaskStatus::Failed {
                    Some(step.id.clone())
                } else {
                    None
                }),
                run_after: Some(Utc::now()),
                ..TaskChanges::default()
            },
            events,
        )
        .await?
        .ok_or_else(refused)?;
        txn.commit().await?;
        self.sink.publish(&events);
        self.runnable();
        Ok(task)
    }
}

/// Stored events of a task with `seq > after`, oldest first.
pub async fn events_after<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    task_id: TaskId,
    after: i64,
    limit: u64,
) -> Result<Vec<TaskEvent>> {
    task_event::Entity::find_in(scope)
        .filter(task_event::Column::TaskId.eq(task_id.uuid()))
        .filter(task_event::Column::Seq.gt(after))
        .order_by_asc(task_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(TaskEvent::try_from)
        .collect()
}

/// Rows grouped by task, every id present (with an empty list if need be),
/// each group in the rows' order.
fn group<R, T>(
    ids: &[TaskId],
    rows: Vec<R>,
    task_of: impl Fn(&R) -> TaskId,
    convert: impl Fn(R) -> T,
) -> HashMap<TaskId, Vec<T>> {
    let mut out: HashMap<TaskId, Vec<T>> = ids.iter().map(|id| (*id, Vec::new())).collect();
    for row in rows {
        let task = task_of(&row);
        out.entry(task).or_default().push(convert(row));
    }
    out
}

pub async fn get_task<C: ConnectionTrait>(db: &C, scope: TenantScope, id: TaskId) -> Result<Task> {
    task::Entity::find_by_id_in(scope, id.uuid())
        .one(db)
        .await?
        .ok_or_else(|| Error::not_found("task"))
        .and_then(Task::try_from)
}

/// A subject's tasks, but not `except`.
fn about_subject(subject: Uuid, except: Option<TaskId>) -> Condition {
    let mut about = Condition::all().add(task::Column::SubjectId.eq(subject));
    if let Some(except) = except {
        about = about.add(task::Column::Id.ne(except.uuid()));
    }
    about
}

#[cfg(test)]
mod tests {
    use super::shift_placeholders;

    #[test]
    fn placeholders_are_renumbered_outside_quotes_only() {
        assert_eq!(
            shift_placeholders(
                r#"INSERT INTO "t$1" ("a", "b") VALUES ($1, $12) -- '$2'"#,
                3
            ),
            r#"INSERT INTO "t$1" ("a", "b") VALUES ($4, $15) -- '$2'"#
        );
        assert_eq!(shift_placeholders("SELECT $1", 0), "SELECT $1");
        assert_eq!(shift_placeholders("SELECT $x, $", 2), "SELECT $x, $");
    }
}
