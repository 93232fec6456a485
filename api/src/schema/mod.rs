//! The GraphQL schema: a designed contract, exported to `schema.graphql`.
//!
//! - [`ids`]: opaque global ids (`Node`) and list cursors.
//! - [`types`]: output types (`Viewer`, `Tenant`, `ApiKey`) and the `Node`
//!   interface.
//! - [`query`], [`mutation`]: root resolvers, each a thin call into `domain`.
//! - [`tasks`]: plans, tools and tasks.
//! - [`admin`]: the tenant admin's area: audit log, connections, API-key
//!   rate limits.
//! - [`capabilities`]: the capability catalogue and tenants' subscriptions.
//! - [`loaders`]: DataLoader batching of the relations lists fan out to.
//! - [`limits`]: the document limits and the time limit, as extensions.
//! - [`order`]: each response's fields in selection order.
//!
//! Every operation passes two extensions besides error coding: automatic
//! persisted queries (an in-memory LRU of parsed documents by SHA-256) and
//! the rate limiter, which runs before parsing on HTTP and WebSocket alike.
//! - [`memory`]: memory and knowledge graph (`MemoryQuery`, `MemoryMutation`).

pub mod admin;
pub mod capabilities;
pub mod events;
pub mod ids;
pub mod limits;
pub mod loaders;
pub mod memory;
pub mod mutation;
pub mod order;
pub mod query;
pub mod subscription;
pub mod tasks;
pub mod types;

use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use async_graphql::{
    Request, Response, Schema, ServerResult,
    extensions::{
        Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest, NextRequest,
        apollo_persisted_queries::{ApolloPersistedQueries, LruCacheStorage},
    },
};
use brainstem_domain::{
    Domain, Principal,
    rate_limit::{Rate, RateLimiter},
};

use crate::{
    cost::DocumentLimits,
    error::{ResultExt, ensure_codes, to_server_error},
};

// The query root: one object per area, merged. An area adds its own
// `#[derive(Default)]` object in its module and one entry here.
#[derive(async_graphql::MergedObject, Default)]
pub struct Query(
    query::CoreQuery,
    tasks::TaskQuery,
    admin::AdminQuery,
    memory::MemoryQuery,
    capabilities::CapabilityQuery,
);

// The mutation root, merged like `Query`.
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(
    mutation::CoreMutation,
    tasks::TaskMutation,
    admin::AdminMutation,
    memory::MemoryMutation,
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

/// The caller of one request or WebSocket connection, put in the context by
/// the transport. `None` is anonymous.
#[derive(Clone, Debug)]
pub struct Caller(pub Option<Principal>);

/// When the caller's bearer token expires, if it does.
#[derive(Clone, Copy, Debug)]
pub struct CallerExpiry(pub Option<chrono::DateTime<chrono::Utc>>);

/// The caller's API key's own rate limit, if it has one.
#[derive(Clone, Copy, Debug)]
pub struct CallerRateLimit(pub Option<Rate>);

/// The address the request came from, when the transport knows it: what
/// anonymous callers are rate-limited by.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub std::net::IpAddr);

/// The context data for an authenticated (or anonymous) caller.
pub fn caller_data(credential: Option<crate::auth::Credential>) -> async_graphql::Data {
    let mut data = async_graphql::Data::default();
    let expiry = credential.as_ref().and_then(|c| c.expires_at);
    data.insert(CallerRateLimit(
        credential.as_ref().and_then(|c| c.rate_limit),
    ));
    data.insert(CallerExpiry(expiry));
    data.insert(Caller(credential.map(|c| c.principal)));
    data
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

/// The principal, or `UNAUTHENTICATED`.
pub fn principal<'a>(ctx: &'a async_graphql::Context<'_>) -> async_graphql::Result<&'a Principal> {
    ctx.data_opt::<Caller>()
        .and_then(|c| c.0.as_ref())
        .ok_or(brainstem_domain::Error::Unauthenticated(
            "authentication required: send `Authorization: Bearer <token>`".into(),
        ))
        .gql()
}

pub fn domain<'a>(ctx: &'a async_graphql::Context<'_>) -> &'a Domain {
    // The schema is always built with a Domain (see `build`), so this is present.
    ctx.data_unchecked::<Domain>()
}

pub fn build(domain: Domain, limits: GraphqlLimits, surface: &Surface) -> BrainstemSchema {
    let (entities, mentions) = memory::loaders(&domain);
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

/// Gives every error in every response an `extensions.code`. It keeps the
/// request's document text (after the persisted-query lookup fills it in)
/// so that a type error found while resolving can name its argument.
#[derive(Default)]
struct ErrorCodes {
    query: OnceLock<String>,
}

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodes::default())
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for ErrorCodes {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        ensure_codes(&mut response.errors, self.query.get().map(String::as_str));
        response
    }

    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let request = next.run(ctx, request).await?;
        let _ = self.query.set(request.query.clone());
        Ok(request)
    }
}

/// Gives each operation a DataLoader of its own. Batches then gather one
/// operation's keys only: a loader shared by concurrent operations would
/// merge their keys into ever larger batches that each waits for.
struct RequestLoader {
    domain: Domain,
    delay: std::time::Duration,
}

impl ExtensionFactory for RequestLoader {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RequestLoader {
            domain: self.domain.clone(),
            delay: self.delay,
        })
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for RequestLoader {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let loader = loaders::Loaders::new(self.domain.clone(), self.delay);
        next.run(ctx, request.data(loader)).await
    }
}

/// Admits each operation through the caller's rate limits before it is
/// parsed (only its text's size and tokens are checked before): an
/// authenticated caller's key and tenant, an anonymous caller's address. It
/// runs after the persisted-query lookup, so a client's
/// `PersistedQueryNotFound` round trip costs it nothing.
struct RateLimit(Arc<RateLimiter>);

impl ExtensionFactory for RateLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RateLimit(self.0.clone()))
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for RateLimit {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let now = Instant::now();
        match limits::data::<Caller>(ctx, &request).and_then(|c| c.0.as_ref()) {
            Some(principal) => {
                let key_rate = limits::data::<CallerRateLimit>(ctx, &request).and_then(|r| r.0);
                self.0
                    .check(principal, key_rate, now)
                    .map_err(to_server_error)?;
            }
            None => {
                if let Some(address) = limits::data::<ClientAddress>(ctx, &request) {
                    self.0
                        .check_anonymous(address.0, now)
                        .map_err(to_server_error)?;
                }
            }
        }
        next.run(ctx, request).await
    }
}
