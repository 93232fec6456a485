//! Who is calling and who they may be: the viewer, tenants and API keys
//! (with their own rate limits). `viewer` needs only a signed-in caller;
//! keys are the tenant admin's, the tenant list the platform admin's
//! (audited). Every mutation takes one `input` object and returns a payload
//! object.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject, connection::Connection};
use brainstem_domain::{
    Actor, ApiKeyId, Error, Principal, Role as DomainRole, TenantId,
    api_keys::ApiKey as DomainApiKey, rate_limit::Rate, tenants::Tenant as DomainTenant,
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    context::{CallerExpiry, domain, principal},
    ids::{self, NodeType, encode},
    page::{connection, page_request},
};
use crate::error::ResultExt;

/// A role a caller holds.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    PlatformAdmin,
    TenantAdmin,
    Member,
    /// Decides reviews and approves plans.
    Reviewer,
    Service,
}

impl From<DomainRole> for Role {
    fn from(r: DomainRole) -> Self {
        match r {
            DomainRole::PlatformAdmin => Role::PlatformAdmin,
            DomainRole::TenantAdmin => Role::TenantAdmin,
            DomainRole::Member => Role::Member,
            DomainRole::Reviewer => Role::Reviewer,
            DomainRole::Service => Role::Service,
        }
    }
}

/// How the caller authenticated.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    /// A bearer token (JWT).
    Token,
    /// A partner API key.
    ApiKey,
    /// An inbound hook (`/hooks/{tenant}/{source}`).
    Hook,
}

/// The caller of this request.
#[derive(SimpleObject)]
pub struct Viewer {
    /// The token's subject, or `api_key:<id>` for API keys.
    pub subject: String,
    pub credential: CredentialKind,
    pub roles: Vec<Role>,
    /// API-key scopes; empty for bearer tokens.
    pub scopes: Vec<String>,
    /// The caller's tenant; `null` for a platform admin without one.
    pub tenant: Option<Tenant>,
    /// When the bearer token expires; `null` for API keys.
    pub expires_at: Option<DateTime<Utc>>,
}

impl Viewer {
    pub fn subject_of(actor: &Actor) -> (String, CredentialKind) {
        match actor {
            Actor::User(sub) => (sub.clone(), CredentialKind::Token),
            Actor::ApiKey(_) => (actor.to_string(), CredentialKind::ApiKey),
            Actor::Hook(_) => (actor.to_string(), CredentialKind::Hook),
        }
    }
}

/// A tenant: the unit of isolation. Everything else belongs to one.
#[derive(Clone, Debug)]
pub struct Tenant(pub DomainTenant);

#[Object]
impl Tenant {
    pub async fn id(&self) -> ID {
        encode(NodeType::Tenant, self.0.id.uuid())
    }

    /// URL-safe unique name.
    async fn slug(&self) -> &str {
        &self.0.slug
    }

    async fn name(&self) -> &str {
        &self.0.name
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// A partner API key. The secret itself is shown only once, on creation.
#[derive(Clone, Debug)]
pub struct ApiKey(pub DomainApiKey);

#[Object]
impl ApiKey {
    pub async fn id(&self) -> ID {
        encode(NodeType::ApiKey, self.0.id.uuid())
    }

    async fn name(&self) -> &str {
        &self.0.name
    }

    /// The first characters of the secret, to tell keys apart.
    async fn prefix(&self) -> &str {
        &self.0.prefix
    }

    async fn scopes(&self) -> Vec<String> {
        self.0.scopes.iter().cloned().collect()
    }

    /// Who created it (`user:<sub>` or `api_key:<id>`).
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    async fn revoked_at(&self) -> Option<DateTime<Utc>> {
        self.0.revoked_at
    }

    async fn last_used_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_used_at
    }

    async fn revoked(&self) -> bool {
        self.0.revoked_at.is_some()
    }

    /// The key's own rate limit; `null` when it uses the configured default.
    async fn rate_limit(&self) -> Option<RateLimit> {
        self.0.rate_limit.map(RateLimit::from)
    }
}

/// A request rate: `perSecond` sustained, `burst` at once.
#[derive(SimpleObject, InputObject, Clone, Copy, Debug)]
#[graphql(input_name = "RateLimitInput")]
pub struct RateLimit {
    /// Requests per second; 0 means unlimited.
    pub per_second: f64,
    /// How many requests may arrive at once.
    pub burst: u32,
}

impl From<Rate> for RateLimit {
    fn from(r: Rate) -> Self {
        Self {
            per_second: r.per_second,
            burst: r.burst,
        }
    }
}

#[derive(Default)]
pub struct ViewerQuery;

#[Object]
impl ViewerQuery {
    /// The caller: who they are and which tenant they act in.
    async fn viewer(&self, ctx: &Context<'_>) -> async_graphql::Result<Viewer> {
        let principal = principal(ctx)?;
        let tenant = match principal.tenant {
            Some(t) => Some(Tenant(
                domain(ctx)
                    .tenants
                    .get(brainstem_domain::TenantScope::new(t))
                    .await
                    .gql()?,
            )),
            None => None,
        };
        let (subject, credential) = Viewer::subject_of(&principal.actor);
        let expires_at = ctx.data_opt::<CallerExpiry>().and_then(|e| e.0);
        Ok(Viewer {
            subject,
            credential,
            roles: principal.roles.iter().map(|r| (*r).into()).collect(),
            scopes: principal.scopes.iter().cloned().collect(),
            tenant,
            expires_at,
        })
    }
}

#[derive(Default)]
pub struct IdentityQuery;

#[Object]
impl IdentityQuery {
    /// The API keys of the caller's tenant (tenant admins and API keys with
    /// the `admin` scope).
    async fn api_keys(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Connection<String, ApiKey>> {
        let principal = principal(ctx)?;
        let scope = principal.require_tenant_admin().gql()?;
        let page = domain(ctx)
            .api_keys
            .list(scope, page_request(first, after, last, before)?)
            .await
            .gql()?;
        Ok(connection(page, |k| k.id.uuid(), ApiKey))
    }

    /// Every tenant (platform admins; each use is audited).
    async fn tenants(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> async_graphql::Result<Connection<String, Tenant>> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let request = page_request(first, after, last, before)?;
        let scope = domain
            .audit
            .open_platform_scope(principal, "tenant.list", "tenants", None)
            .await
            .gql()?;
        let page = domain.tenants.list(&scope, request).await.gql()?;
        Ok(connection(page, |t| t.id.uuid(), Tenant))
    }
}

#[derive(Default)]
pub struct IdentityMutation;

#[derive(InputObject)]
pub struct CreateApiKeyInput {
    /// A label, 1–100 characters.
    pub name: String,
    /// At least one of `tasks:read`, `tasks:write`, `memory:read`,
    /// `memory:write`, `admin`.
    pub scopes: Vec<String>,
}

#[derive(SimpleObject)]
pub struct CreateApiKeyPayload {
    pub api_key: ApiKey,
    /// The secret. It is shown this once and cannot be retrieved again.
    pub secret: String,
}

#[derive(InputObject)]
pub struct RevokeApiKeyInput {
    pub id: ID,
}

#[derive(SimpleObject)]
pub struct RevokeApiKeyPayload {
    pub api_key: ApiKey,
}

#[derive(InputObject)]
pub struct CreateTenantInput {
    /// URL-safe unique name: 2–63 characters of a-z, 0-9 and `-`.
    pub slug: String,
    pub name: String,
}

#[derive(SimpleObject)]
pub struct CreateTenantPayload {
    pub tenant: Tenant,
}

#[Object]
impl IdentityMutation {
    /// Create an API key in the caller's tenant (tenant admins).
    async fn create_api_key(
        &self,
        ctx: &Context<'_>,
        input: CreateApiKeyInput,
    ) -> async_graphql::Result<CreateApiKeyPayload> {
        let principal = principal(ctx)?;
        let created = domain(ctx)
            .api_keys
            .create(principal, &input.name, &input.scopes)
            .await
            .gql()?;
        Ok(CreateApiKeyPayload {
            api_key: ApiKey(created.key),
            secret: created.secret,
        })
    }

    /// Revoke an API key of the caller's tenant; it stops working at once.
    async fn revoke_api_key(
        &self,
        ctx: &Context<'_>,
        input: RevokeApiKeyInput,
    ) -> async_graphql::Result<RevokeApiKeyPayload> {
        let principal = principal(ctx)?;
        let id = ids::decode_as(&input.id, NodeType::ApiKey).gql()?;
        let key = domain(ctx)
            .api_keys
            .revoke(principal, ApiKeyId::from(id))
            .await
            .gql()?;
        Ok(RevokeApiKeyPayload {
            api_key: ApiKey(key),
        })
    }

    /// Create a tenant (platform admins; audited).
    async fn create_tenant(
        &self,
        ctx: &Context<'_>,
        input: CreateTenantInput,
    ) -> async_graphql::Result<CreateTenantPayload> {
        let principal = principal(ctx)?;
        let domain = domain(ctx);
        let scope = domain
            .audit
            .open_platform_scope(principal, "tenant.create", &input.slug, None)
            .await
            .gql()?;
        let tenant = domain
            .tenants
            .create(&scope, &input.slug, &input.name)
            .await
            .gql()?;
        Ok(CreateTenantPayload {
            tenant: Tenant(tenant),
        })
    }
}

/// A tenant by id: the caller's own, or any for a platform admin (audited).
pub(super) async fn tenant_node(
    ctx: &Context<'_>,
    principal: &Principal,
    uuid: Uuid,
) -> async_graphql::Result<Tenant> {
    let domain = domain(ctx);
    let tenant_id = TenantId::from(uuid);
    if principal.tenant == Some(tenant_id) {
        let scope = principal.tenant_scope().gql()?;
        Ok(Tenant(domain.tenants.get(scope).await.gql()?))
    } else if principal.is_platform_admin() {
        let scope = domain
            .audit
            .open_platform_scope(principal, "tenant.read", &uuid.to_string(), Some(tenant_id))
            .await
            .gql()?;
        Ok(Tenant(
            domain.tenants.get_any(&scope, tenant_id).await.gql()?,
        ))
    } else {
        Err(Error::not_found("tenant")).gql()
    }
}

/// An API key of the caller's tenant (tenant admins).
pub(super) async fn api_key_node(
    ctx: &Context<'_>,
    principal: &Principal,
    uuid: Uuid,
) -> async_graphql::Result<ApiKey> {
    let scope = principal.require_tenant_admin().gql()?;
    let key = domain(ctx)
        .api_keys
        .get(scope, ApiKeyId::from(uuid))
        .await
        .gql()?;
    Ok(ApiKey(key))
}
