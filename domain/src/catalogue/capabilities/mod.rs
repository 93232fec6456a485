//! Capabilities: the platform's catalogue of products and tenants'
//! subscriptions to them.
//!
//! A **capability** (platform-owned: its tables are platform tables, like
//! `tenants`, read and written without a tenant scope) has a key, a name, a description, the
//! plans it brings (full definitions, checked like `publishPlan`), the
//! partner HTTP tools it registers ([`partner`]) and its limits. The intents
//! it brings are those of its plans; the tools it needs are those its plans
//! name. Only a platform admin publishes one, through an audited
//! [`PlatformScope`]. Each publish bumps the capability's version; its plans
//! are stored again with that version, and rows are never changed, so a
//! task that named a plan before a republish still finds it.
//!
//! A **subscription** (tenant-owned, one per tenant and capability) is
//! `TRIAL` (until its end), `ACTIVE`, `CANCELLED` or `EXPIRED`. A trial past
//! its end *is* expired: [`effective_status`] computes the status with an
//! explicit `now` wherever a subscription is read, and the maintenance pass
//! [`Capabilities::expire_trials`] (run by the executor's reaper) stores it.
//!
//! **How capability plans reach a tenant's tasks** (see
//! [`crate::catalogue::plans::Plans::available`]): a tenant's tasks may run its own
//! plans and the current plans of the capabilities it subscribes to (ACTIVE,
//! or TRIAL before its end). Intent detection considers only those, plus
//! the fallback `general_instruction`. `startTask(planKey:)` looks for the
//! tenant's own plan of that key first (a tenant may override a capability's
//! plan), then for a capability's; naming the plan, or the intent, of a
//! capability the tenant does not subscribe to is `FORBIDDEN` with a message
//! naming the capability. When a subscription lapses, tasks not yet planned
//! fail at planning, and a running task fails at its next partner-tool step.

mod catalogue;
pub mod partner;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fmt,
    str::FromStr,
    sync::Arc,
};

use brainstem_entity::{
    CapabilityId, PlanId, SubscriptionId, TenantId, TenantOwned, TenantScope, capability,
    capability_plan, capability_subscription, capability_tool,
};
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, QueryFilter, QueryOrder, TransactionTrait, sea_query::Expr,
};
use serde_json::{Value, json};

use crate::{
    Error, PlatformScope, Principal, Result,
    catalogue::{
        plans::{self, Plan, PlanDef},
        tool::{Tool, ToolRegistry},
    },
    kernel::{
        audit::{self, AuditEntry},
        crypto::{Keyring, Sealed},
        page::{self, Page, PageRequest},
    },
};
use catalogue::catalogue_row;
pub(crate) use catalogue::{
    all_current_plans, all_partner_tools, check_intent, check_quota, partner_tools, plan_by_id,
    plan_by_id_for_tenant, plan_for_tenant, subscribed_plans,
};

/// Every partner tool's key starts with this.
pub const PARTNER_PREFIX: &str = "partner.";
/// Signing secrets start with this, so they are recognisable.
pub const SECRET_PREFIX: &str = "bcs_";
/// Default and largest timeout of a partner tool call.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 10_000;
pub const MAX_TOOL_TIMEOUT_MS: u64 = 120_000;
/// The longest trial a tenant may start.
pub const MAX_TRIAL_DAYS: u32 = 365;

/// What a capability allows a subscriber; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Tasks a tenant may start per calendar month (UTC) on this
    /// capability's plans.
    pub max_tasks_per_month: Option<u32>,
}

impl Limits {
    fn to_json(self) -> Value {
        match self.max_tasks_per_month {
            Some(n) => json!({"max_tasks_per_month": n}),
            None => json!({}),
        }
    }

    fn from_json(value: &Value) -> Self {
        Self {
            max_tasks_per_month: value
                .get("max_tasks_per_month")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        }
    }
}

/// A partner HTTP tool: an endpoint the executor calls with `POST`, signed
/// with the capability's secret (see [`partner`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PartnerToolDef {
    /// `partner.<name>`, unique across the catalogue.
    pub key: String,
    pub description: String,
    pub url: String,
    /// JSON Schema of the arguments (checked at publish and before a call).
    pub input_schema: Value,
    /// JSON Schema the response must match, if any.
    pub output_schema: Option<Value>,
    pub timeout_ms: u64,
}

impl From<capability_tool::Model> for PartnerToolDef {
    fn from(m: capability_tool::Model) -> Self {
        Self {
            key: m.key,
            description: m.description,
            url: m.url,
            input_schema: m.input_schema,
            output_schema: m.output_schema,
            timeout_ms: u64::try_from(m.timeout_ms).unwrap_or(DEFAULT_TOOL_TIMEOUT_MS),
        }
    }
}

/// What a platform admin publishes.
#[derive(Clone, Debug)]
pub struct CapabilityDef {
    pub key: String,
    pub name: String,
    pub description: String,
    pub plans: Vec<PlanDef>,
    pub tools: Vec<PartnerToolDef>,
    pub limits: Limits,
    /// Replace the signing secret (a new one is shown once).
    pub rotate_secret: bool,
}

/// A capability of the catalogue (its current version).
#[derive(Clone, Debug, PartialEq)]
pub struct Capability {
    pub id: CapabilityId,
    pub key: String,
    pub name: String,
    pub description: String,
    pub version: i32,
    pub limits: Limits,
    pub published_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&capability::Model> for Capability {
    fn from(m: &capability::Model) -> Self {
        Self {
            id: m.id.into(),
            key: m.key.clone(),
            name: m.name.clone(),
            description: m.description.clone(),
            version: m.version,
            limits: Limits::from_json(&m.limits),
            published_by: m.published_by.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A published capability, with its signing secret when it is new (first
/// publish or rotation): shown this once, stored only encrypted.
#[derive(Clone)]
pub struct Published {
    pub capability: Capability,
    pub signing_secret: Option<String>,
}

impl fmt::Debug for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Published")
            .field("capability", &self.capability)
            .field("new_signing_secret", &self.signing_secret.is_some())
            .finish()
    }
}

/// Where a subscription stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubscriptionStatus {
    Trial,
    Active,
    Cancelled,
    Expired,
}

impl SubscriptionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trial => "TRIAL",
            Self::Active => "ACTIVE",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }
}

impl fmt::Display for SubscriptionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SubscriptionStatus {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "TRIAL" => Ok(Self::Trial),
            "ACTIVE" => Ok(Self::Active),
            "CANCELLED" => Ok(Self::Cancelled),
            "EXPIRED" => Ok(Self::Expired),
            other => Err(Error::internal(format!(
                "unknown subscription status `{other}`"
            ))),
        }
    }
}

/// The status at `now`: a trial past its end counts as expired, whatever
/// is stored.
pub fn effective_status(
    stored: SubscriptionStatus,
    trial_ends_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> SubscriptionStatus {
    match (stored, trial_ends_at) {
        (SubscriptionStatus::Trial, Some(end)) if end <= now => SubscriptionStatus::Expired,
        (status, _) => status,
    }
}

/// Whether a subscription in this status switches its capability on.
pub fn is_on(status: SubscriptionStatus) -> bool {
    matches!(
        status,
        SubscriptionStatus::Trial | SubscriptionStatus::Active
    )
}

/// A tenant's subscription, as of the `now` it was read with.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    pub id: SubscriptionId,
    pub tenant: TenantId,
    pub capability_id: CapabilityId,
    /// The status at the time of reading (see [`effective_status`]).
    pub status: SubscriptionStatus,
    pub trial_ends_at: Option<DateTime<Utc>>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub cancelled_at: Option<DateTime<Utc>>,
}

impl Subscription {
    fn read(m: capability_subscription::Model, now: DateTime<Utc>) -> Result<Self> {
        let stored: SubscriptionStatus = m.status.parse()?;
        Ok(Self {
            id: m.id.into(),
            tenant: m.tenant_id.into(),
            capability_id: m.capability_id.into(),
            status: effective_status(stored, m.trial_ends_at, now),
            trial_ends_at: m.trial_ends_at,
            created_by: m.created_by,
            created_at: m.created_at,
            updated_at: m.updated_at,
            cancelled_at: m.cancelled_at,
        })
    }
}

fn valid_key(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// The catalogue and the subscriptions.
#[derive(Clone)]
pub struct Capabilities {
    db: DatabaseConnection,
    registry: ToolRegistry,
    keyring: Option<Arc<Keyring>>,
}

impl Capabilities {
    pub fn new(db: DatabaseConnection, registry: ToolRegistry) -> Self {
        Self {
            db,
            registry,
            keyring: None,
        }
    }

    /// Seal signing secrets with `keyring` (the connections' keys).
    pub fn with_keyring(mut self, keyring: Arc<Keyring>) -> Self {
        self.keyring = Some(keyring);
        self
    }

    fn keyring(&self) -> Result<&Keyring> {
        self.keyring.as_deref().ok_or_else(|| {
            Error::internal("no encryption key is configured (connection_encryption_key)")
        })
    }

    /// Publish a capability, or a new version of one (platform admins).
    pub async fn publish(&self, scope: &PlatformScope, def: CapabilityDef) -> Result<Published> {
        check_capability(&def, &self.registry)?;
        let txn = self.db.begin().await?;
        let existing = capability::Entity::find()
            .filter(capability::Column::Key.eq(&def.key))
            .one(&txn)
            .await?;
        let id = existing
            .as_ref()
            .map(|c| CapabilityId::from(c.id))
            .unwrap_or_default();
        refuse_foreign_keys(&txn, id, &def).await?;
        let now = Utc::now();
        let new_secret = (existing.is_none() || def.rotate_secret).then(new_signing_secret);
        let sealed = match &new_secret {
            Some(secret) => Some(
                self.keyring()?
                    .seal(secret.as_bytes(), secret_context(id).as_bytes())?,
            ),
            None => None,
        };
        let model = match existing {
            None => {
                let sealed =
                    sealed.ok_or_else(|| Error::internal("no secret for a new capability"))?;
                capability::ActiveModel {
                    id: Set(id.uuid()),
                    key: Set(def.key.clone()),
                    name: Set(def.name.clone()),
                    description: Set(def.description.clone()),
                    version: Set(1),
                    limits: Set(def.limits.to_json()),
                    secret_ciphertext: Set(sealed.ciphertext),
                    secret_key_id: Set(sealed.key_id),
                    published_by: Set(scope.actor().to_owned()),
                    created_at: Set(now),
                    updated_at: Set(now),
                }
                .insert(&txn)
                .await
                .map_err(|e| published_concurrently(e, &def.key))?
            }
            Some(row) => {
                let mut active: capability::ActiveModel = row.clone().into();
                active.name = Set(def.name.clone());
                active.description = Set(def.description.clone());
                active.version = Set(row.version + 1);
                active.limits = Set(def.limits.to_json());
                if let Some(sealed) = sealed {
                    active.secret_ciphertext = Set(sealed.ciphertext);
                    active.secret_key_id = Set(sealed.key_id);
                }
                active.published_by = Set(scope.actor().to_owned());
                active.updated_at = Set(now);
                // Guarded by the version read above: of two concurrent
                // publishes, one wins and the other is told to try again.
                let updated = capability::Entity::update_many()
                    .set(active)
                    .filter(capability::Column::Id.eq(row.id))
                    .filter(capability::Column::Version.eq(row.version))
                    .exec_with_returning(&txn)
                    .await?;
                updated.into_iter().next().ok_or_else(|| {
                    Error::Conflict(format!(
                        "capability `{}` was published concurrently; publish again",
                        def.key
                    ))
                })?
            }
        };
        for plan in &def.plans {
            capability_plan::ActiveModel {
                id: Set(PlanId::new().uuid()),
                capability_id: Set(id.uuid()),
                version: Set(model.version),
                key: Set(plan.key.clone()),
                intent: Set(plan.intent.clone()),
                description: Set(plan.description.clone()),
                priority: Set(plan.priority),
                patterns: Set(json!(plan.patterns)),
                steps: Set(serde_json::to_value(&plan.steps).map_err(Error::internal)?),
                created_by: Set(scope.actor().to_owned()),
                created_at: Set(now),
            }
            .insert(&txn)
            .await
            .map_err(|e| published_concurrently(e, &def.key))?;
        }
        capability_tool::Entity::delete_many()
            .filter(capability_tool::Column::CapabilityId.eq(id.uuid()))
            .exec(&txn)
            .await?;
        for tool in &def.tools {
            capability_tool::ActiveModel {
                id: Set(uuid::Uuid::now_v7()),
                capability_id: Set(id.uuid()),
                key: Set(tool.key.clone()),
                description: Set(tool.description.clone()),
                url: Set(tool.url.clone()),
                input_schema: Set(tool.input_schema.clone()),
                output_schema: Set(tool.output_schema.clone()),
                timeout_ms: Set(i64::try_from(tool.timeout_ms).unwrap_or(i64::MAX)),
                created_at: Set(now),
            }
            .insert(&txn)
            .await
            .map_err(|e| published_concurrently(e, &def.key))?;
        }
        txn.commit().await?;
        tracing::info!(
            capability = %def.key,
            version = model.version,
            plans = def.plans.len(),
            tools = def.tools.len(),
            audit = %scope.audit_id(),
            "capability published"
        );
        Ok(Published {
            capability: Capability::from(&model),
            signing_secret: new_secret,
        })
    }

    /// The catalogue, oldest first. Anyone signed in may read it.
    pub async fn list(&self, request: PageRequest) -> Result<Page<Capability>> {
        let select = capability::Entity::find();
        let page = page::fetch(&self.db, select, capability::Column::Id, request).await?;
        Ok(page.map(|m| Capability::from(&m)))
    }

    pub async fn get_by_key(&self, key: &str) -> Result<Capability> {
        catalogue_row(&self.db, key)
            .await?
            .map(|m| Capability::from(&m))
            .ok_or_else(|| Error::not_found(format!("capability `{key}`")))
    }

    pub async fn get(&self, id: CapabilityId) -> Result<Capability> {
        capability::Entity::find_by_id(id.uuid())
            .one(&self.db)
            .await?
            .map(|m| Capability::from(&m))
            .ok_or_else(|| Error::not_found("capability"))
    }

    /// Several capabilities at once (for batch loading); missing ids are absent.
    pub async fn get_many(&self, ids: &[CapabilityId]) -> Result<Vec<Capability>> {
        Ok(capability::Entity::find()
            .filter(capability::Column::Id.is_in(ids.iter().map(|i| i.uuid())))
            .all(&self.db)
            .await?
            .iter()
            .map(Capability::from)
            .collect())
    }

    /// The plans of several capability versions at once, by
    /// `(capability, version)`, each list ordered by key.
    pub async fn plans_of_many(
        &self,
        versions: &[(CapabilityId, i32)],
    ) -> Result<HashMap<(CapabilityId, i32), Vec<Plan>>> {
        let ids: BTreeSet<uuid::Uuid> = versions.iter().map(|(c, _)| c.uuid()).collect();
        let wanted: HashSet<(CapabilityId, i32)> = versions.iter().copied().collect();
        let keys = self
            .get_many(
                &ids.iter()
                    .map(|u| CapabilityId::from(*u))
                    .collect::<Vec<_>>(),
            )
            .await?;
        let key_of: HashMap<CapabilityId, String> =
            keys.into_iter().map(|c| (c.id, c.key)).collect();
        let rows = capability_plan::Entity::find()
            .filter(capability_plan::Column::CapabilityId.is_in(ids))
            .filter(
                capability_plan::Column::Version
                    .is_in(versions.iter().map(|(_, v)| *v).collect::<BTreeSet<_>>()),
            )
            .order_by_asc(capability_plan::Column::Key)
            .all(&self.db)
            .await?;
        let mut out: HashMap<(CapabilityId, i32), Vec<Plan>> = HashMap::new();
        for row in rows {
            let at = (CapabilityId::from(row.capability_id), row.version);
            if !wanted.contains(&at) {
                continue;
            }
            let key = key_of.get(&at.0).cloned().unwrap_or_default();
            out.entry(at).or_default().push(plan_of(row, &key)?);
        }
        Ok(out)
    }

    /// The partner tools of several capabilities at once, each list by key.
    pub async fn tools_of_many(
        &self,
        ids: &[CapabilityId],
    ) -> Result<HashMap<CapabilityId, Vec<PartnerToolDef>>> {
        let rows = capability_tool::Entity::find()
            .filter(capability_tool::Column::CapabilityId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(capability_tool::Column::Key)
            .all(&self.db)
            .await?;
        let mut out: HashMap<CapabilityId, Vec<PartnerToolDef>> = HashMap::new();
        for row in rows {
            out.entry(row.capability_id.into())
                .or_default()
                .push(PartnerToolDef::from(row));
        }
        Ok(out)
    }

    /// Every version of a capability's plan, newest first.
    pub async fn plan_versions(&self, key: &str) -> Result<Vec<Plan>> {
        let rows = capability_plan::Entity::find()
            .filter(capability_plan::Column::Key.eq(key))
            .order_by_desc(capability_plan::Column::Version)
            .all(&self.db)
            .await?;
        let Some(first) = rows.first() else {
            return Err(Error::not_found(format!("plan `{key}`")));
        };
        let capability = self.get(first.capability_id.into()).await?;
        rows.into_iter()
            .map(|row| plan_of(row, &capability.key))
            .collect()
    }

    /// Subscribe the principal's tenant (needs `admin`): a trial of
    /// `trial_days` days, or an active subscription. Subscribing while in
    /// trial makes it active; a tenant gets one trial per capability.
    pub async fn subscribe(
        &self,
        principal: &Principal,
        capability_key: &str,
        trial_days: Option<u32>,
        now: DateTime<Utc>,
    ) -> Result<Subscription> {
        let scope = principal.require_scope("admin")?;
        if let Some(days) = trial_days
            && !(1..=MAX_TRIAL_DAYS).contains(&days)
        {
            return Err(Error::validation(format!(
                "trialDays must be between 1 and {MAX_TRIAL_DAYS}"
            )));
        }
        let capability = self.get_by_key(capability_key).await?;
        let existing = self.row(scope, capability.id).await?;
        let (status, trial_ends_at) = match trial_days {
            Some(days) => (
                SubscriptionStatus::Trial,
                Some(now + Duration::days(i64::from(days))),
            ),
            None => (SubscriptionStatus::Active, None),
        };
        let model = match existing {
            None => capability_subscription::ActiveModel {
                id: Set(SubscriptionId::new().uuid()),
                tenant_id: Set(scope.tenant_id().uuid()),
                capability_id: Set(capability.id.uuid()),
                status: Set(status.as_str().to_owned()),
                trial_ends_at: Set(trial_ends_at),
                created_by: Set(principal.actor.to_string()),
                created_at: Set(now),
                updated_at: Set(now),
                cancelled_at: Set(None),
            }
            .insert(&self.db)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Conflict(_) => Error::Conflict(format!(
                    "the tenant subscribed to `{capability_key}` concurrently"
                )),
                other => other,
            })?,
            Some(row) => {
                let current = Subscription::read(row.clone(), now)?;
                match (current.status, trial_days) {
                    (SubscriptionStatus::Active, None) => return Ok(current),
                    (SubscriptionStatus::Active, Some(_)) => {
                        return Err(Error::Conflict(format!(
                            "the tenant already subscribes to `{capability_key}`; a trial is for new subscribers"
                        )));
                    }
                    (SubscriptionStatus::Trial, Some(_)) => {
                        return Err(Error::Conflict(format!(
                            "the tenant's trial of `{capability_key}` runs until {}",
                            row.trial_ends_at
                                .map(|t| t.to_rfc3339())
                                .unwrap_or_default()
                        )));
                    }
                    (_, Some(_)) if row.trial_ends_at.is_some() => {
                        return Err(Error::Conflict(format!(
                            "the tenant has had its trial of `{capability_key}`; subscribe without trialDays"
                        )));
                    }
                    _ => {}
                }
                let mut active: capability_subscription::ActiveModel = row.into();
                active.status = Set(status.as_str().to_owned());
                if trial_ends_at.is_some() {
                    active.trial_ends_at = Set(trial_ends_at);
                }
                active.cancelled_at = Set(None);
                active.updated_at = Set(now);
                self.save(scope, active).await?
            }
        };
        let subscription = Subscription::read(model, now)?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "capability.subscribe".into(),
                target: capability_key.to_owned(),
                data: json!({
                    "status": subscription.status.as_str(),
                    "trial_ends_at": subscription.trial_ends_at,
                }),
            },
        )
        .await?;
        Ok(subscription)
    }

    /// Cancel the principal's tenant's subscription (needs `admin`). Its
    /// plans and partner tools are off for the tenant from now on.
    pub async fn cancel(
        &self,
        principal: &Principal,
        capability_key: &str,
        now: DateTime<Utc>,
    ) -> Result<Subscription> {
        let scope = principal.require_scope("admin")?;
        let capability = self.get_by_key(capability_key).await?;
        let not_found = || Error::not_found(format!("subscription to `{capability_key}`"));
        let row = self
            .row(scope, capability.id)
            .await?
            .ok_or_else(not_found)?;
        let current = Subscription::read(row.clone(), now)?;
        if !is_on(current.status) {
            return Err(Error::InvalidTransition(format!(
                "the subscription to `{capability_key}` is already {}",
                current.status
            )));
        }
        let mut active: capability_subscription::ActiveModel = row.into();
        active.status = Set(SubscriptionStatus::Cancelled.as_str().to_owned());
        active.cancelled_at = Set(Some(now));
        active.updated_at = Set(now);
        let model = self.save(scope, active).await?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "capability.cancel".into(),
                target: capability_key.to_owned(),
                data: json!({"previous_status": current.status.as_str()}),
            },
        )
        .await?;
        Subscription::read(model, now)
    }

    /// The tenant's subscriptions, oldest first, with statuses as of `now`.
    pub async fn subscriptions(
        &self,
        scope: TenantScope,
        request: PageRequest,
        now: DateTime<Utc>,
    ) -> Result<Page<Subscription>> {
        let page = page::fetch(
            &self.db,
            capability_subscription::Entity::find_in(scope),
            capability_subscription::Column::Id,
            request,
        )
        .await?;
        let items = page
            .items
            .into_iter()
            .map(|m| Subscription::read(m, now))
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            has_next_page: page.has_next_page,
            has_previous_page: page.has_previous_page,
        })
    }

    pub async fn subscription(
        &self,
        scope: TenantScope,
        id: SubscriptionId,
        now: DateTime<Utc>,
    ) -> Result<Subscription> {
        let row = capability_subscription::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("subscription"))?;
        Subscription::read(row, now)
    }

    /// The maintenance pass: store `EXPIRED` on every trial that ended by
    /// `now`, in every tenant. Returns how many. Reads already treat such
    /// trials as expired; this keeps the stored status honest for reports.
    pub async fn expire_trials(&self, now: DateTime<Utc>) -> Result<u64> {
        // unscoped: a platform maintenance pass over every tenant's trials;
        // it changes nothing but the status of trials that have ended.
        let result = capability_subscription::Entity::update_many()
            .col_expr(
                capability_subscription::Column::Status,
                Expr::value(SubscriptionStatus::Expired.as_str()),
            )
            .col_expr(capability_subscription::Column::UpdatedAt, Expr::value(now))
            .filter(capability_subscription::Column::Status.eq(SubscriptionStatus::Trial.as_str()))
            .filter(capability_subscription::Column::TrialEndsAt.lte(now))
            .exec(&self.db)
            .await?;
        if result.rows_affected > 0 {
            tracing::info!(expired = result.rows_affected, "expired ended trials");
        }
        Ok(result.rows_affected)
    }

    /// The secret that signs calls to a capability's partner tools. One
    /// sealed with an old key is re-sealed with the current one on the way.
    pub(crate) async fn signing_secret(&self, id: CapabilityId) -> Result<String> {
        let row = capability::Entity::find_by_id(id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("capability"))?;
        let keyring = self.keyring()?;
        let plaintext = keyring.open(
            &Sealed {
                key_id: row.secret_key_id.clone(),
                ciphertext: row.secret_ciphertext.clone(),
            },
            secret_context(id).as_bytes(),
        )?;
        let secret = String::from_utf8(plaintext)
            .map_err(|_| Error::internal("a decrypted signing secret is not text"))?;
        if row.secret_key_id != keyring.current_key_id() {
            let sealed = keyring.seal(secret.as_bytes(), secret_context(id).as_bytes())?;
            capability::Entity::update_many()
                .col_expr(
                    capability::Column::SecretCiphertext,
                    Expr::value(sealed.ciphertext),
                )
                .col_expr(capability::Column::SecretKeyId, Expr::value(sealed.key_id))
                .filter(capability::Column::Id.eq(id.uuid()))
                .exec(&self.db)
                .await?;
        }
        Ok(secret)
    }

    async fn row(
        &self,
        scope: TenantScope,
        capability: CapabilityId,
    ) -> Result<Option<capability_subscription::Model>> {
        Ok(capability_subscription::Entity::find_in(scope)
            .filter(capability_subscription::Column::CapabilityId.eq(capability.uuid()))
            .one(&self.db)
            .await?)
    }

    async fn save(
        &self,
        scope: TenantScope,
        active: capability_subscription::ActiveModel,
    ) -> Result<capability_subscription::Model> {
        let id = match &active.id {
            sea_orm::ActiveValue::Set(id) | sea_orm::ActiveValue::Unchanged(id) => *id,
            sea_orm::ActiveValue::NotSet => return Err(Error::internal("subscription id missing")),
        };
        capability_subscription::Entity::update_many_in(scope)
            .set(active)
            .filter(capability_subscription::Column::Id.eq(id))
            .exec_with_returning(&self.db)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::not_found("subscription"))
    }
}

/// Check a definition before anything is stored: names, tools, and every
/// plan with the same integrity check as `publishPlan` (the capability's
/// own partner tools count as registered).
fn check_capability(def: &CapabilityDef, registry: &ToolRegistry) -> Result<()> {
    let mut errors = Vec::new();
    if !valid_key(&def.key, 100) {
        errors.push(format!(
            "capability key `{}` needs 1-100 characters of letters, digits, `_`, `-`, `.`, `:`",
            def.key
        ));
    }
    if def.name.trim().is_empty() || def.name.len() > 255 {
        errors.push("a capability's name needs 1-255 characters".to_owned());
    }
    if def.description.len() > 10_000 {
        errors.push("a capability's description has at most 10000 characters".to_owned());
    }
    if def.limits.max_tasks_per_month == Some(0) {
        errors.push("limits.maxTasksPerMonth must be at least 1 (omit it for no limit)".to_owned());
    }
    let mut tool_keys = HashSet::new();
    for tool in &def.tools {
        let at = format!("tool `{}`", tool.key);
        let name = tool.key.strip_prefix(PARTNER_PREFIX).unwrap_or_default();
        if !valid_key(name, 100) {
            errors.push(format!(
                "{at}: a partner tool's key is `{PARTNER_PREFIX}` and 1-100 characters of letters, digits, `_`, `-`, `.`, `:`"
            ));
        }
        if registry.contains(&tool.key) {
            errors.push(format!("{at}: a built-in tool has this key"));
        }
        if !tool_keys.insert(tool.key.clone()) {
            errors.push(format!("{at}: declared twice"));
        }
        match reqwest::Url::parse(&tool.url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {}
            _ => errors.push(format!("{at}: url must be an http(s) URL")),
        }
        if !(1..=MAX_TOOL_TIMEOUT_MS).contains(&tool.timeout_ms) {
            errors.push(format!(
                "{at}: timeoutMs must be between 1 and {MAX_TOOL_TIMEOUT_MS}"
            ));
        }
        if !tool.input_schema.is_object() {
            errors.push(format!("{at}: inputSchema must be a JSON Schema object"));
        }
        if tool.output_schema.as_ref().is_some_and(|s| !s.is_object()) {
            errors.push(format!("{at}: outputSchema must be a JSON Schema object"));
        }
    }
    let own: Vec<Arc<dyn Tool>> = def
        .tools
        .iter()
        .map(|t| Arc::new(partner::PartnerTool::unsigned(t.clone())) as Arc<dyn Tool>)
        .collect();
    let registry = registry.with_extra(own);
    let mut plan_keys = HashSet::new();
    for plan in &def.plans {
        if !plan_keys.insert(plan.key.clone()) {
            errors.push(format!("plan `{}`: declared twice", plan.key));
        }
        if let Err(e) = plans::check_plan(plan, &registry) {
            errors.push(e.to_string());
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Validation(format!(
            "capability `{}` is invalid: {}",
            def.key,
            errors.join("; ")
        )))
    }
}

/// A plan or tool key belongs to one capability: refuse keys another one
/// already has, naming it.
async fn refuse_foreign_keys<C: ConnectionTrait>(
    db: &C,
    id: CapabilityId,
    def: &CapabilityDef,
) -> Result<()> {
    let plan_keys: Vec<&str> = def.plans.iter().map(|p| p.key.as_str()).collect();
    let taken_plan = capability_plan::Entity::find()
        .filter(capability_plan::Column::Key.is_in(plan_keys))
        .filter(capability_plan::Column::CapabilityId.ne(id.uuid()))
        .one(db)
        .await?;
    let tool_keys: Vec<&str> = def.tools.iter().map(|t| t.key.as_str()).collect();
    let taken_tool = capability_tool::Entity::find()
        .filter(capability_tool::Column::Key.is_in(tool_keys))
        .filter(capability_tool::Column::CapabilityId.ne(id.uuid()))
        .one(db)
        .await?;
    let (what, key, owner) = match (taken_plan, taken_tool) {
        (Some(p), _) => ("plan", p.key, p.capability_id),
        (None, Some(t)) => ("tool", t.key, t.capability_id),
        (None, None) => return Ok(()),
    };
    let owner = capability::Entity::find_by_id(owner)
        .one(db)
        .await?
        .map(|c| c.key)
        .unwrap_or_default();
    Err(Error::Conflict(format!(
        "{what} `{key}` belongs to capability `{owner}`"
    )))
}

fn published_concurrently(err: sea_orm::DbErr, key: &str) -> Error {
    match Error::from(err) {
        Error::Conflict(_) => Error::Conflict(format!(
            "capability `{key}` was published concurrently; publish again"
        )),
        other => other,
    }
}

fn new_signing_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", hex::encode(bytes))
}

/// What a signing secret's ciphertext is bound to.
fn secret_context(id: CapabilityId) -> String {
    format!("brainstem.capability:{id}")
}

fn plan_of(row: capability_plan::Model, capability_key: &str) -> Result<Plan> {
    Ok(Plan {
        id: row.id.into(),
        steps: serde_json::from_value(row.steps).map_err(|e| {
            Error::internal(format!(
                "stored capability plan {} is unreadable: {e}",
                row.key
            ))
        })?,
        patterns: serde_json::from_value(row.patterns).unwrap_or_default(),
        key: row.key,
        version: row.version,
        intent: row.intent,
        description: row.description,
        priority: row.priority,
        created_by: row.created_by,
        created_at: row.created_at,
        capability: Some(capability_key.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::WithBuiltins;

    #[test]
    fn a_trial_past_its_end_counts_as_expired() {
        let now = Utc::now();
        let trial = SubscriptionStatus::Trial;
        assert_eq!(
            effective_status(trial, Some(now + Duration::days(1)), now),
            SubscriptionStatus::Trial
        );
        assert_eq!(
            effective_status(trial, Some(now), now),
            SubscriptionStatus::Expired,
            "the end itself is past"
        );
        assert_eq!(
            effective_status(
                trial,
                Some(now + Duration::days(1)),
                now + Duration::days(2)
            ),
            SubscriptionStatus::Expired
        );
        assert_eq!(
            effective_status(SubscriptionStatus::Active, None, now),
            SubscriptionStatus::Active
        );
        assert!(is_on(SubscriptionStatus::Trial) && is_on(SubscriptionStatus::Active));
        assert!(!is_on(SubscriptionStatus::Cancelled) && !is_on(SubscriptionStatus::Expired));
        for s in [
            SubscriptionStatus::Trial,
            SubscriptionStatus::Active,
            SubscriptionStatus::Cancelled,
            SubscriptionStatus::Expired,
        ] {
            assert_eq!(s.as_str().parse::<SubscriptionStatus>().unwrap(), s);
        }
    }

    fn tool(key: &str) -> PartnerToolDef {
        PartnerToolDef {
            key: key.into(),
            description: "d".into(),
            url: "http://127.0.0.1:9/x".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            timeout_ms: 1000,
        }
    }

    #[test]
    fn a_definition_is_checked_like_a_plan_and_names_each_problem() {
        let registry = ToolRegistry::builder().with_builtins().unwrap().build();
        let step = |tool: &str| -> plans::StepDef {
            serde_json::from_value(json!({"id": "s", "tool": tool})).unwrap()
        };
        let def = CapabilityDef {
            key: "acme.quotes".into(),
            name: "Quotes".into(),
            description: String::new(),
            plans: vec![PlanDef {
                key: "acme.quote".into(),
                intent: "acme.quote".into(),
                description: String::new(),
                priority: 0,
                patterns: vec!["quote".into()],
                steps: vec![step("partner.acme.rate")],
            }],
            tools: vec![tool("partner.acme.rate")],
            limits: Limits::default(),
            rotate_secret: false,
        };
        assert!(
            check_capability(&def, &registry).is_ok(),
            "own partner tools count"
        );
        let mut bad = def.clone();
        bad.tools = vec![tool("acme.rate"), tool("partner.x"), tool("partner.x")];
        bad.tools[1].url = "ftp://x".into();
        bad.plans.push(bad.plans[0].clone());
        bad.limits.max_tasks_per_month = Some(0);
        let err = check_capability(&bad, &registry).unwrap_err().to_string();
        for needle in [
            "tool `acme.rate`: a partner tool's key is `partner.`",
            "tool `partner.x`: url must be an http(s) URL",
            "tool `partner.x`: declared twice",
            "plan `acme.quote`: declared twice",
            "tool `partner.acme.rate` is not registered",
            "maxTasksPerMonth",
        ] {
            assert!(err.contains(needle), "{needle} in {err}");
        }
    }
}
