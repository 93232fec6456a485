//! The runner of a bulk retry ([`bulk_retry`](super::bulk_retry)): works
//! through a job's pending items, a batch at a time, under a lease on the
//! job, and marks the job completed when none is left.
//!
//! **Who runs it.** The process that creates a job starts its runner at
//! once ([`Tasks::spawn_retry_job`]). A job whose runner died (a crashed
//! process: its lease expires, [`RETRY_JOB_LEASE`]) is taken up by the
//! housekeeping sweep of any process ([`Tasks::resume_retry_jobs`]), which
//! goes on with the items still pending.
//!
//! Invariants:
//! - One runner per job at a time: the lease ([`job_lease`]) is taken by a
//!   compare-and-set (free, expired, or already ours) and renewed before
//!   every batch.
//! - Even two runners on one job (a lease lost mid-batch) handle an item
//!   once: an item's outcome is written, guarded on it being pending, in
//!   the transaction that retries its task.
//! - An error of one task is that item's outcome (`FAILED`, with the
//!   error); an error of the database stops the runner, and the job is
//!   taken up again when its lease expires.

use std::time::Duration;

use super::{
    bulk_retry::{ItemOutcome, retry_changes},
    *,
};
use crate::kernel::{
    db::BeginWrite,
    job_lease::{self, JobColumns, LeasedJob},
};
use brainstem_entity::{retry_job, retry_job_item};

/// How long a runner holds a job without renewing its lease; a job whose
/// runner is silent longer is taken up by another process.
pub const RETRY_JOB_LEASE: Duration = Duration::from_secs(30);
/// Items handled between two renewals of the lease.
const BATCH: u64 = 20;

impl Tasks {
    /// Run job `id` of `scope` in the background (see [`Tasks::run_retry_job`]).
    pub fn spawn_retry_job(
        &self,
        scope: TenantScope,
        id: Uuid,
        take_over_at: Option<DateTime<Utc>>,
    ) {
        let tasks = self.clone();
        job_lease::spawn_runner(scope, id, "retry", move |owner| async move {
            tasks
                .run_retry_job(scope, id, &owner, take_over_at, None)
                .await
        });
    }

    /// Work through job `id` as `owner`: take its lease (free, ours, or
    /// expired before `take_over_at`, default now), then handle its
    /// pending items a batch at a time, and mark it completed when none
    /// is left. Stops early, lease held, after `budget` items (a test's
    /// crash). Returns how many items this call handled.
    pub async fn run_retry_job(
        &self,
        scope: TenantScope,
        id: Uuid,
        owner: &str,
        take_over_at: Option<DateTime<Utc>>,
        budget: Option<u64>,
    ) -> Result<u64> {
        let mut handled = 0;
        let mut at = take_over_at;
        loop {
            if !job_lease::take::<retry_job::Entity, _>(
                &self.db,
                scope,
                id,
                owner,
                RETRY_JOB_LEASE,
                at.take(),
            )
            .await?
            {
                return Ok(handled);
            }
            let want = budget.map_or(BATCH, |b| BATCH.min(b - handled));
            if want == 0 {
                return Ok(handled);
            }
            let items = retry_job_item::Entity::find_in(scope)
                .filter(retry_job_item::Column::JobId.eq(id))
                .filter(retry_job_item::Column::Outcome.is_null())
                .order_by_asc(retry_job_item::Column::Id)
                .limit(want)
                .all(&self.db)
                .await?;
            if items.is_empty() {
                job_lease::finish::<retry_job::Entity, _>(&self.db, scope, id, owner).await?;
                return Ok(handled);
            }
            let job = retry_job::Entity::find_by_id_in(scope, id)
                .one(&self.db)
                .await?
                .ok_or_else(|| Error::not_found(format!("retry job {id}")))?;
            for item in items {
                self.retry_item(scope, &job, item).await?;
                handled += 1;
            }
        }
    }

    /// Retry one item's task if it is still as matched, and record the
    /// outcome in the same transaction.
    async fn retry_item(
        &self,
        scope: TenantScope,
        job: &retry_job::Model,
        item: retry_job_item::Model,
    ) -> Result<()> {
        let id = TaskId::from(item.task_id);
        // Read outside the transaction: the guard below holds the task to
        // exactly this version.
        let task = match self.get(scope, id).await {
            Ok(task) => task,
            Err(Error::NotFound(_)) => {
                return self
                    .record_failure(scope, &item, "the task no longer exists")
                    .await;
            }
            Err(other) => return Err(other),
        };
        let plan_steps = match (job.from_start, task.plan_id) {
            (true, Some(plan)) => match self.plans.get(scope, plan).await {
                Ok(plan) => Some(plan.steps),
                Err(Error::NotFound(_)) => {
                    return self
                        .record_failure(scope, &item, "the task's plan version no longer exists")
                        .await;
                }
                Err(other) => return Err(other),
            },
            _ => None,
        };
        let changes = retry_changes(&task, job.from_start, plan_steps);
        let event = NewEvent::status(TaskStatus::Pending, "retry requested").data(json!({
            "by": job.created_by,
            "retry_job": job.id.to_string(),
            "from_start": job.from_start,
        }));
        let txn = self.db.begin_write().await?;
        let done = mutate(
            &txn,
            self.announcing(),
            scope,
            id,
            &Guard::Unchanged(TaskStatus::Failed, item.task_seq),
            changes,
            vec![event],
        )
        .await?;
        let outcome = if done.is_some() {
            ItemOutcome::Retried
        } else {
            ItemOutcome::Skipped
        };
        if !mark(&*txn, scope, &item, outcome, None).await? {
            // Another runner recorded it first; undo.
            drop(txn);
            return Ok(());
        }
        txn.commit().await?;
        if let Some((_, events)) = done {
            self.sink.publish(&events);
            self.runnable();
        }
        Ok(())
    }

    async fn record_failure(
        &self,
        scope: TenantScope,
        item: &retry_job_item::Model,
        message: &str,
    ) -> Result<()> {
        mark(&self.db, scope, item, ItemOutcome::Failed, Some(message)).await?;
        Ok(())
    }

    /// Take up every tenant's running jobs whose runner is gone (a lease
    /// expired before `now`, or never taken): each goes on in the
    /// background under its tenant's scope. How many were taken up.
    pub async fn resume_retry_jobs(&self, now: DateTime<Utc>) -> Result<usize> {
        let abandoned = job_lease::abandoned::<retry_job::Entity, _>(&self.db, now).await?;
        for (id, tenant) in &abandoned {
            self.spawn_retry_job(TenantScope::new(*tenant), *id, Some(now));
        }
        Ok(abandoned.len())
    }
}

impl LeasedJob for retry_job::Entity {
    fn columns() -> JobColumns<retry_job::Column> {
        use retry_job::Column as J;
        JobColumns {
            id: J::Id,
            status: J::Status,
            lease_owner: J::LeaseOwner,
            lease_expires_at: J::LeaseExpiresAt,
            updated_at: J::UpdatedAt,
            finished_at: J::FinishedAt,
        }
    }
}

/// Record an item's outcome if it is still pending; whether it was.
async fn mark<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    item: &retry_job_item::Model,
    outcome: ItemOutcome,
    error: Option<&str>,
) -> Result<bool> {
    use retry_job_item::Column as I;
    let marked = retry_job_item::Entity::update_many_in(scope)
        .col_expr(I::Outcome, Expr::value(outcome.as_str()))
        .col_expr(I::Error, Expr::value(error.map(str::to_owned)))
        .col_expr(I::UpdatedAt, Expr::value(Utc::now()))
        .filter(I::Id.eq(item.id))
        .filter(I::Outcome.is_null())
        .exec(db)
        .await?;
    Ok(marked.rows_affected == 1)
}
