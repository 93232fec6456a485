//! A tenant's usage over a period, for billing (tenant admins). See
//! `brainstem_domain::usage`.

use async_graphql::{Context, Object, SimpleObject};
use chrono::{DateTime, Utc};

use super::context::{domain, principal};
use crate::error::ResultExt;

/// What the caller's tenant used in `[from, to)`.
#[derive(SimpleObject)]
pub struct TenantUsage {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Tasks created in the period.
    pub tasks_started: u64,
    /// Of those, the ones now `COMPLETED`.
    pub tasks_completed: u64,
    /// Of those, the ones now `FAILED`.
    pub tasks_failed: u64,
    /// Step attempts started in the period.
    pub step_attempts: u64,
    /// Model tokens of those attempts.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Their cost, in millionths of the billing currency unit.
    pub cost_micros: u64,
}

#[derive(Default)]
pub struct UsageQuery;

#[Object]
impl UsageQuery {
    /// The caller's tenant's usage from `from` (included) to `to`
    /// (excluded), at most 366 days (tenant admins).
    async fn usage(
        &self,
        ctx: &Context<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> async_graphql::Result<TenantUsage> {
        let report = domain(ctx).usage(principal(ctx)?, from, to).await.gql()?;
        Ok(TenantUsage {
            from,
            to,
            tasks_started: report.tasks_started,
            tasks_completed: report.tasks_completed,
            tasks_failed: report.tasks_failed,
            step_attempts: report.step_attempts,
            input_tokens: report.usage.input_tokens,
            output_tokens: report.usage.output_tokens,
            cost_micros: report.usage.cost_micros,
        })
    }
}
