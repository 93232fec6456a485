//! The executor policy on the wire: the limits the tenant's agent steps run
//! under (tenant admins read them, and may tighten them for the tenant,
//! never loosen them past the platform's; each change is audited).

use std::time::Duration;

use async_graphql::{Context, InputObject, Object, SimpleObject};
use brainstem_domain::policy::{ExecutorPolicy as DomainPolicy, PolicyOverrides};

use super::context::{domain, principal};
use crate::error::ResultExt;

/// Limits of an agent loop.
#[derive(SimpleObject, Clone, Copy)]
pub struct ExecutorPolicy {
    /// Model calls per loop; past them it ends with `ITERATION_LIMIT`.
    pub max_iterations: u32,
    /// Tool calls per loop, over all its iterations.
    pub max_tool_calls: u32,
    pub tool_call_timeout_ms: u64,
    /// From the loop's first model call.
    pub loop_timeout_ms: u64,
    /// Per model call.
    pub max_output_tokens: u32,
    pub temperature: f64,
}

impl From<DomainPolicy> for ExecutorPolicy {
    fn from(p: DomainPolicy) -> Self {
        Self {
            max_iterations: p.max_iterations,
            max_tool_calls: p.max_tool_calls,
            tool_call_timeout_ms: p.tool_call_timeout.as_millis() as u64,
            loop_timeout_ms: p.loop_timeout.as_millis() as u64,
            max_output_tokens: p.max_output_tokens,
            // As set (to three decimals), not as f32 widens.
            temperature: (f64::from(p.temperature) * 1000.0).round() / 1000.0,
        }
    }
}

/// The policy in force and where it comes from.
#[derive(SimpleObject)]
pub struct ExecutorPolicyView {
    /// What the tenant's agent steps run under.
    pub effective: ExecutorPolicy,
    /// The platform's limits, which the tenant may only tighten.
    pub platform: ExecutorPolicy,
}

#[derive(Default)]
pub struct PolicyQuery;

#[Object]
impl PolicyQuery {
    /// The executor policy of the caller's tenant (tenant admins).
    async fn executor_policy(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<ExecutorPolicyView> {
        let scope = principal(ctx)?.require_scope("admin").gql()?;
        let policies = &domain(ctx).policies;
        let effective = policies.effective(scope).await.gql()?;
        Ok(ExecutorPolicyView {
            effective: effective.into(),
            platform: policies.defaults().into(),
        })
    }
}

/// The tenant's overrides; a field left out keeps the platform's value.
#[derive(InputObject)]
pub struct SetExecutorPolicyInput {
    pub max_iterations: Option<u32>,
    pub max_tool_calls: Option<u32>,
    pub tool_call_timeout_ms: Option<u64>,
    pub loop_timeout_ms: Option<u64>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

#[derive(SimpleObject)]
pub struct SetExecutorPolicyPayload {
    pub effective: ExecutorPolicy,
}

#[derive(Default)]
pub struct PolicyMutation;

#[Object]
impl PolicyMutation {
    /// Replace the tenant's overrides of the executor policy (tenant
    /// admins; each limit at most the platform's). Audited.
    async fn set_executor_policy(
        &self,
        ctx: &Context<'_>,
        input: SetExecutorPolicyInput,
    ) -> async_graphql::Result<SetExecutorPolicyPayload> {
        let overrides = PolicyOverrides {
            max_iterations: input.max_iterations,
            max_tool_calls: input.max_tool_calls,
            tool_call_timeout: input.tool_call_timeout_ms.map(Duration::from_millis),
            loop_timeout: input.loop_timeout_ms.map(Duration::from_millis),
            max_output_tokens: input.max_output_tokens,
            temperature: input.temperature,
        };
        let effective = domain(ctx)
            .policies
            .set(principal(ctx)?, overrides)
            .await
            .gql()?;
        Ok(SetExecutorPolicyPayload {
            effective: effective.into(),
        })
    }
}
