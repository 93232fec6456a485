//! The wire: axum routes, the async-graphql schema, authentication.
//!
//! - [`auth`]: JWT (HS256/RS256) and API-key authentication, dev-token minting.
//! - [`coercion`]: which argument a type error during execution is about.
//! - [`cost`]: a document's size, tokens and expanded cost, known before it
//!   runs.
//! - [`edge`]: bounds on request bodies (size, time), refusals as JSON.
//! - [`error`]: the one place where domain errors become GraphQL error codes.
//! - [`schema`]: GraphQL types and resolvers (thin adapters over `domain`).
//! - [`http`]: `/graphql` over HTTP (GraphQL-over-HTTP), GraphiQL, health and
//!   metrics routes.
//! - [`ws`]: `/graphql/ws` for `graphql-transport-ws` and legacy `graphql-ws`.
//! - [`mcp`]: `/mcp`, the Model Context Protocol over Streamable HTTP: tools
//!   that run GraphQL operations as the caller.
//! - [`fanout`]: `taskEvents` over WebSocket, each event rendered once per
//!   subscription shape and shared.
//! - [`metrics`]: Prometheus counters and histograms.
//! - [`state`]: what every route shares ([`ApiState`]).
//!
//! The modules are layers (`tests/e2e/layers.rs` checks it): the GraphQL
//! plumbing (`error`, `coercion`, `cost`, `metrics`, `auth`) below the
//! [`schema`], and the transports (`state`, `http`, `ws`, `mcp`, `fanout`)
//! above it.

pub mod auth;
pub mod coercion;
pub mod cost;
pub mod edge;
pub mod error;
pub mod fanout;
pub mod hooks;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod schema;
pub mod state;
pub mod upload;
pub mod ws;

pub use http::GRAPHQL_RESPONSE_JSON;

use std::sync::Arc;

use axum::Router;
use brainstem_domain::Domain;

pub use auth::{AuthConfig, Authenticator};
pub use schema::{BrainstemSchema, GraphqlLimits};
pub use state::ApiState;

/// What the API needs besides the domain.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub auth: AuthConfig,
    pub limits: GraphqlLimits,
    /// Per-key and per-tenant request rates (in-process, per replica).
    pub rate_limits: brainstem_domain::rate_limit::RateLimits,
    /// The bearer token `/metrics` requires; `None`: open.
    pub metrics_token: Option<secrecy::SecretString>,
    /// How the server tells open WebSockets it is going away.
    pub departure: edge::Departure,
    /// How `/mcp` is served.
    pub mcp: mcp::McpConfig,
    /// Read replicas serving queries and subscriptions' reads, if any.
    pub replicas: Option<Arc<brainstem_domain::replicas::Replicas>>,
}

/// Why the HTTP application could not be built: a configuration the
/// operator gave, or tools that do not match this build's schema.
#[derive(Debug)]
pub enum SetupError {
    Auth(auth::AuthSetupError),
    McpTools(mcp::ToolDeclarationError),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Auth(e) => e.fmt(f),
            SetupError::McpTools(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetupError::Auth(e) => Some(e),
            SetupError::McpTools(e) => Some(e),
        }
    }
}

impl From<auth::AuthSetupError> for SetupError {
    fn from(e: auth::AuthSetupError) -> Self {
        SetupError::Auth(e)
    }
}

impl From<mcp::ToolDeclarationError> for SetupError {
    fn from(e: mcp::ToolDeclarationError) -> Self {
        SetupError::McpTools(e)
    }
}

/// Build the whole HTTP application.
pub fn router(domain: Domain, config: ApiConfig) -> Result<Router, SetupError> {
    let auth = Arc::new(Authenticator::new(config.auth, domain.clone())?);
    let surface = schema::Surface::new(brainstem_domain::rate_limit::RateLimiter::new(
        config.rate_limits,
    ));
    let schema = schema::build(
        domain.clone(),
        config.limits,
        &surface,
        config.replicas.clone(),
    );
    let metrics = metrics::Metrics::new();
    metrics.count_statements(domain.statements.clone());
    let fanout = Arc::new(fanout::Fanout::default());
    metrics.count_fanout(fanout.renders.clone(), fanout.sent.clone());
    let state = ApiState {
        domain,
        schema,
        auth,
        metrics: Arc::new(metrics),
        surface,
        limits: config.limits,
        fanout,
        metrics_token: config.metrics_token.map(Arc::new),
        departure: config.departure,
    };
    let mcp = mcp::routes(state.clone(), &config.mcp)?;
    Ok(http::routes(state, mcp))
}
