//! The client's operations on tasks: start one (idempotent by key), cancel,
//! retry, resume or reject at a review, and complete a delegated step with
//! its single-use token. Every mutation takes one `input` object and
//! returns a payload object.

use async_graphql::{Context, Enum, ID, InputObject, Json, Object, SimpleObject};
use brainstem_domain::{
    ConversationId, Error, TenantScope,
    tasks::{self, DelegationOutcome, NewTask},
};
use serde_json::Value;
use uuid::Uuid;

use super::{
    Channel, Task, TaskMode,
    modes::{self, StartTaskPayload},
    review_id, task_id,
};
use crate::{
    error::ResultExt,
    schema::{
        context::{Caller, RequestTimeout, domain, principal},
        ids,
        plans::PlanStepInput,
    },
};

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
    /// Append the task to this conversation (one of the caller's, from
    /// `startConversation`) as its next turn.
    pub conversation_id: Option<ID>,
    /// How to run it (default `ENQUEUE`).
    #[graphql(default_with = "TaskMode::Enqueue")]
    pub mode: TaskMode,
    /// How long `ENQUEUE_AND_WAIT` and `ANSWER` wait for the outcome, in
    /// milliseconds (capped just below the request timeout).
    #[graphql(default = 30000)]
    pub wait_timeout_ms: u32,
    /// Among the tenant's runnable tasks, higher runs first (default 0);
    /// equal priorities run oldest first.
    #[graphql(default)]
    pub priority: i32,
    /// Tasks with the same key (a conversation, a customer id) run at most
    /// the plan's `maxConcurrent` at once; the others wait, in order. A
    /// turn of a conversation runs under its conversation's key instead.
    pub concurrency_key: Option<String>,
    /// For a turn of a conversation: what it does while earlier turns are
    /// unfinished (default: the conversation's `multitask`).
    pub multitask: Option<super::Multitask>,
}

#[derive(SimpleObject)]
pub struct TaskPayload {
    pub task: Task,
}

#[derive(InputObject)]
pub struct TaskIdInput {
    pub id: ID,
}

/// What a person decides at a review.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewDecision {
    Approve,
    Reject,
}

#[derive(InputObject)]
pub struct ResumeTaskInput {
    pub task_id: ID,
    /// The pending review being decided.
    pub review_id: ID,
    /// `APPROVE` (the default) lets the task go on; `REJECT` cancels it.
    #[graphql(default_with = "ReviewDecision::Approve")]
    pub decision: ReviewDecision,
    /// Merged into the task's state; `intent` also sets the intent.
    pub corrections: Option<Json<Value>>,
    /// When approving a plan (`AWAITING_APPROVAL`): the plan to run
    /// instead, checked like a published plan.
    pub plan: Option<Vec<PlanStepInput>>,
    /// Why, when rejecting.
    pub reason: Option<String>,
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
    /// Start a task. The same `idempotencyKey` returns the existing task.
    /// In `ENQUEUE_AND_WAIT` and `ANSWER` the request waits for the task to
    /// settle, up to `waitTimeoutMs`; the task goes on after it either way.
    async fn start_task(
        &self,
        ctx: &Context<'_>,
        input: StartTaskInput,
    ) -> async_graphql::Result<StartTaskPayload> {
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
                    mode: input.mode.into(),
                    conversation: match &input.conversation_id {
                        Some(id) => Some(
                            ids::decode_as(id, ids::NodeType::Conversation)
                                .map(ConversationId::from)
                                .gql()?,
                        ),
                        None => None,
                    },
                    max_steps: input.max_steps,
                    confidence_threshold: input.confidence_threshold,
                    priority: input.priority,
                    concurrency_key: input.concurrency_key,
                    multitask: input.multitask.map(Into::into),
                },
            )
            .await
            .gql()?;
        let task = match task.mode {
            tasks::TaskMode::EnqueueAndWait | tasks::TaskMode::Answer => {
                let timeout = ctx
                    .data_opt::<RequestTimeout>()
                    .map_or(std::time::Duration::from_secs(30), |t| t.0);
                let limit = modes::wait_limit(input.wait_timeout_ms, timeout);
                domain(ctx)
                    .wait_until_settled(task.scope(), task.id, limit)
                    .await
                    .gql()?
            }
            tasks::TaskMode::Enqueue | tasks::TaskMode::Plan => task,
        };
        let asked = task.mode;
        Ok(modes::payload(task, asked))
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

    /// Decide the named pending review: approve it (merging corrections
    /// into the state; for a plan awaiting approval, maybe replacing the
    /// plan), or reject it (the task is cancelled). Of two concurrent calls
    /// exactly one wins; the other gets `CONFLICT`.
    async fn resume_task(
        &self,
        ctx: &Context<'_>,
        input: ResumeTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.task_id)?;
        let review = review_id(&input.review_id)?;
        let tasks = &domain(ctx).tasks;
        let task = match input.decision {
            ReviewDecision::Approve => {
                let corrections = input.corrections.map(|j| j.0).unwrap_or(Value::Null);
                let plan = input
                    .plan
                    .map(|steps| steps.into_iter().map(Into::into).collect());
                tasks
                    .resume_with_plan(principal, id, review, corrections, plan)
                    .await
            }
            ReviewDecision::Reject => {
                let reason = input.reason.unwrap_or_else(|| "rejected".into());
                tasks.reject(principal, id, review, &reason).await
            }
        }
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
        if let Some(p) = ctx.data_opt::<Caller>().and_then(|c| c.0.as_ref())
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
