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
//! - [`page`]: keyset pagination shared by every list.
//! - [`redact`]: PII redaction for anything logged or stored as a summary.
//! - [`settings`]: platform settings kept in the database.
//! - [`Domain`]: all services, built once and shared.

pub mod api_keys;
pub mod audit;
pub mod db;
pub mod error;
pub mod page;
pub mod principal;
pub mod redact;
pub mod settings;
pub mod tenants;

pub use audit::PlatformScope;
pub use brainstem_entity::{ApiKeyId, AuditId, TenantId, TenantScope, UserId};
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
}

impl Domain {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            tenants: tenants::Tenants::new(db.clone()),
            api_keys: api_keys::ApiKeys::new(db.clone()),
            audit: audit::AuditLog::new(db.clone()),
            db,
        }
    }

    /// Whether the database answers; used by `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        self.db.ping().await.map_err(Error::from)
    }
}
