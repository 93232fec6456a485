//! The task record: its statuses and channels, the [`Task`] read from a row,
//! what a client or a tool asks for when starting one ([`NewTask`],
//! [`NewChildTask`]), list filters, and the rows a task fans out to (step
//! attempts, reviews, artifacts).
//!
//! Statuses, channels and event kinds are stored as their text
//! (`as_str`/`FromStr`); a stored text that names no variant is an internal
//! error, never a default. A task's plan is frozen in the record when it is
//! planned, so a later change of the plan does not move a running task.

use std::{fmt, str::FromStr};

use brainstem_entity::{
    ConversationId, PlanId, TaskId, TenantId, TenantScope, artifact, review, task, task_step,
};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::{Error, Result, catalogue::plans::StepDef, models::usage::Usage};

pub const DEFAULT_MAX_STEPS: u32 = 50;
pub const DEFAULT_CONFIDENCE_THRESHOLD: f64 = 0.8;
/// The review step id used for the intent-confidence gate.
pub const INTENT_REVIEW_STEP: &str = "intent_detection";

/// The review of a plan waiting for approval (a task started in `PLAN`
/// mode).
pub const PLAN_REVIEW_STEP: &str = "plan_approval";

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
        AwaitingApproval => "AWAITING_APPROVAL",
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

    /// Finished, or waiting for a person (a review, an approval) or an
    /// external system: it will not move on its own.
    pub fn is_settled(self) -> bool {
        self.is_terminal()
            || matches!(
                self,
                Self::NeedsReview | Self::AwaitingApproval | Self::Delegated
            )
    }
}

string_enum!(
    /// How a client asked a task to run: start and return (the default);
    /// start and wait for the outcome (up to a limit); plan, then wait in
    /// `AWAITING_APPROVAL` for a person; or a dry run that plans and
    /// answers and runs no step.
    TaskMode {
        Enqueue => "ENQUEUE",
        EnqueueAndWait => "ENQUEUE_AND_WAIT",
        Plan => "PLAN",
        Answer => "ANSWER",
    }
);

// `string_enum!` takes no attributes on variants, so no `#[default]`.
#[allow(clippy::derivable_impls)]
impl Default for TaskMode {
    fn default() -> Self {
        Self::Enqueue
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
        GuardrailMatched => "GuardrailMatched",
        TurnQueued => "TurnQueued",
        TurnInterrupted => "TurnInterrupted",
        TaskForked => "TaskForked",
        ForkedFrom => "ForkedFrom",
    }
);

string_enum!(
    /// What a turn of a conversation sent while earlier turns are
    /// unfinished does (double texting): refuse (`CONFLICT`), wait for
    /// them in order, stop them and follow them (they stay in the
    /// history, marked interrupted, with the text they had), or stop them
    /// and leave them out of the history (their records stay).
    Multitask {
        Reject => "REJECT",
        Enqueue => "ENQUEUE",
        Interrupt => "INTERRUPT",
        Rollback => "ROLLBACK",
    }
);

// `string_enum!` takes no attributes on variants, so no `#[default]`.
#[allow(clippy::derivable_impls)]
impl Default for Multitask {
    fn default() -> Self {
        Self::Enqueue
    }
}

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
    pub mode: TaskMode,
    /// The conversation the task is a turn of.
    pub conversation: Option<ConversationId>,
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
    /// Milliseconds its steps' tool calls took so far (its running time;
    /// waiting for a worker, a review or a delegation does not count).
    pub running_ms: i64,
    /// What an agent step concluded, as stored (`None` until one did).
    pub result: Option<Value>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// A stored JSON object, moved out (anything else reads as empty).
fn into_map(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

pub(super) fn strings(v: &Value) -> Vec<String> {
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
            mode: m.mode.parse()?,
            conversation: m.conversation_id.map(ConversationId::from),
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
            attempts: into_map(m.attempts),
            current_step_id: m.current_step_id,
            state: m.state,
            step_outputs: into_map(m.step_outputs),
            max_steps: u32::try_from(m.max_steps).unwrap_or(DEFAULT_MAX_STEPS),
            error: m.error_message,
            trace_id: m.trace_id,
            lease_owner: m.lease_owner,
            lease_expires_at: m.lease_expires_at,
            run_after: m.run_after,
            cancel_requested: m.cancel_requested,
            last_seq: m.last_seq,
            usage: Usage::from_json(&m.usage),
            running_ms: m.running_ms,
            result: m.result,
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

    /// The `index`-th memory its result suggests (see `Task.result`).
    pub fn memory_suggestion(&self, index: usize) -> Option<&str> {
        self.result
            .as_ref()?
            .get("memory_suggestions")?
            .get(index)?
            .as_str()
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
    pub mode: TaskMode,
    /// Append the task to this conversation (the caller's own).
    pub conversation: Option<ConversationId>,
    pub max_steps: Option<u32>,
    pub confidence_threshold: Option<f64>,
    /// Higher runs first among the tenant's runnable tasks (default 0).
    pub priority: i32,
    /// Tasks sharing this key (a conversation, a customer) run at most
    /// their plan's `max_concurrent` at once. A turn of a conversation
    /// takes its conversation's key instead (one turn at a time).
    pub concurrency_key: Option<String>,
    /// For a turn of a conversation: what it does while earlier turns are
    /// unfinished (default: the conversation's setting).
    pub multitask: Option<Multitask>,
}

/// A child task started by a tool (declared with the tools' ports).
pub use crate::catalogue::ports::NewChildTask;

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
