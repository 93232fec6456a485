//! Brainstem's services. This crate knows storage (through
//! `brainstem-entity`) but no HTTP, GraphQL or JWT: `brainstem-api` adapts it
//! to the wire.
//!
//! - [`error`]: the crate's one error enum, [`Error`].
//! - [`db`]: connecting to SQLite or PostgreSQL and running migrations.
//! - [`principal`]: who is calling ([`Principal`], [`Role`]) and the scope
//!   they act in.
//! - [`audit`]: the append-only, hashed audit log and [`PlatformScope`], the
//!   only way to read across tenants.
//! - [`tenants`], [`api_keys`]: the tenancy and credential services.
//! - [`acting`]: a platform admin acting inside a named tenant (audited).
//! - [`connections`]: tenants' credentials for external systems, their
//!   secrets sealed by [`crypto`] (AES-256-GCM, rotatable keys).
//! - [`rate_limit`]: in-process token buckets per API key and per tenant.
//! - [`page`]: keyset pagination shared by every list.
//! - [`redact`]: PII redaction for anything logged or stored as a summary.
//! - [`settings`]: platform settings kept in the database.
//! - [`Domain`]: all services, built once and shared.

pub mod acting;
pub mod api_keys;
pub mod audit;
pub mod connections;
pub mod crypto;
pub mod db;
pub mod error;
pub mod page;
pub mod principal;
pub mod rate_limit;
pub mod redact;
pub mod settings;
pub mod tenants;

pub use audit::PlatformScope;
pub use brainstem_entity::{ApiKeyId, AuditId, ConnectionId, TenantId, TenantScope, UserId};
pub use error::{Error, Result};
pub use principal::{Actor, Principal, Role};

use sea_orm::DatabaseConnection;

/// Every service of the domain, sharing one connection pool. Cheap to clone.
#[derive(Clone)]
pub struct Domain {
    pub db: DatabaseConnection,
    pub tenants: tenants::Tenants,
    pub api_keys: api_keys::ApiKeys,
    pub audit: audit::AuditLog,
    pub connections: connections::Connections,
}

impl Domain {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            tenants: tenants::Tenants::new(db.clone()),
            api_keys: api_keys::ApiKeys::new(db.clone()),
            audit: audit::AuditLog::new(db.clone()),
            connections: connections::Connections::new(db.clone(), None),
            db,
        }
    }

    /// Use `keyring` to seal and open connection secrets. Without one,
    /// connections without a secret still work and any secret is refused.
    pub fn with_connection_keys(mut self, keyring: crypto::Keyring) -> Self {
        self.connections =
            connections::Connections::new(self.db.clone(), Some(std::sync::Arc::new(keyring)));
        self
    }

    /// Whether the database answers; used by `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        self.db.ping().await.map_err(Error::from)
    }
}
