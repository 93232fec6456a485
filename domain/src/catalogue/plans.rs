//! Plans are data: a key, a version, the intent they handle, a priority,
//! intent patterns and ordered steps. Publishing creates a new version after
//! an integrity check; a task freezes the version it runs.
//!
//! The integrity check refuses a plan (naming plan, step and tool) when a
//! step names an unknown tool, repeats a step id, holds a template that does
//! not compile, or has arguments that fail the tool's JSON Schema. It runs on
//! publish, on every step a tool injects at run time, and over all stored
//! plans at startup.
//!
//! A tenant's tasks run its own plans and the plans of the capabilities it
//! subscribes to ([`Plans::available`]; see [`crate::catalogue::capabilities`]).

use crate::kernel::db::BeginWrite;
use std::{collections::HashSet, sync::Arc};

use brainstem_entity::{PlanId, TenantOwned, TenantScope, plan};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Error, Principal, Result,
    catalogue::{
        capabilities, mcp,
        patterns::{self, PatternCache},
        tool::{Tool, ToolRegistry},
    },
    kernel::{
        audit::{self, AuditEntry},
        json_schema::{self, Mode},
        page::{self, Page, PageRequest},
        row_security::{Bypass, as_platform},
        template,
    },
};

/// The intent every tenant has: work nothing else claims.
pub const FALLBACK_INTENT: &str = "general_instruction";

/// How often and how patiently a failed step is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, including the first (1 means no retry).
    #[serde(default = "one")]
    pub max_attempts: u32,
    /// Delay before the second attempt; doubles each time, with jitter.
    #[serde(default = "default_backoff")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_ms: u64,
}

fn one() -> u32 {
    1
}
fn default_backoff() -> u64 {
    500
}
fn default_max_backoff() -> u64 {
    30_000
}
fn yes() -> bool {
    true
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            initial_backoff_ms: default_backoff(),
            max_backoff_ms: default_max_backoff(),
        }
    }
}

impl RetryPolicy {
    /// The specifications' policy for calls to other systems (D.6): 3
    /// attempts, 1,000 ms before the first retry, doubling, at most 30 s,
    /// with jitter; only retryable failures (timeouts, connection errors,
    /// 429 and 5xx answers) are retried.
    pub const OUTGOING_CALLS: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        initial_backoff_ms: 1_000,
        max_backoff_ms: 30_000,
    };

    /// Whether the policy is within bounds: 1-20 attempts, backoffs of at
    /// most 5 minutes, the first no longer than the cap.
    pub fn check(&self) -> std::result::Result<(), String> {
        const MAX_BACKOFF_MS: u64 = 300_000;
        if self.max_attempts == 0 || self.max_attempts > 20 {
            return Err("max_attempts must be 1-20".into());
        }
        if self.max_backoff_ms > MAX_BACKOFF_MS || self.initial_backoff_ms > self.max_backoff_ms {
            return Err(format!(
                "backoffs must satisfy initial_backoff_ms <= max_backoff_ms <= {MAX_BACKOFF_MS}"
            ));
        }
        Ok(())
    }

    /// Delay before attempt `next` (2 for the first retry): exponential
    /// backoff with "equal jitter" (half fixed, half random).
    pub fn backoff_ms(&self, next: u32, random: f64) -> u64 {
        let exp = next.saturating_sub(2).min(30);
        let base = self
            .initial_backoff_ms
            .saturating_mul(1u64 << exp)
            .min(self.max_backoff_ms);
        base / 2 + ((base / 2) as f64 * random.clamp(0.0, 1.0)) as u64
    }
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDef {
    /// Stable id, unique in the plan; progress is tracked by it.
    pub id: String,
    pub tool: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    /// A template; the step is skipped when it renders falsy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Whether a failure of this step fails the task (default true).
    #[serde(default = "yes")]
    pub stop_on_failure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Pause for a human before running this step.
    #[serde(default)]
    pub requires_review: bool,
    /// Overrides the tool's own timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// What a client publishes.
#[derive(Clone, Debug)]
pub struct PlanDef {
    pub key: String,
    pub intent: String,
    pub description: String,
    pub priority: i32,
    pub patterns: Vec<String>,
    pub steps: Vec<StepDef>,
    /// Tasks of the plan sharing a concurrency key that may run at once
    /// (`None`: no limit).
    pub max_concurrent: Option<u32>,
}

/// A stored plan version.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub id: PlanId,
    pub key: String,
    pub version: i32,
    pub intent: String,
    pub description: String,
    pub priority: i32,
    pub patterns: Vec<String>,
    pub steps: Vec<StepDef>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// The capability that brings this plan; `None` for the tenant's own.
    pub capability: Option<String>,
    /// When the tenant archived the plan; an archived plan starts no task.
    pub archived_at: Option<DateTime<Utc>>,
}

impl TryFrom<plan::Model> for Plan {
    type Error = Error;

    fn try_from(m: plan::Model) -> Result<Self> {
        Ok(Self {
            id: m.id.into(),
            steps: serde_json::from_value(m.steps).map_err(|e| {
                Error::internal(format!("stored plan {} is unreadable: {e}", m.key))
            })?,
            patterns: serde_json::from_value(m.patterns).unwrap_or_default(),
            key: m.key,
            version: m.version,
            intent: m.intent,
            description: m.description,
            priority: m.priority,
            created_by: m.created_by,
            created_at: m.created_at,
            capability: None,
            archived_at: m.archived_at,
        })
    }
}

fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// The integrity check for `steps` of plan `plan_key`. `existing` holds the
/// ids already in use (for injected steps: the task's plan so far). Returns
/// every problem found.
pub fn check_steps(
    plan_key: &str,
    steps: &[StepDef],
    registry: &ToolRegistry,
    existing: &HashSet<String>,
) -> std::result::Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let mut seen = existing.clone();
    for step in steps {
        let at = format!("plan `{plan_key}` step `{}`", step.id);
        if !valid_name(&step.id, 100) {
            errors.push(format!(
                "{at}: a step id needs 1-100 characters of letters, digits, `_`, `-`, `.`, `:`"
            ));
        }
        if !seen.insert(step.id.clone()) {
            errors.push(format!("{at}: duplicate step id"));
        }
        let Some(tool) = registry.get(&step.tool) else {
            errors.push(format!("{at}: tool `{}` is not registered", step.tool));
            continue;
        };
        if !step.args.is_object() {
            errors.push(format!(
                "{at}: args of tool `{}` must be an object",
                step.tool
            ));
            continue;
        }
        if let Err(e) = template::check(&step.args) {
            errors.push(format!("{at} (tool `{}`): {e}", step.tool));
        } else if let Err(e) = json_schema::validate(&tool.input_schema(), &step.args, Mode::Plan) {
            errors.push(format!("{at}: {e} (tool `{}`)", step.tool));
        }
        if let Some(condition) = &step.condition
            && let Err(e) = template::check(&Value::String(condition.clone()))
        {
            errors.push(format!("{at} (tool `{}`): condition: {e}", step.tool));
        }
        if let Some(retry) = &step.retry
            && let Err(e) = retry.check()
        {
            errors.push(format!("{at}: retry.{e}"));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Check a whole definition before it is stored.
pub fn check_plan(def: &PlanDef, registry: &ToolRegistry) -> Result<()> {
    let mut errors = Vec::new();
    if !valid_name(&def.key, 100) {
        errors.push(format!(
            "plan key `{}` needs 1-100 characters of letters, digits, `_`, `-`, `.`, `:`",
            def.key
        ));
    }
    if !valid_name(&def.intent, 100) {
        errors.push(format!(
            "plan `{}`: invalid intent `{}`",
            def.key, def.intent
        ));
    }
    errors.extend(patterns::check(&def.key, &def.patterns));
    if let Err(mut step_errors) = check_steps(&def.key, &def.steps, registry, &HashSet::new()) {
        errors.append(&mut step_errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Validation(format!(
            "plan integrity check failed with {} error(s): {}",
            errors.len(),
            errors.join("; ")
        )))
    }
}

/// The concurrency limit of a tenant's plan version `id` (`None`: none).
pub async fn max_concurrent<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: PlanId,
) -> Result<Option<i32>> {
    Ok(plan::Entity::find_by_id_in(scope, id.uuid())
        .one(db)
        .await?
        .and_then(|p| p.max_concurrent))
}

#[derive(Clone)]
pub struct Plans {
    db: DatabaseConnection,
    registry: ToolRegistry,
    patterns: PatternCache,
}

impl Plans {
    pub fn new(db: DatabaseConnection, registry: ToolRegistry) -> Self {
        Self {
            db,
            registry,
            patterns: PatternCache::default(),
        }
    }

    /// The same service reading from `replica` (a hot standby of `db`),
    /// sharing this one's compiled patterns.
    pub fn reading_from(&self, replica: DatabaseConnection) -> Self {
        Self {
            db: replica,
            ..self.clone()
        }
    }

    /// Plans' compiled intent patterns, shared by this process's tasks.
    pub fn patterns(&self) -> &PatternCache {
        &self.patterns
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Publish a new version of a plan (tenant admins). Its steps may use
    /// the partner tools of capabilities the tenant subscribes to.
    pub async fn publish(&self, principal: &Principal, def: PlanDef) -> Result<Plan> {
        let scope = principal.require_scope("admin")?;
        let registry = self.tools_for(Some(scope), &def.steps, Utc::now()).await?;
        check_plan(&def, &registry)?;
        let latest = plan::Entity::find_in(scope)
            .filter(plan::Column::Key.eq(&def.key))
            .order_by_desc(plan::Column::Version)
            .limit(1)
            .one(&self.db)
            .await?;
        let version = latest.map(|p| p.version + 1).unwrap_or(1);
        let txn = self.db.begin_write().await?;
        let model = plan::ActiveModel {
            id: Set(PlanId::new().uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            key: Set(def.key.clone()),
            version: Set(version),
            intent: Set(def.intent),
            description: Set(def.description),
            priority: Set(def.priority),
            patterns: Set(serde_json::json!(def.patterns)),
            steps: Set(serde_json::to_value(&def.steps).map_err(Error::internal)?),
            created_by: Set(principal.actor.to_string()),
            created_at: Set(Utc::now()),
            archived_at: Set(None),
            max_concurrent: Set(def
                .max_concurrent
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX))),
        }
        .insert(&txn)
        .await
        .map_err(|e| match Error::from(e) {
            Error::Conflict(_) => Error::Conflict(format!(
                "plan `{}` was published concurrently; publish again",
                def.key
            )),
            other => other,
        })?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "plan.publish".into(),
                target: model.id.to_string(),
                data: serde_json::json!({"key": model.key, "version": model.version}),
            },
        )
        .await?;
        txn.commit().await?;
        Plan::try_from(model)
    }

    /// Archive (`archived`) or restore a plan's key, every version of it
    /// (tenant admins; audited as `plan.archive` or `plan.restore`). An
    /// archived plan starts no new task and is not chosen by intent
    /// detection; tasks already started finish on their frozen version.
    /// Returns the latest version.
    pub async fn set_archived(
        &self,
        principal: &Principal,
        key: &str,
        archived: bool,
        now: DateTime<Utc>,
    ) -> Result<Plan> {
        let scope = principal.require_scope("admin")?;
        let txn = self.db.begin_write().await?;
        let changed = plan::Entity::update_many_in(scope)
            .col_expr(
                plan::Column::ArchivedAt,
                Expr::value(archived.then_some(now)),
            )
            .filter(plan::Column::Key.eq(key))
            .exec(&txn)
            .await?
            .rows_affected;
        if changed == 0 {
            return Err(Error::not_found(format!("plan `{key}`")));
        }
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: if archived {
                    "plan.archive"
                } else {
                    "plan.restore"
                }
                .into(),
                target: key.to_owned(),
                data: serde_json::json!({"versions": changed}),
            },
        )
        .await?;
        txn.commit().await?;
        self.latest(scope, key).await
    }

    /// The latest version of each plan, by key.
    pub async fn list_latest(
        &self,
        scope: TenantScope,
        request: PageRequest,
    ) -> Result<Page<Plan>> {
        // Keyset over versions would need a window; plans are few, so page
        // over all versions and keep the latest of each key.
        let all = plan::Entity::find_in(scope)
            .order_by_asc(plan::Column::Key)
            .order_by_desc(plan::Column::Version)
            .all(&self.db)
            .await?;
        let mut latest: Vec<plan::Model> = Vec::new();
        for p in all {
            if latest.last().is_none_or(|l| l.key != p.key) {
                latest.push(p);
            }
        }
        page::slice(latest, |p| p.id, request)?.try_map(Plan::try_from)
    }

    /// Every version of one plan, newest first.
    pub async fn versions(&self, scope: TenantScope, key: &str) -> Result<Vec<Plan>> {
        let rows = plan::Entity::find_in(scope)
            .filter(plan::Column::Key.eq(key))
            .order_by_desc(plan::Column::Version)
            .all(&self.db)
            .await?;
        if rows.is_empty() {
            return Err(Error::not_found(format!("plan `{key}`")));
        }
        rows.into_iter().map(Plan::try_from).collect()
    }

    /// The latest version of a plan.
    pub async fn latest(&self, scope: TenantScope, key: &str) -> Result<Plan> {
        plan::Entity::find_in(scope)
            .filter(plan::Column::Key.eq(key))
            .order_by_desc(plan::Column::Version)
            .limit(1)
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found(format!("plan `{key}`")))
            .and_then(Plan::try_from)
    }

    /// Version `version` of the plan a task of key `key` may run at `now`:
    /// the tenant's own, else a subscribed capability's (`Forbidden`
    /// naming the capability otherwise); `NotFound` when there is none.
    pub async fn version(
        &self,
        scope: TenantScope,
        key: &str,
        version: i32,
        now: DateTime<Utc>,
    ) -> Result<Plan> {
        if let Some(own) = plan::Entity::find_in(scope)
            .filter(plan::Column::Key.eq(key))
            .filter(plan::Column::Version.eq(version))
            .one(&self.db)
            .await?
        {
            return Plan::try_from(own);
        }
        capabilities::plan_version_for_tenant(&self.db, scope, key, version, now)
            .await?
            .ok_or_else(|| Error::not_found(format!("version {version} of plan `{key}`")))
    }

    /// A plan version by id: one of the tenant's, or one of the catalogue's
    /// (capability plans are public, like the catalogue).
    pub async fn get(&self, scope: TenantScope, id: PlanId) -> Result<Plan> {
        if let Some(own) = plan::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
        {
            return Plan::try_from(own);
        }
        capabilities::plan_by_id(&self.db, id)
            .await?
            .map(|(plan, _)| plan)
            .ok_or_else(|| Error::not_found("plan"))
    }

    /// The plans a tenant's tasks may run at `now`: the latest version of
    /// each of its own plans, then the current plans of the capabilities it
    /// subscribes to (ACTIVE, or TRIAL before its end). Intent detection and
    /// plan choice look only at these.
    pub async fn available(&self, scope: TenantScope, now: DateTime<Utc>) -> Result<Vec<Plan>> {
        let mut plans = self.all_latest(scope).await?;
        plans.retain(|p| p.archived_at.is_none());
        plans.extend(capabilities::subscribed_plans(&self.db, scope, now).await?);
        Ok(plans)
    }

    /// The plan a task starting at `now` names by key: the tenant's own plan
    /// of that key (a tenant may override a capability's plan), else the
    /// current plan of a subscribed capability. A capability's plan without
    /// a subscription is `Forbidden`, naming the capability; an unknown key
    /// is `NotFound`.
    pub async fn for_start(
        &self,
        scope: TenantScope,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Plan> {
        match self.latest(scope, key).await {
            Err(Error::NotFound(_)) => capabilities::plan_for_tenant(&self.db, scope, key, now)
                .await?
                .ok_or_else(|| Error::not_found(format!("plan `{key}`"))),
            Ok(plan) if plan.archived_at.is_some() => Err(Error::validation(format!(
                "plan `{key}` is archived: restore it (restorePlan) or publish a new version"
            ))),
            other => other,
        }
    }

    /// The plan version a task named at start, for planning at `now`: the
    /// tenant's own, or a capability's while the tenant still subscribes
    /// (`Forbidden` naming the capability otherwise).
    pub async fn for_task(
        &self,
        scope: TenantScope,
        id: PlanId,
        now: DateTime<Utc>,
    ) -> Result<Plan> {
        Self::for_task_in(&self.db, scope, id, now).await
    }

    /// [`Self::for_task`], read through `db` (say, an open transaction).
    pub async fn for_task_in<C: ConnectionTrait>(
        db: &C,
        scope: TenantScope,
        id: PlanId,
        now: DateTime<Utc>,
    ) -> Result<Plan> {
        if let Some(own) = plan::Entity::find_by_id_in(scope, id.uuid())
            .one(db)
            .await?
        {
            return Plan::try_from(own);
        }
        capabilities::plan_by_id_for_tenant(db, scope, id, now)
            .await?
            .ok_or_else(|| Error::not_found("plan"))
    }

    /// `Forbidden`, naming the capability, when a task names an intent that
    /// only capabilities the tenant does not subscribe to bring.
    pub async fn check_intent(
        &self,
        scope: TenantScope,
        intent: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if intent == FALLBACK_INTENT
            || self
                .all_latest(scope)
                .await?
                .iter()
                .any(|p| p.intent == intent)
        {
            return Ok(());
        }
        capabilities::check_intent(&self.db, scope, intent, now).await
    }

    /// The registry plus the partner tools `steps` name, as the scope's
    /// tenant may use them at `now` (`Forbidden` for a tool of a capability
    /// it does not subscribe to). Unknown keys stay unknown, for the
    /// integrity check to report.
    pub async fn tools_for(
        &self,
        scope: Option<TenantScope>,
        steps: &[StepDef],
        now: DateTime<Utc>,
    ) -> Result<ToolRegistry> {
        let partner: Vec<String> = steps
            .iter()
            .filter(|s| !self.registry.contains(&s.tool))
            .map(|s| s.tool.clone())
            .collect();
        let mut extra = capabilities::partner_tools(&self.db, scope, &partner, now).await?;
        extra.extend(mcp::mcp_tools(&self.db, scope, &partner).await?);
        Ok(self.registry.with_extra(extra))
    }

    /// The tool a step of the scope's tenant runs at `now`: a registered
    /// one, or a partner tool of a subscribed capability. `NotFound` when no
    /// such tool exists; `Forbidden` naming the capability when the tenant
    /// does not subscribe to it.
    pub async fn tool(
        &self,
        scope: TenantScope,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Arc<dyn Tool>> {
        if let Some(tool) = self.registry.get(key) {
            return Ok(tool);
        }
        if mcp::parse_key(key).is_some() {
            return mcp::mcp_tools(&self.db, Some(scope), &[key.to_owned()])
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| Error::not_found(format!("tool `{key}`")));
        }
        capabilities::partner_tools(&self.db, Some(scope), &[key.to_owned()], now)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::not_found(format!("tool `{key}`")))
    }

    /// Every tool the scope's tenant may run at `now`: the registered ones
    /// and the partner tools of the capabilities it subscribes to.
    pub async fn tools_of_tenant(
        &self,
        scope: TenantScope,
        now: DateTime<Utc>,
    ) -> Result<Vec<Arc<dyn Tool>>> {
        let mut tools: Vec<Arc<dyn Tool>> = self.registry.list().cloned().collect();
        tools.extend(capabilities::subscribed_tools(&self.db, scope, now).await?);
        Ok(tools)
    }

    /// The MCP tools among `keys` that the scope's tenant's connections
    /// lend (an agent step offers those it names; see [`mcp`]).
    pub async fn mcp_tools(
        &self,
        scope: TenantScope,
        keys: &[String],
    ) -> Result<Vec<Arc<dyn Tool>>> {
        mcp::mcp_tools(&self.db, Some(scope), keys).await
    }

    /// The latest version of every plan of the tenant (for intent detection
    /// and plan resolution).
    pub async fn all_latest(&self, scope: TenantScope) -> Result<Vec<Plan>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .list_latest(scope, PageRequest::forward(page::MAX_PAGE_SIZE, after))
                .await?;
            after = page.items.last().map(|p| p.id.uuid());
            let more = page.has_next_page;
            out.extend(page.items);
            if !more {
                return Ok(out);
            }
        }
    }

    /// Run the integrity check over every stored plan version that could
    /// still run (the latest of each key, in every tenant, and the current
    /// plans of every capability). Used at startup.
    pub async fn check_all(&self) -> Result<()> {
        let registry = self
            .registry
            .with_extra(capabilities::all_partner_tools(&self.db).await?);
        // unscoped: a startup check over every tenant's plans, read-only.
        let every_plan = plan::Entity::find()
            .order_by_asc(plan::Column::TenantId)
            .order_by_asc(plan::Column::Key)
            .order_by_desc(plan::Column::Version)
            .all(&self.db);
        let rows = as_platform(Bypass::Maintenance, every_plan).await?;
        let mut errors = Vec::new();
        let mut last: Option<(uuid::Uuid, String)> = None;
        for row in rows {
            let ident = (row.tenant_id, row.key.clone());
            if last.as_ref() == Some(&ident) {
                continue;
            }
            last = Some(ident);
            let plan = Plan::try_from(row)?;
            let registry =
                registry.with_extra(mcp::unchecked(plan.steps.iter().map(|s| s.tool.as_str())));
            if let Err(mut e) = check_steps(&plan.key, &plan.steps, &registry, &HashSet::new()) {
                errors.append(&mut e);
            }
        }
        for plan in capabilities::all_current_plans(&self.db).await? {
            if let Err(mut e) = check_steps(&plan.key, &plan.steps, &registry, &HashSet::new()) {
                errors.append(&mut e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Validation(format!(
                "plan integrity check failed with {} error(s): {}",
                errors.len(),
                errors.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::WithBuiltins;

    fn step(id: &str, tool: &str, args: Value) -> StepDef {
        serde_json::from_value(json!({"id": id, "tool": tool, "args": args})).unwrap()
    }

    #[test]
    fn steps_default_to_stopping_on_failure_without_retry() {
        let s = step("a", "set_state", json!({}));
        assert!(s.stop_on_failure);
        assert!(s.retry.is_none());
        assert!(!s.requires_review);
        let bad: std::result::Result<StepDef, _> =
            serde_json::from_value(json!({"id": "a", "tool": "t", "colour": "red"}));
        assert!(bad.is_err(), "unknown step fields are refused");
    }

    #[test]
    fn integrity_check_names_plan_step_and_tool() {
        let registry = ToolRegistry::builder().with_builtins().unwrap().build();
        let errors = check_steps(
            "p",
            &[
                step("one", "no_such_tool", json!({})),
                step("two", "http_request", json!({"url": 5})),
                step("two", "set_state", json!({"x": "{{ state. }}"})),
            ],
            &registry,
            &HashSet::new(),
        )
        .unwrap_err();
        let all = errors.join("\n");
        assert!(
            all.contains("plan `p` step `one`: tool `no_such_tool` is not registered"),
            "{all}"
        );
        assert!(
            all.contains(
                "step `two`: args.url must be of type string, got number (tool `http_request`)"
            ),
            "{all}"
        );
        assert!(all.contains("step `two`: duplicate step id"), "{all}");
        assert!(all.contains("does not compile"), "{all}");
    }

    #[test]
    fn backoff_grows_exponentially_with_bounded_jitter() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial_backoff_ms: 100,
            max_backoff_ms: 1_000,
        };
        assert_eq!(p.backoff_ms(2, 0.0), 50);
        assert_eq!(p.backoff_ms(2, 1.0), 100);
        assert_eq!(p.backoff_ms(3, 1.0), 200);
        assert_eq!(p.backoff_ms(4, 0.5), 300);
        assert_eq!(p.backoff_ms(9, 1.0), 1_000, "capped");
    }
}
