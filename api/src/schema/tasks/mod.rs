//! Tasks on the wire: the task record with its relations (steps, events,
//! reviews, artifacts, parent and children), the `task`/`tasks` reads and
//! the client's operations on a task. Reads need `tasks:read`, writes
//! `tasks:write` (the domain checks them). A page of tasks loads each
//! selected relation in one batch before its items resolve ([`prefetch`]).
//!
//! - [`steps`]: what a run records: step attempts, reviews, artifacts, usage.
//! - [`events`]: one GraphQL type per kind of task event.
//! - [`mutation`]: start, cancel, retry, resume, reject, complete a delegation.
//! - [`modes`]: what `startTask` answers in each mode, and the wait.
//! - [`result`]: what an agent step concluded (`Task.result`).

pub mod events;
pub mod modes;
pub mod mutation;
pub mod result;
pub mod steps;

use std::sync::Arc;

use async_graphql::{
    Context, Enum, ID, InputObject, Json, Object, SimpleObject, connection::Connection,
};
use brainstem_domain::{
    Error, TaskId, TenantScope,
    tasks::{self, Detail, EventWindow, TaskFilter as DomainFilter},
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub use self::{
    events::TaskEvent,
    mutation::TaskMutation,
    steps::{Artifact, Review, TaskStep, Usage},
};
use super::{
    context::{domain, require_scope},
    ids::{self, NodeType},
    loaders::{TaskArtifactsKey, TaskEventsKey, TaskKey, TaskReviewsKey, TaskStepsKey, loader},
    page::{connection, page_request},
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
    }
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

#[Object]
impl Task {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Task, self.0.id.uuid())
    }
    async fn status(&self) -> TaskStatus {
        self.0.status.into()
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
                page_detail(ctx),
            )
            .await
            .gql()?;
        prefetch(ctx, &page.items).await?;
        Ok(connection(page, |t| t.id.uuid(), Task))
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
        let window = event_window(&self.0, after, first, last).gql()?;
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

/// A selection of steps that shows none of their JSON needs only a
/// summary of each row.
/// A page of tasks that shows none of a task's JSON (`payload`,
/// `frozenPlan`, `settledStepIds`, `state`, `usage`, `result`), under
/// `edges.node` or `nodes`, reads summaries.
fn page_detail(ctx: &Context<'_>) -> Detail {
    let look = ctx.look_ahead();
    let shows = |f: &str| {
        look.field("edges").field("node").field(f).exists() || look.field("nodes").field(f).exists()
    };
    detail(
        [
            "payload",
            "frozenPlan",
            "settledStepIds",
            "state",
            "usage",
            "result",
        ]
        .into_iter()
        .any(shows),
    )
}

/// `shows(field)` says whether the selection names a field.
fn step_detail(shows: impl Fn(&str) -> bool) -> Detail {
    detail(["args", "output", "usage"].into_iter().any(shows))
}

/// The same for events (`data`, `dataKeys`).
fn event_detail(shows: impl Fn(&str) -> bool) -> Detail {
    detail(["data", "dataKeys"].into_iter().any(shows))
}

fn detail(full: bool) -> Detail {
    if full { Detail::Full } else { Detail::Summary }
}

/// Load what the operation selects of every task of a page (steps, event
/// windows, reviews, artifacts, parents), one batch per relation (steps
/// and events together when both are summaries), before
/// the items resolve; each item then finds its rows in the operation's
/// loader cache. The loader batches by time as well, but a busy server may
/// take longer than the batch delay to resolve a whole page.
async fn prefetch(ctx: &Context<'_>, page: &[tasks::Task]) -> async_graphql::Result<()> {
    let node = ctx.look_ahead().field("edges").field("node");
    if page.is_empty() || !node.exists() {
        return Ok(());
    }
    let loader = loader(ctx);
    let steps = node.field("steps");
    let step_keys: Vec<TaskStepsKey> = if steps.exists() {
        let detail = step_detail(|f| steps.field(f).exists());
        page.iter()
            .map(|t| TaskStepsKey(t.scope(), t.id, detail))
            .collect()
    } else {
        Vec::new()
    };
    let mut event_keys = Vec::new();
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
        let detail = event_detail(|f| field.selection_set().any(|c| c.name() == f));
        let last = int("last").map(|n| n as i32);
        for task in page {
            // Bad arguments are reported by the field itself.
            if let Ok(window) = event_window(task, int("after"), first, last) {
                event_keys.push(TaskEventsKey(task.scope(), task.id, window, detail));
            }
        }
    }
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
    let steps_and_events = async {
        match summaries_together(&step_keys, &event_keys) {
            Some(scope) => {
                let tasks: Vec<TaskId> = step_keys.iter().map(|k| k.1).collect();
                let windows: Vec<(TaskId, EventWindow)> =
                    event_keys.iter().map(|k| (k.1, k.2)).collect();
                let (steps, events) = domain(ctx)
                    .tasks
                    .step_and_event_summaries(scope, &tasks, &windows)
                    .await
                    .gql()?;
                loader
                    .feed_many(steps.into_iter().map(|(id, steps)| {
                        let key = TaskStepsKey(scope, id, Detail::Summary);
                        (key, steps.into_iter().map(Arc::new).collect())
                    }))
                    .await;
                loader
                    .feed_many(events.into_iter().map(|((id, window), events)| {
                        let key = TaskEventsKey(scope, id, window, Detail::Summary);
                        (key, events.into_iter().map(Arc::new).collect())
                    }))
                    .await;
            }
            None => {
                let steps = async {
                    if !step_keys.is_empty() {
                        loader.load_many(step_keys.iter().copied()).await?;
                    }
                    Ok::<_, async_graphql::Error>(())
                };
                let events = async {
                    if !event_keys.is_empty() {
                        loader.load_many(event_keys.iter().copied()).await?;
                    }
                    Ok(())
                };
                futures_util::try_join!(steps, events)?;
            }
        }
        Ok::<_, async_graphql::Error>(())
    };
    futures_util::try_join!(steps_and_events, reviews, artifacts, parents)?;
    Ok(())
}

/// The one scope of a page's step and event keys, when both relations are
/// read and read as summaries: then they are read in one statement
/// (`Tasks::step_and_event_summaries`) instead of one each.
fn summaries_together(steps: &[TaskStepsKey], events: &[TaskEventsKey]) -> Option<TenantScope> {
    let scope = steps.first()?.0;
    let summary =
        |key_scope: TenantScope, detail: Detail| key_scope == scope && detail == Detail::Summary;
    let together = !events.is_empty()
        && steps.iter().all(|k| summary(k.0, k.2))
        && events.iter().all(|k| summary(k.0, k.3));
    together.then_some(scope)
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
                conversation: None,
            })
            .unwrap_or_default();
        task_page(ctx, scope, filter, first, after).await
    }
}

/// A page of the tenant's tasks that pass `filter`, newest first, with the
/// relations the selection shows loaded in batches.
pub(crate) async fn task_page(
    ctx: &Context<'_>,
    scope: TenantScope,
    filter: DomainFilter,
    first: Option<i32>,
    after: Option<String>,
) -> async_graphql::Result<Connection<String, Task>> {
    let page = domain(ctx)
        .tasks
        .list(scope, filter, page_request(first, after)?, page_detail(ctx))
        .await
        .gql()?;
    prefetch(ctx, &page.items).await?;
    Ok(connection(page, |t| t.id.uuid(), Task))
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
