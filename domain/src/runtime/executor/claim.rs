//! Claiming: which runnable task a free slot takes next, and returning
//! the tasks of lost leases to the queue.

use super::*;

/// A claimed task and, when it is planned in it, the claim's transaction,
/// still open.
pub(super) struct Claimed {
    pub(super) task: Task,
    pub(super) held: Option<DatabaseTransaction>,
}

impl Executor {
    /// [`Self::claim_next`] across tenants (the queue is shared).
    pub(super) async fn claim_one(&self) -> Result<Option<Claimed>> {
        as_platform(Bypass::Queue, self.claim_next()).await
    }

    /// Claim the next runnable task, with the claim's transaction still
    /// open when the task is to be planned in it.
    async fn claim_next(&self) -> Result<Option<Claimed>> {
        let txn = self.domain.db.begin().await?;
        let Some(task) = self.claim_in(&txn, Utc::now()).await? else {
            txn.commit().await?;
            return Ok(None);
        };
        // A task that named its plan is planned in the claim's own
        // transaction (one commit fewer), reading through it: planning then
        // reads only that plan, and no second pooled connection is needed
        // while this one is held. Otherwise the claim commits first.
        let held = if task.plan_key.is_none()
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
        Ok(Some(Claimed { task, held }))
    }

    /// Claim the oldest runnable task of any tenant.
    pub async fn claim(&self, now: DateTime<Utc>) -> Result<Option<Task>> {
        as_platform(Bypass::Queue, self.claim_in(&self.domain.db, now)).await
    }

    async fn claim_in<C: ConnectionTrait>(
        &self,
        db: &C,
        now: DateTime<Utc>,
    ) -> Result<Option<Task>> {
        let backend = db.get_database_backend();
        let sql = match backend {
            DbBackend::Postgres => {
                // The claim's transaction then sees only the claimed
                // task's tenant (row security), at no extra round trip.
                "UPDATE tasks SET lease_owner = $1, lease_expires_at = $2, updated_at = $3 \
                 WHERE id = (SELECT id FROM tasks WHERE status = 'PENDING' AND lease_owner IS NULL \
                 AND run_after <= $3 ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 RETURNING *, set_config('brainstem.tenant', tenant_id::text, true) AS row_access"
            }
            // SQLite has one writer at a time: the UPDATE itself is the claim.
            _ => {
                "UPDATE tasks SET lease_owner = ?1, lease_expires_at = ?2, updated_at = ?3 \
                 WHERE id = (SELECT id FROM tasks WHERE status = 'PENDING' AND lease_owner IS NULL \
                 AND run_after <= ?3 ORDER BY run_after, id LIMIT 1) \
                 RETURNING *"
            }
        };
        let statement = Statement::from_sql_and_values(
            backend,
            sql,
            [
                self.config.worker_id.clone().into(),
                self.lease_until().into(),
                now.into(),
            ],
        );
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

    /// Every tenant's tasks whose lease expired before `now`: id, tenant and
    /// lease owner.
    async fn expired_leases(&self, now: DateTime<Utc>) -> Result<Vec<sea_orm::QueryResult>> {
        let db = &self.domain.db;
        let backend = db.get_database_backend();
        let sql = match backend {
            DbBackend::Postgres => {
                "SELECT id, tenant_id, lease_owner FROM tasks WHERE lease_expires_at < $1"
            }
            _ => "SELECT id, tenant_id, lease_owner FROM tasks WHERE lease_expires_at < ?1",
        };
        // unscoped: the reaper looks at every tenant's expired leases.
        Ok(db
            .query_all_raw(Statement::from_sql_and_values(backend, sql, [now.into()]))
            .await?)
    }

    /// Return tasks whose lease expired before `now` to the queue.
    pub async fn reap_expired(&self, now: DateTime<Utc>) -> Result<usize> {
        let db = &self.domain.db;
        let rows = as_platform(Bypass::Queue, self.expired_leases(now)).await?;
        let mut reaped = 0;
        for row in rows {
            let id: Uuid = row.try_get("", "id")?;
            let tenant: Uuid = row.try_get("", "tenant_id")?;
            let owner: Option<String> = row.try_get("", "lease_owner")?;
            let Some(owner) = owner else { continue };
            let scope = TenantScope::new(tenant.into());
            let returned = as_tenant(scope.tenant_id(), async {
                let txn = db.begin().await?;
                let done = mutate(
                    &txn,
                    scope,
                    id.into(),
                    &Guard::Expired(owner.clone(), now),
                    TaskChanges {
                        status: Some(TaskStatus::Pending),
                        lease: Some(None),
                        ..TaskChanges::default()
                    },
                    vec![
                        NewEvent::status(TaskStatus::Pending, "lease expired; back in the queue")
                            .data(json!({"reason": "lease_expired", "worker": owner})),
                    ],
                )
                .await?;
                txn.commit().await?;
                Ok::<_, crate::Error>(done)
            })
            .await?;
            if let Some((_, events)) = returned {
                tracing::warn!(task = %id, worker = %owner, "reaped an expired lease");
                self.domain.tasks.sink().publish(&events);
                reaped += 1;
                metrics().lease_expiries.inc();
            }
        }
        if reaped > 0 {
            self.domain.tasks.wake_signal().notify_waiters();
        }
        Ok(reaped)
    }
}
