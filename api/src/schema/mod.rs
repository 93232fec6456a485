//! The GraphQL schema: a designed contract, exported to `schema.graphql`.
//!
//! It is built in layers, lowest first; a module uses only the layers
//! below it (checked by `tests/e2e/layers.rs`):
//!
//! 1. Plumbing every area uses: [`context`] (the caller and the domain),
//!    [`ids`] (opaque global ids and cursors), [`page`] (Relay connections),
//!    [`loaders`] (DataLoader batching of the relations lists fan out to),
//!    and the extensions: [`limits`] (document limits and the time limit),
//!    [`order`] (each response's fields in selection order), [`extensions`]
//!    (error codes, one loader per operation, rate limits before parsing).
//! 2. [`identity`]: the viewer, tenants and API keys.
//! 3. [`plans`] (plans and tools) and [`graph`] (the knowledge graph).
//! 4. [`tasks`]: tasks, their steps, reviews, artifacts and events.
//! 5. [`memory`], [`capabilities`] and [`admin`] (audit log, connections,
//!    API keys' rate limits).
//! 6. The assembly: [`node`] (the `Node` interface and `node(id:)`),
//!    [`subscription`], and here the `Query` and `Mutation` roots merged
//!    from the areas' objects, and [`build`].
//!
//! Every operation passes automatic persisted queries (an in-memory LRU of
//! parsed documents by SHA-256) and the rate limiter, which runs before
//! parsing on HTTP and WebSocket alike.

pub mod admin;
pub mod capabilities;
pub mod context;
pub mod extensions;
pub mod graph;
pub mod identity;
pub mod ids;
pub mod limits;
pub mod loaders;
pub mod memory;
pub mod node;
pub mod order;
pub mod page;
pub mod plans;
pub mod subscription;
pub mod tasks;

use std::sync::Arc;

use async_graphql::{
    Schema,
    extensions::apollo_persisted_queries::{ApolloPersistedQueries, LruCacheStorage},
};
use brainstem_domain::{Domain, rate_limit::RateLimiter};

pub use self::context::{
    Caller, CallerExpiry, CallerRateLimit, ClientAddress, caller_data, domain, principal,
};
use self::extensions::{ErrorCodes, RateLimit, RequestLoader};
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
    plans::PlanQuery,
    admin::AdminQuery,
    memory::MemoryQuery,
    graph::GraphQuery,
    capabilities::CapabilityQuery,
);

// The mutation root, merged like `Query`.
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(
    identity::IdentityMutation,
    plans::PlanMutation,
    tasks::TaskMutation,
    admin::AdminMutation,
    memory::MemoryMutation,
    graph::GraphMutation,
    capabilities::CapabilityMutation,
);

pub type BrainstemSchema = Schema<Query, Mutation, subscription::Subscription>;

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

pub fn build(domain: Domain, limits: GraphqlLimits, surface: &Surface) -> BrainstemSchema {
    let entities = graph::entity_loader(&domain);
    let mentions = memory::mention_loader(&domain);
    Schema::build(
        Query::default(),
        Mutation::default(),
        subscription::Subscription,
    )
    .data(domain.clone())
    .data(entities)
    .data(mentions)
    .limit_depth(limits.max_depth)
    // Extensions run outermost first: codes are added last, to everything.
    // Each document's text is checked before anything parses it, and its
    // expanded cost before anything walks the expansion (`limits`).
    .extension(ErrorCodes::default())
    .extension(order::SelectionOrder::default())
    .extension(limits::ScanDocument(limits.document))
    .extension(ApolloPersistedQueries::new(
        surface.persisted_queries.clone(),
    ))
    .extension(RateLimit(surface.limiter.clone()))
    .extension(limits::MeasureDocument(limits.document))
    .extension(limits::Deadline(limits.request_timeout))
    .extension(RequestLoader {
        domain,
        delay: limits.batch_delay,
    })
    .finish()
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
