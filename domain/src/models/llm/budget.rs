//! Token budgets, checked *before* a model call from its most expensive
//! case (A.6): the estimated prompt plus `max_tokens`. A call that could
//! pass a limit is not made; the step fails (not retryably) with a message
//! naming the limit, what is used and what the call could take.
//!
//! - **Per task**: `llm_task_token_budget` (default 100,000; 0: none) caps
//!   the tokens (input + output) of all a task's steps. A step may tighten
//!   it with its `max_task_tokens` argument, never loosen it.
//! - **Per tenant per day**: `llm_tenant_daily_token_quota` (0: none) caps
//!   a tenant's tokens since midnight UTC, counted from the usage stored
//!   on its step attempts (A.17 counts a day the same way, and fails open
//!   when no usage row exists yet — here the count is simply 0).
//!
//! Two steps checked at the same moment can both pass and together exceed
//! a limit by at most one call each; a hard limit would need a reservation
//! row per call. Usage of an attempt that failed mid-stream is not recorded.
//! LLM intent detection is not gated (its answer is capped at 100 tokens and
//! the rules stand in) but its usage counts toward the task.

use std::future::Future;

use brainstem_entity::{TenantOwned, TenantScope, task_step};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, DatabaseConnection, QueryFilter, QuerySelect};
use serde_json::Value;

use crate::{Result, models::usage::Usage};

/// The configured limits; 0 means none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    pub task_tokens: u64,
    pub tenant_daily_tokens: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            task_tokens: 100_000,
            tenant_daily_tokens: 0,
        }
    }
}

/// The task limit for a step: the configured one, tightened by the step.
pub fn task_limit(configured: u64, step: Option<u64>) -> u64 {
    match (configured, step) {
        (0, Some(s)) => s,
        (c, Some(s)) => c.min(s),
        (c, None) => c,
    }
}

/// Why a call estimated at `estimate` tokens may not run under `limit`
/// with `used` already spent, or `None` if it may.
pub fn refusal(what: &str, limit: u64, used: u64, estimate: u64) -> Option<String> {
    if limit == 0 || used.saturating_add(estimate) <= limit {
        return None;
    }
    Some(format!(
        "BUDGET_EXCEEDED: the {what} of {limit} tokens has {} left, but this call may use up to \
         {estimate} (estimated prompt + max_tokens); lower max_tokens or raise the limit",
        limit.saturating_sub(used)
    ))
}

/// What tenants have spent, read for [`check`]: lent to the tools, which
/// check a budget before each model call and may read nothing else
/// through it. Cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    db: DatabaseConnection,
}

impl Ledger {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// [`check`], against this ledger.
    pub async fn check(
        &self,
        budgets: Budgets,
        scope: TenantScope,
        task_usage: impl Future<Output = Result<Usage>>,
        step_limit: Option<u64>,
        estimate: u64,
    ) -> Result<std::result::Result<(), String>> {
        check(&self.db, budgets, scope, task_usage, step_limit, estimate).await
    }
}

/// Check both limits for a call of `estimate` tokens by a step of a task
/// whose usage so far `task_usage` reads (only when a task limit applies).
/// `Ok(Err(reason))` when a limit refuses it.
pub async fn check(
    db: &DatabaseConnection,
    budgets: Budgets,
    scope: TenantScope,
    task_usage: impl Future<Output = Result<Usage>>,
    step_limit: Option<u64>,
    estimate: u64,
) -> Result<std::result::Result<(), String>> {
    let limit = task_limit(budgets.task_tokens, step_limit);
    if limit > 0 {
        let usage = task_usage.await?;
        if let Some(reason) = refusal("task's token budget", limit, tokens(usage), estimate) {
            return Ok(Err(reason));
        }
    }
    if budgets.tenant_daily_tokens > 0 {
        let midnight = Utc::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or_else(Utc::now);
        let used = tenant_tokens_since(db, scope, midnight).await?;
        if let Some(reason) = refusal(
            "tenant's daily token quota",
            budgets.tenant_daily_tokens,
            used,
            estimate,
        ) {
            return Ok(Err(reason));
        }
    }
    Ok(Ok(()))
}

fn tokens(usage: Usage) -> u64 {
    usage.input_tokens.saturating_add(usage.output_tokens)
}

/// Tokens used by the tenant's step attempts started since `since`.
pub async fn tenant_tokens_since(
    db: &DatabaseConnection,
    scope: TenantScope,
    since: DateTime<Utc>,
) -> Result<u64> {
    let rows: Vec<Value> = task_step::Entity::find_in(scope)
        .select_only()
        .column(task_step::Column::Usage)
        .filter(task_step::Column::StartedAt.gte(since))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .iter()
        .map(|u| tokens(Usage::from_json(u)))
        .fold(0u64, u64::saturating_add))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_can_tighten_the_task_limit_but_not_loosen_it() {
        assert_eq!(task_limit(1000, None), 1000);
        assert_eq!(task_limit(1000, Some(10)), 10);
        assert_eq!(task_limit(1000, Some(5000)), 1000);
        assert_eq!(task_limit(0, Some(5000)), 5000);
        assert_eq!(task_limit(0, None), 0);
    }

    #[test]
    fn a_call_that_could_pass_the_limit_is_refused() {
        assert_eq!(refusal("task budget", 0, 10_000, 10_000), None);
        assert_eq!(refusal("task budget", 100, 40, 60), None);
        let reason = refusal("task's token budget", 100, 41, 60).unwrap();
        assert!(reason.starts_with("BUDGET_EXCEEDED"));
        assert!(reason.contains("of 100 tokens has 59 left"), "{reason}");
        assert!(reason.contains("up to 60"), "{reason}");
        assert!(refusal("x", 100, 200, 1).unwrap().contains("has 0 left"));
    }
}
