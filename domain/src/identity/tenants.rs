//! Tenants: creating them (platform admins only), reading one's own, and
//! resolving the `tenant` claim of a credential.
//!
//! Invariant: a tenant is never renamed or deleted, so a claim once
//! resolved resolves the same for the life of the process; resolved claims
//! are kept in memory (at most [`RESOLVED_CLAIMS`]), and a request
//! authenticated by a token costs no statement for its tenant. A claim that
//! names no tenant is not kept: a tenant created later is found.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use brainstem_entity::{TenantId, TenantScope, tenant};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait,
    PaginatorTrait, QueryFilter,
};
use uuid::Uuid;

use crate::{
    Error, PlatformScope, Result,
    kernel::page::{self, Page, PageRequest},
};

/// A tenant's URL-safe name: 2–63 characters of `a-z`, `0-9` and `-`,
/// starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slug(String);

impl Slug {
    pub fn parse(raw: &str) -> Result<Self> {
        let ok_len = (2..=63).contains(&raw.len());
        let ok_chars = raw
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let ok_start = raw
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if ok_len && ok_chars && ok_start {
            Ok(Self(raw.to_owned()))
        } else {
            Err(Error::validation(format!(
                "invalid tenant slug `{raw}`: use 2-63 characters a-z, 0-9 and -, starting with a letter or digit"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

impl From<tenant::Model> for Tenant {
    fn from(m: tenant::Model) -> Self {
        Self {
            id: m.id.into(),
            slug: m.slug,
            name: m.name,
            created_at: m.created_at,
        }
    }
}

/// How many resolved claims are kept; past it, the map starts over.
pub const RESOLVED_CLAIMS: usize = 10_000;

#[derive(Clone)]
pub struct Tenants {
    db: DatabaseConnection,
    /// Claims resolved so far (slug or id) and their tenant.
    resolved: Arc<RwLock<HashMap<String, Tenant>>>,
}

impl Tenants {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            db,
            resolved: Arc::default(),
        }
    }

    /// Create a tenant (platform admins, through an audited scope).
    pub async fn create(&self, _scope: &PlatformScope, slug: &str, name: &str) -> Result<Tenant> {
        self.insert(Slug::parse(slug)?, name).await
    }

    async fn insert(&self, slug: Slug, name: &str) -> Result<Tenant> {
        let name = name.trim();
        if name.is_empty() || name.len() > 200 {
            return Err(Error::validation("tenant name must have 1-200 characters"));
        }
        let model = tenant::ActiveModel {
            id: Set(TenantId::new().uuid()),
            slug: Set(slug.as_str().to_owned()),
            name: Set(name.to_owned()),
            created_at: Set(Utc::now()),
        }
        .insert(&self.db)
        .await
        .map_err(|err| match Error::from(err) {
            Error::Conflict(_) => {
                Error::Conflict(format!("a tenant with slug `{}` exists", slug.as_str()))
            }
            other => other,
        })?;
        Ok(model.into())
    }

    /// Every tenant (platform admins, through an audited scope).
    pub async fn list(&self, _scope: &PlatformScope, request: PageRequest) -> Result<Page<Tenant>> {
        let page = page::fetch(
            &self.db,
            tenant::Entity::find(),
            tenant::Column::Id,
            request,
        )
        .await?;
        Ok(page.map(Tenant::from))
    }

    /// Any tenant by id (platform admins, through an audited scope).
    pub async fn get_any(&self, _scope: &PlatformScope, id: TenantId) -> Result<Tenant> {
        self.by_id(id).await
    }

    /// The scope's own tenant.
    pub async fn get(&self, scope: TenantScope) -> Result<Tenant> {
        self.by_id(scope.tenant_id()).await
    }

    async fn by_id(&self, id: TenantId) -> Result<Tenant> {
        tenant::Entity::find_by_id(id.uuid())
            .one(&self.db)
            .await?
            .map(Tenant::from)
            .ok_or_else(|| Error::not_found("tenant"))
    }

    /// Resolve a credential's `tenant` claim, a tenant id or slug. Used only
    /// while authenticating; an unknown tenant means the credential is bad.
    pub async fn resolve_claim(&self, claim: &str) -> Result<Tenant> {
        if let Ok(resolved) = self.resolved.read()
            && let Some(tenant) = resolved.get(claim)
        {
            return Ok(tenant.clone());
        }
        let found = match Uuid::parse_str(claim) {
            Ok(id) => tenant::Entity::find_by_id(id).one(&self.db).await?,
            Err(_) => {
                tenant::Entity::find()
                    .filter(tenant::Column::Slug.eq(claim))
                    .one(&self.db)
                    .await?
            }
        };
        let tenant = found
            .map(Tenant::from)
            .ok_or_else(|| Error::Unauthenticated(format!("unknown tenant `{claim}`")))?;
        if let Ok(mut resolved) = self.resolved.write() {
            if resolved.len() >= RESOLVED_CLAIMS {
                resolved.clear();
            }
            resolved.insert(claim.to_owned(), tenant.clone());
        }
        Ok(tenant)
    }

    /// On a store with no tenants at all, create the `demo` tenant so that a
    /// first `cargo run` has something to log in to. Returns it if created.
    pub async fn ensure_demo(&self) -> Result<Option<Tenant>> {
        if tenant::Entity::find().count(&self.db).await? > 0 {
            return Ok(None);
        }
        match self.insert(Slug::parse("demo")?, "Demo").await {
            Ok(t) => Ok(Some(t)),
            // Another process won the race; fine.
            Err(Error::Conflict(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_parsed_not_trusted() {
        assert!(Slug::parse("demo").is_ok());
        assert!(Slug::parse("acme-42").is_ok());
        for bad in ["", "a", "-x", "Acme", "a b", "ü1", &"x".repeat(64)] {
            assert!(Slug::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
