//! A tenant's usage over a period, for billing: tasks started and how they
//! ended, step attempts, and the tokens and cost of its model calls.
//!
//! Tasks count by when they were created, step attempts (and their usage)
//! by when they started, both in `[from, to)`; a task that spans the end
//! of a period counts in the period it started, its attempts in the periods
//! they ran. The figures come from the task and step records themselves,
//! so they match what `Task.usage` and `TaskStep.usage` show.

use brainstem_entity::{TenantOwned, task, task_step};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter, QuerySelect};
use serde_json::Value;

use crate::{Domain, Error, Principal, Result, models::usage::Usage};

/// The longest period one report covers.
pub const MAX_PERIOD_DAYS: i64 = 366;

/// What a tenant used in `[from, to)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageReport {
    pub tasks_started: u64,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub step_attempts: u64,
    /// Tokens and cost of the step attempts' model calls.
    pub usage: Usage,
}

impl Domain {
    /// The caller's tenant's usage in `[from, to)` (tenant admins).
    pub async fn usage(
        &self,
        principal: &Principal,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<UsageReport> {
        let scope = principal.require_scope("admin")?;
        if from >= to {
            return Err(Error::validation("`from` must be before `to`"));
        }
        if to - from > Duration::days(MAX_PERIOD_DAYS) {
            return Err(Error::validation(format!(
                "a usage report covers at most {MAX_PERIOD_DAYS} days"
            )));
        }
        let tasks = || {
            task::Entity::find_in(scope)
                .filter(task::Column::CreatedAt.gte(from))
                .filter(task::Column::CreatedAt.lt(to))
        };
        let tasks_started = tasks().count(&self.db).await?;
        let tasks_completed = tasks()
            .filter(task::Column::Status.eq("COMPLETED"))
            .count(&self.db)
            .await?;
        let tasks_failed = tasks()
            .filter(task::Column::Status.eq("FAILED"))
            .count(&self.db)
            .await?;
        let usages: Vec<Value> = task_step::Entity::find_in(scope)
            .select_only()
            .column(task_step::Column::Usage)
            .filter(task_step::Column::StartedAt.gte(from))
            .filter(task_step::Column::StartedAt.lt(to))
            .into_tuple()
            .all(&self.db)
            .await?;
        let step_attempts = usages.len() as u64;
        let usage = usages
            .iter()
            .map(Usage::from_json)
            .fold(Usage::default(), Usage::plus);
        Ok(UsageReport {
            tasks_started,
            tasks_completed,
            tasks_failed,
            step_attempts,
            usage,
        })
    }
}
