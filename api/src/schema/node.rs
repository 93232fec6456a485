//! The `Node` interface and `node(id:)`: every type with a global id, and
//! the one resolver that finds any of them by asking the area that owns
//! the type. An id of another tenant's object is `NOT_FOUND`, exactly like
//! an id that does not exist.

use async_graphql::{Context, ID, Interface, Object};
use brainstem_domain::Error;

use super::{
    admin, capabilities,
    context::principal,
    conversations, graph, identity,
    ids::{self, NodeType},
    memory, plans, tasks,
};
use crate::error::ResultExt;

/// An object with a globally unique, opaque id.
// Values live for one resolver call; boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Interface)]
#[graphql(field(name = "id", ty = "ID", desc = "Opaque global id."))]
pub enum Node {
    Tenant(identity::Tenant),
    ApiKey(identity::ApiKey),
    Task(tasks::Task),
    Plan(plans::Plan),
    Connection(admin::Connection),
    AuditEntry(admin::AuditEntry),
    Memory(memory::Memory),
    KgEntity(graph::KgEntity),
    KgRelation(graph::KgRelation),
    Capability(capabilities::Capability),
    CapabilitySubscription(capabilities::CapabilitySubscription),
    Conversation(conversations::Conversation),
    RetryJob(tasks::RetryJob),
    MemoryImportJob(memory::MemoryImportJob),
}

#[derive(Default)]
pub struct NodeQuery;

#[Object]
impl NodeQuery {
    /// Fetch any object by its global id. Objects of other tenants are
    /// reported as `NOT_FOUND`, exactly like objects that do not exist.
    async fn node(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Node> {
        let principal = principal(ctx)?;
        let (ty, uuid) = ids::decode(&id).gql()?;
        match ty {
            NodeType::Tenant => identity::tenant_node(ctx, principal, uuid)
                .await
                .map(Node::Tenant),
            NodeType::ApiKey => identity::api_key_node(ctx, principal, uuid)
                .await
                .map(Node::ApiKey),
            NodeType::Task => tasks::task_node(ctx, uuid).await.map(Node::Task),
            NodeType::Plan => plans::plan_node(ctx, uuid).await.map(Node::Plan),
            NodeType::Memory => memory::memory_node(ctx, uuid).await.map(Node::Memory),
            NodeType::KgEntity => graph::entity_node(ctx, uuid).await.map(Node::KgEntity),
            NodeType::KgRelation => graph::relation_node(ctx, uuid).await.map(Node::KgRelation),
            NodeType::Connection => admin::connection_node(ctx, principal, uuid)
                .await
                .map(Node::Connection),
            NodeType::AuditEntry => admin::audit_entry_node(ctx, principal, uuid)
                .await
                .map(Node::AuditEntry),
            NodeType::Capability => capabilities::capability_node(ctx, uuid)
                .await
                .map(Node::Capability),
            NodeType::CapabilitySubscription => {
                capabilities::subscription_node(ctx, principal, uuid)
                    .await
                    .map(Node::CapabilitySubscription)
            }
            NodeType::Conversation => conversations::conversation_node(ctx, uuid)
                .await
                .map(Node::Conversation),
            NodeType::RetryJob => tasks::retry_job_node(ctx, uuid).await.map(Node::RetryJob),
            NodeType::MemoryImportJob => memory::import_job_node(ctx, uuid)
                .await
                .map(Node::MemoryImportJob),
            _ => Err(Error::not_found("node")).gql(),
        }
    }
}
