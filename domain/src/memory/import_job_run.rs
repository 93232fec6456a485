//! The runner of a memory import job ([`import_job`](super::import_job)):
//! works through a job's pending lines in batches of up to
//! [`MAX_IMPORT_BATCH`], in line order, each through [`Memories::import`],
//! under a lease on the job ([`job_lease`]), and marks the job completed
//! when no line is left.
//!
//! **Bulk.** A runner keeps the tenant's vectors in the process
//! ([`DuplicateScan`], refreshed before each batch) for the batches'
//! near-duplicate lookups, and the tenant's HNSW index is not built while
//! the job runs ([`VectorIndex::maintain`](super::VectorIndex::maintain)
//! skips the tenant): the runner builds it once the job is completed.
//!
//! **Who runs it.** The process that creates a job starts its runner at
//! once ([`Memories::spawn_import_job`]). A job whose runner died (its
//! lease expired, [`IMPORT_JOB_LEASE`]) is taken up by the housekeeping
//! sweep of any process ([`Memories::resume_import_jobs`]), which goes on
//! with the lines still pending.
//!
//! Invariants:
//! - One runner per job at a time, batches one after another: the lease is
//!   taken (free, expired, or already ours) and renewed before each batch.
//! - **Exactly once.** Every line is imported under a key: its own `key`,
//!   or `job:<job id>:<line number>`. A batch whose memories were stored
//!   but whose outcomes were not (a crash between the two commits) runs
//!   again with the same keys, stores nothing twice, and reports those
//!   lines `SKIPPED` with the memory they became.
//! - A batch's outcomes and the job's counters are written in one
//!   transaction, guarded by the lease (the job row) and by each line being
//!   pending: a runner that lost its lease records nothing.
//! - A bad line is that line's `FAILED` outcome with its error; an error of
//!   the store stops the runner, and the job is taken up again when its
//!   lease expires.

use std::{collections::HashMap, time::Duration};

use brainstem_entity::{TenantOwned, TenantScope, memory, memory_import_job, memory_import_line};
use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{CaseStatement, Expr, ExprTrait},
};
use uuid::Uuid;

use super::{
    ImportStatus, Imported, MAX_IMPORT_BATCH, Memories, duplicate_scan::DuplicateScan, import_line,
};
use crate::{
    Error, Result,
    kernel::{
        db::{Backend, BeginWrite},
        job_lease::{self, JobColumns, LeasedJob},
    },
};

/// How long a runner holds a job without renewing its lease; a job whose
/// runner is silent longer is taken up by another process.
pub const IMPORT_JOB_LEASE: Duration = Duration::from_secs(60);
/// Lines whose outcomes one statement records.
const RECORD_CHUNK: usize = 200;
/// How often a batch that lost a race on a key (another import stored it
/// meanwhile) is run again before the runner stops.
const CONFLICT_RETRIES: usize = 3;

impl LeasedJob for memory_import_job::Entity {
    fn columns() -> JobColumns<memory_import_job::Column> {
        use memory_import_job::Column as J;
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

impl Memories {
    /// Run job `id` of `scope` in the background (see
    /// [`Memories::run_import_job`]).
    pub fn spawn_import_job(
        &self,
        scope: TenantScope,
        id: Uuid,
        take_over_at: Option<DateTime<Utc>>,
    ) {
        let memories = self.clone();
        job_lease::spawn_runner(scope, id, "import", move |owner| async move {
            memories
                .run_import_job(scope, id, &owner, take_over_at, None)
                .await
        });
    }

    /// Work through job `id` as `owner`: take its lease (free, ours, or
    /// expired before `take_over_at`, default now), then import its pending
    /// lines a batch at a time, and mark it completed when none is left.
    /// Stops early, lease held, after `budget` lines (a test's crash).
    /// Returns how many lines this call recorded.
    pub async fn run_import_job(
        &self,
        scope: TenantScope,
        id: Uuid,
        owner: &str,
        take_over_at: Option<DateTime<Utc>>,
        budget: Option<u64>,
    ) -> Result<u64> {
        let batch = MAX_IMPORT_BATCH as u64;
        let stored = memory::Entity::find_in(scope)
            .filter(memory::Column::EmbeddingModel.eq(self.embedder.model()))
            .count(&self.db)
            .await?;
        let mut scan = DuplicateScan::new(
            scope,
            self.embedder.model(),
            self.config.embedding_dimension,
            stored,
        );
        let mut handled = 0;
        let mut at = take_over_at;
        let mut conflicts = 0;
        loop {
            let taken = job_lease::take::<memory_import_job::Entity, _>(
                &self.db,
                scope,
                id,
                owner,
                IMPORT_JOB_LEASE,
                at.take(),
            )
            .await?;
            if !taken {
                return Ok(handled);
            }
            let want = budget.map_or(batch, |b| Ord::min(batch, b - handled));
            if want == 0 {
                return Ok(handled);
            }
            let lines: Vec<(i64, String)> = memory_import_line::Entity::find_in(scope)
                .filter(memory_import_line::Column::JobId.eq(id))
                .filter(memory_import_line::Column::Outcome.is_null())
                .order_by_asc(memory_import_line::Column::LineNo)
                .limit(want)
                .select_only()
                .column(memory_import_line::Column::LineNo)
                .column(memory_import_line::Column::Raw)
                .into_tuple()
                .all(&self.db)
                .await?;
            if lines.is_empty() {
                job_lease::finish::<memory_import_job::Entity, _>(&self.db, scope, id, owner)
                    .await?;
                self.import_progress.announce(id);
                self.analyze_after_load(scope).await;
                // The tenant's vector index, which waited for the job.
                if let Err(err) = self.index.maintain().await {
                    tracing::warn!(error = %err, "import: building vector indexes after the job failed; the maintenance job retries");
                }
                return Ok(handled);
            }
            let items = lines
                .iter()
                .map(|(line_no, raw)| import_line::read(*line_no, raw, derived_key(id, *line_no)))
                .collect();
            scan.refresh(&*self.index).await?;
            let results = match self.import_scanned(scope, items, Some(&scan)).await {
                Ok(results) => results,
                // Another import stored one of the batch's keys meanwhile:
                // run the batch again, which skips it.
                Err(Error::Conflict(_)) if conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    continue;
                }
                Err(err) => return Err(err),
            };
            conflicts = 0;
            if !self.record(scope, id, owner, &lines, results).await? {
                // The lease went to another runner, which goes on.
                return Ok(handled);
            }
            self.import_progress.announce(id);
            handled += lines.len() as u64;
        }
    }

    /// Refresh PostgreSQL's statistics of the tables a job filled: after a
    /// bulk load they describe the tables as they were, and the tenant's
    /// first searches would be planned for that. Only for a tenant left
    /// with at least `tenant_index_rows` memories: a smaller one is
    /// searched exactly, by the same plan whatever the statistics say, and
    /// a small job's `ANALYZE` of the shared tables would only wait behind
    /// their index builds. (SQLite keeps no statistics unless asked; its
    /// plans are chosen without them.)
    async fn analyze_after_load(&self, scope: TenantScope) {
        if Backend::of(&self.db) != Backend::Postgres {
            return;
        }
        match memory::Entity::find_in(scope).count(&self.db).await {
            Ok(rows) if rows >= self.config.tenant_index_rows as u64 => {}
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(error = %err, "import: counting the tenant's memories after the job failed");
                return;
            }
        }
        if let Err(err) = self
            .db
            .execute_unprepared("ANALYZE memories, memory_embeddings")
            .await
        {
            tracing::warn!(error = %err, "import: refreshing the planner's statistics after the job failed; autovacuum will");
        }
    }

    /// Record a batch's outcomes and add them to the job's counters, in one
    /// transaction, if `owner` still holds the job. Whether it did.
    async fn record(
        &self,
        scope: TenantScope,
        id: Uuid,
        owner: &str,
        lines: &[(i64, String)],
        results: Vec<Imported>,
    ) -> Result<bool> {
        use memory_import_job::Column as J;
        use memory_import_line::Column as L;
        let mut counts: HashMap<ImportStatus, i64> = HashMap::new();
        for r in &results {
            *counts.entry(r.status).or_default() += 1;
        }
        let count = |s: ImportStatus| counts.get(&s).copied().unwrap_or(0);
        let txn = self.db.begin_write().await?;
        let add = |col: J, n: i64| Expr::col(col).add(n);
        let held = memory_import_job::Entity::update_many_in(scope)
            .col_expr(J::Created, add(J::Created, count(ImportStatus::Created)))
            .col_expr(J::Merged, add(J::Merged, count(ImportStatus::Merged)))
            .col_expr(J::Skipped, add(J::Skipped, count(ImportStatus::Skipped)))
            .col_expr(J::Failed, add(J::Failed, count(ImportStatus::Failed)))
            .col_expr(J::UpdatedAt, Expr::value(Utc::now()))
            .filter(J::Id.eq(id))
            .filter(J::LeaseOwner.eq(owner))
            .exec(&*txn)
            .await?;
        if held.rows_affected != 1 {
            txn.rollback().await?;
            return Ok(false);
        }
        let pairs: Vec<(i64, Imported)> = lines.iter().map(|(n, _)| *n).zip(results).collect();
        let mut recorded = 0;
        for chunk in pairs.chunks(RECORD_CHUNK) {
            let at = |n: i64| L::LineNo.eq(n);
            let mut outcome = CaseStatement::new();
            let mut memory = CaseStatement::new();
            let mut kind = CaseStatement::new();
            let mut message = CaseStatement::new();
            let mut any_error = false;
            for (n, r) in chunk {
                outcome = outcome.case(at(*n), Expr::value(r.status.as_str()));
                memory = memory.case(at(*n), Expr::value(r.memory.map(|m| m.uuid())));
                if let Some(err) = &r.error {
                    let (k, m) = err.to_stored();
                    kind = kind.case(at(*n), Expr::value(k));
                    message = message.case(at(*n), Expr::value(m));
                    any_error = true;
                }
            }
            let mut update = memory_import_line::Entity::update_many_in(scope)
                .col_expr(L::Outcome, outcome.into())
                .col_expr(L::MemoryId, memory.into());
            if any_error {
                update = update
                    .col_expr(L::ErrorKind, kind.finally(Expr::col(L::ErrorKind)).into())
                    .col_expr(
                        L::ErrorMessage,
                        message.finally(Expr::col(L::ErrorMessage)).into(),
                    );
            }
            recorded += update
                .filter(L::JobId.eq(id))
                .filter(L::LineNo.is_in(chunk.iter().map(|(n, _)| *n)))
                .filter(L::Outcome.is_null())
                .exec(&*txn)
                .await?
                .rows_affected;
        }
        if recorded != pairs.len() as u64 {
            // Some line was recorded by another runner: count nothing twice.
            txn.rollback().await?;
            return Ok(false);
        }
        txn.commit().await?;
        Ok(true)
    }

    /// Take up every tenant's running import jobs whose runner is gone (a
    /// lease expired before `now`, or never taken): each goes on in the
    /// background under its tenant's scope. How many were taken up.
    pub async fn resume_import_jobs(&self, now: DateTime<Utc>) -> Result<usize> {
        let abandoned = job_lease::abandoned::<memory_import_job::Entity, _>(&self.db, now).await?;
        for (id, tenant) in &abandoned {
            self.spawn_import_job(TenantScope::new(*tenant), *id, Some(now));
        }
        Ok(abandoned.len())
    }
}

/// The key of a line that names none: unique to its job and line, so the
/// line is imported once however often its batch runs.
pub fn derived_key(job: Uuid, line_no: i64) -> String {
    format!("job:{job}:{line_no}")
}
