//! Housekeeping: the platform's upkeep, run beside the executor on one
//! beat.
//!
//! **What it does.** Two chores, on one ticker of period `deliver_every`
//! (the beat, 1 s by default):
//! - *delivery*, every beat: due outbound webhook deliveries are sent
//!   (`Webhooks::deliver_due`), so one is sent about a beat after it falls
//!   due;
//! - *the sweep*, on the first beat at least `reap_every` after the last
//!   one (5 s by default; start-up sets the lease, from 1 to 30 s): tasks
//!   whose lease expired (a crashed or frozen process) go back to the queue
//!   with an event ([`Housekeeping::reap_expired`]), bulk retries whose
//!   runner is gone are taken up (`Tasks::resume_retry_jobs`), and so are
//!   memory import jobs (`Memories::resume_import_jobs`), trials that
//!   ended are stored as expired (`Capabilities::expire_trials`), and the
//!   schedules' due runs start (`Schedules::run_due`).
//!
//! **Who runs it.** Every process that runs an executor (`serve` and
//! `worker` with `executor_slots` above 0) runs it once, started where the
//! executor is; it stops when `stopping` turns true (or its sender is
//! gone), after the chores in hand end.
//!
//! Invariants:
//! - One loop and one ticker, but each chore runs on its own task: a slow
//!   webhook endpoint never holds up the reaper, nor the reverse. A chore
//!   still running when it falls due again is not started a second time.
//! - A chore's error is logged and never ends the loop: the chore runs
//!   again when it is next due.
//! - Any number of replicas may run every chore at once: the reaper
//!   changes a task only under `Guard::Expired` (the lease it read, still
//!   expired), a delivery is taken by a compare-and-set on its next
//!   attempt, a schedule's run is keyed `schedule:{id}:{due}` and moved on
//!   by a compare-and-set, and storing an ended trial is idempotent.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;
use tokio::{
    sync::watch,
    task::JoinHandle,
    time::{Instant, MissedTickBehavior},
};
use uuid::Uuid;

use crate::{
    Domain, Result, TenantScope,
    kernel::{
        db::BeginWrite,
        metrics::metrics,
        row_security::{Bypass, as_platform, as_tenant},
    },
    runtime::tasks::{Guard, NewEvent, TaskChanges, TaskStatus, mutate},
};

/// How often the chores run.
#[derive(Clone, Debug)]
pub struct HousekeepingConfig {
    /// The beat: how often due webhook deliveries are sent.
    pub deliver_every: Duration,
    /// How often expired leases are reaped, ended trials stored and due
    /// schedules started (on the first beat once this has passed).
    pub reap_every: Duration,
}

impl Default for HousekeepingConfig {
    fn default() -> Self {
        Self {
            deliver_every: Duration::from_secs(1),
            reap_every: Duration::from_secs(5),
        }
    }
}

/// The upkeep loop of one process. Cheap to clone.
#[derive(Clone)]
pub struct Housekeeping {
    domain: Domain,
    config: HousekeepingConfig,
    stopping: watch::Receiver<bool>,
}

impl Housekeeping {
    pub fn new(
        domain: Domain,
        config: HousekeepingConfig,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            domain,
            config,
            stopping,
        }
    }

    /// Start the loop; it ends when `stopping` turns true.
    pub fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }

    async fn run(self) {
        // The first tick is at once: a process starting catches up. (A
        // zero period is not a beat: `interval` refuses it.)
        let mut beat =
            tokio::time::interval(self.config.deliver_every.max(Duration::from_millis(1)));
        beat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut stopping = self.stopping.clone();
        let mut delivering: Option<JoinHandle<()>> = None;
        let mut sweeping: Option<JoinHandle<()>> = None;
        let mut next_sweep = Instant::now();
        loop {
            tokio::select! {
                _ = beat.tick() => {}
                changed = stopping.changed() => if changed.is_err() { break },
            }
            if *self.stopping.borrow() {
                break;
            }
            if idle(&delivering) {
                let chores = self.clone();
                delivering = Some(tokio::spawn(async move { chores.deliver().await }));
            }
            let now = Instant::now();
            if now >= next_sweep && idle(&sweeping) {
                next_sweep = now + self.config.reap_every;
                let chores = self.clone();
                sweeping = Some(tokio::spawn(async move { chores.sweep().await }));
            }
        }
        for chore in [delivering, sweeping].into_iter().flatten() {
            if let Err(err) = chore.await {
                tracing::error!(%err, "a housekeeping chore panicked");
            }
        }
    }

    /// Send the webhook deliveries due now.
    async fn deliver(&self) {
        match self.domain.webhooks.deliver_due(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(delivered = n, "sent webhook deliveries"),
            Err(err) => tracing::error!(%err, "webhook delivery error"),
        }
    }

    /// Reap expired leases, take up abandoned jobs, store ended trials,
    /// start due schedules.
    async fn sweep(&self) {
        if let Err(err) = self.reap_expired(Utc::now()).await {
            tracing::error!(%err, "reaper error");
        }
        match self.domain.tasks.resume_retry_jobs(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "took up abandoned bulk retries"),
            Err(err) => tracing::error!(%err, "bulk retry sweep error"),
        }
        match self.domain.memory.resume_import_jobs(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "took up abandoned memory imports"),
            Err(err) => tracing::error!(%err, "memory import sweep error"),
        }
        if let Err(err) = self.domain.capabilities.expire_trials(Utc::now()).await {
            tracing::error!(%err, "trial expiry error");
        }
        match self.domain.schedules.run_due(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(runs = n, "started scheduled runs");
                self.domain.tasks.wake_signal().notify_waiters();
            }
            Err(err) => tracing::error!(%err, "schedule error"),
        }
    }

    /// Return tasks whose lease expired before `now` to the queue; how
    /// many.
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
                let txn = db.begin_write().await?;
                let done = mutate(
                    &txn,
                    self.domain.tasks.announcing(),
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
}

/// Whether a chore may start: none started yet, or the last one ended.
fn idle(chore: &Option<JoinHandle<()>>) -> bool {
    chore.as_ref().is_none_or(JoinHandle::is_finished)
}
