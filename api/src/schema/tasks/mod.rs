//! Tasks on the wire: the task record with its relations (steps, events,
//! reviews, artifacts, parent and children), the `task`/`tasks` reads and
//! the client's operations on a task. Reads need `tasks:read`, writes
//! `tasks:write` (the domain checks them). A page of tasks loads each
//! selected relation before its items resolve ([`listing`]).
//!
//! - [`steps`]: what a run records: step attempts, reviews, artifacts, usage.
//! - [`events`]: one GraphQL type per kind of task event.
//! - [`mutation`]: start, cancel, retry, resume, reject, complete a delegation.
//! - [`modes`]: what `startTask` answers in each mode, and the wait.
//! - [`result`]: what an agent step concluded (`Task.result`).
//! - [`bulk_retry`]: `retryTasks`, a job that retries many failed tasks.
//! - [`fork`]: checkpoints, `stateAt`, forks and reruns.

pub mod bulk_retry;
pub mod events;
pub mod fork;
mod listing;
pub mod modes;
pub mod mutation;
mod plain_page;
pub mod result;
mod review_list;
pub mod steps;

use async_graphql::{Context, Enum, ID, InputObject, Json, Object, SimpleObject};
use brainstem_domain::{
    ConversationId, TaskId, TenantScope,
    tasks::{self, TaskFilter as DomainFilter, TaskGroup, TimeRange},
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub(crate) use self::bulk_retry::retry_job_node;
pub use self::bulk_retry::{BulkRetryMutation, BulkRetryQuery, RetryJob};
use self::listing::{event_detail, event_span, step_detail};
pub use self::review_list::ReviewQuery;
pub use self::{
    events::TaskEvent,
    mutation::TaskMutation,
    steps::{Artifact, Review, TaskStep, Usage},
};
pub(crate) use self::{
    listing::{group_page, read_ahead_groups, task_page},
    plain_page::TaskPage,
};
use super::{
    context::{domain, require_scope},
    ids::{self, NodeType},
    loaders::{TaskArtifactsKey, TaskEventsKey, TaskKey, TaskReviewsKey, TaskStepsKey, loader},
    page::{ListOrder, ordered_page_request},
    plain_list::PlainList,
    plans::PlanStep,
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
        Pending, DetectingIntent, Planning, Executing, NeedsReview, AwaitingApproval,
        Delegated, Completed, Failed, Cancelled,
    }
);

mirror_enum!(
    /// How a task runs: `ENQUEUE` starts it and returns; `ENQUEUE_AND_WAIT`
    /// starts it and waits for its outcome (up to `waitTimeoutMs`); `PLAN`
    /// plans it and waits in `AWAITING_APPROVAL` for `resumeTask`; `ANSWER`
    /// plans it and answers with one model call, running no step.
    TaskMode = tasks::TaskMode { Enqueue, EnqueueAndWait, Plan, Answer }
);

mirror_enum!(
    /// Where a task came from.
    Channel = tasks::Channel { Web, Api, Webhook, Email, System }
);

mirror_enum!(
    /// What a task event records.
    TaskEventKind = tasks::EventKind {
        StatusChanged, StepStarted, StepCompleted, StepFailed, StepSkipped, StepsInjected,
        ReviewRequested, Delegated, TokenDelta, MemoryRecalled, GuardrailMatched,
        TurnQueued, TurnInterrupted, TaskForked, ForkedFrom,
    }
);

mirror_enum!(
    /// What a turn of a conversation sent while earlier turns are
    /// unfinished does: `REJECT` refuses it (`CONFLICT`); `ENQUEUE` waits
    /// for them, turns running one at a time in order; `INTERRUPT` stops
    /// them (a model's answer mid-stream) and keeps them in the history,
    /// marked interrupted, with their text so far; `ROLLBACK` stops them
    /// and leaves them out of the history (their records stay).
    Multitask = tasks::Multitask { Reject, Enqueue, Interrupt, Rollback }
);

mirror_enum!(
    ReviewStatus = tasks::ReviewStatus {
        Pending,
        Approved,
        Rejected
    }
);

pub(super) fn task_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, "tasks:read")
}

pub(super) fn task_id(id: &ID) -> async_graphql::Result<TaskId> {
    ids::decode_as(id, NodeType::Task).map(TaskId::from).gql()
}

pub(super) fn review_id(id: &ID) -> async_graphql::Result<Uuid> {
    ids::decode_as(id, NodeType::Review).gql()
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

/// Why a `PENDING` task is not running yet.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub enum WaitingReason {
    /// Ready: the next free slot takes it, in the fair order.
    WaitingForSlot,
    /// Its tenant runs its `maxRunning` tasks already.
    TenantMaxRunning,
    /// Its concurrency key runs the plan's `maxConcurrent` already.
    MaxConcurrent,
    /// Its retry's back-off has not passed yet.
    RetryBackoff,
}

impl From<brainstem_domain::queue::WaitingReason> for WaitingReason {
    fn from(r: brainstem_domain::queue::WaitingReason) -> Self {
        match r {
            brainstem_domain::queue::WaitingReason::WaitingForSlot => Self::WaitingForSlot,
            brainstem_domain::queue::WaitingReason::TenantMaxRunning => Self::TenantMaxRunning,
            brainstem_domain::queue::WaitingReason::MaxConcurrent => Self::MaxConcurrent,
            brainstem_domain::queue::WaitingReason::RetryBackoff => Self::RetryBackoff,
        }
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
    /// Why a `PENDING` task is not running yet (null for any other):
    /// `WAITING_FOR_SLOT`, or the limit that holds it back.
    async fn waiting_reason(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Option<WaitingReason>> {
        if self.0.status != tasks::TaskStatus::Pending {
            return Ok(None);
        }
        let scope = require_scope(ctx, "tasks:read")?;
        Ok(domain(ctx)
            .queue
            .waiting_reason(scope, self.0.id, Utc::now())
            .await
            .gql()?
            .map(WaitingReason::from))
    }
    /// How the client asked it to run.
    async fn mode(&self) -> TaskMode {
        self.0.mode.into()
    }
    /// The conversation the task is a turn of.
    async fn conversation_id(&self) -> Option<ID> {
        self.0
            .conversation
            .map(|c| ids::encode(NodeType::Conversation, c.uuid()))
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
    /// What the task's agent step concluded; null until one did.
    async fn result(&self) -> Option<result::TaskResult> {
        self.0.result.as_ref().map(result::TaskResult::from_stored)
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
    /// Tasks this task spawned, oldest first unless `orderBy`.
    async fn children(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<TaskPage> {
        let request = ordered_page_request(first, after, last, before, order_by)?;
        let parent = self.0.id.uuid();
        group_page(ctx, self.0.scope(), TaskGroup::Children, parent, request).await
    }
    /// Every attempt of every step, in the order they ran.
    async fn steps(&self, ctx: &Context<'_>) -> async_graphql::Result<PlainList<TaskStep>> {
        Ok(PlainList(
            loader(ctx)
                .load_one(TaskStepsKey(
                    self.0.scope(),
                    self.0.id,
                    step_detail(|f| ctx.look_ahead().field(f).exists()),
                ))
                .await?
                .unwrap_or_default()
                .into_iter()
                .map(TaskStep)
                .collect(),
        ))
    }
    /// Stored events with `seq > after` (default 0), oldest first: the
    /// first `first` of them, or with `last`, the latest `last`.
    async fn events(
        &self,
        ctx: &Context<'_>,
        after: Option<i64>,
        #[graphql(default = 100)] first: i32,
        last: Option<i32>,
    ) -> async_graphql::Result<PlainList<TaskEvent>> {
        let window = event_span(after, first, last).gql()?.window(&self.0);
        Ok(PlainList(
            loader(ctx)
                .load_one(TaskEventsKey(
                    self.0.scope(),
                    self.0.id,
                    window,
                    event_detail(|f| ctx.look_ahead().field(f).exists()),
                ))
                .await?
                .unwrap_or_default()
                .into_iter()
                .map(TaskEvent::from)
                .collect(),
        ))
    }
    async fn reviews(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Review>> {
        Ok(self
            .load_reviews(ctx)
            .await?
            .into_iter()
            .map(Review)
            .collect())
    }
    /// The review the task waits for, if it is in `NEEDS_REVIEW` or
    /// `AWAITING_APPROVAL`.
    async fn pending_review(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Review>> {
        if !matches!(
            self.0.status,
            tasks::TaskStatus::NeedsReview | tasks::TaskStatus::AwaitingApproval
        ) {
            return Ok(None);
        }
        Ok(self
            .load_reviews(ctx)
            .await?
            .into_iter()
            .find(|r| r.status == tasks::ReviewStatus::Pending)
            .map(Review))
    }
    /// The state after each settled step (and agent iteration), in the
    /// order they settled: where a client can fork from.
    async fn checkpoints(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<fork::TaskCheckpoint>> {
        fork::checkpoints(ctx, &self.0).await
    }
    /// The state as it stood right after `stepId` settled (with
    /// `iteration`: that iteration of the agent loop `stepId` starts);
    /// `null` while it has not.
    async fn state_at(
        &self,
        ctx: &Context<'_>,
        step_id: String,
        iteration: Option<u32>,
    ) -> async_graphql::Result<Option<Json<Value>>> {
        fork::state_at(ctx, &self.0, &step_id, iteration).await
    }
    /// The task this one is a fork (or rerun) of.
    async fn forked_from(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Option<fork::TaskForkLink>> {
        fork::forked_from(ctx, &self.0).await
    }
    /// The forks and reruns of this task, oldest first.
    async fn forks(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Task>> {
        fork::forks(ctx, &self.0).await
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

/// Which tasks a list shows; every field given must hold. Time ranges are
/// half-open: `…After` includes the instant, `…Before` excludes it, and
/// an `…After` later than its `…Before` is refused.
#[derive(InputObject)]
pub struct TaskFilter {
    /// Any of these statuses.
    pub statuses: Option<Vec<TaskStatus>>,
    pub intent: Option<String>,
    pub channel: Option<Channel>,
    /// Tasks of this plan (by key, any version).
    pub plan_key: Option<String>,
    /// The turns of this conversation.
    pub conversation_id: Option<ID>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub updated_after: Option<DateTime<Utc>>,
    pub updated_before: Option<DateTime<Utc>>,
    /// The task's input contains this text, ignoring case (at most 200
    /// characters; `%` and `_` are matched as themselves).
    pub input_contains: Option<String>,
}

impl TaskFilter {
    fn into_domain(self) -> async_graphql::Result<DomainFilter> {
        let conversation = self
            .conversation_id
            .as_ref()
            .map(|id| ids::decode_as(id, NodeType::Conversation).map(ConversationId::from))
            .transpose()
            .gql()?;
        Ok(DomainFilter {
            statuses: self
                .statuses
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
            intent: self.intent,
            channel: self.channel.map(Into::into),
            parent: None,
            conversation,
            plan_key: self.plan_key,
            created: TimeRange {
                after: self.created_after,
                before: self.created_before,
            },
            updated: TimeRange {
                after: self.updated_after,
                before: self.updated_before,
            },
            input_contains: self.input_contains,
        })
    }
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

    /// The caller's tenant's tasks, oldest first unless `orderBy`.
    #[allow(clippy::too_many_arguments)]
    async fn tasks(
        &self,
        ctx: &Context<'_>,
        filter: Option<TaskFilter>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<TaskPage> {
        let request = ordered_page_request(first, after, last, before, order_by)?;
        let scope = task_scope(ctx)?;
        let filter = filter
            .map(TaskFilter::into_domain)
            .transpose()?
            .unwrap_or_default();
        task_page(ctx, scope, filter, request).await
    }
}

/// A task of the caller's tenant.
pub(crate) async fn task_node(ctx: &Context<'_>, uuid: Uuid) -> async_graphql::Result<Task> {
    let scope = task_scope(ctx)?;
    let task = domain(ctx)
        .tasks
        .get(scope, TaskId::from(uuid))
        .await
        .gql()?;
    Ok(Task(task))
}
