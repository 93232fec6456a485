//! Catalogue reads for the planner (`crate::catalogue::plans`) and the executor: which
//! plans, intents and partner tools a tenant may use at a given instant,
//! and the monthly task quota of a capability.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use brainstem_entity::{
    PlanId, TenantOwned, TenantScope, capability, capability_plan, capability_subscription,
    capability_tool, task,
};
use chrono::{DateTime, Datelike, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, ExprTrait, PaginatorTrait,
    QueryFilter, QueryOrder,
};

use super::{
    Limits, PARTNER_PREFIX, PartnerToolDef, SubscriptionStatus, effective_status, is_on, partner,
    plan_of,
};
use crate::{
    Error, Result,
    catalogue::{plans::Plan, tool::Tool},
};

pub(super) async fn catalogue_row<C: ConnectionTrait>(
    db: &C,
    key: &str,
) -> Result<Option<capability::Model>> {
    Ok(capability::Entity::find()
        .filter(capability::Column::Key.eq(key))
        .one(db)
        .await?)
}

/// The capabilities the tenant has switched on at `now` (ACTIVE, or TRIAL
/// before its end).
pub(crate) async fn subscribed<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    now: DateTime<Utc>,
) -> Result<Vec<capability::Model>> {
    let subscriptions = capability_subscription::Entity::find_in(scope)
        .filter(capability_subscription::Column::Status.is_in([
            SubscriptionStatus::Active.as_str(),
            SubscriptionStatus::Trial.as_str(),
        ]))
        .all(db)
        .await?;
    let mut ids = Vec::new();
    for s in subscriptions {
        let stored: SubscriptionStatus = s.status.parse()?;
        if is_on(effective_status(stored, s.trial_ends_at, now)) {
            ids.push(s.capability_id);
        }
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(capability::Entity::find()
        .filter(capability::Column::Id.is_in(ids))
        .order_by_asc(capability::Column::Key)
        .all(db)
        .await?)
}

/// The current plans of the capabilities the tenant subscribes to at `now`.
pub(crate) async fn subscribed_plans(
    db: &DatabaseConnection,
    scope: TenantScope,
    now: DateTime<Utc>,
) -> Result<Vec<Plan>> {
    let mut capabilities = subscribed(db, scope, now).await?;
    // An archived capability's plans start nothing new.
    capabilities.retain(|c| c.archived_at.is_none());
    if capabilities.is_empty() {
        return Ok(Vec::new());
    }
    let mut condition = sea_orm::Condition::any();
    for c in &capabilities {
        condition = condition.add(
            capability_plan::Column::CapabilityId
                .eq(c.id)
                .and(capability_plan::Column::Version.eq(c.version)),
        );
    }
    let key_of: HashMap<uuid::Uuid, &str> = capabilities
        .iter()
        .map(|c| (c.id, c.key.as_str()))
        .collect();
    capability_plan::Entity::find()
        .filter(condition)
        .order_by_asc(capability_plan::Column::Key)
        .all(db)
        .await?
        .into_iter()
        .map(|row| {
            let key = key_of.get(&row.capability_id).copied().unwrap_or_default();
            plan_of(row, key)
        })
        .collect()
}

/// The first instant of `now`'s calendar month (UTC) and of the next one.
fn month_of(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let first = now
        .date_naive()
        .with_day(1)
        .unwrap_or_else(|| now.date_naive());
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(first);
    let at_midnight = |d: chrono::NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
    (at_midnight(first), at_midnight(next))
}

/// Refuse a task on a capability's plan when the tenant has started the
/// capability's `max_tasks_per_month` already this calendar month (UTC):
/// `RateLimited`, naming the capability and the limit, until the month ends.
/// Tasks count once they name one of the capability's plans (at start, or
/// when planning picks it).
pub(crate) async fn check_quota(
    db: &DatabaseConnection,
    scope: TenantScope,
    plan: &Plan,
    now: DateTime<Utc>,
) -> Result<()> {
    let Some(key) = &plan.capability else {
        return Ok(());
    };
    let Some(capability) = catalogue_row(db, key).await? else {
        return Ok(());
    };
    let Some(limit) = Limits::from_json(&capability.limits).max_tasks_per_month else {
        return Ok(());
    };
    let plan_ids: Vec<uuid::Uuid> = capability_plan::Entity::find()
        .filter(capability_plan::Column::CapabilityId.eq(capability.id))
        .all(db)
        .await?
        .into_iter()
        .map(|p| p.id)
        .collect();
    let (month, next) = month_of(now);
    let started = task::Entity::find_in(scope)
        .filter(task::Column::PlanId.is_in(plan_ids))
        .filter(task::Column::CreatedAt.gte(month))
        .count(db)
        .await?;
    if started < u64::from(limit) {
        return Ok(());
    }
    Err(Error::RateLimited {
        message: format!(
            "quota exceeded: capability `{}` allows {limit} tasks per month and this tenant has started {started}; it resets at {}",
            capability.key,
            next.to_rfc3339()
        ),
        retry_after_secs: u64::try_from((next - now).num_seconds()).unwrap_or(0),
    })
}

/// Why a tenant may not use something a capability brings.
fn not_subscribed(what: &str, capability: &capability::Model) -> Error {
    Error::forbidden(format!(
        "{what} belongs to capability `{}` (\"{}\"), which this tenant does not subscribe to; subscribe to it first (subscribeCapability)",
        capability.key, capability.name
    ))
}

/// The current plan `key` of whichever capability owns it, with the
/// capability; `Forbidden` naming the capability unless the tenant
/// subscribes to it at `now`. `None` when no capability has the key.
pub(crate) async fn plan_for_tenant(
    db: &DatabaseConnection,
    scope: TenantScope,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Option<Plan>> {
    let Some(latest) = capability_plan::Entity::find()
        .filter(capability_plan::Column::Key.eq(key))
        .order_by_desc(capability_plan::Column::Version)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let Some(owner) = capability::Entity::find_by_id(latest.capability_id)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    if !subscribed(db, scope, now)
        .await?
        .iter()
        .any(|c| c.id == owner.id)
    {
        return Err(not_subscribed(&format!("plan `{key}`"), &owner));
    }
    if owner.archived_at.is_some() {
        return Err(Error::validation(format!(
            "plan `{key}` belongs to capability `{}`, which is archived",
            owner.key
        )));
    }
    // The capability may have dropped the plan in its current version.
    let current = capability_plan::Entity::find()
        .filter(capability_plan::Column::Key.eq(key))
        .filter(capability_plan::Column::CapabilityId.eq(owner.id))
        .filter(capability_plan::Column::Version.eq(owner.version))
        .one(db)
        .await?;
    current.map(|row| plan_of(row, &owner.key)).transpose()
}

/// A capability plan by id (a version a task named), if the tenant still
/// subscribes to its capability at `now`; `None` when no such row exists.
pub(crate) async fn plan_by_id_for_tenant<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: PlanId,
    now: DateTime<Utc>,
) -> Result<Option<Plan>> {
    let Some((plan, owner)) = plan_by_id(db, id).await? else {
        return Ok(None);
    };
    if !subscribed(db, scope, now)
        .await?
        .iter()
        .any(|c| c.id == owner.id)
    {
        return Err(not_subscribed(&format!("plan `{}`", plan.key), &owner));
    }
    Ok(Some(plan))
}

/// One version of a capability's plan by key, if the tenant still
/// subscribes to its capability at `now`; `None` when no such version
/// exists.
pub(crate) async fn plan_version_for_tenant(
    db: &DatabaseConnection,
    scope: TenantScope,
    key: &str,
    version: i32,
    now: DateTime<Utc>,
) -> Result<Option<Plan>> {
    let Some(row) = capability_plan::Entity::find()
        .filter(capability_plan::Column::Key.eq(key))
        .filter(capability_plan::Column::Version.eq(version))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    plan_by_id_for_tenant(db, scope, row.id.into(), now).await
}

/// A capability plan by id, with its capability (the catalogue is public).
pub(crate) async fn plan_by_id<C: ConnectionTrait>(
    db: &C,
    id: PlanId,
) -> Result<Option<(Plan, capability::Model)>> {
    let Some(row) = capability_plan::Entity::find_by_id(id.uuid())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let Some(owner) = capability::Entity::find_by_id(row.capability_id)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some((plan_of(row, &owner.key)?, owner)))
}

/// `Forbidden` naming the capability when `intent` is brought only by
/// capabilities the tenant does not subscribe to.
pub(crate) async fn check_intent(
    db: &DatabaseConnection,
    scope: TenantScope,
    intent: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let rows = capability_plan::Entity::find()
        .filter(capability_plan::Column::Intent.eq(intent))
        .all(db)
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let subscribed = subscribed(db, scope, now).await?;
    let mut owners: Vec<uuid::Uuid> = Vec::new();
    for row in rows {
        let Some(owner) = subscribed.iter().find(|c| c.id == row.capability_id) else {
            owners.push(row.capability_id);
            continue;
        };
        if owner.version == row.version {
            return Ok(());
        }
    }
    let Some(first) = owners.first() else {
        return Ok(());
    };
    match capability::Entity::find_by_id(*first).one(db).await? {
        Some(owner) => Err(not_subscribed(&format!("intent `{intent}`"), &owner)),
        None => Ok(()),
    }
}

/// The partner tools named `keys`, as tools. With a tenant scope, a tool of
/// a capability the tenant does not subscribe to at `now` is `Forbidden`
/// naming the capability; without one (platform checks), every catalogue
/// tool resolves. Unknown keys are left out.
pub(crate) async fn partner_tools(
    db: &DatabaseConnection,
    scope: Option<TenantScope>,
    keys: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<Arc<dyn Tool>>> {
    let keys: Vec<&str> = keys
        .iter()
        .filter(|k| k.starts_with(PARTNER_PREFIX))
        .map(String::as_str)
        .collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = capability_tool::Entity::find()
        .filter(capability_tool::Column::Key.is_in(keys))
        .all(db)
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let owners = capability::Entity::find()
        .filter(capability::Column::Id.is_in(rows.iter().map(|r| r.capability_id)))
        .all(db)
        .await?;
    let allowed: Option<HashSet<uuid::Uuid>> = match scope {
        Some(scope) => Some(
            subscribed(db, scope, now)
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect(),
        ),
        None => None,
    };
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for row in rows {
        let Some(owner) = owners.iter().find(|c| c.id == row.capability_id) else {
            continue;
        };
        if let Some(allowed) = &allowed
            && !allowed.contains(&owner.id)
        {
            return Err(not_subscribed(&format!("tool `{}`", row.key), owner));
        }
        tools.push(Arc::new(partner::PartnerTool::new(
            PartnerToolDef::from(row),
            owner.id.into(),
            owner.key.clone(),
        )));
    }
    Ok(tools)
}

/// The partner tools of every capability the scope's tenant subscribes to
/// at `now`, by key.
pub(crate) async fn subscribed_tools(
    db: &DatabaseConnection,
    scope: TenantScope,
    now: DateTime<Utc>,
) -> Result<Vec<Arc<dyn Tool>>> {
    let owners = subscribed(db, scope, now).await?;
    if owners.is_empty() {
        return Ok(Vec::new());
    }
    let rows = capability_tool::Entity::find()
        .filter(capability_tool::Column::CapabilityId.is_in(owners.iter().map(|c| c.id)))
        .order_by_asc(capability_tool::Column::Key)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let owner = owners.iter().find(|c| c.id == row.capability_id)?;
            let tool: Arc<dyn Tool> = Arc::new(partner::PartnerTool::new(
                PartnerToolDef::from(row),
                owner.id.into(),
                owner.key.clone(),
            ));
            Some(tool)
        })
        .collect())
}

/// Every partner tool of the catalogue (for the startup check).
pub(crate) async fn all_partner_tools(db: &DatabaseConnection) -> Result<Vec<Arc<dyn Tool>>> {
    let keys: Vec<String> = capability_tool::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|t| t.key)
        .collect();
    partner_tools(db, None, &keys, Utc::now()).await
}

/// The current plans of every capability (for the startup check).
pub(crate) async fn all_current_plans(db: &DatabaseConnection) -> Result<Vec<Plan>> {
    let capabilities = capability::Entity::find().all(db).await?;
    let mut out = Vec::new();
    for c in capabilities {
        let rows = capability_plan::Entity::find()
            .filter(capability_plan::Column::CapabilityId.eq(c.id))
            .filter(capability_plan::Column::Version.eq(c.version))
            .all(db)
            .await?;
        for row in rows {
            out.push(plan_of(row, &c.key)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_count_calendar_months_in_utc() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(
            month_of(at("2026-11-21T14:00:00Z")),
            (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            month_of(at("2026-12-31T23:59:59Z")),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
    }
}
