//! What a task's run records, on the wire: each attempt of each step with
//! its usage, the reviews it asked for (each naming its task), and the
//! artifacts it left.

use async_graphql::{Context, ID, Json, Object, ScalarType, SimpleObject, Value as AnyValue};
use brainstem_domain::{Error, tasks, tools::Usage as DomainUsage};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{ReviewStatus, Task, task_scope};
use crate::error::ResultExt;
use crate::schema::context::principal;
use crate::schema::ids::{self, NodeType};
use crate::schema::loaders::{TaskKey, loader};
use crate::schema::plain_list::Plain;

/// Token and cost accounting.
#[derive(SimpleObject, Clone, Copy)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cost in millionths of the billing currency unit.
    pub cost_micros: u64,
}

impl From<DomainUsage> for Usage {
    fn from(u: DomainUsage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_micros: u.cost_micros,
        }
    }
}

/// One attempt of one step.
#[derive(Clone)]
pub struct TaskStep(pub std::sync::Arc<tasks::StepAttempt>);

#[Object]
impl TaskStep {
    async fn step_id(&self) -> &str {
        &self.0.step_id
    }
    async fn tool(&self) -> &str {
        &self.0.tool
    }
    async fn attempt(&self) -> i32 {
        self.0.attempt
    }
    /// `COMPLETED`, `FAILED` or `DELEGATED`.
    async fn status(&self) -> &str {
        &self.0.status
    }
    /// The resolved arguments, PII redacted.
    async fn args(&self) -> Json<Value> {
        Json(self.0.args.clone())
    }
    /// The step's output, PII redacted. An agent step's output holds the
    /// prompt its model call was sent (`messages`: the tenant's system
    /// prompt among them), which only tenant admins see; for anyone else
    /// it is left out.
    async fn output(&self, ctx: &Context<'_>) -> Json<Value> {
        let mut output = self.0.output.clone();
        let admin = principal(ctx).is_ok_and(|p| p.require_scope("admin").is_ok());
        if self.0.tool == "agent"
            && !admin
            && let Value::Object(fields) = &mut output
        {
            fields.remove("messages");
        }
        Json(output)
    }
    async fn summary(&self) -> &str {
        &self.0.summary
    }
    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
    /// `<task id>:<step id>`, handed to the tool on every attempt.
    async fn idempotency_key(&self) -> &str {
        &self.0.idempotency_key
    }
    async fn usage(&self) -> Usage {
        self.0.usage.into()
    }
    async fn started_at(&self) -> DateTime<Utc> {
        self.0.started_at
    }
    async fn finished_at(&self) -> DateTime<Utc> {
        self.0.finished_at
    }
    async fn duration_ms(&self) -> i64 {
        self.0.duration_ms
    }
}

impl Plain for TaskStep {
    const PLAIN: &'static [&'static str] = &[
        "stepId",
        "tool",
        "attempt",
        "status",
        "summary",
        "error",
        "idempotencyKey",
        "startedAt",
        "finishedAt",
        "durationMs",
    ];

    fn plain(&self, name: &str) -> AnyValue {
        step_value(&self.0, name)
    }
}

/// Field `name` of `step`, one of [`TaskStep::PLAIN`] (what its resolver
/// answers).
pub(super) fn step_value(step: &tasks::StepAttempt, name: &str) -> AnyValue {
    match name {
        "stepId" => AnyValue::String(step.step_id.clone()),
        "tool" => AnyValue::String(step.tool.clone()),
        "attempt" => AnyValue::from(step.attempt),
        "status" => AnyValue::String(step.status.clone()),
        "summary" => AnyValue::String(step.summary.clone()),
        "error" => step.error.clone().map_or(AnyValue::Null, AnyValue::String),
        "idempotencyKey" => AnyValue::String(step.idempotency_key.clone()),
        "startedAt" => step.started_at.to_value(),
        "finishedAt" => step.finished_at.to_value(),
        "durationMs" => AnyValue::from(step.duration_ms),
        _ => AnyValue::Null,
    }
}

/// A request for a human decision.
#[derive(Clone)]
pub struct Review(pub tasks::Review);

#[Object]
impl Review {
    async fn id(&self) -> ID {
        ids::encode(NodeType::Review, self.0.id)
    }
    async fn task_id(&self) -> ID {
        ids::encode(NodeType::Task, self.0.task_id.uuid())
    }
    /// The task that waits on it (or waited).
    async fn task(&self, ctx: &Context<'_>) -> async_graphql::Result<Task> {
        let scope = task_scope(ctx)?;
        loader(ctx)
            .load_one(TaskKey(scope, self.0.task_id))
            .await?
            .map(Task)
            .ok_or_else(|| Error::not_found(format!("task {}", self.0.task_id)))
            .gql()
    }
    /// The step under review, or `intent_detection`.
    async fn step_id(&self) -> &str {
        &self.0.step_id
    }
    async fn reason(&self) -> &str {
        &self.0.reason
    }
    async fn confidence(&self) -> Option<f64> {
        self.0.confidence
    }
    /// What would happen on approval (e.g. the detected intent or the
    /// step's arguments), PII redacted.
    async fn proposed(&self) -> Json<Value> {
        Json(self.0.proposed.clone())
    }
    async fn status(&self) -> ReviewStatus {
        self.0.status.into()
    }
    async fn corrections(&self) -> Json<Value> {
        Json(self.0.corrections.clone())
    }
    async fn resolved_by(&self) -> Option<&str> {
        self.0.resolved_by.as_deref()
    }
    async fn resolved_at(&self) -> Option<DateTime<Utc>> {
        self.0.resolved_at
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// Something a step created or changed.
#[derive(SimpleObject, Clone)]
pub struct Artifact {
    pub step_id: String,
    pub tool: String,
    pub kind: String,
    pub role: String,
    pub reference: String,
    pub metadata: Json<Value>,
    pub created_at: DateTime<Utc>,
}

impl From<tasks::Artifact> for Artifact {
    fn from(a: tasks::Artifact) -> Self {
        Self {
            step_id: a.step_id,
            tool: a.tool,
            kind: a.kind,
            role: a.role,
            reference: a.reference,
            metadata: Json(a.metadata),
            created_at: a.created_at,
        }
    }
}
