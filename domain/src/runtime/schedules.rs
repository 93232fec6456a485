//! Schedules: a tenant's plan started on a cron expression in a time zone.
//!
//! Tenant admins create, pause, resume and delete them (each audited). The
//! executor's housekeeping beat calls [`Schedules::run_due`], on every
//! replica: each due schedule's run starts a task keyed by the schedule
//! and its due time, then the schedule's `next_run_at` moves forward with a
//! compare-and-set on the due time it read.
//!
//! Invariants:
//! - One task per due time, however many replicas see it and whether or
//!   not one crashes between the two writes: the task's idempotency key is
//!   `schedule:{id}:{due}` (a second start finds the first), and only the
//!   replica whose compare-and-set wins moves the schedule on.
//! - A schedule that missed due times (every replica down) runs once for
//!   the latest of them, then keeps to its cron from now.
//! - A paused schedule has no next run; resuming computes it from now.

use std::str::FromStr;

use brainstem_entity::{TaskId, TenantOwned, TenantScope, schedule};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, sea_query::Expr,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Error, Principal, Result,
    kernel::{
        audit::{self, AuditEntry},
        row_security::{self, Bypass, as_platform},
    },
    runtime::tasks::{Channel, NewTask, Tasks},
};

/// Due schedules one beat starts at most (the rest wait for the next).
const DUE_BATCH: u64 = 100;

/// A schedule as admins see it.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub id: Uuid,
    pub name: String,
    pub plan_key: String,
    pub cron: String,
    pub time_zone: String,
    pub input: String,
    pub payload: Value,
    pub paused: bool,
    pub next_run_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_task: Option<TaskId>,
    pub created_by: String,
}

impl From<schedule::Model> for Schedule {
    fn from(m: schedule::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            plan_key: m.plan_key,
            cron: m.cron,
            time_zone: m.time_zone,
            input: m.input,
            payload: m.payload,
            paused: m.status == PAUSED,
            next_run_at: m.next_run_at,
            last_run_at: m.last_run_at,
            last_task: m.last_task_id.map(TaskId::from),
            created_by: m.created_by,
        }
    }
}

impl Schedule {
    /// The next `count` due times from `now` (none while paused).
    pub fn upcoming(&self, now: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        if self.paused {
            return Vec::new();
        }
        let Ok(when) = When::parse(&self.cron, &self.time_zone) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(count);
        let mut from = now;
        while out.len() < count {
            match when.next_after(from) {
                Some(next) => {
                    out.push(next);
                    from = next;
                }
                None => break,
            }
        }
        out
    }
}

/// What an admin creates.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub name: String,
    pub plan_key: String,
    pub cron: String,
    pub time_zone: String,
    pub input: String,
    pub payload: Value,
}

const ACTIVE: &str = "ACTIVE";
const PAUSED: &str = "PAUSED";

/// A cron expression in a time zone.
struct When {
    cron: Cron,
    zone: Tz,
}

impl When {
    fn parse(cron: &str, zone: &str) -> Result<Self> {
        let cron = Cron::from_str(cron.trim())
            .map_err(|e| Error::validation(format!("cron `{cron}`: {e}")))?;
        let zone = Tz::from_str(zone.trim()).map_err(|_| {
            Error::validation(format!(
                "time zone `{zone}` is not an IANA zone (e.g. Europe/Paris)"
            ))
        })?;
        Ok(Self { cron, zone })
    }

    /// The first due time strictly after `after`.
    fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.zone), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

#[derive(Clone)]
pub struct Schedules {
    db: DatabaseConnection,
    tasks: Tasks,
}

impl Schedules {
    pub fn new(db: DatabaseConnection, tasks: Tasks) -> Self {
        Self { db, tasks }
    }

    /// The tenant's schedules, by name (tenant admins).
    pub async fn list(&self, principal: &Principal) -> Result<Vec<Schedule>> {
        let scope = principal.require_scope("admin")?;
        Ok(schedule::Entity::find_in(scope)
            .order_by_asc(schedule::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Schedule::from)
            .collect())
    }

    /// Create a schedule (tenant admins; audited as `schedule.create`).
    pub async fn create(
        &self,
        principal: &Principal,
        new: NewSchedule,
        now: DateTime<Utc>,
    ) -> Result<Schedule> {
        let scope = principal.require_scope("admin")?;
        let name = new.name.trim().to_owned();
        if name.is_empty() || name.len() > 100 {
            return Err(Error::validation("a schedule name has 1-100 characters"));
        }
        if new.plan_key.trim().is_empty() {
            return Err(Error::validation("a schedule needs a planKey"));
        }
        let when = When::parse(&new.cron, &new.time_zone)?;
        let next = when
            .next_after(now)
            .ok_or_else(|| Error::validation(format!("cron `{}` never comes due", new.cron)))?;
        let by = principal.actor.to_string();
        let model = schedule::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            name: Set(name.clone()),
            plan_key: Set(new.plan_key.trim().to_owned()),
            cron: Set(new.cron.trim().to_owned()),
            time_zone: Set(new.time_zone.trim().to_owned()),
            input: Set(new.input),
            payload: Set(new.payload),
            status: Set(ACTIVE.to_owned()),
            next_run_at: Set(Some(next)),
            last_run_at: Set(None),
            last_task_id: Set(None),
            created_by: Set(by.clone()),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&self.db)
        .await
        .map_err(|e| match Error::from(e) {
            Error::Conflict(_) => Error::Conflict(format!("a schedule named `{name}` exists")),
            other => other,
        })?;
        audit::record(
            &self.db,
            AuditEntry::in_tenant(
                scope.tenant_id(),
                &by,
                "schedule.create",
                &name,
                json!({
                    "plan_key": model.plan_key, "cron": model.cron, "time_zone": model.time_zone,
                }),
            ),
        )
        .await?;
        Ok(model.into())
    }

    /// Pause (`paused`) or resume a schedule (tenant admins; audited).
    /// Resuming computes its next run from `now`.
    pub async fn set_paused(
        &self,
        principal: &Principal,
        name: &str,
        paused: bool,
        now: DateTime<Utc>,
    ) -> Result<Schedule> {
        let scope = principal.require_scope("admin")?;
        let row = self.row(scope, name).await?;
        let next = if paused {
            None
        } else {
            When::parse(&row.cron, &row.time_zone)?.next_after(now)
        };
        let mut active: schedule::ActiveModel = row.into();
        active.status = Set(if paused { PAUSED } else { ACTIVE }.to_owned());
        active.next_run_at = Set(next);
        active.updated_at = Set(now);
        let model = active.update(&self.db).await?;
        let action = if paused {
            "schedule.pause"
        } else {
            "schedule.resume"
        };
        audit::record(
            &self.db,
            AuditEntry::in_tenant(
                scope.tenant_id(),
                principal.actor.to_string(),
                action,
                name,
                json!({}),
            ),
        )
        .await?;
        Ok(model.into())
    }

    /// Delete a schedule (tenant admins; audited). Returns whether there
    /// was one.
    pub async fn delete(&self, principal: &Principal, name: &str) -> Result<bool> {
        let scope = principal.require_scope("admin")?;
        let deleted = schedule::Entity::delete_many_in(scope)
            .filter(schedule::Column::Name.eq(name))
            .exec(&self.db)
            .await?
            .rows_affected
            > 0;
        if deleted {
            audit::record(
                &self.db,
                AuditEntry::in_tenant(
                    scope.tenant_id(),
                    principal.actor.to_string(),
                    "schedule.delete",
                    name,
                    json!({}),
                ),
            )
            .await?;
        }
        Ok(deleted)
    }

    /// Start every run due at `now`, on any replica; returns how many this
    /// call started.
    pub async fn run_due(&self, now: DateTime<Utc>) -> Result<usize> {
        let due = as_platform(
            Bypass::Queue,
            // unscoped: the due schedules of every tenant; each run is then
            // started and recorded under its own tenant's scope.
            schedule::Entity::find()
                .filter(schedule::Column::Status.eq(ACTIVE))
                .filter(schedule::Column::NextRunAt.lte(now))
                .order_by_asc(schedule::Column::NextRunAt)
                .limit(DUE_BATCH)
                .all(&self.db),
        )
        .await?;
        let mut started = 0;
        for row in due {
            let tenant = row.tenant_id.into();
            match row_security::as_tenant(tenant, self.run_one(row, now)).await {
                Ok(true) => started += 1,
                Ok(false) => {}
                Err(err) => tracing::warn!(%err, "a scheduled run could not start"),
            }
        }
        Ok(started)
    }

    /// Start `row`'s due run and move it on; `false` when another replica
    /// moved it first.
    async fn run_one(&self, row: schedule::Model, now: DateTime<Utc>) -> Result<bool> {
        let Some(due) = row.next_run_at else {
            return Ok(false);
        };
        let scope = TenantScope::new(row.tenant_id.into());
        let next = When::parse(&row.cron, &row.time_zone)?.next_after(now.max(due));
        let task = self
            .tasks
            .start_system(
                scope,
                format!("schedule:{}", row.name),
                NewTask {
                    input: row.input.clone(),
                    payload: row.payload.clone(),
                    plan_key: Some(row.plan_key.clone()),
                    channel: Some(Channel::System),
                    idempotency_key: Some(format!("schedule:{}:{}", row.id, due.timestamp())),
                    ..NewTask::default()
                },
            )
            .await?;
        let moved = schedule::Entity::update_many_in(scope)
            .col_expr(schedule::Column::NextRunAt, Expr::value(next))
            .col_expr(schedule::Column::LastRunAt, Expr::value(Some(due)))
            .col_expr(
                schedule::Column::LastTaskId,
                Expr::value(Some(task.id.uuid())),
            )
            .col_expr(schedule::Column::UpdatedAt, Expr::value(now))
            .filter(schedule::Column::Id.eq(row.id))
            .filter(schedule::Column::NextRunAt.eq(due))
            .exec(&self.db)
            .await?;
        if moved.rows_affected == 1 {
            crate::kernel::metrics::metrics().schedule_runs.inc();
        }
        Ok(moved.rows_affected == 1)
    }

    async fn row(&self, scope: TenantScope, name: &str) -> Result<schedule::Model> {
        schedule::Entity::find_in(scope)
            .filter(schedule::Column::Name.eq(name))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("schedule"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn due_times_follow_the_cron_in_its_time_zone() {
        let every_five = When::parse("*/5 * * * *", "UTC").unwrap();
        assert_eq!(
            every_five.next_after(at("2026-11-26T10:02:30Z")),
            Some(at("2026-11-26T10:05:00Z"))
        );
        // Strictly after: a due time is not due again.
        assert_eq!(
            every_five.next_after(at("2026-11-26T10:05:00Z")),
            Some(at("2026-11-26T10:10:00Z"))
        );
        // Nine in the morning in Paris is 08:00 UTC in winter, 07:00 in summer.
        let paris = When::parse("0 9 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            paris.next_after(at("2026-11-26T10:00:00Z")),
            Some(at("2026-11-27T08:00:00Z"))
        );
        assert_eq!(
            paris.next_after(at("2026-07-01T00:00:00Z")),
            Some(at("2026-07-01T07:00:00Z"))
        );
    }

    #[test]
    fn bad_crons_and_zones_are_refused_with_the_reason() {
        let err = |c: &str, z: &str| When::parse(c, z).err().unwrap().to_string();
        assert!(err("every day", "UTC").contains("cron `every day`"));
        assert!(err("* * * * *", "Mars/Olympus").contains("IANA zone"));
        assert!(When::parse("0 0 12 * * MON", "America/New_York").is_ok());
    }
}
