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
//! - [`memory`]: memories, hybrid search, outcomes, the lifecycle job and
//!   the embedders; [`graph`]: the knowledge graph.
//! - [`Domain`]: all services, built once and shared.

pub mod api_keys;
pub mod audit;
pub mod db;
pub mod error;
pub mod graph;
pub mod memory;
pub mod page;
pub mod principal;
pub mod redact;
pub mod settings;
pub mod tenants;

pub use audit::PlatformScope;
pub use brainstem_entity::{
    ApiKeyId, AuditId, EntityId, MemoryId, RelationId, TenantId, TenantScope, UserId,
};
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
    pub graph: graph::Graph,
    pub memory: memory::Memories,
}

impl Domain {
    /// With the default memory settings (offline embedder).
    pub fn new(db: DatabaseConnection) -> Self {
        let graph = graph::Graph::new(db.clone());
        let memory = memory::Memories::with_embedder(
            db.clone(),
            graph.clone(),
            memory::MemoryConfig::default(),
            std::sync::Arc::new(memory::embedder::HashingEmbedder::new(
                memory::MemoryConfig::default().embedding_dimension,
            )),
        );
        Self::assemble(db, graph, memory)
    }

    /// With configured memory settings. Call [`Domain::prepare`] before use.
    pub fn with_memory(db: DatabaseConnection, config: memory::MemoryConfig) -> Result<Self> {
        let graph = graph::Graph::new(db.clone());
        let memory = memory::Memories::new(db.clone(), graph.clone(), config)?;
        Ok(Self::assemble(db, graph, memory))
    }

    fn assemble(db: DatabaseConnection, graph: graph::Graph, memory: memory::Memories) -> Self {
        Self {
            tenants: tenants::Tenants::new(db.clone()),
            api_keys: api_keys::ApiKeys::new(db.clone()),
            audit: audit::AuditLog::new(db.clone()),
            graph,
            memory,
            db,
        }
    }

    /// Startup work the services need after migrations (the vector table of
    /// the configured dimension).
    pub async fn prepare(&self) -> Result<()> {
        self.memory.prepare().await
    }

    /// Whether the database answers; used by `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        self.db.ping().await.map_err(Error::from)
    }
}
