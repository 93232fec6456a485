//! Bulk retry: re-run a tenant's matching failed tasks as one job
//! (`retryTasks`), each from its failed step or from its first step, and
//! read the job's progress.
//!
//! **The job.** Creating a job matches the tasks once, in the transaction
//! that stores the job: one item per task, holding the task's event
//! sequence at that moment. The job is audited (`task.retry_bulk`) in the
//! same transaction. A runner ([`bulk_retry_run`](super::bulk_retry_run))
//! then works through the pending items in the background; its counters
//! are counted from the items, so they never drift from what was done.
//!
//! Invariants:
//! - A task is retried only if it is exactly as it was when matched:
//!   failed, unleased, and with no event since (`Guard::Unchanged`). A task
//!   retried meanwhile (by this job, another job or `retryTask`), running,
//!   or finished is *skipped*. So two jobs, or a job run twice, never run a
//!   task twice for one failure.
//! - An item's outcome is written in the transaction that retries its task,
//!   guarded on the item still being pending: a crash leaves both done or
//!   neither, and of two runners only one can record an item.
//! - A retried task goes back to the queue as `PENDING`: the fair executor
//!   runs it under its tenant's limits like any other task.
//! - Only `FAILED` tasks can be retried; a job takes at most
//!   [`MAX_RETRY_TASKS`] tasks.

use super::*;
use crate::kernel::{db::BeginWrite, text_match};
use brainstem_entity::{retry_job, retry_job_item};
use sea_orm::{FromQueryResult, sea_query::Func};

/// The most tasks one job takes (`limit`).
pub const MAX_RETRY_TASKS: u32 = 10_000;
/// The tasks a job takes when the caller gives no `limit`.
pub const DEFAULT_RETRY_TASKS: u32 = 1_000;
/// The most failed items a job reports with their errors.
pub const MAX_REPORTED_ERRORS: u64 = 20;
/// Items inserted per statement when a job is created (well under
/// SQLite's bound on variables per statement).
const INSERT_CHUNK: usize = 500;

/// Which failed tasks a bulk retry takes; every field given must hold.
#[derive(Clone, Debug, Default)]
pub struct RetryFilter {
    /// Statuses to match; only `FAILED` can be retried (the default).
    pub statuses: Vec<TaskStatus>,
    /// Tasks of this plan.
    pub plan_key: Option<String>,
    /// Tasks that failed at this step.
    pub failed_step: Option<String>,
    /// Tasks whose error contains this text, ignoring case.
    pub error_matches: Option<String>,
    pub created: TimeRange,
}

/// What `retryTasks` asks.
#[derive(Clone, Debug, Default)]
pub struct RetryRequest {
    pub filter: RetryFilter,
    /// At most this many tasks, oldest first ([`DEFAULT_RETRY_TASKS`] when
    /// `None`; 1 to [`MAX_RETRY_TASKS`]).
    pub limit: Option<u32>,
    /// Run each task from its first step instead of its failed one.
    pub from_start: bool,
}

impl RetryRequest {
    /// Refuse what cannot be run: a limit out of bounds, a status that
    /// cannot be retried, an inverted range, blank or overlong text.
    pub fn check(&self) -> Result<()> {
        let limit = self.limit.unwrap_or(DEFAULT_RETRY_TASKS);
        if limit == 0 || limit > MAX_RETRY_TASKS {
            return Err(Error::validation(format!(
                "limit must be between 1 and {MAX_RETRY_TASKS}"
            )));
        }
        if let Some(status) = self
            .filter
            .statuses
            .iter()
            .find(|s| **s != TaskStatus::Failed)
        {
            return Err(Error::validation(format!(
                "only FAILED tasks can be retried; `{status}` cannot be"
            )));
        }
        if let (Some(after), Some(before)) = (self.filter.created.after, self.filter.created.before)
            && after > before
        {
            return Err(Error::validation(format!(
                "`createdAfter` ({after}) is later than `createdBefore` ({before})"
            )));
        }
        for (name, text) in [
            ("planKey", &self.filter.plan_key),
            ("failedStep", &self.filter.failed_step),
            ("errorMatches", &self.filter.error_matches),
        ] {
            if let Some(text) = text
                && (text.trim().is_empty() || text.chars().count() > text_match::MAX_MATCH_CHARS)
            {
                return Err(Error::validation(format!(
                    "`{name}` must have 1-{} characters",
                    text_match::MAX_MATCH_CHARS
                )));
            }
        }
        Ok(())
    }

    fn limit(&self) -> u32 {
        self.limit.unwrap_or(DEFAULT_RETRY_TASKS)
    }

    /// The request as stored with the job (and shown in its audit row).
    fn to_json(&self) -> Value {
        let f = &self.filter;
        json!({
            "statuses": f.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "planKey": f.plan_key,
            "failedStep": f.failed_step,
            "errorMatches": f.error_matches,
            "createdAfter": f.created.after,
            "createdBefore": f.created.before,
            "limit": self.limit(),
            "fromStart": self.from_start,
        })
    }
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryJobStatus {
    /// Items remain (or the last ones are being handled).
    Running,
    /// Every item has its outcome.
    Completed,
}

impl RetryJobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        match s {
            "RUNNING" => Ok(Self::Running),
            "COMPLETED" => Ok(Self::Completed),
            other => Err(Error::internal(format!("unknown retry job status {other}"))),
        }
    }
}

/// What became of one matched task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Back in the queue.
    Retried,
    /// No longer as matched: retried meanwhile, running or finished.
    Skipped,
    /// Could not be retried (the error says why).
    Failed,
}

impl ItemOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retried => "RETRIED",
            Self::Skipped => "SKIPPED",
            Self::Failed => "FAILED",
        }
    }
}

/// A task a job could not retry, and why.
#[derive(Clone, Debug)]
pub struct RetryJobError {
    pub task: TaskId,
    pub message: String,
}

/// A bulk retry and its progress.
#[derive(Clone, Debug)]
pub struct RetryJob {
    pub id: Uuid,
    pub tenant: TenantId,
    pub status: RetryJobStatus,
    /// The request as given (filter, limit, fromStart).
    pub request: Value,
    pub from_start: bool,
    /// Tasks the filter matched when the job was created.
    pub matched: u64,
    /// Matched tasks handled so far: `retried + skipped + failed`.
    pub processed: u64,
    pub retried: u64,
    pub skipped: u64,
    pub failed: u64,
    /// The first [`MAX_REPORTED_ERRORS`] failed items.
    pub errors: Vec<RetryJobError>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(FromQueryResult)]
struct OutcomeCount {
    job_id: Uuid,
    outcome: Option<String>,
    n: i64,
}

impl Tasks {
    /// Start a bulk retry: match the caller's tenant's tasks, store the
    /// job, and work through it in the background. Needs what `retryTask`
    /// needs (`tasks:write`).
    pub async fn retry_tasks(
        &self,
        principal: &Principal,
        request: RetryRequest,
    ) -> Result<RetryJob> {
        let job = self.create_retry_job(principal, request).await?;
        self.spawn_retry_job(TenantScope::new(job.tenant), job.id, None);
        Ok(job)
    }

    /// Store a bulk retry and the tasks it matched, without running it
    /// ([`Tasks::retry_tasks`] does both; tests drive the runner).
    pub async fn create_retry_job(
        &self,
        principal: &Principal,
        request: RetryRequest,
    ) -> Result<RetryJob> {
        let scope = forbid_unless_writable(principal)?;
        request.check()?;
        let backend = self.db.get_database_backend();
        let now = Utc::now();
        let id = Uuid::now_v7();
        let by = principal.actor.to_string();
        let txn = self.db.begin_write().await?;
        let matched = matching(backend, scope, &request)?
            .select_only()
            .column(task::Column::Id)
            .column(task::Column::LastSeq)
            .into_tuple::<(Uuid, i64)>()
            .all(&*txn)
            .await?;
        retry_job::ActiveModel {
            id: Set(id),
            tenant_id: Set(scope.tenant_id().uuid()),
            filter: Set(request.to_json()),
            max_tasks: Set(i32::try_from(request.limit()).unwrap_or(i32::MAX)),
            from_start: Set(request.from_start),
            status: Set(RetryJobStatus::Running.as_str().to_owned()),
            lease_owner: Set(None),
            lease_expires_at: Set(None),
            created_by: Set(by.clone()),
            created_at: Set(now),
            updated_at: Set(now),
            finished_at: Set(None),
        }
        .insert(&*txn)
        .await?;
        for chunk in matched.chunks(INSERT_CHUNK) {
            retry_job_item::Entity::insert_many(chunk.iter().map(|(task, seq)| {
                retry_job_item::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    tenant_id: Set(scope.tenant_id().uuid()),
                    job_id: Set(id),
                    task_id: Set(*task),
                    task_seq: Set(*seq),
                    outcome: Set(None),
                    error: Set(None),
                    updated_at: Set(now),
                }
            }))
            .exec(&*txn)
            .await?;
        }
        audit::record(
            &*txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by,
                action: "task.retry_bulk".into(),
                target: id.to_string(),
                data: json!({"request": request.to_json(), "matched": matched.len()}),
            },
        )
        .await?;
        txn.commit().await?;
        self.job_in(scope, id).await
    }

    /// One of the caller's tenant's bulk retries.
    pub async fn retry_job(&self, principal: &Principal, id: Uuid) -> Result<RetryJob> {
        let scope = principal.require_scope("tasks:read")?;
        self.job_in(scope, id).await
    }

    async fn job_in(&self, scope: TenantScope, id: Uuid) -> Result<RetryJob> {
        let row = retry_job::Entity::find_by_id_in(scope, id)
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found(format!("retry job {id}")))?;
        let mut jobs = self.with_progress(scope, vec![row]).await?;
        jobs.pop()
            .ok_or_else(|| Error::not_found(format!("retry job {id}")))
    }

    /// The caller's tenant's bulk retries, newest first, at most `first`
    /// (1 to 100).
    pub async fn retry_jobs(&self, principal: &Principal, first: u64) -> Result<Vec<RetryJob>> {
        let scope = principal.require_scope("tasks:read")?;
        if !(1..=100).contains(&first) {
            return Err(Error::validation("first must be between 1 and 100"));
        }
        let rows = retry_job::Entity::find_in(scope)
            .order_by_desc(retry_job::Column::CreatedAt)
            .order_by_desc(retry_job::Column::Id)
            .limit(first)
            .all(&self.db)
            .await?;
        self.with_progress(scope, rows).await
    }

    /// Job rows with their counters, counted from their items in one
    /// statement for all of them (the errors are read only for jobs that
    /// have failed items).
    async fn with_progress(
        &self,
        scope: TenantScope,
        rows: Vec<retry_job::Model>,
    ) -> Result<Vec<RetryJob>> {
        use retry_job_item::Column as I;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let counts = retry_job_item::Entity::find_in(scope)
            .filter(I::JobId.is_in(rows.iter().map(|r| r.id)))
            .select_only()
            .column(I::JobId)
            .column(I::Outcome)
            .expr_as(Func::count(Expr::col(I::Id)), "n")
            .group_by(I::JobId)
            .group_by(I::Outcome)
            .into_model::<OutcomeCount>()
            .all(&self.db)
            .await?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            jobs.push(self.job_of(scope, row, &counts).await?);
        }
        Ok(jobs)
    }

    /// One job from its row and the counts of every job read with it.
    async fn job_of(
        &self,
        scope: TenantScope,
        row: retry_job::Model,
        counts: &[OutcomeCount],
    ) -> Result<RetryJob> {
        use retry_job_item::Column as I;
        let count = |outcome: Option<ItemOutcome>| -> u64 {
            counts
                .iter()
                .filter(|c| {
                    c.job_id == row.id && c.outcome.as_deref() == outcome.map(ItemOutcome::as_str)
                })
                .map(|c| u64::try_from(c.n).unwrap_or(0))
                .sum()
        };
        let (retried, skipped, failed) = (
            count(Some(ItemOutcome::Retried)),
            count(Some(ItemOutcome::Skipped)),
            count(Some(ItemOutcome::Failed)),
        );
        let pending = count(None);
        let errors = if failed > 0 {
            retry_job_item::Entity::find_in(scope)
                .filter(I::JobId.eq(row.id))
                .filter(I::Outcome.eq(ItemOutcome::Failed.as_str()))
                .order_by_asc(I::Id)
                .limit(MAX_REPORTED_ERRORS)
                .all(&self.db)
                .await?
                .into_iter()
                .map(|item| RetryJobError {
                    task: item.task_id.into(),
                    message: item.error.unwrap_or_default(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(RetryJob {
            id: row.id,
            tenant: row.tenant_id.into(),
            status: RetryJobStatus::parse(&row.status)?,
            request: row.filter,
            from_start: row.from_start,
            matched: retried + skipped + failed + pending,
            processed: retried + skipped + failed,
            retried,
            skipped,
            failed,
            errors,
            created_by: row.created_by,
            created_at: row.created_at,
            finished_at: row.finished_at,
        })
    }
}

/// The scope's tasks a request matches, oldest first, at most its limit.
fn matching(
    backend: sea_orm::DbBackend,
    scope: TenantScope,
    request: &RetryRequest,
) -> Result<sea_orm::Select<task::Entity>> {
    let f = &request.filter;
    let statuses = if f.statuses.is_empty() {
        vec![TaskStatus::Failed.as_str()]
    } else {
        f.statuses.iter().map(|s| s.as_str()).collect()
    };
    let mut select = task::Entity::find_in(scope).filter(task::Column::Status.is_in(statuses));
    if let Some(key) = &f.plan_key {
        select = select.filter(task::Column::PlanKey.eq(key.as_str()));
    }
    if let Some(step) = &f.failed_step {
        select = select.filter(task::Column::CurrentStepId.eq(step.as_str()));
    }
    if let Some(text) = &f.error_matches {
        select = select.filter(text_match::contains(
            backend,
            (task::Entity, task::Column::ErrorMessage),
            text,
        ));
    }
    if let Some(after) = f.created.after {
        select = select.filter(task::Column::CreatedAt.gte(after));
    }
    if let Some(before) = f.created.before {
        select = select.filter(task::Column::CreatedAt.lt(before));
    }
    Ok(select
        .order_by_asc(task::Column::CreatedAt)
        .order_by_asc(task::Column::Id)
        .limit(u64::from(request.limit())))
}

/// The change that puts a failed task back in the queue: from its failed
/// step (which gets a fresh retry budget; settled steps stay settled), or
/// with `from_start` from its first step, every step unsettled and the
/// plan's own steps (`plan_steps`, without steps injected by the failed
/// run) when the plan is known.
pub(super) fn retry_changes(
    task: &Task,
    from_start: bool,
    plan_steps: Option<Vec<StepDef>>,
) -> TaskChanges {
    let mut changes = TaskChanges {
        status: Some(TaskStatus::Pending),
        error: Some(None),
        run_after: Some(Utc::now()),
        ..TaskChanges::default()
    };
    if from_start {
        changes.attempts = Some(Map::new());
        changes.settled_step_ids = Some(Vec::new());
        changes.reviewed_step_ids = Some(Vec::new());
        changes.step_outputs = Some(Map::new());
        changes.state = Some(json!({}));
        changes.current_step_id = Some(None);
        changes.frozen_plan = plan_steps;
    } else {
        let mut attempts = task.attempts.clone();
        if let Some(step) = &task.current_step_id {
            attempts.remove(step);
        }
        changes.attempts = Some(attempts);
    }
    changes
}
