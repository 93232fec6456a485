//! Plans and tools on the wire: published plan versions with their steps,
//! the tools steps can use, and `publishPlan`. Reads need `tasks:read`;
//! publishing is the tenant admin's (the domain checks it). A plan that a
//! capability brings lists its versions from the catalogue.

use async_graphql::{Context, ID, InputObject, Json, Object, SimpleObject, connection::Connection};
use brainstem_domain::{
    PlanId, TenantScope,
    plans::{self, PlanDef, RetryPolicy, StepDef},
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::{
    context::{domain, principal, require_scope},
    ids::{self, NodeType},
    page::{connection, page_request},
};
use crate::error::ResultExt;

/// Plans and tools are read with the `tasks:read` scope.
fn read_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, "tasks:read")
}

/// One step of a plan.
#[derive(SimpleObject, Clone)]
pub struct PlanStep {
    pub id: String,
    pub tool: String,
    pub args: Json<Value>,
    pub condition: Option<String>,
    pub stop_on_failure: bool,
    pub requires_review: bool,
    pub max_attempts: u32,
    pub timeout_secs: Option<u64>,
}

impl From<&StepDef> for PlanStep {
    fn from(s: &StepDef) -> Self {
        Self {
            id: s.id.clone(),
            tool: s.tool.clone(),
            args: Json(s.args.clone()),
            condition: s.condition.clone(),
            stop_on_failure: s.stop_on_failure,
            requires_review: s.requires_review,
            max_attempts: s.retry.unwrap_or_default().max_attempts,
            timeout_secs: s.timeout_secs,
        }
    }
}

/// One published version of a plan.
#[derive(Clone)]
pub struct Plan(pub plans::Plan);

#[Object]
impl Plan {
    pub async fn id(&self) -> ID {
        ids::encode(NodeType::Plan, self.0.id.uuid())
    }
    async fn key(&self) -> &str {
        &self.0.key
    }
    async fn version(&self) -> i32 {
        self.0.version
    }
    async fn intent(&self) -> &str {
        &self.0.intent
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    async fn priority(&self) -> i32 {
        self.0.priority
    }
    /// Intent-detection patterns (case-insensitive regular expressions).
    async fn patterns(&self) -> &[String] {
        &self.0.patterns
    }
    async fn steps(&self) -> Vec<PlanStep> {
        self.0.steps.iter().map(PlanStep::from).collect()
    }
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// The key of the capability that brings this plan; `null` for the
    /// tenant's own plans.
    async fn capability_key(&self) -> Option<&str> {
        self.0.capability.as_deref()
    }
    /// When the plan was archived; an archived plan starts no new task
    /// (`restorePlan`, or publishing a new version, makes it current again).
    async fn archived_at(&self) -> Option<DateTime<Utc>> {
        self.0.archived_at
    }
    /// Every version of this plan, newest first.
    async fn versions(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Plan>> {
        let versions = match &self.0.capability {
            Some(_) => domain(ctx).capabilities.plan_versions(&self.0.key).await,
            None => {
                let scope = read_scope(ctx)?;
                domain(ctx).plans.versions(scope, &self.0.key).await
            }
        };
        Ok(versions.gql()?.into_iter().map(Plan).collect())
    }
}

/// A tool this server can run.
#[derive(SimpleObject)]
pub struct Tool {
    pub key: String,
    pub description: String,
    pub input_schema: Json<Value>,
}

#[derive(Default)]
pub struct PlanQuery;

#[Object]
impl PlanQuery {
    /// The latest version of each of the tenant's plans.
    async fn plans(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Connection<String, Plan>> {
        let scope = read_scope(ctx)?;
        let page = domain(ctx)
            .plans
            .list_latest(scope, page_request(first, after, last, before)?)
            .await
            .gql()?;
        Ok(connection(page, |p| p.id.uuid(), Plan))
    }

    /// The latest version of one plan (its `versions` lists the others).
    async fn plan(&self, ctx: &Context<'_>, key: String) -> async_graphql::Result<Plan> {
        let scope = read_scope(ctx)?;
        Ok(Plan(domain(ctx).plans.latest(scope, &key).await.gql()?))
    }

    /// The tools steps can use.
    async fn tools(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Tool>> {
        read_scope(ctx)?;
        Ok(domain(ctx)
            .plans
            .registry()
            .list()
            .map(|t| Tool {
                key: t.key().to_owned(),
                description: t.description().to_owned(),
                input_schema: Json(t.input_schema()),
            })
            .collect())
    }
}

#[derive(InputObject)]
pub struct RetryPolicyInput {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    #[graphql(default = 500)]
    pub initial_backoff_ms: u64,
    #[graphql(default = 30000)]
    pub max_backoff_ms: u64,
}

#[derive(InputObject)]
pub struct PlanStepInput {
    /// Stable id, unique in the plan.
    pub id: String,
    pub tool: String,
    /// Arguments: JSON, where strings may be templates (`{{ state.x }}`).
    pub args: Option<Json<Value>>,
    /// A template; the step is skipped when it renders falsy.
    pub condition: Option<String>,
    #[graphql(default = true)]
    pub stop_on_failure: bool,
    pub retry: Option<RetryPolicyInput>,
    #[graphql(default = false)]
    pub requires_review: bool,
    pub timeout_secs: Option<u64>,
}

#[derive(InputObject)]
pub struct PublishPlanInput {
    pub key: String,
    pub intent: String,
    #[graphql(default)]
    pub description: String,
    #[graphql(default)]
    pub priority: i32,
    /// Case-insensitive regular expressions that select this plan's intent.
    #[graphql(default)]
    pub patterns: Vec<String>,
    pub steps: Vec<PlanStepInput>,
    /// Tasks of this plan with the same `concurrencyKey` that may run at
    /// once (default: no limit).
    pub max_concurrent: Option<u32>,
}

impl From<PlanStepInput> for StepDef {
    fn from(s: PlanStepInput) -> Self {
        StepDef {
            id: s.id,
            tool: s.tool,
            args: s
                .args
                .map(|j| j.0)
                .unwrap_or_else(|| Value::Object(Default::default())),
            condition: s.condition,
            stop_on_failure: s.stop_on_failure,
            retry: s.retry.map(|r| RetryPolicy {
                max_attempts: r.max_attempts,
                initial_backoff_ms: r.initial_backoff_ms,
                max_backoff_ms: r.max_backoff_ms,
            }),
            requires_review: s.requires_review,
            timeout_secs: s.timeout_secs,
        }
    }
}

impl From<PublishPlanInput> for PlanDef {
    fn from(input: PublishPlanInput) -> Self {
        let steps = input.steps.into_iter().map(StepDef::from).collect();
        PlanDef {
            key: input.key,
            intent: input.intent,
            description: input.description,
            priority: input.priority,
            patterns: input.patterns,
            steps,
            max_concurrent: input.max_concurrent,
        }
    }
}

#[derive(SimpleObject)]
pub struct PublishPlanPayload {
    pub plan: Plan,
}

#[derive(Default)]
pub struct PlanMutation;

#[Object]
impl PlanMutation {
    /// Publish a new version of a plan (tenant admins, or API keys with the
    /// `admin` scope). The integrity check names plan, step and tool of
    /// every problem.
    async fn publish_plan(
        &self,
        ctx: &Context<'_>,
        input: PublishPlanInput,
    ) -> async_graphql::Result<PublishPlanPayload> {
        let principal = principal(ctx)?;
        let plan = domain(ctx)
            .plans
            .publish(principal, input.into())
            .await
            .gql()?;
        Ok(PublishPlanPayload { plan: Plan(plan) })
    }

    /// Archive a plan, every version of its key (tenant admins). New tasks
    /// naming it are refused and intent detection no longer chooses it;
    /// tasks already started finish on their frozen version. Audited.
    async fn archive_plan(
        &self,
        ctx: &Context<'_>,
        input: PlanKeyInput,
    ) -> async_graphql::Result<PublishPlanPayload> {
        let plan = domain(ctx)
            .plans
            .set_archived(principal(ctx)?, &input.key, true, chrono::Utc::now())
            .await
            .gql()?;
        Ok(PublishPlanPayload { plan: Plan(plan) })
    }

    /// Make an archived plan current again (tenant admins). Audited.
    async fn restore_plan(
        &self,
        ctx: &Context<'_>,
        input: PlanKeyInput,
    ) -> async_graphql::Result<PublishPlanPayload> {
        let plan = domain(ctx)
            .plans
            .set_archived(principal(ctx)?, &input.key, false, chrono::Utc::now())
            .await
            .gql()?;
        Ok(PublishPlanPayload { plan: Plan(plan) })
    }
}

/// A plan, by key.
#[derive(async_graphql::InputObject)]
pub struct PlanKeyInput {
    pub key: String,
}

/// A plan version of the caller's tenant.
pub(super) async fn plan_node(ctx: &Context<'_>, uuid: Uuid) -> async_graphql::Result<Plan> {
    let scope = read_scope(ctx)?;
    let plan = domain(ctx)
        .plans
        .get(scope, PlanId::from(uuid))
        .await
        .gql()?;
    Ok(Plan(plan))
}
