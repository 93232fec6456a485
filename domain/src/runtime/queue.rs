//! The fair queue seen from outside: each tenant's place in it (weight,
//! running limit, model budgets; set by platform admins, audited), its
//! statistics (`queueStats`), and why a waiting task waits.
//!
//! The executor's claim (`executor::claim`) applies the same settings and
//! the same definitions: *running* is a leased task; *ready* is a `PENDING`
//! task with no lease whose `run_after` has passed; a ready task *waits on
//! a limit* when its tenant runs its `max_running` tasks, or its key runs
//! its `max_concurrent`; any other ready task waits for a slot.

use brainstem_entity::{TaskId, TenantId, TenantOwned, TenantScope, tenant_queue_setting};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DatabaseConnection, DbBackend, Statement,
};
use serde_json::json;
use uuid::Uuid;

use crate::{
    Error, PlatformScope, Result,
    kernel::{
        audit::{self, AuditEntry},
        db::BeginWrite,
        row_security::{Bypass, as_platform},
    },
};

/// A tenant's settings in the fair queue, with the platform's defaults
/// filled in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantQueue {
    /// Its share of slots against other tenants with work (default 1).
    pub weight: f64,
    /// Its tasks running at once across every process (0: no limit).
    pub max_running: u32,
    /// Model calls per minute (0: no budget of its own).
    pub llm_rpm: u32,
    /// Model tokens per minute (0: no budget of its own).
    pub llm_tpm: u32,
}

/// A change of a tenant's settings; `None` keeps the platform's default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantQueueInput {
    pub weight: Option<f64>,
    pub max_running: Option<u32>,
    pub llm_rpm: Option<u32>,
    pub llm_tpm: Option<u32>,
}

/// One tenant's queue now.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueStats {
    pub tenant: TenantId,
    /// Ready tasks no limit holds back: they wait for a slot.
    pub runnable: u64,
    /// Leased tasks (being driven).
    pub running: u64,
    /// Ready tasks held back by the tenant's running limit or their key's.
    pub waiting_on_limit: u64,
    /// When the longest-waiting ready task became ready.
    pub oldest_ready_since: Option<DateTime<Utc>>,
}

/// Why a `PENDING` task is not running yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitingReason {
    /// Ready; the next free slot takes it, in the fair order.
    WaitingForSlot,
    /// Its tenant runs `max_running` tasks already.
    TenantMaxRunning,
    /// Its concurrency key runs its plan's `max_concurrent` already.
    MaxConcurrent,
    /// Its retry's back-off has not passed yet.
    RetryBackoff,
}

/// Per tenant: running, ready, ready-but-key-limited and the oldest ready
/// time; `$1` the time, `$2` a tenant or null for every tenant.
const STATS: &str = "\
SELECT t.tenant_id, \
  SUM(CASE WHEN t.lease_owner IS NOT NULL THEN 1 ELSE 0 END) AS running, \
  SUM(CASE WHEN t.lease_owner IS NULL AND t.status = 'PENDING' AND t.run_after <= $1 \
      THEN 1 ELSE 0 END) AS ready, \
  SUM(CASE WHEN t.lease_owner IS NULL AND t.status = 'PENDING' AND t.run_after <= $1 \
      AND t.max_concurrent IS NOT NULL AND t.concurrency_key IS NOT NULL \
      AND (SELECT count(*) FROM tasks k WHERE k.tenant_id = t.tenant_id \
           AND k.concurrency_key = t.concurrency_key AND k.lease_owner IS NOT NULL) >= t.max_concurrent \
      THEN 1 ELSE 0 END) AS keyed, \
  MIN(CASE WHEN t.lease_owner IS NULL AND t.status = 'PENDING' AND t.run_after <= $1 \
      THEN t.run_after END) AS oldest, \
  MAX(q.max_running) AS max_running \
FROM tasks t LEFT JOIN tenant_queue_settings q ON q.tenant_id = t.tenant_id \
WHERE (t.status = 'PENDING' OR t.lease_owner IS NOT NULL) AND ($2 IS NULL OR t.tenant_id = $2) \
GROUP BY t.tenant_id \
ORDER BY t.tenant_id";

#[derive(Clone)]
pub struct Queue {
    db: DatabaseConnection,
    /// The platform's running limit per tenant (0: none).
    default_max_running: u32,
}

impl Queue {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            db,
            default_max_running: 0,
        }
    }

    /// Use `max_running` as every tenant's running limit unless it has its
    /// own.
    pub fn with_default_max_running(mut self, max_running: u32) -> Self {
        self.default_max_running = max_running;
        self
    }

    /// The platform's running limit per tenant (0: none).
    pub fn default_max_running(&self) -> u32 {
        self.default_max_running
    }

    fn apply(&self, row: Option<tenant_queue_setting::Model>) -> TenantQueue {
        let n = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok());
        let row = row.as_ref();
        TenantQueue {
            weight: row.and_then(|r| r.weight).unwrap_or(1.0),
            max_running: row
                .and_then(|r| n(r.max_running))
                .unwrap_or(self.default_max_running),
            llm_rpm: row.and_then(|r| n(r.llm_rpm)).unwrap_or(0),
            llm_tpm: row.and_then(|r| n(r.llm_tpm)).unwrap_or(0),
        }
    }

    /// The tenant's settings in the queue.
    pub async fn settings(&self, scope: TenantScope) -> Result<TenantQueue> {
        let row = tenant_queue_setting::Entity::find_in(scope)
            .one(&self.db)
            .await?;
        Ok(self.apply(row))
    }

    /// Replace `tenant`'s settings (platform admins). Audited
    /// (`tenant_queue.set`, in the tenant's log).
    pub async fn set(
        &self,
        platform: &PlatformScope,
        tenant: TenantId,
        input: TenantQueueInput,
    ) -> Result<TenantQueue> {
        if let Some(w) = input.weight
            && !(w.is_finite() && w > 0.0 && w <= 1000.0)
        {
            return Err(Error::validation("weight must be above 0 and at most 1000"));
        }
        let int = |n: Option<u32>| n.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let scope = TenantScope::new(tenant);
        let now = Utc::now();
        let row = tenant_queue_setting::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(tenant.uuid()),
            weight: Set(input.weight),
            max_running: Set(int(input.max_running)),
            llm_rpm: Set(int(input.llm_rpm)),
            llm_tpm: Set(int(input.llm_tpm)),
            updated_by: Set(platform.actor().to_owned()),
            updated_at: Set(now),
        };
        crate::kernel::row_security::as_tenant(tenant, async {
            let txn = self.db.begin_write().await?;
            tenant_queue_setting::Entity::delete_many_in(scope)
                .exec(&txn)
                .await?;
            let stored = row.insert(&txn).await?;
            audit::record(
                &txn,
                AuditEntry {
                    tenant: Some(tenant),
                    actor: platform.actor().to_owned(),
                    action: "tenant_queue.set".into(),
                    target: tenant.to_string(),
                    data: json!({
                        "weight": input.weight,
                        "max_running": input.max_running,
                        "llm_rpm": input.llm_rpm,
                        "llm_tpm": input.llm_tpm,
                    }),
                },
            )
            .await?;
            txn.commit().await?;
            Ok(self.apply(Some(stored)))
        })
        .await
    }

    /// The tenant's queue at `now`.
    pub async fn stats(&self, scope: TenantScope, now: DateTime<Utc>) -> Result<QueueStats> {
        let tenant = scope.tenant_id();
        let mut rows = self.stats_rows(Some(tenant), now).await?;
        Ok(rows.pop().unwrap_or(QueueStats {
            tenant,
            runnable: 0,
            running: 0,
            waiting_on_limit: 0,
            oldest_ready_since: None,
        }))
    }

    /// Every tenant's queue at `now` (platform admins), tenants with no
    /// task pending or running left out.
    pub async fn stats_all(
        &self,
        _platform: &PlatformScope,
        now: DateTime<Utc>,
    ) -> Result<Vec<QueueStats>> {
        as_platform(Bypass::PlatformAdmin, self.stats_rows(None, now)).await
    }

    async fn stats_rows(
        &self,
        tenant: Option<TenantId>,
        now: DateTime<Utc>,
    ) -> Result<Vec<QueueStats>> {
        let backend = self.db.get_database_backend();
        let sql = match backend {
            DbBackend::Postgres => STATS.replace("$2 IS NULL", "$2::uuid IS NULL"),
            _ => STATS.replace('$', "?"),
        };
        let statement = Statement::from_sql_and_values(
            backend,
            sql,
            [now.into(), tenant.map(TenantId::uuid).into()],
        );
        // scoped: `$2` binds the tenant, or a platform admin reads all.
        let rows = self.db.query_all_raw(statement).await?;
        rows.iter()
            .map(|row| {
                let count = |name: &str| -> Result<u64> {
                    let n: Option<i64> = row.try_get("", name)?;
                    Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
                };
                let tenant: Uuid = row.try_get("", "tenant_id")?;
                let max_running: Option<i32> = row.try_get("", "max_running")?;
                let max_running = max_running
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(self.default_max_running);
                let running = count("running")?;
                let ready = count("ready")?;
                let keyed = count("keyed")?.min(ready);
                let at_limit = max_running > 0 && running >= u64::from(max_running);
                let waiting_on_limit = if at_limit { ready } else { keyed };
                Ok(QueueStats {
                    tenant: tenant.into(),
                    runnable: ready - waiting_on_limit,
                    running,
                    waiting_on_limit,
                    oldest_ready_since: row.try_get("", "oldest")?,
                })
            })
            .collect()
    }

    /// Why the tenant's task `id` waits; `None` when it is not waiting to
    /// run (running, finished, paused for a person).
    pub async fn waiting_reason(
        &self,
        scope: TenantScope,
        id: TaskId,
        now: DateTime<Utc>,
    ) -> Result<Option<WaitingReason>> {
        use brainstem_entity::task;
        use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter};
        let Some(t) = task::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
        else {
            return Err(Error::not_found(format!("task {id}")));
        };
        if t.status != "PENDING" || t.lease_owner.is_some() {
            return Ok(None);
        }
        if t.run_after > now {
            return Ok(Some(WaitingReason::RetryBackoff));
        }
        let settings = self.settings(scope).await?;
        if settings.max_running > 0 {
            let running = task::Entity::find_in(scope)
                .filter(task::Column::LeaseOwner.is_not_null())
                .count(&self.db)
                .await?;
            if running >= u64::from(settings.max_running) {
                return Ok(Some(WaitingReason::TenantMaxRunning));
            }
        }
        if let (Some(key), Some(max)) = (&t.concurrency_key, t.max_concurrent) {
            let running = task::Entity::find_in(scope)
                .filter(task::Column::ConcurrencyKey.eq(key.as_str()))
                .filter(task::Column::LeaseOwner.is_not_null())
                .count(&self.db)
                .await?;
            if running >= u64::try_from(max).unwrap_or(0) {
                return Ok(Some(WaitingReason::MaxConcurrent));
            }
        }
        Ok(Some(WaitingReason::WaitingForSlot))
    }
}
