//! What every route and connection shares, built once by
//! [`crate::router`].

use std::sync::Arc;

use brainstem_domain::Domain;

use crate::{
    auth::Authenticator,
    edge::Departure,
    fanout::Fanout,
    metrics::Metrics,
    schema::{self, BrainstemSchema, GraphqlLimits},
};

/// Shared state of every route.
#[derive(Clone)]
pub struct ApiState {
    pub domain: Domain,
    pub schema: BrainstemSchema,
    pub auth: Arc<Authenticator>,
    pub metrics: Arc<Metrics>,
    pub surface: schema::Surface,
    pub limits: GraphqlLimits,
    /// Rendered task events shared by WebSocket subscribers.
    pub fanout: Arc<Fanout>,
    /// Tells open WebSockets that the server is going away.
    pub departure: Departure,
}
