//! Brainstem's services. This crate knows storage (through
//! `brainstem-entity`) but no HTTP, GraphQL or JWT: `brainstem-api` adapts it
//! to the wire.
//!
//! The crate is grouped in areas, each a folder, in layers: an area may use
//! the areas below it and never one above (`tests/e2e/layers.rs` checks it).
//!
//! ```text
//! tools       the built-in tools (memory, generate, http, delegate, …)
//! runtime     tasks, events, intent detection, the executor, housekeeping,
//!             the tools' ports, Domain
//! catalogue   plans, capabilities, connections, the tool contract and ports
//! memory      memories, hybrid search, maintenance, the knowledge graph
//! models      language models and embedders, budgets, usage
//! identity    tenants, API keys, acting in a tenant
//! kernel      errors, principals and scopes, pages, the database, crypto,
//!             templates, JSON Schema, the HTTP client, rate limits,
//!             settings, the audit log
//! ```
//!
//! - [`kernel`]: what every area needs and that knows no area.
//! - [`identity`]: who may call, in which tenant.
//! - [`models`]: the model and embedder traits, their providers, token
//!   budgets and usage.
//! - [`memory`]: tenant-scoped memories, hybrid keyword + vector search,
//!   their lifecycle, and the knowledge graph.
//! - [`catalogue`]: what a tenant can run: plans as data, the capability
//!   catalogue and subscriptions, connections to external systems, and the
//!   [`Tool`](tools::Tool) contract with its registry and typed ports.
//! - [`runtime`]: durable task execution: the task record and its event
//!   log, the event bus, intent detection, the executor and its
//!   housekeeping, and [`Domain`].
//! - [`tools`]: the built-in tool implementations.
//!
//! The short paths of the modules (`brainstem_domain::tasks`, `::plans`, …)
//! are kept as aliases of their places in the areas.

pub mod catalogue;
pub mod identity;
pub mod kernel;
pub mod memory;
pub mod models;
pub mod runtime;
pub mod tools;

pub use catalogue::{capabilities, connections, guardrails, plans, policy, prompts};
pub use identity::{acting, api_keys, tenants};
pub use kernel::{
    audit, crypto, db, error, http_client, json_schema, metrics, origin, outbound, page, principal,
    rate_limit, redact, replicas, row_security, settings, template,
};
pub use memory::graph;
pub use models::llm;
pub use runtime::{
    conversations, events, executor, hooks, housekeeping, intent, queue, schedules, tasks, usage,
    webhooks,
};

pub use brainstem_entity::{
    ApiKeyId, AuditId, CapabilityId, ConnectionId, ConversationId, EntityId, MemoryId, PlanId,
    RelationId, SubscriptionId, TaskId, TenantId, TenantScope,
};
pub use kernel::{
    audit::PlatformScope,
    error::{Error, Result},
    principal::{Actor, Principal, Role},
};
pub use runtime::domain::{Domain, Reencrypted};
