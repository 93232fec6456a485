//! Output types. They wrap domain values; none is a database row.

use async_graphql::{Enum, ID, Interface, Object, SimpleObject, connection::Connection};
use brainstem_domain::{
    Actor, Role as DomainRole, api_keys::ApiKey as DomainApiKey, page::Page,
    tenants::Tenant as DomainTenant,
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ids::{NodeType, encode, encode_cursor};

/// An object with a globally unique, opaque id.
// Values live for one resolver call; boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Interface)]
#[graphql(field(name = "id", ty = "ID", desc = "Opaque global id."))]
pub enum Node {
    Tenant(Tenant),
    ApiKey(ApiKey),
    Task(super::tasks::Task),
    Plan(super::tasks::Plan),
    Connection(super::admin::Connection),
    AuditEntry(super::admin::AuditEntry),
    Memory(super::memory::Memory),
    KgEntity(super::memory::KgEntity),
    KgRelation(super::memory::KgRelation),
    Capability(super::capabilities::Capability),
    CapabilitySubscription(super::capabilities::CapabilitySubscription),
}

/// A role a caller holds.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    PlatformAdmin,
    TenantAdmin,
    Member,
    Service,
}

impl From<DomainRole> for Role {
    fn from(r: DomainRole) -> Self {
        match r {
            DomainRole::PlatformAdmin => Role::PlatformAdmin,
            DomainRole::TenantAdmin => Role::TenantAdmin,
            DomainRole::Member => Role::Member,
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
        }
    }
}

/// A tenant: the unit of isolation. Everything else belongs to one.
#[derive(Clone, Debug)]
pub struct Tenant(pub DomainTenant);

#[Object]
impl Tenant {
    async fn id(&self) -> ID {
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
    async fn id(&self) -> ID {
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
    async fn rate_limit(&self) -> Option<super::admin::RateLimit> {
        self.0.rate_limit.map(super::admin::RateLimit::from)
    }
}

/// Turn a domain page into a Relay connection.
pub fn connection<T, N>(
    page: Page<T>,
    id_of: impl Fn(&T) -> Uuid,
    node: impl Fn(T) -> N,
) -> Connection<String, N>
where
    N: async_graphql::OutputType,
{
    let mut conn = Connection::new(page.has_previous_page, page.has_next_page);
    conn.edges.extend(page.items.into_iter().map(|item| {
        let cursor = encode_cursor(id_of(&item));
        async_graphql::connection::Edge::new(cursor, node(item))
    }));
    conn
}
