//! SeaORM entities and the tenant-scoped query helpers every service uses.
//!
//! - [`ids`]: newtypes for every row id (UUID v7).
//! - [`scope`]: [`TenantScope`] and the [`TenantOwned`] trait. Tenant-owned
//!   rows are read and written only through `find_in`, `find_by_id_in`,
//!   `update_many_in` and `delete_many_in`, which all take a scope.
//! - one module per table: [`tenant`], [`api_key`], [`audit_log`] (a
//!   tenant's) and [`platform_audit_log`] (of no tenant),
//!   [`platform_setting`], [`connection`]; the executor's [`plan`],
//!   [`task`], [`task_step`], [`task_event`], [`artifact`], [`review`],
//!   [`delegation`]; memory: [`memory`], [`memory_version`],
//!   [`memory_event`], [`memory_mention`], [`memory_import_key`],
//!   [`memory_import_job`], [`memory_import_line`]; knowledge graph: [`kg_entity`],
//!   [`kg_relation`], [`kg_relation_type`]. Memory embeddings are not an entity: their column type
//!   differs by backend (see `brainstem_domain::memory::vector`).
//!   The capability catalogue: [`capability`], [`capability_plan`],
//!   [`capability_tool`], [`capability_subscription`].

pub mod ai_preference;
pub mod api_key;
pub mod artifact;
pub mod audit_log;
pub mod capability;
pub mod capability_plan;
pub mod capability_subscription;
pub mod capability_tool;
pub mod connection;
pub mod conversation;
pub mod delegation;
pub mod executor_policy;
pub mod guardrail;
pub mod ids;
pub mod kg_entity;
pub mod kg_relation;
pub mod kg_relation_type;
pub mod memory;
pub mod memory_event;
pub mod memory_import_job;
pub mod memory_import_key;
pub mod memory_import_line;
pub mod memory_mention;
pub mod memory_version;
pub mod plan;
pub mod platform_audit_log;
pub mod platform_setting;
pub mod retry_job;
pub mod retry_job_item;
pub mod review;
pub mod schedule;
pub mod scope;
pub mod system_prompt;
pub mod task;
pub mod task_checkpoint;
pub mod task_event;
pub mod task_fork;
pub mod task_step;
pub mod tenant;
pub mod tenant_queue_setting;
pub mod turn_interruption;
pub mod webhook_delivery;
pub mod webhook_endpoint;

pub use ids::{
    ApiKeyId, AuditId, CapabilityId, ConnectionId, ConversationId, EntityId, MemoryId, PlanId,
    RelationId, SubscriptionId, TaskId, TenantId,
};
pub use scope::{TenantOwned, TenantScope};
