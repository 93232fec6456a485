//! HTTP routes. `/graphql` follows the GraphQL-over-HTTP specification:
//!
//! - `POST` with `Content-Type: application/json`; `GET` with the request in
//!   the query string (`query`, `operationName`, and `variables` and
//!   `extensions` as JSON). `GET` runs queries only: selecting a mutation is
//!   `405` with `Allow: POST`, and nothing runs.
//! - A request with no document (no `query`, nor a persisted query's hash)
//!   is `400` with code `BAD_USER_INPUT`.
//! - Response bodies keep the selection set's order (aliases and fragments
//!   included); a body over the size limit is replaced by one
//!   `RESPONSE_TOO_LARGE` error, and an operation past its time limit is
//!   `503` with code `TIMEOUT` (see `schema::operation`). A request
//!   whose client goes away is dropped with its connection: its resolvers
//!   stop at their next `await`.
//! - `Accept: application/graphql-response+json` gets that media type, and a
//!   request that fails before execution (malformed, invalid, over a limit)
//!   gets `400`; `application/json` (or no `Accept`) always gets `200` for a
//!   well-formed request.
//! - A browser (`Accept: text/html`) without a query is redirected to
//!   GraphiQL at [`GRAPHIQL_PAGE`], which the binary serves with the
//!   console (no script from elsewhere); any other client is answered as
//!   above.
//! - A bad credential is `401` with code `UNAUTHENTICATED`, and counts as
//!   a failed authentication of the client's address: past
//!   `rate_limit_failed_auth_*`, the address's credentials are refused
//!   with `429` (`RATE_LIMITED`, `Retry-After`) before they are looked up.
//! - `X-Acting-Tenant: <slug or id>` lets a platform admin act in that
//!   tenant for this request (audited); for anyone else it is `403`.
//! - An operation over the caller's rate limit is `429` with `Retry-After`
//!   and code `RATE_LIMITED` (the limit itself is checked by a schema
//!   extension, so WebSocket operations are limited alike). Anonymous
//!   operations are limited by the client's address, which the server must
//!   be run with (`into_make_service_with_connect_info`).
//! - Automatic persisted queries work over `POST` and `GET`; a persisted
//!   mutation is refused over `GET` like any other.
//! - `POST` with `multipart/form-data` is a file upload (the GraphQL
//!   multipart request specification, [`crate::upload`]): it must carry a
//!   preflight-forcing header (`Apollo-Require-Preflight`) and a
//!   credential, both checked before its body is read; then it runs as any
//!   request does.

use std::{collections::BTreeMap, net::SocketAddr, time::Instant};

use axum::extract::Path;
use axum::{
    Extension, Router,
    body::Bytes,
    extract::{ConnectInfo, FromRequest, MatchedPath, RawQuery, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{Next, from_fn_with_state},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use brainstem_domain::{
    Error, TaskId,
    origin::{self, Origin},
    row_security,
    tasks::DelegationOutcome,
};
use serde_json::{Value, json};
use tower_http::{catch_panic::CatchPanicLayer, trace::TraceLayer};

pub use crate::state::{ACTING_TENANT, REQUEST_ID};
use crate::{
    ApiState,
    error::{self, code_and_message},
    hooks, metrics, schema, state, upload, ws,
};

pub const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";

/// Where a browser's `GET /graphql` is sent: GraphiQL, a page of the
/// console's build.
pub const GRAPHIQL_PAGE: &str = "/console/graphiql.html";

/// The application's routes; `mcp` is the `/mcp` route ([`crate::mcp`]),
/// merged here so the same tracking, panic and trace layers wrap it.
pub fn routes(state: ApiState, mcp: Router<ApiState>) -> Router {
    Router::new()
        .route("/graphql", get(graphql_get).post(graphql_post))
        .route("/graphql/ws", get(ws::handler))
        .route("/callbacks/tasks/{task_id}", post(delegation_callback))
        .route("/hooks/{tenant}/{source}", hooks::route())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .merge(mcp)
        .route_layer(from_fn_with_state(state.clone(), track))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Which media type the client accepts for the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    GraphqlResponseJson,
    Json,
}

impl Media {
    fn negotiate(headers: &HeaderMap) -> Option<Self> {
        let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
            return Some(Media::Json);
        };
        if accept.contains(GRAPHQL_RESPONSE_JSON) {
            Some(Media::GraphqlResponseJson)
        } else if accept.contains("application/json") || accept.contains("*/*") {
            Some(Media::Json)
        } else {
            None
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Media::GraphqlResponseJson => GRAPHQL_RESPONSE_JSON,
            Media::Json => "application/json",
        }
    }
}

/// A response that carries only errors, with one coded error.
fn error_response(status: StatusCode, media: Media, code: &str, message: &str) -> Response {
    let body = json!({"errors": [{"message": message, "extensions": {"code": code}}]});
    (
        status,
        [(header::CONTENT_TYPE, media.content_type())],
        body.to_string(),
    )
        .into_response()
}

/// The client's address, when the server was run with it.
type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

async fn graphql_get(
    State(state): State<ApiState>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    let query = query.unwrap_or_default();
    if wants_html && !query.split('&').any(|kv| kv.starts_with("query=")) {
        return Redirect::to(GRAPHIQL_PAGE).into_response();
    }
    let Some(media) = Media::negotiate(&headers) else {
        return not_acceptable();
    };
    let request = match request_from_query_string(&query) {
        Ok(r) => r,
        Err(message) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                media,
                error::BAD_USER_INPUT,
                &format!("invalid GraphQL request in the query string: {message}"),
            );
        }
    };
    if !has_document(&request) {
        return error_response(
            StatusCode::BAD_REQUEST,
            media,
            error::BAD_USER_INPUT,
            "the request has no document: send it as `?query=…` (or a persisted query's \
             hash in `extensions`)",
        );
    }
    if is_mutation(&request) || is_persisted_mutation(&state, &request).await {
        let mut response = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            media,
            error::BAD_USER_INPUT,
            "mutations must be sent with POST",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    execute(
        state,
        peer,
        headers,
        media,
        Incoming::Ready(Box::new(request)),
    )
    .await
}

/// The GraphQL request in a `GET`'s query string. async-graphql's own parser
/// reads `operation_name`; the GraphQL-over-HTTP name is `operationName`.
fn request_from_query_string(raw: &str) -> Result<async_graphql::Request, String> {
    #[derive(serde::Deserialize)]
    struct Params {
        query: Option<String>,
        #[serde(rename = "operationName")]
        operation_name: Option<String>,
        variables: Option<String>,
        extensions: Option<String>,
    }
    let params: Params = serde_urlencoded::from_str(raw).map_err(|e| e.to_string())?;
    let variables = match params.variables.as_deref().filter(|v| !v.is_empty()) {
        Some(json) => serde_json::from_str::<Option<async_graphql::Variables>>(json)
            .map_err(|e| format!("`variables` must be a JSON object: {e}"))?,
        None => None,
    };
    let extensions = match params.extensions.as_deref().filter(|v| !v.is_empty()) {
        Some(json) => serde_json::from_str::<Option<async_graphql::Extensions>>(json)
            .map_err(|e| format!("`extensions` must be a JSON object: {e}"))?,
        None => None,
    };
    let mut request = async_graphql::Request::new(params.query.unwrap_or_default());
    request.operation_name = params.operation_name.filter(|name| !name.is_empty());
    request.variables = variables.unwrap_or_default();
    request.extensions = extensions.unwrap_or_default();
    Ok(request)
}

/// Whether the request carries a document: its text, or the hash of a
/// persisted one.
fn has_document(request: &async_graphql::Request) -> bool {
    !request.query.is_empty() || request.extensions.contains_key("persistedQuery")
}

async fn graphql_post(
    State(state): State<ApiState>,
    peer: Peer,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let Some(media) = Media::negotiate(&headers) else {
        return not_acceptable();
    };
    if upload::is_multipart(&headers) {
        if !upload::has_preflight_header(&headers) {
            return error_response(
                StatusCode::BAD_REQUEST,
                media,
                error::BAD_USER_INPUT,
                &format!(
                    "a multipart request must carry one of the headers {} (any value), so \
                     that no other site can send it from a browser",
                    upload::PREFLIGHT_HEADERS.join(", ")
                ),
            );
        }
        let incoming = Incoming::Upload(request.into_body());
        return execute(state, peer, headers, media, incoming).await;
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
    if !is_json {
        return error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            media,
            error::BAD_USER_INPUT,
            "send the request as application/json (or multipart/form-data to upload a file)",
        );
    }
    let body = match Bytes::from_request(request, &state).await {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
    };
    let request: async_graphql::Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(err) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                media,
                error::BAD_USER_INPUT,
                &format!("the request body is not a valid GraphQL request: {err}"),
            );
        }
    };
    if !has_document(&request) {
        return no_document(media);
    }
    execute(
        state,
        peer,
        headers,
        media,
        Incoming::Ready(Box::new(request)),
    )
    .await
}

/// A `POST` without a document.
fn no_document(media: Media) -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        media,
        error::BAD_USER_INPUT,
        "the request has no document: send it as {\"query\": \"…\"} (or a persisted \
         query's hash in `extensions`)",
    )
}

/// A request as it reaches execution: read, or a multipart body to be read
/// once its sender is authenticated.
enum Incoming {
    Ready(Box<async_graphql::Request>),
    Upload(axum::body::Body),
}

/// Run a GraphQL request within its origin (request and trace ids, for
/// the audit rows it writes and the tasks it starts); the response names
/// the request id in `X-Request-Id`.
async fn execute(
    state: ApiState,
    peer: Peer,
    headers: HeaderMap,
    media: Media,
    request: Incoming,
) -> Response {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let origin = Origin::of_request(value(REQUEST_ID), value("traceparent"));
    let request_id = origin.request_id.clone().unwrap_or_default();
    let trace_id = origin.trace_id.clone().unwrap_or_default();
    let span = tracing::info_span!("graphql", request_id = %request_id, trace_id = %trace_id);
    let client_span = value("traceparent").and_then(origin::parent_span_of);
    origin::adopt(&span, &trace_id, client_span.as_deref());
    let work = origin::within(origin, execute_in(state, peer, &headers, media, request));
    let mut response = tracing::Instrument::instrument(work, span).await;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

async fn execute_in(
    state: ApiState,
    peer: Peer,
    headers: &HeaderMap,
    media: Media,
    incoming: Incoming,
) -> Response {
    let authorization = state::authorization(headers);
    let address = peer.as_ref().map(|Extension(ConnectInfo(a))| a.ip());
    let mut credential = match state.authenticate(authorization.as_deref(), address).await {
        Ok(c) => c,
        Err(err) => return request_failure(media, &err),
    };
    if let Some(acting) = headers.get(ACTING_TENANT) {
        let Ok(tenant) = acting.to_str() else {
            return request_failure(
                media,
                &Error::validation("X-Acting-Tenant must be a tenant slug or id"),
            );
        };
        credential = match state.auth.act_in_tenant(credential, tenant).await {
            Ok(c) => c,
            Err(err) => return request_failure(media, &err),
        };
    }
    // An upload's body is read only once its sender is known.
    let mut request = match incoming {
        Incoming::Ready(request) => *request,
        Incoming::Upload(_) if credential.is_none() => {
            return request_failure(
                media,
                &Error::Unauthenticated(
                    "an upload needs a credential: send `Authorization: Bearer <token>`".into(),
                ),
            );
        }
        Incoming::Upload(body) => {
            let max_file = state.domain.memory.import_file_limits().max_bytes;
            match upload::read(headers, body, max_file).await {
                Ok(request) if has_document(&request) => request,
                Ok(_) => return no_document(media),
                Err(err) => return request_failure(media, &err),
            }
        }
    };
    let access = credential
        .as_ref()
        .and_then(|c| row_security::of_principal(&c.principal));
    if let Some(position) = headers.get(schema::replica_reads::READ_AFTER_HEADER) {
        let Ok(position) = position.to_str() else {
            return request_failure(
                media,
                &Error::validation("Brainstem-Read-After must be a commit position"),
            );
        };
        schema::replica_reads::set_read_after(&mut request, position);
    }
    request.data = schema::caller_data(credential);
    if let Some(Extension(ConnectInfo(address))) = peer {
        request.data.insert(schema::ClientAddress(address.ip()));
    }
    let response = row_security::with(access, state.schema.execute(request)).await;
    graphql_response(response, media, state.limits.max_response_bytes)
}

/// A request refused before execution, with the status its code implies.
fn request_failure(media: Media, err: &Error) -> Response {
    let (code, message) = code_and_message(err);
    let status = error::http_status(err);
    let mut response = error_response(status, media, code, &message);
    error::refusal_headers(err, status, response.headers_mut());
    response
}

/// The body of a response, its fields in the selection set's order (a
/// `serde_json::Value` would sort them). A request error carries no `data`.
fn body_of(response: &async_graphql::Response, request_error: bool) -> serde_json::Result<String> {
    #[derive(serde::Serialize)]
    struct ErrorsOnly<'a> {
        errors: &'a [async_graphql::ServerError],
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        extensions: &'a BTreeMap<String, async_graphql::Value>,
    }
    if request_error {
        serde_json::to_string(&ErrorsOnly {
            errors: &response.errors,
            extensions: &response.extensions,
        })
    } else {
        serde_json::to_string(response)
    }
}

fn graphql_response(response: async_graphql::Response, media: Media, max_bytes: usize) -> Response {
    // Errors without a path happened before execution: a request error.
    let request_error = response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| e.path.is_empty());
    let extra_headers = response.http_headers.clone();
    let body = match body_of(&response, request_error) {
        Ok(body) => body,
        Err(err) => {
            tracing::error!(%err, "cannot serialize a GraphQL response");
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                media,
                error::INTERNAL,
                "internal error",
            );
        }
    };
    if body.len() > max_bytes {
        tracing::warn!(
            bytes = body.len(),
            limit = max_bytes,
            "a GraphQL response over its size limit was replaced by an error"
        );
        let status = match media {
            Media::GraphqlResponseJson => StatusCode::BAD_REQUEST,
            Media::Json => StatusCode::OK,
        };
        return error_response(
            status,
            media,
            error::RESPONSE_TOO_LARGE,
            &format!(
                "the response would be {} bytes, over the limit of {max_bytes}: select fewer \
                 fields or smaller pages",
                body.len()
            ),
        );
    }
    let timed_out = request_error
        && response
            .errors
            .iter()
            .any(|e| error::code_of(e) == Some(error::TIMEOUT));
    let retry_after = error::retry_after(&response.errors);
    let unavailable = error::unavailable_retry_after(&response.errors);
    // A persisted-query miss is part of the normal flow, not a failure:
    // Apollo's server answers it with 200, and some Apollo clients stop
    // using persisted queries for good after a 400.
    let persisted_query_miss = response
        .errors
        .iter()
        .all(|e| e.message == error::PERSISTED_QUERY_NOT_FOUND);
    let status = if retry_after.is_some() {
        StatusCode::TOO_MANY_REQUESTS
    } else if timed_out || unavailable.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else if request_error && media == Media::GraphqlResponseJson && !persisted_query_miss {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut out = (status, [(header::CONTENT_TYPE, media.content_type())], body).into_response();
    out.headers_mut().extend(extra_headers);
    if let Some(secs) = retry_after.or(unavailable) {
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    out
}

/// Whether a `GET` names, by hash alone, a persisted document whose operation
/// is a mutation.
async fn is_persisted_mutation(state: &ApiState, request: &async_graphql::Request) -> bool {
    use async_graphql::extensions::apollo_persisted_queries::CacheStorage;
    if !request.query.is_empty() {
        return false;
    }
    let Some(hash) = request
        .extensions
        .get("persistedQuery")
        .and_then(|v| match v {
            async_graphql::Value::Object(map) => map.get("sha256Hash"),
            _ => None,
        })
        .and_then(|v| match v {
            async_graphql::Value::String(s) => Some(s.clone()),
            _ => None,
        })
    else {
        return false;
    };
    match state.surface.persisted_queries.get(hash).await {
        Some(doc) => {
            operation_type(&doc, request.operation_name.as_deref())
                == Some(async_graphql::parser::types::OperationType::Mutation)
        }
        None => false,
    }
}

/// Whether the operation the request would run is a mutation.
fn is_mutation(request: &async_graphql::Request) -> bool {
    use async_graphql::parser::types::OperationType;
    let Ok(doc) = async_graphql::parser::parse_query(&request.query) else {
        return false; // execution reports the syntax error
    };
    operation_type(&doc, request.operation_name.as_deref()) == Some(OperationType::Mutation)
}

fn operation_type(
    doc: &async_graphql::parser::types::ExecutableDocument,
    operation_name: Option<&str>,
) -> Option<async_graphql::parser::types::OperationType> {
    use async_graphql::parser::types::DocumentOperations;
    match &doc.operations {
        DocumentOperations::Single(op) => Some(op.node.ty),
        DocumentOperations::Multiple(ops) => match operation_name {
            Some(name) => ops.get(name).map(|op| op.node.ty),
            None if ops.len() == 1 => ops.values().next().map(|op| op.node.ty),
            None => None,
        },
    }
}

fn not_acceptable() -> Response {
    (
        StatusCode::NOT_ACCEPTABLE,
        format!("accept {GRAPHQL_RESPONSE_JSON} or application/json"),
    )
        .into_response()
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        Media::Json,
        error::INTERNAL,
        "internal error",
    )
}

/// The body an external system posts when delegated work ends.
#[derive(serde::Deserialize)]
struct CallbackBody {
    success: bool,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    error: Option<String>,
    /// The token may come here or as `Authorization: Bearer <token>`.
    #[serde(default)]
    token: Option<String>,
}

/// `POST /callbacks/tasks/{task_id}`: complete or fail a delegated step.
/// Authenticated by the task's single-use token only.
async fn delegation_callback(
    State(state): State<ApiState>,
    Path(task_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json_error = |status: StatusCode, code: &str, message: &str| {
        (status, axum::Json(json!({"error": message, "code": code}))).into_response()
    };
    let Ok(task_id) = task_id.parse::<TaskId>() else {
        return json_error(
            StatusCode::NOT_FOUND,
            error::NOT_FOUND,
            "delegated task or token not found",
        );
    };
    let body: CallbackBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                error::BAD_USER_INPUT,
                &format!(
                    "expected {{\"success\": bool, \"data\": {{…}}, \"error\": \"…\"}}: {err}"
                ),
            );
        }
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or(body.token);
    let Some(token) = token else {
        return json_error(
            StatusCode::UNAUTHORIZED,
            error::UNAUTHENTICATED,
            "the callback token is missing",
        );
    };
    let outcome = DelegationOutcome {
        success: body.success,
        data: body.data,
        error: body.error,
    };
    match state
        .domain
        .tasks
        .complete_delegation(task_id, &token, outcome)
        .await
    {
        Ok(task) => axum::Json(json!({"status": task.status.as_str()})).into_response(),
        Err(err) => {
            let (code, message) = code_and_message(&err);
            let status = match err {
                Error::NotFound(_) => StatusCode::NOT_FOUND,
                Error::Validation(_) => StatusCode::BAD_REQUEST,
                Error::Conflict(_) | Error::InvalidTransition(_) => StatusCode::CONFLICT,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            json_error(status, code, &message)
        }
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<ApiState>) -> Response {
    match state.domain.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(err) => {
            tracing::warn!(%err, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

async fn metrics_text(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.metrics_token {
        use secrecy::ExposeSecret;
        use sha2::{Digest, Sha256};
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Digests compared, so the comparison's time says nothing of the token.
        if Sha256::digest(presented.as_bytes()) != Sha256::digest(token.expose_secret().as_bytes())
        {
            let mut refused = error_response(
                StatusCode::UNAUTHORIZED,
                Media::Json,
                error::UNAUTHENTICATED,
                "/metrics needs `Authorization: Bearer <metrics_token>`",
            );
            refused
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return refused;
        }
    }
    // The queue's depth is read when asked for, not kept up to date.
    match state.domain.tasks.queue_depth(chrono::Utc::now()).await {
        Ok(depth) => {
            brainstem_domain::metrics::metrics()
                .queue_depth
                .set(i64::try_from(depth).unwrap_or(i64::MAX));
        }
        Err(err) => tracing::warn!(%err, "the queue depth could not be read"),
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// Middleware: count and time every request.
async fn track(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    state
        .metrics
        .http_duration
        .get_or_create(&metrics::RouteLabels {
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .http_requests
        .get_or_create(&metrics::RequestLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}
