//! `POST /hooks/{tenant}/{source}`: another system starts a task with a
//! signed delivery (see `brainstem_domain::hooks` for the signature, the
//! replay window and idempotency).
//!
//! Answers: `202 {"taskId", "duplicate"}` when a task started (or had
//! started for the same delivery); otherwise `{"error", "code"}` with `400`
//! (not a JSON object), `401` (unsigned, badly signed, outside the replay
//! window, or no such hook: one answer for all that need the tenant), `413`
//! (body over `hooks::MAX_BODY_BYTES`, refused before it is read whole),
//! `429` with `Retry-After`: over the tenant's rate (which verified
//! deliveries share with its GraphQL callers), or from an address that has
//! used up its failed authentications (refused before any lookup; its
//! refusals never touch a tenant's rate).

use std::{net::SocketAddr, time::Instant};

use axum::{
    Extension,
    body::Bytes,
    extract::{ConnectInfo, DefaultBodyLimit, Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{MethodRouter, post},
};
use brainstem_domain::{
    Error,
    hooks::{self, Delivery},
};
use serde_json::json;

use crate::{ApiState, error::code_and_message, schema::ids::NodeType};

/// The route, with its own body limit.
pub fn route() -> MethodRouter<ApiState> {
    post(receive).layer(DefaultBodyLimit::max(hooks::MAX_BODY_BYTES))
}

async fn receive(
    State(state): State<ApiState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Path((tenant, source)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let limiter = &state.surface.limiter;
    let address = peer.map(|Extension(ConnectInfo(a))| a.ip());
    if let Some(address) = address
        && let Err(err) = limiter.check_failures(address, Instant::now())
    {
        return refusal(err);
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let delivery = Delivery {
        tenant: &tenant,
        source: &source,
        timestamp: header("x-brainstem-timestamp"),
        signature: header("x-brainstem-signature"),
        body: &body,
    };
    let received = state
        .domain
        .receive_hook(delivery, chrono::Utc::now(), limiter)
        .await;
    if let (Err(Error::Unauthenticated(_)), Some(address)) = (&received, address) {
        limiter.record_failure(address, Instant::now());
    }
    match received {
        Ok(accepted) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({
                "taskId": crate::schema::ids::encode(NodeType::Task, accepted.task.uuid()).0,
                "duplicate": accepted.duplicate,
            })),
        )
            .into_response(),
        Err(err) => refusal(err),
    }
}

/// `{"error", "code"}` with the status the error implies.
fn refusal(err: Error) -> Response {
    let (code, message) = code_and_message(&err);
    let (status, retry_after) = match err {
        Error::NotFound(_) => (StatusCode::NOT_FOUND, None),
        Error::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, None),
        Error::Validation(_) => (StatusCode::BAD_REQUEST, None),
        Error::RateLimited {
            retry_after_secs, ..
        } => (StatusCode::TOO_MANY_REQUESTS, Some(retry_after_secs)),
        Error::Unavailable(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(crate::error::UNAVAILABLE_RETRY_AFTER_SECS),
        ),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    let mut response =
        (status, axum::Json(json!({"error": message, "code": code}))).into_response();
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.max(1).into());
    }
    response
}
