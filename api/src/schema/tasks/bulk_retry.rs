//! Bulk retry on the wire: `retryTasks` re-runs the caller's tenant's
//! matching failed tasks as a job, and `retryJob`/`retryJobs` read the
//! jobs' progress. The same permission as `retryTask` (`tasks:write`) to
//! start one, `tasks:read` to read; the domain checks both. See
//! `brainstem_domain::tasks::RetryJob` for the guarantees.

use async_graphql::{Context, Enum, ID, InputObject, Json, Object, SimpleObject};
use brainstem_domain::{
    Error,
    tasks::{self, RetryFilter, RetryRequest, TimeRange},
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::TaskStatus;
use crate::{
    error::ResultExt,
    schema::{
        context::{domain, principal},
        ids::{NodeType, decode_as, encode},
    },
};

/// Which failed tasks `retryTasks` takes; every field given must hold.
#[derive(InputObject, Default)]
pub struct RetryTasksFilter {
    /// Only `FAILED` tasks can be retried (the default); any other status
    /// is refused.
    pub statuses: Option<Vec<TaskStatus>>,
    /// Tasks of this plan.
    pub plan_key: Option<String>,
    /// Tasks that failed at this step (their `currentStepId`).
    pub failed_step: Option<String>,
    /// Tasks whose error contains this text, ignoring case.
    pub error_matches: Option<String>,
    /// Tasks created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Tasks created before this instant.
    pub created_before: Option<DateTime<Utc>>,
}

#[derive(InputObject)]
pub struct RetryTasksInput {
    #[graphql(default)]
    pub filter: RetryTasksFilter,
    /// At most this many tasks, oldest first: 1 to 10000 (default 1000).
    pub limit: Option<i32>,
    /// Run each task from its first step (every step again) instead of
    /// from its failed step.
    #[graphql(default)]
    pub from_start: bool,
}

/// Where a bulk retry is.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryJobStatus {
    /// Tasks remain to be handled.
    Running,
    /// Every matched task was retried, skipped or failed.
    Completed,
}

/// A task a bulk retry could not retry, and why.
#[derive(SimpleObject)]
pub struct RetryJobError {
    pub task_id: ID,
    pub message: String,
}

/// A bulk retry of failed tasks and its progress.
pub struct RetryJob(tasks::RetryJob);

#[Object]
impl RetryJob {
    /// Opaque global id.
    pub async fn id(&self) -> ID {
        encode(NodeType::RetryJob, self.0.id)
    }

    async fn status(&self) -> RetryJobStatus {
        match self.0.status {
            tasks::RetryJobStatus::Running => RetryJobStatus::Running,
            tasks::RetryJobStatus::Completed => RetryJobStatus::Completed,
        }
    }

    /// The filter, limit and `fromStart` as given.
    async fn request(&self) -> Json<Value> {
        Json(self.0.request.clone())
    }

    async fn from_start(&self) -> bool {
        self.0.from_start
    }

    /// Tasks the filter matched when the job was created.
    async fn matched(&self) -> u64 {
        self.0.matched
    }

    /// Matched tasks handled so far (`retried + skipped + failed`).
    async fn processed(&self) -> u64 {
        self.0.processed
    }

    /// Tasks put back in the queue.
    async fn retried(&self) -> u64 {
        self.0.retried
    }

    /// Tasks no longer as matched when their turn came: retried meanwhile
    /// (by this job, another or `retryTask`), running, or finished.
    async fn skipped(&self) -> u64 {
        self.0.skipped
    }

    /// Tasks that could not be retried (see `errors`).
    async fn failed(&self) -> u64 {
        self.0.failed
    }

    /// The first failed tasks (at most 20), with why.
    async fn errors(&self) -> Vec<RetryJobError> {
        self.0
            .errors
            .iter()
            .map(|e| RetryJobError {
                task_id: encode(NodeType::Task, e.task.uuid()),
                message: e.message.clone(),
            })
            .collect()
    }

    async fn created_by(&self) -> &str {
        &self.0.created_by
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// When the last task was handled.
    async fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.0.finished_at
    }
}

#[derive(SimpleObject)]
pub struct RetryTasksPayload {
    pub job: RetryJob,
}

/// A bulk retry by its global id, for `node(id:)`.
pub(crate) async fn retry_job_node(ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<RetryJob> {
    let job = domain(ctx)
        .tasks
        .retry_job(principal(ctx)?, id)
        .await
        .gql()?;
    Ok(RetryJob(job))
}

#[derive(Default)]
pub struct BulkRetryQuery;

#[Object]
impl BulkRetryQuery {
    /// One of the caller's tenant's bulk retries.
    async fn retry_job(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<RetryJob> {
        retry_job_node(ctx, decode_as(&id, NodeType::RetryJob).gql()?).await
    }

    /// The caller's tenant's bulk retries, newest first.
    async fn retry_jobs(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20, validator(minimum = 1, maximum = 100))] first: u64,
    ) -> async_graphql::Result<Vec<RetryJob>> {
        let jobs = domain(ctx)
            .tasks
            .retry_jobs(principal(ctx)?, first)
            .await
            .gql()?;
        Ok(jobs.into_iter().map(RetryJob).collect())
    }
}

#[derive(Default)]
pub struct BulkRetryMutation;

#[Object]
impl BulkRetryMutation {
    /// Re-run the caller's tenant's failed tasks that match `filter`, each
    /// from its failed step (or from its first with `fromStart`), as a job
    /// that goes on in the background and survives a crash. A task is
    /// retried only if it is still as matched, so repeating the call, or
    /// two jobs at once, never runs a task twice. Needs what `retryTask`
    /// needs. Audited (`task.retry_bulk`).
    async fn retry_tasks(
        &self,
        ctx: &Context<'_>,
        input: RetryTasksInput,
    ) -> async_graphql::Result<RetryTasksPayload> {
        let limit = match input.limit {
            None => None,
            Some(n) => Some(
                u32::try_from(n)
                    .map_err(|_| {
                        Error::validation(format!(
                            "limit must be between 1 and {}",
                            tasks::MAX_RETRY_TASKS
                        ))
                    })
                    .gql()?,
            ),
        };
        let f = input.filter;
        let request = RetryRequest {
            filter: RetryFilter {
                statuses: f
                    .statuses
                    .unwrap_or_default()
                    .into_iter()
                    .map(Into::into)
                    .collect(),
                plan_key: f.plan_key,
                failed_step: f.failed_step,
                error_matches: f.error_matches,
                created: TimeRange {
                    after: f.created_after,
                    before: f.created_before,
                },
            },
            limit,
            from_start: input.from_start,
        };
        let job = domain(ctx)
            .tasks
            .retry_tasks(principal(ctx)?, request)
            .await
            .gql()?;
        Ok(RetryTasksPayload { job: RetryJob(job) })
    }
}
