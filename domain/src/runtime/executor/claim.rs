//! Claiming: which runnable task a free slot takes next (the tasks of
//! lost leases come back to the queue through housekeeping's reaper,
//! [`crate::runtime::housekeeping`]).
//!
//! **The rule.** Among the tenants with runnable work (a `PENDING` task,
//! unleased, `run_after` passed) that are under their running limit, the
//! claim takes the tenant with the fewest running tasks for its weight
//! (`running / weight`; weights default to 1), and among equals the one
//! served least recently (its latest `claimed_at`): tenants share the slots
//! in proportion to their weights, and take turns when nothing is running.
//! Within the tenant: the highest `priority`, then the longest wait
//! (`run_after`, then id). A task with a concurrency key and a
//! `max_concurrent` is skipped while that many tasks of its key are in
//! progress; the next ones of the key wait in the same order. In progress
//! means leased, or started before it (an older id, claimed before) and not
//! finished: a task waiting for a retry, a review or an approval keeps its
//! place, so a key with `max_concurrent` 1 (a conversation's turns under
//! ENQUEUE) runs its tasks strictly one after another. Only older tasks
//! count that way, so two started tasks of a key waiting at once (say, both
//! retried) never wait for each other: the older runs first.
//!
//! **Across processes.** Everything the rule reads is in the database
//! (running means leased; served is `claimed_at`), so any number of
//! processes claim by it with no bookkeeping of their own. On PostgreSQL,
//! when the first tenant has no running limit and no keyed tasks, choosing
//! it (walking the runnable index tenant by tenant) and claiming its next
//! task with `FOR UPDATE SKIP LOCKED` are one statement, committed by
//! itself; otherwise the tenants are listed in order and tried in turn. A
//! tenant with a running limit or keyed tasks is claimed under a
//! transaction-scoped advisory lock of its own, and the count is read after
//! the lock, so two processes cannot both take the last place. SQLite has
//! one writer at a time: there the whole choice is the claim's one
//! `UPDATE`.
//!
//! **The reserve.** A process keeps its last `reserved_slots` free slots
//! for tenants with nothing in flight in it: a claim for one of them
//! ([`Open::ToNewcomers`]) passes over every tenant holding a lease of this
//! process. So when one tenant's slow steps would fill every slot, another
//! tenant's task still starts at once instead of waiting for one of those
//! steps to end. What a process holds is its leases (`lease_owner`), so
//! this too is read from the database.

use super::*;

/// A claimed task and, when it is planned in it, the claim's transaction,
/// still open.
pub(super) struct Claimed {
    pub(super) task: Task,
    pub(super) held: Option<WriteTransaction>,
    /// When the slot took it (its wait in the queue ended).
    pub(super) at: DateTime<Utc>,
}

/// Which tenants a claim may serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Open {
    /// Every tenant with runnable work under its limits.
    ToAll,
    /// Only those with no task leased by this process (a reserved slot).
    ToNewcomers,
}

/// What the one-statement claim found (PostgreSQL).
enum First {
    Claimed(Box<Task>),
    /// No tenant has runnable work under its limit.
    NothingRunnable,
    /// The first tenant is limited, or its next task was taken meanwhile:
    /// the tenants are tried in turn.
    TryInTurn,
}

/// A tenant with runnable work, in the order the rule serves them.
struct Candidate {
    tenant: Uuid,
    /// Its running limit (0: none).
    max_running: i64,
    /// Whether its claim must be serialised (a limit, or keyed tasks).
    limited: bool,
}

/// PostgreSQL: `ranked`, the tenants with runnable work under their
/// running limit, each with its `place` in the rule's order (1 first).
/// `$1`: the platform's default running limit; `$2`: this process's lease
/// owner; `$3`: true to rank only tenants holding none of its leases
/// ([`Open::ToNewcomers`]). The one statement of the rule's order, for
/// [`CANDIDATES_PG`] and [`CLAIM_FIRST_PG`].
macro_rules! ranked_pg {
    () => {
        "\
WITH RECURSIVE active(tenant_id) AS ( \
    (SELECT tenant_id FROM tasks WHERE status = 'PENDING' AND lease_owner IS NULL \
     ORDER BY tenant_id LIMIT 1) \
  UNION ALL \
    SELECT (SELECT t.tenant_id FROM tasks t \
            WHERE t.status = 'PENDING' AND t.lease_owner IS NULL AND t.tenant_id > a.tenant_id \
            ORDER BY t.tenant_id LIMIT 1) \
    FROM active a WHERE a.tenant_id IS NOT NULL \
), ranked AS ( \
SELECT c.tenant_id, c.max_running, c.keyed, \
  row_number() OVER (ORDER BY c.running / c.weight, c.served NULLS FIRST, c.tenant_id) AS place \
FROM ( \
  SELECT a.tenant_id, \
    COALESCE(q.max_running, $1)::bigint AS max_running, \
    COALESCE(q.weight, 1.0) AS weight, \
    (SELECT count(*) FROM tasks r WHERE r.tenant_id = a.tenant_id AND r.lease_owner IS NOT NULL) AS running, \
    (SELECT max(s.claimed_at) FROM tasks s WHERE s.tenant_id = a.tenant_id AND s.claimed_at IS NOT NULL) AS served, \
    EXISTS (SELECT 1 FROM tasks k WHERE k.tenant_id = a.tenant_id AND k.status = 'PENDING' \
            AND k.lease_owner IS NULL AND k.max_concurrent IS NOT NULL) AS keyed \
  FROM active a LEFT JOIN tenant_queue_settings q ON q.tenant_id = a.tenant_id \
  WHERE a.tenant_id IS NOT NULL \
) c \
WHERE (c.max_running <= 0 OR c.running < c.max_running) \
  AND (NOT $3::boolean OR NOT EXISTS (SELECT 1 FROM tasks h WHERE h.tenant_id = c.tenant_id \
                                      AND h.lease_owner IS NOT NULL AND h.lease_owner = $2)) \
) "
    };
}

/// PostgreSQL: the first tenants of `ranked`, in order.
const CANDIDATES_PG: &str = concat!(
    ranked_pg!(),
    "SELECT tenant_id, max_running, keyed FROM ranked ORDER BY place LIMIT 16"
);

/// PostgreSQL: when the first tenant of `ranked` has no limit and no keyed
/// tasks (nothing to serialise), claim its next task in the same
/// statement. One row always: the claimed task's columns (all NULL when
/// none was claimed) and `runnable_tenants`, the number of tenants ranked.
/// The tenant is a scalar subquery, not a join: so its next task is the
/// first entry of `ix_tasks_runnable` in order, where a join sorted all of
/// the tenant's runnable tasks on every claim (2.8–11 ms against 1.2–2.4
/// ms a claim with 400 runnable and 400 leased).
/// `$2`: the lease owner, `$4`: the lease's end, `$5`: now.
const CLAIM_FIRST_PG: &str = concat!(
    ranked_pg!(),
    ", next AS MATERIALIZED ( \
  SELECT c.tenant_id, c.id FROM tasks c \
  WHERE c.tenant_id = (SELECT r.tenant_id FROM ranked r \
                       WHERE r.place = 1 AND r.max_running <= 0 AND NOT r.keyed) \
    AND c.status = 'PENDING' AND c.lease_owner IS NULL AND c.run_after <= $5 \
  ORDER BY c.priority DESC, c.run_after, c.id \
  LIMIT 1 FOR UPDATE OF c SKIP LOCKED \
), claimed AS ( \
UPDATE tasks t SET lease_owner = $2, lease_expires_at = $4, updated_at = $5, claimed_at = $5 \
FROM next WHERE t.tenant_id = next.tenant_id AND t.id = next.id \
RETURNING t.*) \
SELECT claimed.*, (SELECT count(*) FROM ranked) AS runnable_tenants \
FROM (SELECT 1) AS one LEFT JOIN claimed ON true"
);

/// PostgreSQL: claim the tenant `$4`'s next task, if its running limit
/// (`$5`, 0: none) and the task's key allow. It commits at once (nothing
/// else is read in its transaction), so it needs no row access of its own.
const CLAIM_PG: &str = "\
UPDATE tasks SET lease_owner = $1, lease_expires_at = $2, updated_at = $3, claimed_at = $3 \
WHERE tenant_id = $4 AND id = ( \
  SELECT c.id FROM tasks c \
  WHERE c.tenant_id = $4 AND c.status = 'PENDING' AND c.lease_owner IS NULL AND c.run_after <= $3 \
    AND ($5 <= 0 OR (SELECT count(*) FROM tasks r \
                     WHERE r.tenant_id = $4 AND r.lease_owner IS NOT NULL) < $5) \
    AND (c.max_concurrent IS NULL OR c.concurrency_key IS NULL \
         OR (SELECT count(*) FROM tasks k WHERE k.tenant_id = $4 \
             AND k.concurrency_key = c.concurrency_key AND k.lease_owner IS NOT NULL) \
          + (SELECT count(*) FROM tasks w WHERE w.tenant_id = $4 \
             AND w.concurrency_key = c.concurrency_key AND w.lease_owner IS NULL \
             AND w.claimed_at IS NOT NULL AND w.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') \
             AND w.id < c.id) < c.max_concurrent) \
  ORDER BY c.priority DESC, c.run_after, c.id \
  LIMIT 1 FOR UPDATE SKIP LOCKED) \
RETURNING *";

/// SQLite: the whole rule in the claim's one `UPDATE`. `?4`: the
/// platform's default running limit; `?5`: true to rank only tenants
/// holding none of this process's leases. `ranked` is `MATERIALIZED`: each
/// tenant's running count and latest claim are read once per claim;
/// inlined, SQLite read them again for every runnable task it weighed
/// (a second a claim with 800 runnable tasks beside 7,000 finished ones).
/// The running and held counts read the leased tasks' partial index
/// (`INDEXED BY`): left to choose, SQLite walked every task of the tenant,
/// finished ones included, by `ix_tasks_tenant_id`.
const CLAIM_SQLITE: &str = "\
UPDATE tasks SET lease_owner = ?1, lease_expires_at = ?2, updated_at = ?3, claimed_at = ?3 \
WHERE id = ( \
  WITH ranked AS MATERIALIZED ( \
    SELECT a.tenant_id, \
      COALESCE(q.max_running, ?4) AS max_running, \
      COALESCE(q.weight, 1.0) AS weight, \
      (SELECT count(*) FROM tasks r INDEXED BY ix_tasks_leased \
       WHERE r.tenant_id = a.tenant_id AND r.lease_owner IS NOT NULL) AS running, \
      (SELECT max(s.claimed_at) FROM tasks s WHERE s.tenant_id = a.tenant_id AND s.claimed_at IS NOT NULL) AS served \
    FROM (SELECT DISTINCT tenant_id FROM tasks \
          WHERE status = 'PENDING' AND lease_owner IS NULL AND run_after <= ?3) a \
    LEFT JOIN tenant_queue_settings q ON q.tenant_id = a.tenant_id \
    WHERE NOT ?5 OR NOT EXISTS (SELECT 1 FROM tasks h INDEXED BY ix_tasks_leased \
                                WHERE h.tenant_id = a.tenant_id \
                                AND h.lease_owner IS NOT NULL AND h.lease_owner = ?1) \
  ) \
  SELECT c.id FROM tasks c JOIN ranked t ON t.tenant_id = c.tenant_id \
  WHERE c.status = 'PENDING' AND c.lease_owner IS NULL AND c.run_after <= ?3 \
    AND (t.max_running <= 0 OR t.running < t.max_running) \
    AND (c.max_concurrent IS NULL OR c.concurrency_key IS NULL \
         OR (SELECT count(*) FROM tasks k WHERE k.tenant_id = c.tenant_id \
             AND k.concurrency_key = c.concurrency_key AND k.lease_owner IS NOT NULL) \
          + (SELECT count(*) FROM tasks w WHERE w.tenant_id = c.tenant_id \
             AND w.concurrency_key = c.concurrency_key AND w.lease_owner IS NULL \
             AND w.claimed_at IS NOT NULL AND w.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') \
             AND w.id < c.id) < c.max_concurrent) \
  ORDER BY CAST(t.running AS REAL) / t.weight, t.served IS NOT NULL, t.served, t.tenant_id, \
    c.priority DESC, c.run_after, c.id \
  LIMIT 1) \
RETURNING *";

impl Executor {
    /// [`Self::claim_next`] across tenants (the queue is shared), for
    /// the tenants `open` admits.
    pub(super) async fn claim_one(&self, open: Open) -> Result<Option<Claimed>> {
        as_platform(Bypass::Queue, self.claim_next(Utc::now(), true, open)).await
    }

    /// Claim the next runnable task by the rule; on SQLite with the
    /// claim's transaction still open when the task is to be planned in
    /// it. `may_hold`: whether the transaction may stay open for planning.
    async fn claim_next(
        &self,
        now: DateTime<Utc>,
        may_hold: bool,
        open: Open,
    ) -> Result<Option<Claimed>> {
        if self.domain.db.get_database_backend() != DbBackend::Postgres {
            let txn = self.domain.db.begin_write().await?;
            return match self.claim_sqlite(&txn, now, open).await? {
                Some(task) => Ok(Some(self.hold_or_commit(txn, task, may_hold, now).await?)),
                None => {
                    txn.commit().await?;
                    Ok(None)
                }
            };
        }
        match self.claim_first_pg(now, open).await? {
            First::Claimed(task) => {
                return Ok(Some(Claimed {
                    task: *task,
                    held: None,
                    at: now,
                }));
            }
            First::NothingRunnable => return Ok(None),
            First::TryInTurn => {}
        }
        for candidate in self.candidates(open).await? {
            if !candidate.limited {
                // One statement, committed by itself: with each change of
                // a leased task one statement too (`tasks::LeasedWrite`),
                // holding the claim open for planning would save nothing,
                // and would show the claimed task as still runnable to the
                // next claim.
                let claimed = self
                    .claim_pg(
                        &self.domain.db,
                        candidate.tenant,
                        candidate.max_running,
                        now,
                    )
                    .await?;
                match claimed {
                    Some(task) => {
                        return Ok(Some(Claimed {
                            task,
                            held: None,
                            at: now,
                        }));
                    }
                    None => continue,
                }
            }
            // Serialise this tenant's claims across processes; the count in
            // the claim is read after the lock is held, and the lock is not
            // kept while the task plans.
            let txn = self.domain.db.begin_write().await?;
            txn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_advisory_xact_lock(hashtextextended('brainstem.queue:' || $1::text, 0))",
                [candidate.tenant.into()],
            ))
            .await?;
            let claimed = self
                .claim_pg(&txn, candidate.tenant, candidate.max_running, now)
                .await?;
            txn.commit().await?;
            if let Some(task) = claimed {
                return Ok(Some(Claimed {
                    task,
                    held: None,
                    at: now,
                }));
            }
        }
        Ok(None)
    }

    /// SQLite: a task that named its plan is planned in the claim's own
    /// transaction (one write turn fewer), reading through it: planning then
    /// reads only that plan, and no second pooled connection is needed
    /// while this one is held. Otherwise (or when `may_hold` is false) the
    /// claim commits first.
    async fn hold_or_commit(
        &self,
        txn: WriteTransaction,
        task: Task,
        may_hold: bool,
        at: DateTime<Utc>,
    ) -> Result<Claimed> {
        let held = if may_hold
            && task.plan_key.is_none()
            && !task.cancel_requested
            && task.mode != TaskMode::Answer
            && task.intent.is_some()
            && task.plan_id.is_some()
        {
            Some(txn)
        } else {
            txn.commit().await?;
            None
        };
        Ok(Claimed { task, held, at })
    }

    /// PostgreSQL: the common case in one statement (`CLAIM_FIRST_PG`).
    async fn claim_first_pg(&self, now: DateTime<Utc>, open: Open) -> Result<First> {
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            CLAIM_FIRST_PG,
            [
                i64::from(self.config.tenant_max_running).into(),
                self.config.worker_id.clone().into(),
                (open == Open::ToNewcomers).into(),
                self.lease_until().into(),
                now.into(),
            ],
        );
        // unscoped: the shared work queue.
        let Some(row) = self.domain.db.query_one_raw(statement).await? else {
            return Ok(First::NothingRunnable);
        };
        if row.try_get::<Option<Uuid>>("", "id")?.is_some() {
            use sea_orm::FromQueryResult;
            let task = Task::try_from(task::Model::from_query_result(&row, "")?)?;
            metrics()
                .claim_latency
                .observe(seconds_between(task.run_after, now));
            return Ok(First::Claimed(Box::new(task)));
        }
        let runnable: i64 = row.try_get("", "runnable_tenants")?;
        Ok(if runnable == 0 {
            First::NothingRunnable
        } else {
            First::TryInTurn
        })
    }

    /// PostgreSQL: the tenants to try, in the rule's order.
    async fn candidates(&self, open: Open) -> Result<Vec<Candidate>> {
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            CANDIDATES_PG,
            [
                i64::from(self.config.tenant_max_running).into(),
                self.config.worker_id.clone().into(),
                (open == Open::ToNewcomers).into(),
            ],
        );
        // unscoped: the shared work queue.
        let rows = self.domain.db.query_all_raw(statement).await?;
        rows.iter()
            .map(|row| {
                let max_running: i64 = row.try_get("", "max_running")?;
                let keyed: bool = row.try_get("", "keyed")?;
                Ok(Candidate {
                    tenant: row.try_get("", "tenant_id")?,
                    max_running,
                    limited: max_running > 0 || keyed,
                })
            })
            .collect()
    }

    async fn claim_pg<C: ConnectionTrait>(
        &self,
        db: &C,
        tenant: Uuid,
        max_running: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            CLAIM_PG,
            [
                self.config.worker_id.clone().into(),
                self.lease_until().into(),
                now.into(),
                tenant.into(),
                max_running.into(),
            ],
        );
        self.claimed(db, statement, now).await
    }

    async fn claim_sqlite<C: ConnectionTrait>(
        &self,
        db: &C,
        now: DateTime<Utc>,
        open: Open,
    ) -> Result<Option<Task>> {
        let statement = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            CLAIM_SQLITE,
            [
                self.config.worker_id.clone().into(),
                self.lease_until().into(),
                now.into(),
                i64::from(self.config.tenant_max_running).into(),
                (open == Open::ToNewcomers).into(),
            ],
        );
        self.claimed(db, statement, now).await
    }

    /// Run a claim statement; the task it claimed, if any.
    async fn claimed<C: ConnectionTrait>(
        &self,
        db: &C,
        statement: Statement,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        // unscoped: the shared work queue; the claimed task's tenant scopes
        // everything done with it afterwards.
        let row = task::Entity::find().from_raw_sql(statement).one(db).await?;
        let task = row.map(Task::try_from).transpose()?;
        if let Some(task) = &task {
            metrics()
                .claim_latency
                .observe(seconds_between(task.run_after, now));
        }
        Ok(task)
    }

    /// Claim the next runnable task by the rule, committed at once.
    pub async fn claim(&self, now: DateTime<Utc>) -> Result<Option<Task>> {
        let claimed = as_platform(Bypass::Queue, self.claim_next(now, false, Open::ToAll)).await?;
        Ok(claimed.map(|c| c.task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL: every part of the one-statement claim is answered by an
    /// index of `tasks`, and whether the first tenant has keyed runnable
    /// tasks is a probe of `ix_tasks_keyed_runnable` (without it, a read
    /// of the whole table: most of a claim's time).
    #[tokio::test]
    async fn postgres_claim_reads_tasks_by_index_only() {
        let db = crate::kernel::db::plans::migrated_postgres().await;
        let now = Utc::now();
        for newcomers in [false, true] {
            let plan = crate::kernel::db::plans::postgres_plan(
                &db,
                CLAIM_FIRST_PG,
                vec![
                    0i64.into(),
                    "w".into(),
                    newcomers.into(),
                    now.into(),
                    now.into(),
                ],
            )
            .await;
            assert!(
                plan.iter()
                    .any(|line| line.contains("ix_tasks_keyed_runnable")),
                "{plan:#?}"
            );
            assert!(
                !plan.iter().any(|line| line.contains("Seq Scan on tasks")),
                "{plan:#?}"
            );
        }
    }

    /// SQLite ranks the tenants once per claim (`MATERIALIZE ranked`), not
    /// once per runnable task it weighs, and counts a tenant's running and
    /// held tasks among its leased ones only.
    #[tokio::test]
    async fn sqlite_ranks_each_tenant_once_per_claim() {
        let (_dir, db) = crate::kernel::db::plans::migrated_sqlite().await;
        let select = CLAIM_SQLITE
            .split_once("WHERE id = ( ")
            .and_then(|(_, rest)| rest.rsplit_once(") RETURNING"))
            .map(|(select, _)| select)
            .unwrap();
        let now = Utc::now();
        let statement = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            select,
            ["w".into(), now.into(), now.into(), 0i64.into(), true.into()],
        );
        let plan = crate::kernel::db::plans::query_plan(&db, statement).await;
        assert!(
            plan.iter().any(|step| step == "MATERIALIZE ranked"),
            "{plan:?}"
        );
        // The running counts are read inside the materialised ranking only.
        let counts = plan
            .iter()
            .filter(|step| step.starts_with("SEARCH r "))
            .count();
        assert_eq!(counts, 1, "{plan:?}");
        for leased in [
            "SEARCH r USING INDEX ix_tasks_leased",
            "SEARCH h USING INDEX ix_tasks_leased",
        ] {
            assert!(
                plan.iter().any(|step| step.starts_with(leased)),
                "{leased}: {plan:?}"
            );
        }
    }
}
