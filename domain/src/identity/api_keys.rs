//! Partner API keys. The secret is shown once, at creation; only its SHA-256
//! is stored. A key belongs to one tenant, carries scopes, and can be revoked.
//!
//! Secrets look like `bsk_<64 hex>`: 256 random bits, so a plain SHA-256
//! (not a slow password hash) is enough to make a leaked table useless.

use std::collections::BTreeSet;

use brainstem_entity::{ApiKeyId, TenantId, TenantOwned, TenantScope, api_key};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter,
    sea_query::Expr,
};
use serde_json::json;

use super::revocations::{Revocations, Revoked};
use crate::{
    Error, Principal, Result,
    kernel::{
        audit::{self, AuditEntry, sha256_hex},
        page::{self, Page, PageRequest},
        rate_limit::Rate,
        row_security::{Bypass, as_platform, as_tenant},
    },
};

/// Every secret starts with this, so credentials are recognisable in logs
/// and secret scanners.
pub const SECRET_PREFIX: &str = "bsk_";

/// The scopes a key can hold.
pub const SCOPES: &[&str] = &[
    "tasks:read",
    "tasks:write",
    "memory:read",
    "memory:write",
    "reviews:write",
    "admin",
];

/// How often `last_used_at` is refreshed, so authentication is not a write
/// per request.
const LAST_USED_GRANULARITY: Duration = Duration::seconds(60);

#[derive(Clone, Debug, PartialEq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub tenant: TenantId,
    pub name: String,
    pub prefix: String,
    pub scopes: BTreeSet<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    /// The key's own rate limit; `None` uses the configured default.
    pub rate_limit: Option<Rate>,
}

impl From<api_key::Model> for ApiKey {
    fn from(m: api_key::Model) -> Self {
        let scopes = m
            .scopes
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            id: m.id.into(),
            tenant: m.tenant_id.into(),
            name: m.name,
            prefix: m.prefix,
            scopes,
            created_by: m.created_by,
            created_at: m.created_at,
            revoked_at: m.revoked_at,
            last_used_at: m.last_used_at,
            rate_limit: m.rate_limit_per_second.map(|per_second| {
                Rate::new(
                    per_second,
                    m.rate_limit_burst
                        .and_then(|b| u32::try_from(b).ok())
                        .unwrap_or(0),
                )
            }),
        }
    }
}

/// A new key with its secret, which is never available again.
#[derive(Debug)]
pub struct CreatedApiKey {
    pub key: ApiKey,
    pub secret: String,
}

/// Parse requested scopes, refusing unknown ones and empty sets.
pub fn parse_scopes(raw: &[String]) -> Result<BTreeSet<String>> {
    if raw.is_empty() {
        return Err(Error::validation(format!(
            "an API key needs at least one scope; known scopes: {}",
            SCOPES.join(", ")
        )));
    }
    raw.iter()
        .map(|s| {
            if SCOPES.contains(&s.as_str()) {
                Ok(s.clone())
            } else {
                Err(Error::validation(format!(
                    "unknown scope `{s}`; known scopes: {}",
                    SCOPES.join(", ")
                )))
            }
        })
        .collect()
}

#[derive(Clone)]
pub struct ApiKeys {
    db: DatabaseConnection,
    revocations: Revocations,
}

impl ApiKeys {
    /// Keys in `db`; revoking one announces it through `revocations`.
    pub fn new(db: DatabaseConnection, revocations: Revocations) -> Self {
        Self { db, revocations }
    }

    /// Create a key in the principal's tenant (tenant admins only).
    pub async fn create(
        &self,
        principal: &Principal,
        name: &str,
        scopes: &[String],
    ) -> Result<CreatedApiKey> {
        let scope = principal.require_tenant_admin()?;
        let name = name.trim();
        if name.is_empty() || name.len() > 100 {
            return Err(Error::validation("API key name must have 1-100 characters"));
        }
        let scopes = parse_scopes(scopes)?;
        let secret = crate::kernel::crypto::random_secret(SECRET_PREFIX);
        let id = ApiKeyId::new();
        let model = api_key::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            name: Set(name.to_owned()),
            prefix: Set(secret.chars().take(SECRET_PREFIX.len() + 8).collect()),
            secret_hash: Set(sha256_hex(secret.as_bytes())),
            scopes: Set(json!(scopes)),
            created_by: Set(principal.actor.to_string()),
            created_at: Set(Utc::now()),
            revoked_at: Set(None),
            last_used_at: Set(None),
            rate_limit_per_second: Set(None),
            rate_limit_burst: Set(None),
        }
        .insert(&self.db)
        .await?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "api_key.create".into(),
                target: id.to_string(),
                data: json!({"name": name, "scopes": scopes}),
            },
        )
        .await?;
        Ok(CreatedApiKey {
            key: model.into(),
            secret,
        })
    }

    /// The tenant's keys, oldest first (revoked ones included).
    pub async fn list(&self, scope: TenantScope, request: PageRequest) -> Result<Page<ApiKey>> {
        let page = page::fetch(
            &self.db,
            api_key::Entity::find_in(scope),
            api_key::Column::Id,
            request,
        )
        .await?;
        Ok(page.map(ApiKey::from))
    }

    /// One key of the scope's tenant.
    pub async fn get(&self, scope: TenantScope, id: ApiKeyId) -> Result<ApiKey> {
        api_key::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .map(ApiKey::from)
            .ok_or_else(|| Error::not_found("API key"))
    }

    /// Revoke a key of the principal's tenant (tenant admins only). Revoking
    /// a revoked key changes nothing.
    pub async fn revoke(&self, principal: &Principal, id: ApiKeyId) -> Result<ApiKey> {
        let scope = principal.require_tenant_admin()?;
        let key = self.get(scope, id).await?;
        if key.revoked_at.is_some() {
            return Ok(key);
        }
        let now = Utc::now();
        api_key::Entity::update_many_in(scope)
            .col_expr(api_key::Column::RevokedAt, Expr::value(now))
            .filter(api_key::Column::Id.eq(id.uuid()))
            .filter(api_key::Column::RevokedAt.is_null())
            .exec(&self.db)
            .await?;
        // Committed: every process's connections holding the key stop.
        self.revocations
            .announce(&self.db, Revoked::ApiKey(id))
            .await;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "api_key.revoke".into(),
                target: id.to_string(),
                data: json!({}),
            },
        )
        .await?;
        self.get(scope, id).await
    }

    /// Whether key `id` of the scope's tenant still exists unrevoked: the
    /// per-operation check of a connection that authenticated with it once.
    pub async fn is_live(&self, scope: TenantScope, id: ApiKeyId) -> Result<bool> {
        let found = api_key::Entity::find_by_id_in(scope, id.uuid())
            .filter(api_key::Column::RevokedAt.is_null())
            .one(&self.db);
        Ok(as_tenant(scope.tenant_id(), found).await?.is_some())
    }

    /// Give a key of the principal's tenant its own rate limit, or (with
    /// `None`) return it to the configured default. Tenant admins only.
    pub async fn set_rate_limit(
        &self,
        principal: &Principal,
        id: ApiKeyId,
        rate: Option<Rate>,
    ) -> Result<ApiKey> {
        let scope = principal.require_tenant_admin()?;
        if let Some(rate) = rate
            && !(rate.per_second.is_finite() && rate.per_second >= 0.0)
        {
            return Err(Error::validation(
                "a rate must be a finite number of requests per second, 0 or more (0: unlimited)",
            ));
        }
        let burst = rate
            .map(|r| i32::try_from(r.burst))
            .transpose()
            .map_err(|_| Error::validation("the burst is too large"))?;
        self.get(scope, id).await?;
        api_key::Entity::update_many_in(scope)
            .col_expr(
                api_key::Column::RateLimitPerSecond,
                Expr::value(rate.map(|r| r.per_second)),
            )
            .col_expr(api_key::Column::RateLimitBurst, Expr::value(burst))
            .filter(api_key::Column::Id.eq(id.uuid()))
            .exec(&self.db)
            .await?;
        audit::record(
            &self.db,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "api_key.rate_limit".into(),
                target: id.to_string(),
                data: json!({
                    "per_second": rate.map(|r| r.per_second),
                    "burst": rate.map(|r| r.burst),
                }),
            },
        )
        .await?;
        self.get(scope, id).await
    }

    /// Find the live key for a presented secret. This is the one lookup not
    /// scoped by tenant: the secret itself says which tenant it belongs to.
    pub async fn authenticate(&self, secret: &str) -> Result<ApiKey> {
        let invalid = || Error::Unauthenticated("invalid API key".into());
        if !secret.starts_with(SECRET_PREFIX) {
            return Err(invalid());
        }
        // unscoped: the secret names its tenant; nothing else is readable by it.
        let lookup = api_key::Entity::find()
            .filter(api_key::Column::SecretHash.eq(sha256_hex(secret.as_bytes())))
            .one(&self.db);
        let model = as_platform(Bypass::Authentication, lookup)
            .await?
            .ok_or_else(invalid)?;
        let key = ApiKey::from(model);
        if key.revoked_at.is_some() {
            return Err(Error::Unauthenticated(
                "this API key has been revoked".into(),
            ));
        }
        let now = Utc::now();
        if key
            .last_used_at
            .is_none_or(|t| now - t > LAST_USED_GRANULARITY)
        {
            let touch = api_key::Entity::update_many_in(TenantScope::new(key.tenant))
                .col_expr(api_key::Column::LastUsedAt, Expr::value(now))
                .filter(api_key::Column::Id.eq(key.id.uuid()))
                .exec(&self.db);
            as_tenant(key.tenant, touch).await?;
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_must_be_known_and_present() {
        assert!(parse_scopes(&[]).is_err());
        assert!(parse_scopes(&["tasks:read".into(), "nope".into()]).is_err());
        let ok = parse_scopes(&["admin".into(), "tasks:read".into(), "admin".into()]).unwrap();
        assert_eq!(ok.len(), 2);
    }
}
