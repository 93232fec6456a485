//! The executor policy: the limits an agent step runs under, and each
//! tenant's overrides of them.
//!
//! The defaults are the specification's (D.6): 5 iterations, 10 tool calls
//! over the whole loop, 30 s per tool call, 120 s for the loop, 4,000
//! output tokens per model call, temperature 0.7. A plan's agent step may
//! tighten them for itself (never loosen: a step's value above the policy's
//! is capped at the policy's). A tenant admin may tighten them for the
//! tenant ([`Policies::set`], audited); nobody can loosen them past the
//! platform's.

use crate::kernel::db::BeginWrite;
use std::time::Duration;

use brainstem_entity::{TenantOwned, TenantScope, executor_policy};
use chrono::Utc;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseConnection};
use serde_json::json;
use uuid::Uuid;

use crate::{
    Error, Result,
    kernel::{
        audit::{self, AuditEntry},
        principal::Principal,
    },
};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExecutorPolicy {
    /// Model calls one agent loop may make; past them it ends with
    /// `ITERATION_LIMIT`.
    pub max_iterations: u32,
    /// Tool calls one agent loop may make, over all its iterations.
    pub max_tool_calls: u32,
    /// How long one tool call may run.
    pub tool_call_timeout: Duration,
    /// How long one agent loop may run, from its first model call.
    pub loop_timeout: Duration,
    /// The most output tokens one model call may produce.
    pub max_output_tokens: u32,
    pub temperature: f32,
}

impl Default for ExecutorPolicy {
    fn default() -> Self {
        Self {
            max_iterations: 5,
            max_tool_calls: 10,
            tool_call_timeout: Duration::from_secs(30),
            loop_timeout: Duration::from_secs(120),
            max_output_tokens: 4000,
            temperature: 0.7,
        }
    }
}

/// A tenant's overrides; `None` keeps the platform's default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyOverrides {
    pub max_iterations: Option<u32>,
    pub max_tool_calls: Option<u32>,
    pub tool_call_timeout: Option<Duration>,
    pub loop_timeout: Option<Duration>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

impl PolicyOverrides {
    /// `defaults` with these overrides applied.
    pub fn apply(&self, defaults: ExecutorPolicy) -> ExecutorPolicy {
        ExecutorPolicy {
            max_iterations: self.max_iterations.unwrap_or(defaults.max_iterations),
            max_tool_calls: self.max_tool_calls.unwrap_or(defaults.max_tool_calls),
            tool_call_timeout: self.tool_call_timeout.unwrap_or(defaults.tool_call_timeout),
            loop_timeout: self.loop_timeout.unwrap_or(defaults.loop_timeout),
            max_output_tokens: self.max_output_tokens.unwrap_or(defaults.max_output_tokens),
            temperature: self.temperature.unwrap_or(defaults.temperature),
        }
    }

    /// Why these overrides may not be stored: each limit may only tighten
    /// the platform's (`defaults`); temperature is 0–2.
    pub fn check(&self, defaults: &ExecutorPolicy) -> std::result::Result<(), String> {
        let mut errors = Vec::new();
        let mut within = |name: &str, value: Option<u64>, most: u64| {
            if let Some(v) = value
                && (v == 0 || v > most)
            {
                errors.push(format!("{name} must be 1 to {most}"));
            }
        };
        within(
            "maxIterations",
            self.max_iterations.map(u64::from),
            defaults.max_iterations.into(),
        );
        within(
            "maxOutputTokens",
            self.max_output_tokens.map(u64::from),
            defaults.max_output_tokens.into(),
        );
        within(
            "toolCallTimeoutMs",
            self.tool_call_timeout.map(|d| d.as_millis() as u64),
            defaults.tool_call_timeout.as_millis() as u64,
        );
        within(
            "loopTimeoutMs",
            self.loop_timeout.map(|d| d.as_millis() as u64),
            defaults.loop_timeout.as_millis() as u64,
        );
        if let Some(n) = self.max_tool_calls
            && n > defaults.max_tool_calls
        {
            errors.push(format!(
                "maxToolCalls must be 0 to {}",
                defaults.max_tool_calls
            ));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            errors.push("temperature must be 0 to 2".into());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The platform's policy and each tenant's overrides.
#[derive(Clone)]
pub struct Policies {
    db: DatabaseConnection,
    defaults: ExecutorPolicy,
}

impl Policies {
    pub fn new(db: DatabaseConnection, defaults: ExecutorPolicy) -> Self {
        Self { db, defaults }
    }

    pub fn defaults(&self) -> ExecutorPolicy {
        self.defaults
    }

    /// The tenant's overrides (none set: all `None`).
    pub async fn overrides(&self, scope: TenantScope) -> Result<PolicyOverrides> {
        let row = executor_policy::Entity::find_in(scope)
            .one(&self.db)
            .await?;
        Ok(
            row.map_or_else(PolicyOverrides::default, |m| PolicyOverrides {
                max_iterations: m.max_iterations.and_then(|n| u32::try_from(n).ok()),
                max_tool_calls: m.max_tool_calls.and_then(|n| u32::try_from(n).ok()),
                tool_call_timeout: m
                    .tool_call_timeout_ms
                    .and_then(|n| u64::try_from(n).ok())
                    .map(Duration::from_millis),
                loop_timeout: m
                    .loop_timeout_ms
                    .and_then(|n| u64::try_from(n).ok())
                    .map(Duration::from_millis),
                max_output_tokens: m.max_output_tokens.and_then(|n| u32::try_from(n).ok()),
                temperature: m.temperature.map(|t| t as f32),
            }),
        )
    }

    /// The policy the tenant's agent steps run under.
    pub async fn effective(&self, scope: TenantScope) -> Result<ExecutorPolicy> {
        Ok(self.overrides(scope).await?.apply(self.defaults))
    }

    /// Replace the tenant's overrides (tenant admins; limits may only
    /// tighten the platform's). Audited (`executor_policy.set`).
    pub async fn set(
        &self,
        principal: &Principal,
        overrides: PolicyOverrides,
    ) -> Result<ExecutorPolicy> {
        let scope = principal.require_scope("admin")?;
        overrides.check(&self.defaults).map_err(Error::Validation)?;
        let by = principal.actor.to_string();
        let now = Utc::now();
        let ms = |d: Option<Duration>| d.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let int = |n: Option<u32>| n.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let txn = self.db.begin_write().await?;
        executor_policy::Entity::delete_many_in(scope)
            .exec(&txn)
            .await?;
        executor_policy::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            max_iterations: Set(int(overrides.max_iterations)),
            max_tool_calls: Set(int(overrides.max_tool_calls)),
            tool_call_timeout_ms: Set(ms(overrides.tool_call_timeout)),
            loop_timeout_ms: Set(ms(overrides.loop_timeout)),
            max_output_tokens: Set(int(overrides.max_output_tokens)),
            temperature: Set(overrides.temperature.map(f64::from)),
            updated_by: Set(by.clone()),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by,
                action: "executor_policy.set".into(),
                target: scope.tenant_id().to_string(),
                data: json!({
                    "max_iterations": overrides.max_iterations,
                    "max_tool_calls": overrides.max_tool_calls,
                    "tool_call_timeout_ms": ms(overrides.tool_call_timeout),
                    "loop_timeout_ms": ms(overrides.loop_timeout),
                    "max_output_tokens": overrides.max_output_tokens,
                    "temperature": overrides.temperature,
                }),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(overrides.apply(self.defaults))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_only_tighten_and_apply_field_by_field() {
        let defaults = ExecutorPolicy::default();
        let tighter = PolicyOverrides {
            max_iterations: Some(3),
            max_tool_calls: Some(0),
            ..PolicyOverrides::default()
        };
        assert_eq!(tighter.check(&defaults), Ok(()));
        let applied = tighter.apply(defaults);
        assert_eq!((applied.max_iterations, applied.max_tool_calls), (3, 0));
        assert_eq!(applied.max_output_tokens, 4000);
        let looser = PolicyOverrides {
            max_iterations: Some(6),
            loop_timeout: Some(Duration::from_secs(121)),
            temperature: Some(2.5),
            ..PolicyOverrides::default()
        };
        assert_eq!(
            looser.check(&defaults),
            Err("maxIterations must be 1 to 5; loopTimeoutMs must be 1 to 120000; temperature must be 0 to 2".into())
        );
    }
}
