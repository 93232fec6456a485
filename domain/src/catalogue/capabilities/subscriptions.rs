//! Subscriptions: a tenant's subscription to a capability (one per tenant
//! and capability), its status, and the operations a tenant admin asks for
//! (subscribe, cancel) or the maintenance pass runs (expire trials).
//!
//! A subscription is `TRIAL` (until its end), `ACTIVE`, `CANCELLED` or
//! `EXPIRED`. A trial past its end *is* expired: [`effective_status`]
//! computes the status with an explicit `now` wherever a subscription is
//! read, and [`Capabilities::expire_trials`] stores it. A tenant gets one
//! trial per capability. Subscribing and cancelling are audited.

use std::{fmt, str::FromStr};

use brainstem_entity::{
    CapabilityId, SubscriptionId, TenantId, TenantOwned, TenantScope, capability_subscription,
};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr,
};
use serde_json::json;

use super::{Capabilities, MAX_TRIAL_DAYS};
use crate::{
    Error, Principal, Result,
    kernel::{
        audit::{self, AuditEntry},
        page::{self, Page, PageRequest},
        row_security::{Bypass, as_platform},
    },
};

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

impl Capabilities {
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
        if capability.archived_at.is_some() {
            return Err(Error::validation(format!(
                "capability `{capability_key}` is archived and takes no new subscription"
            )));
        }
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
        let ended = capability_subscription::Entity::update_many()
            .col_expr(
                capability_subscription::Column::Status,
                Expr::value(SubscriptionStatus::Expired.as_str()),
            )
            .col_expr(capability_subscription::Column::UpdatedAt, Expr::value(now))
            .filter(capability_subscription::Column::Status.eq(SubscriptionStatus::Trial.as_str()))
            .filter(capability_subscription::Column::TrialEndsAt.lte(now))
            .exec(&self.db);
        let result = as_platform(Bypass::Maintenance, ended).await?;
        if result.rows_affected > 0 {
            tracing::info!(expired = result.rows_affected, "expired ended trials");
        }
        Ok(result.rows_affected)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
