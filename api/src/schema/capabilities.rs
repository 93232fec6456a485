//! The capability catalogue and subscriptions on the wire.
//!
//! Anyone signed in reads the catalogue; platform admins publish to it (each
//! publish is audited); tenant admins subscribe their tenant and cancel.
//! A capability's plans, tools and a subscription's capability are batched
//! through the [`loaders`](super::loaders).

use async_graphql::{
    Context, Enum, ID, InputObject, Json, Object, SimpleObject, connection::Connection,
};
use brainstem_domain::{
    CapabilityId, Error, Principal, SubscriptionId,
    capabilities::{self, CapabilityDef, Limits, PartnerToolDef},
    plans,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{
    context::{domain, principal},
    ids::{self, NodeType},
    loaders::{CapabilityKey, CapabilityPlansKey, CapabilityToolsKey, loader},
    page::{connection, page_request},
    plans::{Plan, PublishPlanInput},
};
use crate::error::ResultExt;

/// Where a subscription stands. A trial past its end reads as `EXPIRED`.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionStatus {
    Trial,
    Active,
    Cancelled,
    Expired,
}

impl From<capabilities::SubscriptionStatus> for SubscriptionStatus {
    fn from(s: capabilities::SubscriptionStatus) -> Self {
        match s {
            capabilities::SubscriptionStatus::Trial => Self::Trial,
            capabilities::SubscriptionStatus::Active => Self::Active,
            capabilities::SubscriptionStatus::Cancelled => Self::Cancelled,
            capabilities::SubscriptionStatus::Expired => Self::Expired,
        }
    }
}

/// What a capability allows a subscriber; `null` is no limit.
#[derive(SimpleObject, InputObject, Clone, Copy, Debug, Default)]
#[graphql(input_name = "CapabilityLimitsInput")]
pub struct CapabilityLimits {
    /// Tasks a tenant may start per calendar month (UTC) on this
    /// capability's plans.
    pub max_tasks_per_month: Option<u32>,
}

/// A partner HTTP tool a capability registers. Steps name it by `key`.
#[derive(SimpleObject, Clone)]
pub struct PartnerTool {
    /// `partner.<name>`.
    pub key: String,
    pub description: String,
    /// Called with `POST`, signed with the capability's secret.
    pub url: String,
    pub input_schema: Json<Value>,
    pub output_schema: Option<Json<Value>>,
    pub timeout_ms: u64,
    /// How calls to it are retried (a plan step's own `retry` wins).
    pub retry: RetryPolicy,
}

/// How a failed call is retried: attempts in all, and the backoff before
/// each retry (doubling from `initialBackoffMs` up to `maxBackoffMs`, with
/// jitter). Only retryable failures are retried: timeouts, connection
/// errors, 429 and 5xx answers.
#[derive(SimpleObject, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl From<PartnerToolDef> for PartnerTool {
    fn from(t: PartnerToolDef) -> Self {
        Self {
            key: t.key,
            description: t.description,
            url: t.url,
            input_schema: Json(t.input_schema),
            output_schema: t.output_schema.map(Json),
            timeout_ms: t.timeout_ms,
            retry: {
                let r = t.retry.unwrap_or(plans::RetryPolicy::OUTGOING_CALLS);
                RetryPolicy {
                    max_attempts: r.max_attempts,
                    initial_backoff_ms: r.initial_backoff_ms,
                    max_backoff_ms: r.max_backoff_ms,
                }
            },
        }
    }
}

/// A product of the catalogue: the plans, intents and partner tools a
/// subscribing tenant gets.
#[derive(Clone)]
pub struct Capability(pub capabilities::Capability);

impl Capability {
    async fn current_plans(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<brainstem_domain::plans::Plan>> {
        Ok(loader(ctx)
            .load_one(CapabilityPlansKey(self.0.id, self.0.version))
            .await?
            .unwrap_or_default())
    }
}

#[Object]
impl Capability {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Capability, self.0.id.uuid())
    }
    /// Unique, e.g. `insurance.loss_run_chaser`.
    async fn key(&self) -> &str {
        &self.0.key
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    /// Bumped by every publish.
    async fn version(&self) -> i32 {
        self.0.version
    }
    /// When a platform admin archived it: it starts no new task and takes
    /// no new subscription (tasks already started finish).
    async fn archived_at(&self) -> Option<DateTime<Utc>> {
        self.0.archived_at
    }
    async fn limits(&self) -> CapabilityLimits {
        CapabilityLimits {
            max_tasks_per_month: self.0.limits.max_tasks_per_month,
        }
    }
    /// The plans of the current version, by key.
    async fn plans(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Plan>> {
        Ok(self
            .current_plans(ctx)
            .await?
            .into_iter()
            .map(Plan)
            .collect())
    }
    /// The intents its plans handle.
    async fn intents(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<String>> {
        let mut intents: Vec<String> = self
            .current_plans(ctx)
            .await?
            .into_iter()
            .map(|p| p.intent)
            .collect();
        intents.sort();
        intents.dedup();
        Ok(intents)
    }
    /// Every tool its plans use: built-in and partner tools.
    async fn required_tools(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<String>> {
        let mut tools: Vec<String> = self
            .current_plans(ctx)
            .await?
            .into_iter()
            .flat_map(|p| p.steps.into_iter().map(|s| s.tool))
            .collect();
        tools.sort();
        tools.dedup();
        Ok(tools)
    }
    /// The partner HTTP tools it registers.
    async fn tools(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<PartnerTool>> {
        Ok(loader(ctx)
            .load_one(CapabilityToolsKey(self.0.id))
            .await?
            .unwrap_or_default()
            .into_iter()
            .map(PartnerTool::from)
            .collect())
    }
    /// Who published the current version.
    async fn published_by(&self) -> &str {
        &self.0.published_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
}

/// A tenant's subscription to a capability.
#[derive(Clone)]
pub struct CapabilitySubscription(pub capabilities::Subscription);

#[Object]
impl CapabilitySubscription {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::CapabilitySubscription, self.0.id.uuid())
    }
    async fn capability(&self, ctx: &Context<'_>) -> async_graphql::Result<Capability> {
        loader(ctx)
            .load_one(CapabilityKey(self.0.capability_id))
            .await?
            .map(Capability)
            .ok_or_else(|| Error::not_found("capability"))
            .gql()
    }
    /// As of this request: a trial past its end is `EXPIRED`.
    async fn status(&self) -> SubscriptionStatus {
        self.0.status.into()
    }
    /// Whether the capability's plans and tools are on for the tenant.
    async fn active(&self) -> bool {
        capabilities::is_on(self.0.status)
    }
    async fn trial_ends_at(&self) -> Option<DateTime<Utc>> {
        self.0.trial_ends_at
    }
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    async fn cancelled_at(&self) -> Option<DateTime<Utc>> {
        self.0.cancelled_at
    }
}

#[derive(Default)]
pub struct CapabilityQuery;

#[Object]
impl CapabilityQuery {
    /// The catalogue, oldest first (anyone signed in).
    async fn capabilities(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Connection<String, Capability>> {
        principal(ctx)?;
        let page = domain(ctx)
            .capabilities
            .list(page_request(first, after, last, before)?)
            .await
            .gql()?;
        // Load what the page's items select in one batch per relation.
        let node = ctx.look_ahead().field("edges").field("node");
        let wants_plans = ["plans", "intents", "requiredTools"]
            .iter()
            .any(|f| node.field(f).exists());
        let plans = async {
            if wants_plans {
                loader(ctx)
                    .load_many(
                        page.items
                            .iter()
                            .map(|c| CapabilityPlansKey(c.id, c.version)),
                    )
                    .await?;
            }
            Ok::<_, async_graphql::Error>(())
        };
        let tools = async {
            if node.field("tools").exists() {
                loader(ctx)
                    .load_many(page.items.iter().map(|c| CapabilityToolsKey(c.id)))
                    .await?;
            }
            Ok(())
        };
        futures_util::try_join!(plans, tools)?;
        Ok(connection(page, |c| c.id.uuid(), Capability))
    }

    /// One capability of the catalogue, by key.
    async fn capability(
        &self,
        ctx: &Context<'_>,
        key: String,
    ) -> async_graphql::Result<Capability> {
        principal(ctx)?;
        Ok(Capability(
            domain(ctx).capabilities.get_by_key(&key).await.gql()?,
        ))
    }

    /// The caller's tenant's subscriptions, oldest first.
    async fn subscriptions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Connection<String, CapabilitySubscription>> {
        let scope = principal(ctx)?.require_scope("tasks:read").gql()?;
        let page = domain(ctx)
            .capabilities
            .subscriptions(scope, page_request(first, after, last, before)?, Utc::now())
            .await
            .gql()?;
        if ctx
            .look_ahead()
            .field("edges")
            .field("node")
            .field("capability")
            .exists()
        {
            loader(ctx)
                .load_many(page.items.iter().map(|s| CapabilityKey(s.capability_id)))
                .await?;
        }
        Ok(connection(page, |s| s.id.uuid(), CapabilitySubscription))
    }
}

#[derive(InputObject)]
pub struct PartnerToolInput {
    /// `partner.<name>`, unique across the catalogue.
    pub key: String,
    #[graphql(default)]
    pub description: String,
    /// An http(s) URL, called with `POST`.
    pub url: String,
    /// JSON Schema of the arguments (default: any object).
    pub input_schema: Option<Json<Value>>,
    /// JSON Schema the answer must match.
    pub output_schema: Option<Json<Value>>,
    /// Per call (default 10000, at most 120000); a timeout is retryable.
    pub timeout_ms: Option<u64>,
    /// How calls are retried (without it: 3 attempts, 1000 ms, doubling,
    /// at most 30000 ms); a plan step's own `retry` wins.
    pub retry: Option<super::plans::RetryPolicyInput>,
}

#[derive(InputObject)]
pub struct PublishCapabilityInput {
    pub key: String,
    pub name: String,
    #[graphql(default)]
    pub description: String,
    /// Full plan definitions, checked like `publishPlan`.
    #[graphql(default)]
    pub plans: Vec<PublishPlanInput>,
    /// Partner HTTP tools the plans (and subscribers' own plans) may use.
    #[graphql(default)]
    pub tools: Vec<PartnerToolInput>,
    pub limits: Option<CapabilityLimits>,
    /// Replace the signing secret; the new one is in the payload.
    #[graphql(default = false)]
    pub rotate_secret: bool,
}

#[derive(SimpleObject)]
pub struct PublishCapabilityPayload {
    pub capability: Capability,
    /// The HMAC secret that signs calls to the capability's partner tools:
    /// shown on the first publish and on rotation only, stored encrypted.
    pub signing_secret: Option<String>,
}

#[derive(InputObject)]
pub struct SubscribeCapabilityInput {
    pub capability_key: String,
    /// Start a trial of this many days (1-365) instead of an active
    /// subscription; a tenant gets one trial per capability.
    pub trial_days: Option<u32>,
}

#[derive(InputObject)]
pub struct CancelSubscriptionInput {
    pub capability_key: String,
}

#[derive(SimpleObject)]
pub struct SubscriptionPayload {
    pub subscription: CapabilitySubscription,
}

#[derive(Default)]
pub struct CapabilityMutation;

#[Object]
impl CapabilityMutation {
    /// Publish a capability or a new version of it (platform admins; each
    /// publish is written to the audit log). The plans are checked like
    /// `publishPlan`; plan and tool keys belong to one capability.
    async fn publish_capability(
        &self,
        ctx: &Context<'_>,
        input: PublishCapabilityInput,
    ) -> async_graphql::Result<PublishCapabilityPayload> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let scope = domain
            .audit
            .open_platform_scope(principal, "capability.publish", &input.key, None)
            .await
            .gql()?;
        let def = CapabilityDef {
            key: input.key,
            name: input.name,
            description: input.description,
            plans: input.plans.into_iter().map(Into::into).collect(),
            tools: input
                .tools
                .into_iter()
                .map(|t| PartnerToolDef {
                    key: t.key,
                    description: t.description,
                    url: t.url,
                    input_schema: t
                        .input_schema
                        .map(|j| j.0)
                        .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                    output_schema: t.output_schema.map(|j| j.0),
                    timeout_ms: t
                        .timeout_ms
                        .unwrap_or(capabilities::DEFAULT_TOOL_TIMEOUT_MS),
                    retry: t.retry.map(|r| plans::RetryPolicy {
                        max_attempts: r.max_attempts,
                        initial_backoff_ms: r.initial_backoff_ms,
                        max_backoff_ms: r.max_backoff_ms,
                    }),
                })
                .collect(),
            limits: Limits {
                max_tasks_per_month: input.limits.unwrap_or_default().max_tasks_per_month,
            },
            rotate_secret: input.rotate_secret,
        };
        let published = domain.capabilities.publish(&scope, def).await.gql()?;
        Ok(PublishCapabilityPayload {
            capability: Capability(published.capability),
            signing_secret: published.signing_secret,
        })
    }

    /// Archive a capability (platform admins; audited): its subscribers
    /// start no new task on its plans, intent detection skips them, and it
    /// takes no new subscription; tasks already started finish. Publishing
    /// a new version, or `restoreCapability`, makes it current again.
    async fn archive_capability(
        &self,
        ctx: &Context<'_>,
        input: CapabilityKeyInput,
    ) -> async_graphql::Result<CapabilityPayload> {
        set_archived(ctx, &input.key, true).await
    }

    /// Make an archived capability current again (platform admins; audited).
    async fn restore_capability(
        &self,
        ctx: &Context<'_>,
        input: CapabilityKeyInput,
    ) -> async_graphql::Result<CapabilityPayload> {
        set_archived(ctx, &input.key, false).await
    }

    /// Subscribe the caller's tenant (tenant admins): a trial with
    /// `trialDays`, else active. Subscribing during a trial makes it active.
    async fn subscribe_capability(
        &self,
        ctx: &Context<'_>,
        input: SubscribeCapabilityInput,
    ) -> async_graphql::Result<SubscriptionPayload> {
        let principal = principal(ctx)?;
        let subscription = domain(ctx)
            .capabilities
            .subscribe(
                principal,
                &input.capability_key,
                input.trial_days,
                Utc::now(),
            )
            .await
            .gql()?;
        Ok(SubscriptionPayload {
            subscription: CapabilitySubscription(subscription),
        })
    }

    /// Cancel the caller's tenant's subscription (tenant admins); the
    /// capability's plans and tools are off at once.
    async fn cancel_subscription(
        &self,
        ctx: &Context<'_>,
        input: CancelSubscriptionInput,
    ) -> async_graphql::Result<SubscriptionPayload> {
        let principal = principal(ctx)?;
        let subscription = domain(ctx)
            .capabilities
            .cancel(principal, &input.capability_key, Utc::now())
            .await
            .gql()?;
        Ok(SubscriptionPayload {
            subscription: CapabilitySubscription(subscription),
        })
    }
}

/// A capability of the catalogue (anyone signed in reads it).
pub(super) async fn capability_node(
    ctx: &Context<'_>,
    uuid: Uuid,
) -> async_graphql::Result<Capability> {
    let capability = domain(ctx)
        .capabilities
        .get(CapabilityId::from(uuid))
        .await
        .gql()?;
    Ok(Capability(capability))
}

/// A subscription of the caller's tenant.
pub(super) async fn subscription_node(
    ctx: &Context<'_>,
    principal: &Principal,
    uuid: Uuid,
) -> async_graphql::Result<CapabilitySubscription> {
    let scope = principal.require_scope("tasks:read").gql()?;
    let subscription = domain(ctx)
        .capabilities
        .subscription(scope, SubscriptionId::from(uuid), Utc::now())
        .await
        .gql()?;
    Ok(CapabilitySubscription(subscription))
}

/// A capability, by key.
#[derive(InputObject)]
pub struct CapabilityKeyInput {
    pub key: String,
}

#[derive(SimpleObject)]
pub struct CapabilityPayload {
    pub capability: Capability,
}

async fn set_archived(
    ctx: &Context<'_>,
    key: &str,
    archived: bool,
) -> async_graphql::Result<CapabilityPayload> {
    let domain = domain(ctx);
    let action = if archived {
        "capability.archive"
    } else {
        "capability.restore"
    };
    let scope = domain
        .audit
        .open_platform_scope(principal(ctx)?, action, key, None)
        .await
        .gql()?;
    let capability = domain
        .capabilities
        .set_archived(&scope, key, archived, Utc::now())
        .await
        .gql()?;
    Ok(CapabilityPayload {
        capability: Capability(capability),
    })
}
