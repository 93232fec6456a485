//! The fair queue on the wire: `queueStats` (a tenant admin sees their
//! tenant; a platform admin sees every tenant with work, audited) and
//! `setTenantQueue` (platform admins set a tenant's weight, running limit
//! and model budgets; audited). See `brainstem_domain::queue`.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use brainstem_domain::{
    TenantId,
    queue::{QueueStats as DomainStats, TenantQueue as DomainQueue, TenantQueueInput},
};
use chrono::Utc;

use super::{
    context::{domain, principal},
    ids::{self, NodeType},
};
use crate::error::ResultExt;

/// One tenant's queue now.
#[derive(SimpleObject)]
pub struct QueueStats {
    /// The tenant (a `Tenant` node id).
    pub tenant_id: ID,
    /// Tasks ready to run that no limit holds back: they wait for a slot.
    pub runnable: u64,
    /// Tasks being driven now, across every process.
    pub running: u64,
    /// Ready tasks held back by the tenant's `maxRunning` or their
    /// concurrency key's `maxConcurrent`.
    pub waiting_on_limit: u64,
    /// How long the longest-waiting ready task has waited, in seconds.
    pub oldest_wait_seconds: Option<f64>,
}

impl From<DomainStats> for QueueStats {
    fn from(s: DomainStats) -> Self {
        Self {
            tenant_id: ids::encode(NodeType::Tenant, s.tenant.uuid()),
            runnable: s.runnable,
            running: s.running,
            waiting_on_limit: s.waiting_on_limit,
            oldest_wait_seconds: s
                .oldest_ready_since
                .map(|at| ((Utc::now() - at).num_milliseconds().max(0) as f64) / 1000.0),
        }
    }
}

/// A tenant's settings in the fair queue, defaults filled in.
#[derive(SimpleObject)]
pub struct TenantQueue {
    /// Its share of slots against other tenants with work.
    pub weight: f64,
    /// Its tasks running at once across every process (0: no limit).
    pub max_running: u32,
    /// Model calls per minute (0: no budget of its own).
    pub llm_rpm: u32,
    /// Model tokens per minute (0: no budget of its own).
    pub llm_tpm: u32,
}

impl From<DomainQueue> for TenantQueue {
    fn from(q: DomainQueue) -> Self {
        Self {
            weight: q.weight,
            max_running: q.max_running,
            llm_rpm: q.llm_rpm,
            llm_tpm: q.llm_tpm,
        }
    }
}

#[derive(Default)]
pub struct QueueQuery;

#[Object]
impl QueueQuery {
    /// The queue now: the caller's tenant (tenant admins), or every tenant
    /// with a task pending or running (platform admins; audited).
    async fn queue_stats(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<QueueStats>> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        if principal.is_platform_admin() && principal.tenant.is_none() {
            let platform = domain
                .audit
                .open_platform_scope(principal, "queue.stats", "queue", None)
                .await
                .gql()?;
            let all = domain.queue.stats_all(&platform, Utc::now()).await.gql()?;
            return Ok(all.into_iter().map(QueueStats::from).collect());
        }
        let scope = principal.require_scope("admin").gql()?;
        let stats = domain.queue.stats(scope, Utc::now()).await.gql()?;
        Ok(vec![stats.into()])
    }

    /// The caller's tenant's settings in the fair queue (tenant admins).
    async fn tenant_queue(&self, ctx: &Context<'_>) -> async_graphql::Result<TenantQueue> {
        let scope = principal(ctx)?.require_scope("admin").gql()?;
        Ok(domain(ctx).queue.settings(scope).await.gql()?.into())
    }
}

/// A tenant's settings in the fair queue; a field left out keeps the
/// platform's default.
#[derive(InputObject)]
pub struct SetTenantQueueInput {
    /// The tenant (a `Tenant` node id).
    pub tenant_id: ID,
    /// Its share of slots against other tenants with work (default 1).
    pub weight: Option<f64>,
    /// Its tasks running at once across every process (0: no limit;
    /// default `tenant_max_running`).
    pub max_running: Option<u32>,
    /// Model calls per minute (0: none of its own).
    pub llm_rpm: Option<u32>,
    /// Model tokens per minute (0: none of its own).
    pub llm_tpm: Option<u32>,
}

#[derive(SimpleObject)]
pub struct SetTenantQueuePayload {
    pub queue: TenantQueue,
}

#[derive(Default)]
pub struct QueueMutation;

#[Object]
impl QueueMutation {
    /// Replace a tenant's settings in the fair queue (platform admins).
    /// Audited.
    async fn set_tenant_queue(
        &self,
        ctx: &Context<'_>,
        input: SetTenantQueueInput,
    ) -> async_graphql::Result<SetTenantQueuePayload> {
        let tenant = TenantId::from(ids::decode_as(&input.tenant_id, NodeType::Tenant).gql()?);
        let domain = domain(ctx);
        let platform = domain
            .audit
            .open_platform_scope(
                principal(ctx)?,
                "tenant_queue.open",
                &tenant.to_string(),
                Some(tenant),
            )
            .await
            .gql()?;
        let queue = domain
            .queue
            .set(
                &platform,
                tenant,
                TenantQueueInput {
                    weight: input.weight,
                    max_running: input.max_running,
                    llm_rpm: input.llm_rpm,
                    llm_tpm: input.llm_tpm,
                },
            )
            .await
            .gql()?;
        Ok(SetTenantQueuePayload {
            queue: queue.into(),
        })
    }
}
