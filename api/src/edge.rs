//! The HTTP edge: what a client that sends too much, or too slowly, gets.
//!
//! - A request body larger than [`EdgeLimits::max_body_bytes`] is refused
//!   with `413` and code `PAYLOAD_TOO_LARGE`: at once when its
//!   `Content-Length` says so, else when reading passes the limit. A route
//!   may keep a smaller limit of its own (`DefaultBodyLimit` on the route).
//!   The one exception is an upload (`POST /graphql` as
//!   `multipart/form-data`), bounded by [`EdgeLimits::max_upload_bytes`]
//!   instead, which its reader ([`crate::upload`]) enforces as it reads.
//! - A request body that has not arrived whole within
//!   [`EdgeLimits::body_timeout`] of its headers is refused with `408` and
//!   code `REQUEST_TIMEOUT`, and the connection is closed.
//! - Every refusal made below this layer without a JSON body (axum's own
//!   `413`, `408`) is rewritten as a GraphQL-shaped error with a code.
//! - Answers over [`COMPRESS_ABOVE_BYTES`] are compressed (brotli or
//!   gzip) when the client's `Accept-Encoding` takes it; answers already
//!   encoded (the console's precompressed files), images and event
//!   streams are left as they are.
//!
//! Connection-level bounds (header and idle timeouts, the connection cap)
//! belong to the server loop that accepts connections, not to this layer.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    body::Body,
    extract::{DefaultBodyLimit, Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{Next, from_fn_with_state},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;

use crate::error;

/// Limits on what one request may send.
#[derive(Clone, Copy, Debug)]
pub struct EdgeLimits {
    pub max_body_bytes: usize,
    /// The largest upload body (see [`crate::upload::request_limit`]).
    pub max_upload_bytes: usize,
    pub body_timeout: Duration,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 2 * 1024 * 1024,
            max_upload_bytes: crate::upload::request_limit(
                brainstem_domain::memory::ImportFileLimits::default().max_bytes,
            ),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The Content-Length a request may declare: an upload's limit for an
/// upload, the body limit for anything else.
fn declared_limit(request: &Request, limits: &EdgeLimits) -> usize {
    let upload = request.method() == axum::http::Method::POST
        && request.uri().path() == "/graphql"
        && crate::upload::is_multipart(request.headers());
    if upload {
        limits.max_upload_bytes
    } else {
        limits.max_body_bytes
    }
}

/// Answers smaller than this are sent as they are: compressing them saves
/// less than its cost.
pub const COMPRESS_ABOVE_BYTES: u64 = 1024;

/// Bound `router`'s requests by `limits` and compress its answers (see the
/// module's header).
pub fn bounded(router: axum::Router, limits: EdgeLimits) -> axum::Router {
    use tower_http::compression::{
        CompressionLayer,
        predicate::{NotForContentType, Predicate, SizeAbove},
    };
    let worth_compressing = SizeAbove::new(COMPRESS_ABOVE_BYTES)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE);
    router
        .layer(from_fn_with_state(limits, refusals))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(
            CompressionLayer::new()
                .gzip(true)
                .br(true)
                .compress_when(worth_compressing),
        )
}

async fn refusals(State(limits): State<EdgeLimits>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = declared_limit(&request, &limits);
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit);
    }
    let timed_out = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| with_deadline(body, limits.body_timeout, timed_out.clone()));
    let response = next.run(request).await;
    if timed_out.load(Ordering::Relaxed) {
        return refusal(
            StatusCode::REQUEST_TIMEOUT,
            error::REQUEST_TIMEOUT,
            &format!(
                "the request body did not arrive within {} s",
                limits.body_timeout.as_secs()
            ),
        );
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE if !is_json => too_large(limits.max_body_bytes),
        StatusCode::REQUEST_TIMEOUT if !is_json => refusal(
            StatusCode::REQUEST_TIMEOUT,
            error::REQUEST_TIMEOUT,
            "the request took too long to arrive",
        ),
        _ => response,
    }
}

/// `body`, failing once `timeout` has passed before its end; `timed_out`
/// says whether it did.
fn with_deadline(body: Body, timeout: Duration, timed_out: Arc<AtomicBool>) -> Body {
    let deadline = tokio::time::Instant::now() + timeout;
    let frames = body.into_data_stream();
    let bounded = futures_util::stream::unfold(Some(frames), move |frames| {
        let timed_out = timed_out.clone();
        async move {
            let mut frames = frames?;
            match tokio::time::timeout_at(deadline, frames.next()).await {
                Ok(Some(frame)) => Some((frame, Some(frames))),
                Ok(None) => None,
                Err(_) => {
                    timed_out.store(true, Ordering::Relaxed);
                    Some((Err(axum::Error::new("request body timeout")), None))
                }
            }
        }
    });
    Body::from_stream(bounded)
}

fn too_large(max: usize) -> Response {
    refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        error::PAYLOAD_TOO_LARGE,
        &format!("the request body is over the limit of {max} bytes"),
    )
}

/// A refusal the server will not read more of: the connection closes
/// after it, so an unread body does not hold it.
fn refusal(status: StatusCode, code: &'static str, message: &str) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error::refusal_body(code, message),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The close code a WebSocket gets when the server goes away.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// The server's shutdown as open WebSockets see it: each socket holds a
/// [`Departure::watch`] and closes with [`CLOSE_GOING_AWAY`] when the server
/// [leaves](Departure::leave); the server waits until
/// [all are gone](Departure::all_gone) (within its grace period).
#[derive(Clone, Debug)]
pub struct Departure(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Departure {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Departure {
    /// For one socket: changes to `true` when the server leaves.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.subscribe()
    }

    /// Tell every socket to close.
    pub fn leave(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once every socket's watch is dropped.
    pub async fn all_gone(&self) {
        self.0.closed().await;
    }
}
