//! The one owner of tier moves: promotion, archiving, expiry and the
//! `MEMORY_BANK` cap, run for every tenant by [`Memories::run_maintenance`].
//!
//! Rules, applied in this order in one transaction per run (so a run is all
//! or nothing, and running it twice changes nothing more):
//!
//! 1. `WORKING` → `HISTORY` when score ≥ 0.7 and uses ≥ 2; the 30-day
//!    `HISTORY` lifetime starts at promotion.
//! 2. `HISTORY` → `PATTERNS` when score ≥ 0.9 and uses ≥ 3; permanent.
//! 3. `WORKING`/`HISTORY`/`PATTERNS` with score < 0.2 → `ARCHIVED`.
//! 4. Active memories whose `expires_at` has passed → `EXPIRED`.
//! 5. More than `memory_bank_capacity` active `MEMORY_BANK` memories → the
//!    weakest (importance × confidence, then score, then least recently
//!    used, then oldest) are `ARCHIVED`.
//!
//! After the rules, the vector index builds the per-tenant HNSW indexes
//! that are due (see [`super::vector`]).
//!
//! Every move writes a `memory_events` row. The caller passes "now", so tests
//! run the job at any time they like. On PostgreSQL the run takes
//! `pg_try_advisory_xact_lock`: when another replica is running it, this one
//! skips (`skipped: true`) instead of waiting.

use crate::kernel::db::{BeginWrite, try_xact_lock};
use std::time::Duration as StdDuration;

use brainstem_entity::{MemoryId, TenantOwned, TenantScope, memory, tenant};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait,
    IntoActiveModel, QueryFilter,
};

use super::{Memories, MemoryEvent, Status, Tier, event, record_event};
use crate::{
    Result, TenantId,
    kernel::row_security::{Bypass, as_platform},
};

/// Comparisons with thresholds allow for float noise.
const EPSILON: f64 = 1e-9;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub promoted_to_history: u64,
    pub promoted_to_patterns: u64,
    pub archived: u64,
    pub expired: u64,
    /// `MEMORY_BANK` memories archived by the cap.
    pub capped: u64,
    /// Deleted memories purged for good, past their time in the bin.
    pub purged: u64,
    /// Deleted entities purged for good (with their relations and
    /// mentions), past their time in the bin.
    pub purged_entities: u64,
    /// Per-tenant vector indexes built (PostgreSQL).
    pub vector_indexes_built: u64,
    /// Another process held the lock; nothing was done.
    pub skipped: bool,
}

impl Memories {
    /// Run the lifecycle rules for every tenant as of `now`.
    pub async fn run_maintenance(&self, now: DateTime<Utc>) -> Result<MaintenanceReport> {
        as_platform(Bypass::Maintenance, self.maintain_every_tenant(now)).await
    }

    async fn maintain_every_tenant(&self, now: DateTime<Utc>) -> Result<MaintenanceReport> {
        let mut report = MaintenanceReport::default();
        let txn = self.db.begin_write().await?;
        if !try_xact_lock(&txn, "brainstem.memory_maintenance").await? {
            txn.rollback().await?;
            report.skipped = true;
            return Ok(report);
        }
        let tenants = tenant::Entity::find().all(&txn).await?;
        for t in tenants {
            let scope = TenantScope::new(TenantId::from(t.id));
            self.maintain_tenant(&txn, scope, now, &mut report).await?;
        }
        txn.commit().await?;
        // Outside the transaction: indexes are built concurrently, under a
        // lock of their own.
        report.vector_indexes_built = self.index.maintain().await?;
        Ok(report)
    }

    async fn maintain_tenant(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        now: DateTime<Utc>,
        report: &mut MaintenanceReport,
    ) -> Result<()> {
        let active = || {
            memory::Entity::find_in(scope)
                .filter(memory::Column::Status.eq(Status::Active.as_str()))
        };

        let to_history = active()
            .filter(memory::Column::Tier.eq(Tier::Working.as_str()))
            .filter(memory::Column::Score.gte(0.7 - EPSILON))
            .filter(memory::Column::Uses.gte(2))
            .all(txn)
            .await?;
        for m in to_history {
            move_tier(txn, scope, m, Tier::History, now).await?;
            report.promoted_to_history += 1;
        }

        let to_patterns = active()
            .filter(memory::Column::Tier.eq(Tier::History.as_str()))
            .filter(memory::Column::Score.gte(0.9 - EPSILON))
            .filter(memory::Column::Uses.gte(3))
            .all(txn)
            .await?;
        for m in to_patterns {
            move_tier(txn, scope, m, Tier::Patterns, now).await?;
            report.promoted_to_patterns += 1;
        }

        let weak = active()
            .filter(memory::Column::Tier.is_in([
                Tier::Working.as_str(),
                Tier::History.as_str(),
                Tier::Patterns.as_str(),
            ]))
            .filter(memory::Column::Score.lt(0.2 - EPSILON))
            .all(txn)
            .await?;
        for m in weak {
            set_status(txn, scope, m, Status::Archived, "ARCHIVED", now).await?;
            report.archived += 1;
        }

        let expired = active()
            .filter(memory::Column::ExpiresAt.lte(now))
            .all(txn)
            .await?;
        for m in expired {
            set_status(txn, scope, m, Status::Expired, "EXPIRED", now).await?;
            report.expired += 1;
        }

        let purge_before = now - chrono::Duration::days(i64::from(self.config.purge_after_days));
        report.purged += Memories::purge_deleted(txn, scope, purge_before).await?;
        report.purged_entities +=
            super::graph::Graph::purge_deleted(txn, scope, purge_before).await?;

        let cap = self.config.memory_bank_capacity;
        let mut bank = active()
            .filter(memory::Column::Tier.eq(Tier::MemoryBank.as_str()))
            .all(txn)
            .await?;
        if bank.len() as u64 > cap {
            bank.sort_by(|a, b| {
                (a.importance * a.confidence)
                    .total_cmp(&(b.importance * b.confidence))
                    .then(a.score.total_cmp(&b.score))
                    .then(a.last_used_at.cmp(&b.last_used_at))
                    .then(a.id.cmp(&b.id))
            });
            let excess = bank.len() - cap as usize;
            for m in bank.into_iter().take(excess) {
                set_status(txn, scope, m, Status::Archived, "ARCHIVED", now).await?;
                report.capped += 1;
            }
        }
        Ok(())
    }

    /// Run [`Memories::run_maintenance`] now and then every `interval`,
    /// until the runtime shuts down. Failures are logged and retried at the
    /// next tick. The returned receiver sees each run's report (tests and
    /// health checks wait on it instead of sleeping).
    pub fn spawn_maintenance(
        &self,
        interval: StdDuration,
    ) -> tokio::sync::watch::Receiver<Option<MaintenanceReport>> {
        let memories = self.clone();
        let (tx, rx) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // The first tick completes at once: run first, then sleep.
                ticker.tick().await;
                match memories.run_maintenance(Utc::now()).await {
                    Ok(report) => {
                        if report != MaintenanceReport::default() {
                            tracing::info!(?report, "memory maintenance");
                        }
                        // Nobody listening is fine.
                        let _ = tx.send(Some(report));
                    }
                    Err(err) => tracing::error!(error = %err, "memory maintenance failed"),
                }
            }
        });
        rx
    }
}

async fn move_tier(
    txn: &DatabaseTransaction,
    scope: TenantScope,
    m: memory::Model,
    tier: Tier,
    now: DateTime<Utc>,
) -> Result<()> {
    let id = MemoryId::from(m.id);
    let before = m.tier.clone();
    let mut model = m.into_active_model();
    model.tier = Set(tier.as_str().into());
    model.expires_at = Set(tier.ttl().map(|ttl| now + ttl));
    model.updated_at = Set(now);
    model.update(txn).await?;
    record_event(
        txn,
        scope,
        id,
        MemoryEvent {
            tier_before: Some(before),
            tier_after: Some(tier.as_str().into()),
            ..event("PROMOTED", now)
        },
    )
    .await
}

async fn set_status(
    txn: &DatabaseTransaction,
    scope: TenantScope,
    m: memory::Model,
    status: Status,
    kind: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let id = MemoryId::from(m.id);
    let mut model = m.into_active_model();
    model.status = Set(status.as_str().into());
    model.updated_at = Set(now);
    model.update(txn).await?;
    record_event(txn, scope, id, event(kind, now)).await
}
