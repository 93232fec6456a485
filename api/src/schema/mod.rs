//! The GraphQL schema: a designed contract, exported to `schema.graphql`.
//!
//! It is built in layers, lowest first; a module uses only the layers
//! below it (checked by `tests/e2e/layers.rs`):
//!
//! 1. Plumbing every area uses: [`context`] (the caller and the domain),
//!    [`ids`] (opaque global ids and cursors), [`page`] (Relay connections),
//!    [`loaders`] (DataLoader batching of the relations lists fan out to),
//!    [`plain_list`] (lists of plain records resolved in one pass),
//!    and what runs around each operation: [`limits`] (document limits and
//!    the time limit), [`order`] (each response's fields in selection
//!    order), [`admission`] (persisted queries, rate limits before parsing)
//!    and [`operation`], which runs them in order around the schema.
//! 2. [`identity`]: the viewer, tenants and API keys.
//! 3. [`plans`] (plans and tools) and [`graph`] (the knowledge graph).
//! 4. [`tasks`]: tasks, their steps, reviews, artifacts and events.
//! 5. [`memory`], [`capabilities`] and [`admin`] (audit log, connections,
//!    API keys' rate limits), [`queue`] (the fair queue's statistics and
//!    tenants' settings in it).
//! 6. The assembly: [`node`] (the `Node` interface and `node(id:)`),
//!    [`subscription`], and here the `Query` and `Mutation` roots merged
//!    from the areas' objects, and [`build`].
//!
//! Every operation passes automatic persisted queries (an in-memory LRU of
//! parsed documents by SHA-256) and the rate limiter, which runs before
//! parsing on HTTP and WebSocket alike. The schema itself has no
//! async-graphql extensions (see [`operation`] for why).

pub mod admin;
pub mod admission;
pub mod capabilities;
pub mod context;
pub mod conversations;
pub mod graph;
pub mod guardrails;
pub mod identity;
pub mod ids;
pub mod limits;
pub mod loaders;
pub mod memory;
pub mod models;
pub mod node;
pub mod operation;
pub mod order;
pub mod page;
pub mod plain_list;
pub mod plans;
pub mod policy;
pub mod prompts;
pub mod queue;
pub mod replica_reads;
pub mod schedules;
pub mod subscription;
pub mod tasks;
pub mod usage;
pub mod webhooks;

use std::sync::Arc;

use async_graphql::{
    Data, Request, Response, Schema, extensions::apollo_persisted_queries::LruCacheStorage,
};
use brainstem_domain::{Domain, rate_limit::RateLimiter};
use futures_util::stream::BoxStream;

pub use self::context::{
    Caller, CallerExpiry, CallerRateLimit, ClientAddress, caller_data, domain, principal,
};
use crate::cost::DocumentLimits;

// The query root: one object per area, merged. An area adds its own
// `#[derive(Default)]` object in its module and one entry here; the order
// here is the order of the fields in the schema.
#[derive(async_graphql::MergedObject, Default)]
pub struct Query(
    identity::ViewerQuery,
    node::NodeQuery,
    identity::IdentityQuery,
    tasks::TaskQuery,
    tasks::ReviewQuery,
    tasks::BulkRetryQuery,
    plans::PlanQuery,
    admin::AdminQuery,
    memory::MemoryQuery,
    memory::MemoryImportJobQuery,
    graph::GraphQuery,
    capabilities::CapabilityQuery,
    conversations::ConversationQuery,
    prompts::PromptQuery,
    policy::PolicyQuery,
    guardrails::GuardrailQuery,
    schedules::ScheduleQuery,
    usage::UsageQuery,
    webhooks::WebhookQuery,
    queue::QueueQuery,
    models::ModelQuery,
);

// The mutation root, merged like `Query`.
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(
    identity::IdentityMutation,
    plans::PlanMutation,
    tasks::TaskMutation,
    tasks::BulkRetryMutation,
    tasks::fork::ForkMutation,
    admin::AdminMutation,
    memory::MemoryMutation,
    memory::MemoryImportMutation,
    memory::MemoryImportJobMutation,
    graph::GraphMutation,
    capabilities::CapabilityMutation,
    conversations::ConversationMutation,
    prompts::PromptMutation,
    policy::PolicyMutation,
    guardrails::GuardrailMutation,
    schedules::ScheduleMutation,
    webhooks::WebhookMutation,
    queue::QueueMutation,
);

/// The schema and what runs around each of its operations
/// ([`operation::Pipeline`]). Cheap to clone.
#[derive(Clone)]
pub struct BrainstemSchema {
    schema: Schema<Query, Mutation, subscription::Subscription>,
    pipeline: Arc<operation::Pipeline>,
}

impl BrainstemSchema {
    /// Runs a query or mutation: one response.
    pub async fn execute(&self, request: impl Into<Request>) -> Response {
        self.pipeline.execute(&self.schema, request.into()).await
    }

    /// Runs any operation with no connection data (a fan-out render).
    pub fn execute_stream(&self, request: impl Into<Request>) -> BoxStream<'static, Response> {
        self.pipeline
            .execute_stream(&self.schema, request.into(), None)
    }

    /// Runs any operation with a WebSocket connection's data.
    pub fn execute_stream_with_session_data(
        &self,
        request: impl Into<Request>,
        session: Arc<Data>,
    ) -> BoxStream<'static, Response> {
        self.pipeline
            .execute_stream(&self.schema, request.into(), Some(session))
    }
}

/// Limits every operation must stay within, and how execution batches.
#[derive(Clone, Copy, Debug)]
pub struct GraphqlLimits {
    pub max_depth: usize,
    /// Size, tokens, aliases, directives and expanded cost of a document.
    pub document: DocumentLimits,
    /// Longest a query or mutation may run before it is dropped.
    pub request_timeout: std::time::Duration,
    /// Largest response body over HTTP, in bytes.
    pub max_response_bytes: usize,
    /// Subscriptions one WebSocket connection may hold at once.
    pub max_subscriptions: usize,
    /// How long a WebSocket client has to send `connection_init`.
    pub ws_init_timeout: std::time::Duration,
    /// How long the DataLoader gathers the keys of one level of a list
    /// before it queries: long enough for every item of a page to ask.
    pub batch_delay: std::time::Duration,
}

impl Default for GraphqlLimits {
    fn default() -> Self {
        Self {
            // Deep enough for the introspection query of GraphiQL and
            // codegen tools (`ofType` nested nine times under `args`).
            max_depth: 16,
            document: DocumentLimits::default(),
            request_timeout: std::time::Duration::from_secs(30),
            max_response_bytes: 8 << 20,
            max_subscriptions: 100,
            ws_init_timeout: std::time::Duration::from_secs(3),
            batch_delay: std::time::Duration::from_millis(2),
        }
    }
}

/// What the transport shares with the schema's extensions.
#[derive(Clone)]
pub struct Surface {
    pub limiter: Arc<RateLimiter>,
    /// Parsed documents of automatic persisted queries, by SHA-256. The
    /// transport reads it too, to refuse a persisted mutation over `GET`.
    pub persisted_queries: LruCacheStorage,
}

/// How many persisted documents are kept per replica.
pub const PERSISTED_QUERY_CACHE_SIZE: usize = 1000;

impl Surface {
    pub fn new(limiter: RateLimiter) -> Self {
        Self {
            limiter: Arc::new(limiter),
            persisted_queries: LruCacheStorage::new(PERSISTED_QUERY_CACHE_SIZE),
        }
    }
}

pub fn build(
    domain: Domain,
    limits: GraphqlLimits,
    surface: &Surface,
    replicas: Option<Arc<brainstem_domain::replicas::Replicas>>,
) -> BrainstemSchema {
    let entities = graph::entity_loader(&domain);
    let mentions = memory::mention_loader(&domain);
    let schema = Schema::build(
        Query::default(),
        Mutation::default(),
        subscription::Subscription,
    )
    .data(domain.clone())
    .data(context::RequestTimeout(limits.request_timeout))
    .data(entities)
    .data(mentions)
    .limit_depth(limits.max_depth)
    .finish();
    let pipeline = operation::Pipeline::new(
        bare,
        limits.document,
        limits.request_timeout,
        limits.batch_delay,
        surface.limiter.clone(),
        surface.persisted_queries.clone(),
        domain.clone(),
    );
    let pipeline = match replicas {
        Some(replicas) => pipeline.reading_from(replica_reads::ReadRouting::new(replicas, &domain)),
        None => pipeline,
    };
    BrainstemSchema {
        schema,
        pipeline: Arc::new(pipeline),
    }
}

/// The SDL of the schema, as checked in at `schema.graphql`.
pub fn sdl() -> String {
    bare().finish().sdl()
}

/// The schema's types, without data or extensions: for the SDL, and for
/// tools that need its registry (the cost benchmark).
pub fn bare() -> async_graphql::SchemaBuilder<Query, Mutation, subscription::Subscription> {
    Schema::build(
        Query::default(),
        Mutation::default(),
        subscription::Subscription,
    )
}
