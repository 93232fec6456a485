//! Plans, tools and tasks on the wire.

use async_graphql::{
    Context, Enum, ID, InputObject, Json, Object, SimpleObject, connection::Connection,
};
use brainstem_domain::{
    Error, PlanId, TaskId, TenantScope,
    plans::{self, PlanDef, RetryPolicy, StepDef},
    tasks::{self, DelegationOutcome, EventWindow, NewTask, TaskFilter as DomainFilter},
    tools::Usage as DomainUsage,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{
    domain,
    ids::{self, NodeType},
    loaders::{TaskArtifactsKey, TaskEventsKey, TaskKey, TaskReviewsKey, TaskStepsKey, loader},
    principal,
    query::page_request,
    types::connection,
};
use crate::error::ResultExt;

macro_rules! mirror_enum {
    ($(#[$doc:meta])* $name:ident = $domain:path { $($variant:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name { $($variant),* }

        impl From<$domain> for $name {
            fn from(v: $domain) -> Self {
                match v { $(<$domain>::$variant => $name::$variant),* }
            }
        }

        impl From<$name> for $domain {
            fn from(v: $name) -> Self {
                match v { $($name::$variant => <$domain>::$variant),* }
            }
        }
    };
}

mirror_enum!(
    /// Where a task is in its life.
    TaskStatus = tasks::TaskStatus {
        Pending, DetectingIntent, Planning, Executing, NeedsReview, Delegated, Completed,
        Failed, Cancelled,
    }
);

mirror_enum!(
    /// Where a task came from.
    Channel = tasks::Channel { Web, Api, Webhook, Email, System }
);

mirror_enum!(
    /// What a task event records.
    TaskEventKind = tasks::EventKind {
        StatusChanged, StepStarted, StepCompleted, StepFailed, StepSkipped, StepsInjected,
        ReviewRequested, Delegated, TokenDelta, MemoryRecalled,
    }
);

mirror_enum!(
    ReviewStatus = tasks::ReviewStatus {
        Pending,
        Approved,
        Rejected
    }
);

fn task_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    principal(ctx)?.require_scope("tasks:read").gql()
}

fn task_id(id: &ID) -> async_graphql::Result<TaskId> {
    ids::decode_as(id, NodeType::Task).map(TaskId::from).gql()
}

fn review_id(id: &ID) -> async_graphql::Result<Uuid> {
    ids::decode_as(id, NodeType::Review).gql()
}

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

/// One step of a plan.
#[derive(SimpleObject, Clone)]
pub struct PlanStep {
    pub id: String,
    pub tool: String,
    pub args: Json<Value>,
    pub condition: Option<String>,
    pub stop_on_failure: bool,
    pub requires_review: bool,
    pub max_attempts: u32,
    pub timeout_secs: Option<u64>,
}

impl From<&StepDef> for PlanStep {
    fn from(s: &StepDef) -> Self {
        Self {
            id: s.id.clone(),
            tool: s.tool.clone(),
            args: Json(s.args.clone()),
            condition: s.condition.clone(),
            stop_on_failure: s.stop_on_failure,
            requires_review: s.requires_review,
            max_attempts: s.retry.unwrap_or_default().max_attempts,
            timeout_secs: s.timeout_secs,
        }
    }
}

/// One published version of a plan.
#[derive(Clone)]
pub struct Plan(pub plans::Plan);

#[Object]
impl Plan {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Plan, self.0.id.uuid())
    }
    async fn key(&self) -> &str {
        &self.0.key
    }
    async fn version(&self) -> i32 {
        self.0.version
    }
    async fn intent(&self) -> &str {
        &self.0.intent
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    async fn priority(&self) -> i32 {
        self.0.priority
    }
    /// Intent-detection patterns (case-insensitive regular expressions).
    async fn patterns(&self) -> &[String] {
        &self.0.patterns
    }
    async fn steps(&self) -> Vec<PlanStep> {
        self.0.steps.iter().map(PlanStep::from).collect()
    }
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// The key of the capability that brings this plan; `null` for the
    /// tenant's own plans.
    async fn capability_key(&self) -> Option<&str> {
        self.0.capability.as_deref()
    }
    /// Every version of this plan, newest first.
    async fn versions(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Plan>> {
        let versions = match &self.0.capability {
            Some(_) => domain(ctx).capabilities.plan_versions(&self.0.key).await,
            None => {
                let scope = task_scope(ctx)?;
                domain(ctx).plans.versions(scope, &self.0.key).await
            }
        };
        Ok(versions.gql()?.into_iter().map(Plan).collect())
    }
}

/// A tool this server can run.
#[derive(SimpleObject)]
pub struct Tool {
    pub key: String,
    pub description: String,
    pub input_schema: Json<Value>,
}

/// One attempt of one step.
#[derive(Clone)]
pub struct TaskStep(pub tasks::StepAttempt);

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
    async fn output(&self) -> Json<Value> {
        Json(self.0.output.clone())
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

/// A request for a human decision.
#[derive(Clone)]
pub struct Review(pub tasks::Review);

#[Object]
impl Review {
    async fn id(&self) -> ID {
        ids::encode(NodeType::Review, self.0.id)
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

/// The plan version a task runs.
#[derive(SimpleObject, Clone)]
pub struct PlanRef {
    pub key: String,
    pub version: i32,
}

/// A unit of work: input, detected intent, the frozen plan, and progress.
#[derive(Clone)]
pub struct Task(pub tasks::Task);

impl Task {
    async fn load_reviews(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<tasks::Review>> {
        Ok(loader(ctx)
            .load_one(TaskReviewsKey(self.0.scope(), self.0.id))
            .await?
            .unwrap_or_default())
    }
}

#[Object]
impl Task {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Task, self.0.id.uuid())
    }
    async fn status(&self) -> TaskStatus {
        self.0.status.into()
    }
    async fn channel(&self) -> Channel {
        self.0.channel.into()
    }
    async fn input(&self) -> &str {
        &self.0.input
    }
    async fn payload(&self) -> Json<Value> {
        Json(self.0.payload.clone())
    }
    async fn subject_id(&self) -> Option<String> {
        self.0.subject_id.map(|s| s.to_string())
    }
    async fn intent(&self) -> Option<&str> {
        self.0.intent.as_deref()
    }
    /// Intent confidence, 0–1 (1 when the client named the intent or plan).
    async fn confidence(&self) -> f64 {
        self.0.confidence
    }
    async fn confidence_threshold(&self) -> f64 {
        self.0.confidence_threshold
    }
    /// The plan version the task froze (`null` before planning).
    async fn plan(&self) -> Option<PlanRef> {
        match (&self.0.plan_key, self.0.plan_version) {
            (Some(key), Some(version)) => Some(PlanRef {
                key: key.clone(),
                version,
            }),
            _ => None,
        }
    }
    /// The steps this task runs: the frozen plan plus injected steps.
    async fn frozen_plan(&self) -> Vec<PlanStep> {
        self.0.frozen_plan.iter().map(PlanStep::from).collect()
    }
    /// Steps that will not run again (completed, skipped, or failed without
    /// stopping the task).
    async fn settled_step_ids(&self) -> &[String] {
        &self.0.settled_step_ids
    }
    async fn current_step_id(&self) -> Option<&str> {
        self.0.current_step_id.as_deref()
    }
    async fn state(&self) -> Json<Value> {
        Json(self.0.state.clone())
    }
    async fn max_steps(&self) -> u32 {
        self.0.max_steps
    }
    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
    async fn trace_id(&self) -> &str {
        &self.0.trace_id
    }
    async fn idempotency_key(&self) -> Option<&str> {
        self.0.idempotency_key.as_deref()
    }
    async fn usage(&self) -> Usage {
        self.0.usage.into()
    }
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    async fn started_at(&self) -> Option<DateTime<Utc>> {
        self.0.started_at
    }
    async fn completed_at(&self) -> Option<DateTime<Utc>> {
        self.0.completed_at
    }
    /// The task that spawned this one.
    async fn parent(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Task>> {
        match self.0.parent {
            Some(id) => Ok(loader(ctx)
                .load_one(TaskKey(self.0.scope(), id))
                .await?
                .map(Task)),
            None => Ok(None),
        }
    }
    /// Tasks this task spawned.
    async fn children(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, Task>> {
        let page = domain(ctx)
            .tasks
            .list(
                self.0.scope(),
                DomainFilter {
                    parent: Some(self.0.id),
                    ..DomainFilter::default()
                },
                page_request(first, after)?,
            )
            .await
            .gql()?;
        prefetch(ctx, &page.items).await?;
        Ok(connection(page, |t| t.id.uuid(), Task))
    }
    /// Every attempt of every step, in the order they ran.
    async fn steps(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<TaskStep>> {
        Ok(loader(ctx)
            .load_one(TaskStepsKey(self.0.scope(), self.0.id))
            .await?
            .unwrap_or_default()
            .into_iter()
            .map(TaskStep)
            .collect())
    }
    /// Stored events with `seq > after` (default 0), oldest first: the
    /// first `first` of them, or with `last`, the latest `last`.
    async fn events(
        &self,
        ctx: &Context<'_>,
        after: Option<i64>,
        #[graphql(default = 100)] first: i32,
        last: Option<i32>,
    ) -> async_graphql::Result<Vec<super::events::TaskEvent>> {
        let window = event_window(&self.0, after, first, last).gql()?;
        Ok(loader(ctx)
            .load_one(TaskEventsKey(self.0.scope(), self.0.id, window))
            .await?
            .unwrap_or_default()
            .into_iter()
            .map(super::events::TaskEvent::from)
            .collect())
    }
    async fn reviews(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Review>> {
        Ok(self
            .load_reviews(ctx)
            .await?
            .into_iter()
            .map(Review)
            .collect())
    }
    /// The review the task waits for, if it is in `NEEDS_REVIEW`.
    async fn pending_review(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Review>> {
        if self.0.status != tasks::TaskStatus::NeedsReview {
            return Ok(None);
        }
        Ok(self
            .load_reviews(ctx)
            .await?
            .into_iter()
            .find(|r| r.status == tasks::ReviewStatus::Pending)
            .map(Review))
    }
    async fn artifacts(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Artifact>> {
        Ok(loader(ctx)
            .load_one(TaskArtifactsKey(self.0.scope(), self.0.id))
            .await?
            .unwrap_or_default()
            .into_iter()
            .map(Artifact::from)
            .collect())
    }
}

/// The events `Task.events(after, first, last)` reads.
fn event_window(
    task: &tasks::Task,
    after: Option<i64>,
    first: i32,
    last: Option<i32>,
) -> Result<EventWindow, Error> {
    let after = after.unwrap_or(0);
    match last {
        Some(n) if (1..=1000).contains(&n) => Ok(EventWindow::last(task, after, n as u64)),
        Some(_) => Err(Error::validation("`last` must be between 1 and 1000")),
        None if (1..=1000).contains(&first) => Ok(EventWindow::first(after, first as u64)),
        None => Err(Error::validation("`first` must be between 1 and 1000")),
    }
}

/// Load what the operation selects of every task of a page (steps, event
/// windows, reviews, artifacts, parents), one batch per relation, before
/// the items resolve; each item then finds its rows in the operation's
/// loader cache. The loader batches by time as well, but a busy server may
/// take longer than the batch delay to resolve a whole page.
async fn prefetch(ctx: &Context<'_>, page: &[tasks::Task]) -> async_graphql::Result<()> {
    let node = ctx.look_ahead().field("edges").field("node");
    if page.is_empty() || !node.exists() {
        return Ok(());
    }
    let loader = loader(ctx);
    let steps = async {
        if node.field("steps").exists() {
            loader
                .load_many(page.iter().map(|t| TaskStepsKey(t.scope(), t.id)))
                .await?;
        }
        Ok::<_, async_graphql::Error>(())
    };
    let reviews = async {
        if node.field("reviews").exists() || node.field("pendingReview").exists() {
            loader
                .load_many(page.iter().map(|t| TaskReviewsKey(t.scope(), t.id)))
                .await?;
        }
        Ok(())
    };
    let artifacts = async {
        if node.field("artifacts").exists() {
            loader
                .load_many(page.iter().map(|t| TaskArtifactsKey(t.scope(), t.id)))
                .await?;
        }
        Ok(())
    };
    let parents = async {
        if node.field("parent").exists() {
            loader
                .load_many(
                    page.iter()
                        .filter_map(|t| t.parent.map(|p| TaskKey(t.scope(), p))),
                )
                .await?;
        }
        Ok(())
    };
    let events = async {
        let mut keys = Vec::new();
        // Each selection of `events` (aliases may differ in arguments).
        for field in node.field("events").selection_fields() {
            let args = field.arguments()?;
            let int = |name: &str| {
                args.iter().find_map(|(n, v)| match v {
                    async_graphql::Value::Number(x) if n.as_str() == name => x.as_i64(),
                    _ => None,
                })
            };
            let first = int("first").unwrap_or(100) as i32;
            let last = int("last").map(|n| n as i32);
            for task in page {
                // Bad arguments are reported by the field itself.
                if let Ok(window) = event_window(task, int("after"), first, last) {
                    keys.push(TaskEventsKey(task.scope(), task.id, window));
                }
            }
        }
        if !keys.is_empty() {
            loader.load_many(keys).await?;
        }
        Ok(())
    };
    futures_util::try_join!(steps, reviews, artifacts, parents, events)?;
    Ok(())
}

#[derive(InputObject)]
pub struct TaskFilter {
    pub statuses: Option<Vec<TaskStatus>>,
    pub intent: Option<String>,
    pub channel: Option<Channel>,
}

#[derive(Default)]
pub struct TaskQuery;

#[Object]
impl TaskQuery {
    /// One task of the caller's tenant.
    async fn task(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Task> {
        let scope = task_scope(ctx)?;
        let id = task_id(&id)?;
        Ok(Task(domain(ctx).tasks.get(scope, id).await.gql()?))
    }

    /// The caller's tenant's tasks, oldest first.
    async fn tasks(
        &self,
        ctx: &Context<'_>,
        filter: Option<TaskFilter>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, Task>> {
        let scope = task_scope(ctx)?;
        let filter = filter
            .map(|f| DomainFilter {
                statuses: f
                    .statuses
                    .unwrap_or_default()
                    .into_iter()
                    .map(Into::into)
                    .collect(),
                intent: f.intent,
                channel: f.channel.map(Into::into),
                parent: None,
            })
            .unwrap_or_default();
        let page = domain(ctx)
            .tasks
            .list(scope, filter, page_request(first, after)?)
            .await
            .gql()?;
        prefetch(ctx, &page.items).await?;
        Ok(connection(page, |t| t.id.uuid(), Task))
    }

    /// The latest version of each of the tenant's plans.
    async fn plans(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, Plan>> {
        let scope = task_scope(ctx)?;
        let page = domain(ctx)
            .plans
            .list_latest(scope, page_request(first, after)?)
            .await
            .gql()?;
        Ok(connection(page, |p| p.id.uuid(), Plan))
    }

    /// The latest version of one plan (its `versions` lists the others).
    async fn plan(&self, ctx: &Context<'_>, key: String) -> async_graphql::Result<Plan> {
        let scope = task_scope(ctx)?;
        Ok(Plan(domain(ctx).plans.latest(scope, &key).await.gql()?))
    }

    /// The tools steps can use.
    async fn tools(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Tool>> {
        task_scope(ctx)?;
        Ok(domain(ctx)
            .plans
            .registry()
            .list()
            .map(|t| Tool {
                key: t.key().to_owned(),
                description: t.description().to_owned(),
                input_schema: Json(t.input_schema()),
            })
            .collect())
    }
}

#[derive(InputObject)]
pub struct RetryPolicyInput {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    #[graphql(default = 500)]
    pub initial_backoff_ms: u64,
    #[graphql(default = 30000)]
    pub max_backoff_ms: u64,
}

#[derive(InputObject)]
pub struct PlanStepInput {
    /// Stable id, unique in the plan.
    pub id: String,
    pub tool: String,
    /// Arguments: JSON, where strings may be templates (`{{ state.x }}`).
    pub args: Option<Json<Value>>,
    /// A template; the step is skipped when it renders falsy.
    pub condition: Option<String>,
    #[graphql(default = true)]
    pub stop_on_failure: bool,
    pub retry: Option<RetryPolicyInput>,
    #[graphql(default = false)]
    pub requires_review: bool,
    pub timeout_secs: Option<u64>,
}

#[derive(InputObject)]
pub struct PublishPlanInput {
    pub key: String,
    pub intent: String,
    #[graphql(default)]
    pub description: String,
    #[graphql(default)]
    pub priority: i32,
    /// Case-insensitive regular expressions that select this plan's intent.
    #[graphql(default)]
    pub patterns: Vec<String>,
    pub steps: Vec<PlanStepInput>,
}

impl From<PublishPlanInput> for PlanDef {
    fn from(input: PublishPlanInput) -> Self {
        let steps = input
            .steps
            .into_iter()
            .map(|s| StepDef {
                id: s.id,
                tool: s.tool,
                args: s
                    .args
                    .map(|j| j.0)
                    .unwrap_or_else(|| Value::Object(Default::default())),
                condition: s.condition,
                stop_on_failure: s.stop_on_failure,
                retry: s.retry.map(|r| RetryPolicy {
                    max_attempts: r.max_attempts,
                    initial_backoff_ms: r.initial_backoff_ms,
                    max_backoff_ms: r.max_backoff_ms,
                }),
                requires_review: s.requires_review,
                timeout_secs: s.timeout_secs,
            })
            .collect();
        PlanDef {
            key: input.key,
            intent: input.intent,
            description: input.description,
            priority: input.priority,
            patterns: input.patterns,
            steps,
        }
    }
}

#[derive(SimpleObject)]
pub struct PublishPlanPayload {
    pub plan: Plan,
}

#[derive(InputObject)]
pub struct StartTaskInput {
    /// The instruction or message.
    #[graphql(default)]
    pub input: String,
    /// Structured input (a webhook body, form fields, …).
    pub payload: Option<Json<Value>>,
    /// The knowledge-graph entity the task is about.
    pub subject_id: Option<ID>,
    /// Run this plan (its latest version) instead of detecting the intent.
    pub plan_key: Option<String>,
    /// Use this intent instead of detecting it.
    pub intent: Option<String>,
    /// Starting again with the same key returns the existing task.
    pub idempotency_key: Option<String>,
    pub channel: Option<Channel>,
    /// Cap on plan positions run, injected steps included (default 50).
    pub max_steps: Option<u32>,
    /// Below this intent confidence the task waits for review (default 0.8).
    pub confidence_threshold: Option<f64>,
}

#[derive(SimpleObject)]
pub struct TaskPayload {
    pub task: Task,
}

#[derive(InputObject)]
pub struct TaskIdInput {
    pub id: ID,
}

#[derive(InputObject)]
pub struct ResumeTaskInput {
    pub task_id: ID,
    /// The pending review being approved.
    pub review_id: ID,
    /// Merged into the task's state; `intent` also sets the intent.
    pub corrections: Option<Json<Value>>,
}

#[derive(InputObject)]
pub struct RejectTaskInput {
    pub task_id: ID,
    pub review_id: ID,
    pub reason: String,
}

#[derive(InputObject)]
pub struct CompleteDelegationInput {
    pub task_id: ID,
    /// The single-use token handed to the external system.
    pub token: String,
    pub success: bool,
    /// Merged into the task's state on success.
    pub data: Option<Json<Value>>,
    pub error: Option<String>,
}

#[derive(Default)]
pub struct TaskMutation;

#[Object]
impl TaskMutation {
    /// Publish a new version of a plan (tenant admins, or API keys with the
    /// `admin` scope). The integrity check names plan, step and tool of
    /// every problem.
    async fn publish_plan(
        &self,
        ctx: &Context<'_>,
        input: PublishPlanInput,
    ) -> async_graphql::Result<PublishPlanPayload> {
        let principal = principal(ctx)?;
        let plan = domain(ctx)
            .plans
            .publish(principal, input.into())
            .await
            .gql()?;
        Ok(PublishPlanPayload { plan: Plan(plan) })
    }

    /// Start a task. The same `idempotencyKey` returns the existing task.
    async fn start_task(
        &self,
        ctx: &Context<'_>,
        input: StartTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let subject_id = match &input.subject_id {
            Some(id) => Some(
                Uuid::parse_str(id.as_str())
                    .or_else(|_| ids::decode(id).map(|(_, u)| u))
                    .map_err(|_| {
                        Error::validation(format!("`{}` is not a valid subject id", id.as_str()))
                    })
                    .gql()?,
            ),
            None => None,
        };
        let task = domain(ctx)
            .tasks
            .start(
                principal,
                NewTask {
                    input: input.input,
                    payload: input.payload.map(|j| j.0).unwrap_or(Value::Null),
                    subject_id,
                    plan_key: input.plan_key,
                    intent: input.intent,
                    idempotency_key: input.idempotency_key,
                    channel: input.channel.map(Into::into),
                    max_steps: input.max_steps,
                    confidence_threshold: input.confidence_threshold,
                },
            )
            .await
            .gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Cancel a task: at once when idle, before its next step when running.
    async fn cancel_task(
        &self,
        ctx: &Context<'_>,
        input: TaskIdInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.id)?;
        let task = domain(ctx).tasks.cancel(principal, id).await.gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Run a FAILED task again from the failed step.
    async fn retry_task(
        &self,
        ctx: &Context<'_>,
        input: TaskIdInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.id)?;
        let task = domain(ctx).tasks.retry(principal, id).await.gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Approve the named pending review, merging corrections into the state.
    /// Of two concurrent calls exactly one wins; the other gets `CONFLICT`.
    async fn resume_task(
        &self,
        ctx: &Context<'_>,
        input: ResumeTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.task_id)?;
        let review = review_id(&input.review_id)?;
        let corrections = input.corrections.map(|j| j.0).unwrap_or(Value::Null);
        let task = domain(ctx)
            .tasks
            .resume(principal, id, review, corrections)
            .await
            .gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Reject the named pending review; the task is cancelled.
    async fn reject_task(
        &self,
        ctx: &Context<'_>,
        input: RejectTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.task_id)?;
        let review = review_id(&input.review_id)?;
        let task = domain(ctx)
            .tasks
            .reject(principal, id, review, &input.reason)
            .await
            .gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Complete or fail a delegated step. Authenticated by the task's
    /// single-use token; a wrong, reused or foreign token is `NOT_FOUND`.
    async fn complete_delegation(
        &self,
        ctx: &Context<'_>,
        input: CompleteDelegationInput,
    ) -> async_graphql::Result<TaskPayload> {
        let id = task_id(&input.task_id)?;
        // A signed-in caller may only complete its own tenant's tasks.
        if let Some(p) = ctx.data_opt::<super::Caller>().and_then(|c| c.0.as_ref())
            && let Some(tenant) = p.tenant
            && domain(ctx)
                .tasks
                .get(TenantScope::new(tenant), id)
                .await
                .is_err()
        {
            return Err(Error::not_found("delegated task or token")).gql();
        }
        let task = domain(ctx)
            .tasks
            .complete_delegation(
                id,
                &input.token,
                DelegationOutcome {
                    success: input.success,
                    data: input.data.map(|j| j.0).unwrap_or(Value::Null),
                    error: input.error,
                },
            )
            .await
            .gql()?;
        Ok(TaskPayload { task: Task(task) })
    }
}

/// Resolve `node(id:)` for the types of this module.
pub async fn node(
    ctx: &Context<'_>,
    ty: NodeType,
    uuid: Uuid,
) -> async_graphql::Result<Option<super::types::Node>> {
    let scope = match ty {
        NodeType::Task | NodeType::Plan => task_scope(ctx)?,
        _ => return Ok(None),
    };
    Ok(Some(match ty {
        NodeType::Task => super::types::Node::Task(Task(
            domain(ctx)
                .tasks
                .get(scope, TaskId::from(uuid))
                .await
                .gql()?,
        )),
        _ => super::types::Node::Plan(Plan(
            domain(ctx)
                .plans
                .get(scope, PlanId::from(uuid))
                .await
                .gql()?,
        )),
    }))
}
