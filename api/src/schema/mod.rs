//! The GraphQL schema: a designed contract, exported to `schema.graphql`.
//!
//! - [`ids`]: opaque global ids (`Node`) and list cursors.
//! - [`types`]: output types (`Viewer`, `Tenant`, `ApiKey`) and the `Node`
//!   interface.
//! - [`query`], [`mutation`]: root resolvers, each a thin call into `domain`.
//! - [`memory`]: memory and knowledge graph (`MemoryQuery`, `MemoryMutation`).

pub mod ids;
pub mod memory;
pub mod mutation;
pub mod query;
pub mod types;

use std::sync::Arc;

use async_graphql::{
    EmptySubscription, Response, Schema,
    extensions::{Extension, ExtensionContext, ExtensionFactory, NextRequest},
};
use brainstem_domain::{Domain, Principal};

use crate::error::{ResultExt, ensure_codes};

// The query root: one object per area, merged. An area adds its own
// `#[derive(Default)]` object in its module and one entry here.
#[derive(async_graphql::MergedObject, Default)]
pub struct Query(query::CoreQuery, memory::MemoryQuery);

// The mutation root, merged like `Query`.
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(mutation::CoreMutation, memory::MemoryMutation);

pub type BrainstemSchema = Schema<Query, Mutation, EmptySubscription>;

/// Limits every operation must stay within.
#[derive(Clone, Copy, Debug)]
pub struct GraphqlLimits {
    pub max_depth: usize,
    pub max_complexity: usize,
}

impl Default for GraphqlLimits {
    fn default() -> Self {
        Self {
            max_depth: 12,
            max_complexity: 1000,
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

/// The context data for an authenticated (or anonymous) caller.
pub fn caller_data(credential: Option<crate::auth::Credential>) -> async_graphql::Data {
    let mut data = async_graphql::Data::default();
    let expiry = credential.as_ref().and_then(|c| c.expires_at);
    data.insert(Caller(credential.map(|c| c.principal)));
    data.insert(CallerExpiry(expiry));
    data
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

pub fn build(domain: Domain, limits: GraphqlLimits) -> BrainstemSchema {
    let (entities, mentions) = memory::loaders(&domain);
    Schema::build(Query::default(), Mutation::default(), EmptySubscription)
        .data(domain)
        .data(entities)
        .data(mentions)
        .limit_depth(limits.max_depth)
        .limit_complexity(limits.max_complexity)
        .extension(ErrorCodes)
        .finish()
}

/// The SDL of the schema, as checked in at `schema.graphql`.
pub fn sdl() -> String {
    Schema::build(Query::default(), Mutation::default(), EmptySubscription)
        .finish()
        .sdl()
}

/// Gives every error in every response an `extensions.code`.
struct ErrorCodes;

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodes)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for ErrorCodes {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        ensure_codes(&mut response.errors);
        response
    }
}
