//! [`Domain`]: every service of the platform, built once and shared.
//!
//! It sits in the runtime area because it bundles the runtime's services
//! with those of every area below. Tools never see it: a step lends its
//! tool the typed ports `Domain::tool_ports` builds (`runtime::tool_ports`).

use std::sync::Arc;

use sea_orm::DatabaseConnection;

use crate::{
    Error, PlatformScope, Principal, Result, TaskId, TenantScope,
    catalogue::{
        capabilities, connections, guardrails, mcp, plans, policy, prompts, tool as tools,
    },
    identity::{acting, api_keys, revocations, tenants},
    kernel::{
        audit, crypto, db, outbound,
        page::{self, PageRequest},
        row_security,
    },
    memory::{self, graph},
    runtime::{conversations, events, queue, schedules, tasks, tool_ports, webhooks},
};

/// Every service of the domain, sharing one connection pool. Cheap to clone.
#[derive(Clone)]
pub struct Domain {
    pub db: DatabaseConnection,
    /// SQL statements sent through `db` since start.
    pub statements: db::StatementCounter,
    pub tenants: tenants::Tenants,
    pub api_keys: api_keys::ApiKeys,
    /// Revoked credentials, as this process hears of them (from itself
    /// and, on PostgreSQL, from every other process).
    pub revocations: revocations::Revocations,
    pub audit: audit::AuditLog,
    pub plans: plans::Plans,
    pub tasks: tasks::Tasks,
    pub connections: connections::Connections,
    /// Committed task events, live.
    pub events: Arc<events::EventBus>,
    pub graph: graph::Graph,
    pub memory: memory::Memories,
    pub capabilities: capabilities::Capabilities,
    pub conversations: conversations::Conversations,
    pub prompts: prompts::Prompts,
    /// The executor policy and tenants' overrides.
    pub policies: policy::Policies,
    /// Tenants' rules checked before each step.
    pub guardrails: guardrails::Guardrails,
    /// Tenants' plans started on a cron.
    pub schedules: schedules::Schedules,
    /// Tenants' endpoints for task events, and their outbox.
    pub webhooks: webhooks::Webhooks,
    /// The client every outbound call a tenant's work can steer goes
    /// through (tools, partner tools, webhooks).
    pub outbound: outbound::Outbound,
    /// The language model that answers by default (set at start-up).
    pub answering_model: crate::models::llm::AnsweringModel,
    /// The tool lists and OAuth tokens of tenants' MCP servers, kept by
    /// this process.
    pub mcp: mcp::McpClients,
    /// The fair queue: tenants' settings and statistics.
    pub queue: queue::Queue,
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

    /// The services a read-only operation uses, reading from `replica` (a
    /// hot standby of `db`): tasks, plans, conversations, memories and the
    /// knowledge graph. Every other service, and every write, stays on the
    /// primary; the task service reads from the primary what the replica
    /// has not replayed yet when it must (a subscription's catch-up).
    pub fn reading_from(&self, replica: DatabaseConnection) -> Self {
        let plans = self.plans.reading_from(replica.clone());
        let graph = graph::Graph::new(replica.clone());
        Self {
            tasks: self.tasks.reading_from(replica.clone(), plans.clone()),
            memory: self.memory.reading_from(replica.clone(), graph.clone()),
            conversations: conversations::Conversations::new(replica),
            graph,
            plans,
            ..self.clone()
        }
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
        let tasks = tasks::Tasks::new(db.clone(), plans.clone(), sink);
        let revocations = revocations::Revocations::default();
        Self {
            tenants: tenants::Tenants::new(db.clone()),
            api_keys: api_keys::ApiKeys::new(db.clone(), revocations.clone()),
            revocations,
            audit: audit::AuditLog::new(db.clone()),
            schedules: schedules::Schedules::new(db.clone(), tasks.clone()),
            webhooks: webhooks::Webhooks::new(db.clone()),
            queue: queue::Queue::new(db.clone()),
            tasks,
            plans,
            connections: connections::Connections::new(db.clone(), None),
            events,
            graph,
            memory,
            capabilities: capabilities::Capabilities::new(db.clone(), registry),
            conversations: conversations::Conversations::new(db.clone()),
            prompts: prompts::Prompts::new(db.clone()),
            policies: policy::Policies::new(db.clone(), Default::default()),
            guardrails: guardrails::Guardrails::new(db.clone()),
            outbound: outbound::Outbound::default(),
            mcp: mcp::McpClients::default(),
            answering_model: Default::default(),
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
        self.capabilities = self.capabilities.with_keyring(keyring.clone());
        self.webhooks = self.webhooks.with_keyring(keyring);
        self
    }

    /// Make outbound calls (webhook deliveries, and the tools' calls
    /// through the executor's settings) with `outbound`.
    pub fn with_outbound(mut self, outbound: outbound::Outbound) -> Self {
        self.webhooks = self.webhooks.with_outbound(outbound.clone());
        self.outbound = outbound;
        self
    }

    /// Keep MCP servers' tool lists (and OAuth tokens) as `settings` say.
    pub fn with_mcp_tool_lists(mut self, settings: mcp::ListSettings) -> Self {
        self.mcp = mcp::McpClients::new(settings);
        self
    }

    /// Every tenant's running limit unless it has its own (0: none).
    pub fn with_tenant_max_running(mut self, max_running: u32) -> Self {
        self.queue = self.queue.with_default_max_running(max_running);
        self
    }

    /// Send webhook deliveries as `config` says.
    pub fn with_webhook_config(mut self, config: webhooks::WebhookConfig) -> Self {
        self.webhooks = self.webhooks.with_config(config);
        self
    }

    /// Startup work the services need after migrations (the vector table of
    /// the configured dimension).
    pub async fn prepare(&self) -> Result<()> {
        self.memory.prepare().await
    }

    /// Wait until the task settles (see `TaskStatus::is_settled`) or
    /// `limit` passes; the task as it is then.
    pub async fn wait_until_settled(
        &self,
        scope: TenantScope,
        id: TaskId,
        limit: std::time::Duration,
    ) -> Result<tasks::Task> {
        tool_ports::TaskAccess::new(self.tasks.clone(), self.events.clone())
            .wait_until_settled(scope, id, limit)
            .await
    }

    /// The tools the MCP server of the tenant's connection `name` (of kind
    /// `mcp`) offers (tenant admins, like connections): the list this
    /// process keeps, or asked now when it has none fresh or `refresh`.
    pub async fn mcp_tools_of(
        &self,
        principal: &Principal,
        name: &str,
        refresh: bool,
    ) -> Result<Arc<[mcp::RemoteTool]>> {
        let scope = principal.require_scope("admin")?;
        mcp::list_remote(
            &self.connections,
            &self.outbound,
            &self.mcp,
            scope,
            name,
            refresh,
        )
        .await
    }

    /// Whether the database answers; used by `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        self.db.ping().await.map_err(Error::from)
    }

    /// The principal that `principal` becomes inside the tenant named by
    /// `claim` (see [`acting::act_in_tenant`]).
    pub async fn act_in_tenant(&self, principal: &Principal, claim: &str) -> Result<Principal> {
        acting::act_in_tenant(&self.tenants, &self.audit, principal, claim).await
    }

    /// Re-seal with the current key every sealed secret that an old key
    /// sealed (after a key rotation): connection secrets (inbound hooks'
    /// signing secrets among them) and webhook endpoint secrets in every
    /// tenant, and capability signing secrets. Returns how many of each.
    /// Needs an audited platform scope, since it touches every tenant.
    /// Once it has run, the old keys can be dropped.
    pub async fn reencrypt_secrets(&self, scope: &PlatformScope) -> Result<Reencrypted> {
        let mut total = Reencrypted {
            capabilities: self.capabilities.reencrypt(scope).await?,
            ..Reencrypted::default()
        };
        let mut after = None;
        loop {
            let page = self
                .tenants
                .list(scope, PageRequest::forward(page::MAX_PAGE_SIZE, after))
                .await?;
            for tenant in &page.items {
                let scope = TenantScope::new(tenant.id);
                let connections = self.connections.reencrypt(scope);
                total.connections += row_security::as_tenant(tenant.id, connections).await?;
                let webhooks = self.webhooks.reencrypt(scope);
                total.webhooks += row_security::as_tenant(tenant.id, webhooks).await?;
            }
            match page.items.last() {
                Some(last) if page.has_next_page => after = Some(last.id.uuid()),
                _ => return Ok(total),
            }
        }
    }
}

/// How many sealed secrets of each kind [`Domain::reencrypt_secrets`]
/// re-sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reencrypted {
    /// Tenants' connection secrets (inbound hooks' included).
    pub connections: u64,
    /// Outbound webhook endpoints' signing secrets.
    pub webhooks: u64,
    /// Capabilities' partner-call signing secrets.
    pub capabilities: u64,
}
