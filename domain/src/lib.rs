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
//! - [`plans`], [`intent`], [`tasks`], [`executor`], [`tools`]: durable task
//!   execution: plans as data, rules-first intent detection, the task
//!   lifecycle and event log, the executor, and the tool contract.
//! - [`template`], [`json_schema`]: step argument templates and checks.
//! - [`events`]: the event bus (in-process or PostgreSQL `LISTEN/NOTIFY`)
//!   and the resumable task event stream.
//! - [`acting`]: a platform admin acting inside a named tenant (audited).
//! - [`connections`]: tenants' credentials for external systems, their
//!   secrets sealed by [`crypto`] (AES-256-GCM, rotatable keys).
//! - [`capabilities`]: the platform's catalogue (plans, intents, partner
//!   HTTP tools, limits) and tenants' subscriptions, which switch a
//!   capability's plans and tools on.
//! - [`rate_limit`]: in-process token buckets per API key and per tenant.
//! - [`llm`]: the `LanguageModel` trait, its providers (OpenAI-compatible,
//!   offline), timeouts, retries, breaker, token budgets; [`http_client`]:
//!   the outgoing HTTP client and its TLS provider.
//! - [`page`]: keyset pagination shared by every list.
//! - [`redact`]: PII redaction for anything logged or stored as a summary.
//! - [`settings`]: platform settings kept in the database.
//! - [`memory`]: memories, hybrid search, outcomes, the lifecycle job and
//!   the embedders; [`graph`]: the knowledge graph.
//! - [`Domain`]: all services, built once and shared.

pub mod acting;
pub mod api_keys;
pub mod audit;
pub mod capabilities;
pub mod connections;
pub mod crypto;
pub mod db;
pub mod error;
pub mod events;
pub mod executor;
pub mod graph;
pub mod http_client;
pub mod intent;
pub mod json_schema;
pub mod llm;
pub mod memory;
pub mod page;
pub mod plans;
pub mod principal;
pub mod rate_limit;
pub mod redact;
pub mod settings;
pub mod tasks;
pub mod template;
pub mod tenants;
pub mod tools;

pub use audit::PlatformScope;
pub use brainstem_entity::{
    ApiKeyId, AuditId, CapabilityId, ConnectionId, EntityId, MemoryId, PlanId, RelationId,
    SubscriptionId, TaskId, TenantId, TenantScope, UserId,
};
pub use error::{Error, Result};
pub use principal::{Actor, Principal, Role};

use std::sync::Arc;

use sea_orm::DatabaseConnection;

/// Every service of the domain, sharing one connection pool. Cheap to clone.
#[derive(Clone)]
pub struct Domain {
    pub db: DatabaseConnection,
    /// SQL statements sent through `db` since start.
    pub statements: db::StatementCounter,
    pub tenants: tenants::Tenants,
    pub api_keys: api_keys::ApiKeys,
    pub audit: audit::AuditLog,
    pub plans: plans::Plans,
    pub tasks: tasks::Tasks,
    pub connections: connections::Connections,
    /// Committed task events, live.
    pub events: Arc<events::EventBus>,
    pub graph: graph::Graph,
    pub memory: memory::Memories,
    pub capabilities: capabilities::Capabilities,
}

impl Domain {
    /// Build every service, with the default memory settings (the offline
    /// embedder). `registry` holds the tools this process can run; `events`
    /// receives every committed task event.
    pub fn new(
        db: DatabaseConnection,
        registry: tools::ToolRegistry,
        events: Arc<events::EventBus>,
    ) -> Self {
        let graph = graph::Graph::new(db.clone());
        let memory = memory::Memories::with_embedder(
            db.clone(),
            graph.clone(),
            memory::MemoryConfig::default(),
            Arc::new(memory::embedder::HashingEmbedder::new(
                memory::MemoryConfig::default().embedding_dimension,
            )),
        );
        Self::assemble(db, registry, events, graph, memory)
    }

    /// With configured memory settings. Call [`Domain::prepare`] before use.
    pub fn with_memory(
        db: DatabaseConnection,
        registry: tools::ToolRegistry,
        events: Arc<events::EventBus>,
        config: memory::MemoryConfig,
    ) -> Result<Self> {
        let graph = graph::Graph::new(db.clone());
        let memory = memory::Memories::new(db.clone(), graph.clone(), config)?;
        Ok(Self::assemble(db, registry, events, graph, memory))
    }

    fn assemble(
        db: DatabaseConnection,
        registry: tools::ToolRegistry,
        events: Arc<events::EventBus>,
        graph: graph::Graph,
        memory: memory::Memories,
    ) -> Self {
        let sink: Arc<dyn tasks::EventSink> = events.clone();
        let mut db = db;
        let statements = db::StatementCounter::default();
        statements.attach(&mut db);
        let plans = plans::Plans::new(db.clone(), registry.clone());
        Self {
            tenants: tenants::Tenants::new(db.clone()),
            api_keys: api_keys::ApiKeys::new(db.clone()),
            audit: audit::AuditLog::new(db.clone()),
            tasks: tasks::Tasks::new(db.clone(), plans.clone(), sink),
            plans,
            connections: connections::Connections::new(db.clone(), None),
            events,
            graph,
            memory,
            capabilities: capabilities::Capabilities::new(db.clone(), registry),
            statements,
            db,
        }
    }

    /// Use `keyring` to seal and open connection secrets (and capabilities'
    /// signing secrets). Without one, connections without a secret still
    /// work and any secret is refused.
    pub fn with_connection_keys(mut self, keyring: crypto::Keyring) -> Self {
        let keyring = Arc::new(keyring);
        self.connections = connections::Connections::new(self.db.clone(), Some(keyring.clone()));
        self.capabilities = self.capabilities.with_keyring(keyring);
        self
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
