//! The tool contract's ports: what of the platform a tool may use, by name
//! and type.
//!
//! A step's [`ToolContext`](super::tool::ToolContext) lends its tool one
//! [`ToolPorts`], built once per process by the runtime and shared by every
//! step. The services of the areas below the runtime (memory, the knowledge
//! graph, connections, plans, prompts, policies, the capability catalogue,
//! the token ledger) are named by their own types. What the runtime owns
//! (tasks, their events) this area cannot name, so it declares what a tool
//! asks of it as traits ([`TaskPort`], [`LiveEvents`]) that the runtime
//! implements; they answer in the plain values declared here
//! ([`TaskView`], [`AttemptView`]), never in the runtime's records.
//!
//! Invariants:
//! - Nothing here names the runtime; a tool reaches nothing of the platform
//!   but these ports (no service is lent as an untyped value), so the
//!   layers test sees every dependency a tool has.
//! - Every read and write takes the tenant scope of the task the step runs
//!   for.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use brainstem_entity::{ConversationId, TaskId, TenantId, TenantScope};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Result,
    catalogue::{
        capabilities::Capabilities, connections::Connections, mcp::McpClients, plans::Plans,
        policy::Policies, prompts::Prompts,
    },
    memory::{Memories, graph::Graph},
    models::{llm::budget::Ledger, usage::Usage},
};

/// What of the platform a tool may use. Cheap to clone; built once.
#[derive(Clone)]
pub struct ToolPorts {
    /// The tenant's memories: `memory.remember`, `memory.recall`, the
    /// dossiers and the agent's prompt.
    pub memory: Memories,
    /// The knowledge graph: `memory.link` and the agent's knowledge.
    pub graph: Graph,
    /// The tenant's connections, whose secrets `http_request` borrows for
    /// its headers.
    pub connections: Connections,
    /// The tool lists and OAuth tokens of the tenant's MCP servers: the
    /// agent's menu, and the tokens `mcp:` tools send.
    pub mcp: McpClients,
    /// Plans and the tools a tenant may use: the agent's menu.
    pub plans: Plans,
    /// System prompts and preferences: the agent's prompt.
    pub prompts: Prompts,
    /// Tenants' tightened limits for agent loops.
    pub policies: Policies,
    /// The capability catalogue: partner tools sign their calls with their
    /// capability's secret.
    pub capabilities: Capabilities,
    /// What a tenant has spent, for token budgets checked before a model
    /// call.
    pub ledger: Ledger,
    /// The runtime's tasks: child tasks, and reads of the step's task and
    /// its neighbours.
    pub tasks: Arc<dyn TaskPort>,
    /// Where the step's live-only events go.
    pub live: Arc<dyn LiveEvents>,
}

/// What a tool asks of the runtime's tasks. The runtime implements it.
#[async_trait]
pub trait TaskPort: Send + Sync {
    /// Start a child task; a repeat of its idempotency key finds the
    /// first one instead.
    async fn start_child(&self, child: NewChildTask) -> Result<TaskId>;

    /// Wait until the task settles (finished, or waiting for a person or
    /// an external system) or `limit` passes; the task as it is then.
    async fn wait_until_settled(
        &self,
        scope: TenantScope,
        id: TaskId,
        limit: Duration,
    ) -> Result<TaskView>;

    async fn get(&self, scope: TenantScope, id: TaskId) -> Result<TaskView>;

    /// The turns of `conversation` before the task `before`, oldest first,
    /// at most `limit` (the latest ones).
    async fn earlier_turns(
        &self,
        scope: TenantScope,
        conversation: ConversationId,
        before: TaskId,
        limit: u64,
    ) -> Result<Vec<TaskView>>;

    /// Every attempt of every step of the task, in the order they ran.
    async fn attempts(&self, scope: TenantScope, task: TaskId) -> Result<Vec<AttemptView>>;

    /// Up to `limit` of a subject's tasks (not `except`), newest first.
    async fn recent_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<Vec<TaskView>>;

    /// How many of a subject's tasks (not `except`) are unfinished.
    async fn open_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
    ) -> Result<u64>;
}

/// Publishes a step's live-only events. The runtime implements it.
pub trait LiveEvents: Send + Sync {
    /// `delta` extends the text the step has generated so far, starting at
    /// character `offset`.
    fn token_delta(
        &self,
        tenant: TenantId,
        task: TaskId,
        step_id: &str,
        offset: usize,
        delta: &str,
    );
}

/// A child task started by a tool.
#[derive(Clone, Debug)]
pub struct NewChildTask {
    pub tenant: TenantId,
    pub parent: TaskId,
    pub idempotency_key: String,
    pub input: String,
    pub payload: Value,
    pub plan_key: Option<String>,
    pub intent: Option<String>,
}

/// A task as a tool reads it.
#[derive(Clone, Debug)]
pub struct TaskView {
    pub id: TaskId,
    /// Its status, as the API spells it (`COMPLETED`, …).
    pub status: &'static str,
    /// Finished, or waiting for a person or an external system: it will
    /// not move on its own.
    pub settled: bool,
    pub input: String,
    pub subject_id: Option<Uuid>,
    /// The conversation the task is a turn of.
    pub conversation: Option<ConversationId>,
    pub intent: Option<String>,
    pub plan_key: Option<String>,
    pub state: Value,
    /// What an agent step concluded (`None` until one did).
    pub result: Option<Value>,
    pub error: Option<String>,
    /// The tokens its steps used so far.
    pub usage: Usage,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

/// One attempt of a step, as a tool reads it: which step, and how it
/// failed (`None`: it did not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    pub step_id: String,
    pub error: Option<String>,
}
