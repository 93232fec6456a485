//! What every route and connection shares, built once by
//! [`crate::router`].

use std::{net::IpAddr, sync::Arc, time::Instant};

use axum::http::{HeaderMap, header};
use brainstem_domain::{Domain, Error};

use crate::{
    auth::{Authenticator, Credential},
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
    /// The bearer token `/metrics` requires; `None`: open.
    pub metrics_token: Option<Arc<secrecy::SecretString>>,
    /// Tells open WebSockets that the server is going away.
    pub departure: Departure,
}

impl ApiState {
    /// Authenticate an `Authorization` value sent from `address` (over
    /// HTTP or in a WebSocket's `connection_init`). A bad credential counts
    /// as a failed authentication of the address; an address that has used
    /// up its failures is refused with `RATE_LIMITED` before its credential
    /// is looked up, so guessing costs a bounded number of lookups.
    pub async fn authenticate(
        &self,
        header: Option<&str>,
        address: Option<IpAddr>,
    ) -> Result<Option<Credential>, Error> {
        let limiter = &self.surface.limiter;
        if let (Some(_), Some(address)) = (header, address) {
            limiter.check_failures(address, Instant::now())?;
        }
        let credential = self.auth.authenticate_header(header).await;
        if let (Err(Error::Unauthenticated(_)), Some(address)) = (&credential, address) {
            limiter.record_failure(address, Instant::now());
        }
        credential
    }
}

/// The header that names a request (given by the client, or made here).
pub const REQUEST_ID: &str = "x-request-id";

/// The header naming the tenant a platform admin acts in.
pub const ACTING_TENANT: &str = "x-acting-tenant";

/// The credential an HTTP request presents, as an `Authorization` value:
/// that header, or `X-Api-Key: <key>` as `Bearer <key>`.
pub fn authorization(headers: &HeaderMap) -> Option<String> {
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    value(header::AUTHORIZATION.as_str())
        .map(str::to_owned)
        .or_else(|| value("x-api-key").map(|key| format!("Bearer {key}")))
}
