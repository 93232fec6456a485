//! `/mcp`: Brainstem as a Model Context Protocol server, over Streamable
//! HTTP (the `rmcp` crate), for partners' agents.
//!
//! - Every request is authenticated like `/graphql`: `Authorization:
//!   Bearer <token or API key>` or `X-Api-Key`, and `X-Acting-Tenant` for
//!   a platform admin. A missing or bad credential is `401` with
//!   `WWW-Authenticate: Bearer` (as MCP's authorization section asks)
//!   before anything of MCP runs, and counts as a failed authentication of
//!   the client's address, as on `/graphql`.
//! - The server is stateless (no MCP session): each POST carries its own
//!   credential, so any replica answers any request and a revoked key is
//!   refused at its next request.
//! - Each tool is a GraphQL operation ([`tools`]) run through the schema's
//!   pipeline with the caller's credential: the resolvers' scope checks,
//!   tenant scoping, row security, rate limits and audit apply unchanged,
//!   and a tool's input schema is the GraphQL field's ([`json_schema`]).
//!   A caller sees and may call only the tools its scopes allow.
//! - `start_task` in a waiting mode reports the task's events as MCP
//!   progress notifications when the client sent a `progressToken`
//!   ([`wait`]).
//! - A task and a memory are resources, `brainstem://tasks/{id}` and
//!   `brainstem://memories/{id}` ([`resources`]), read through the same
//!   GraphQL-as-the-caller path as the tools.
//! - A tool's failure (a GraphQL error: `NOT_FOUND`, `FORBIDDEN`, …) is a
//!   tool result with `isError` and the errors' codes, which the calling
//!   model can read; an unknown tool, or one the caller may not use, is a
//!   protocol error (`-32602`).

pub mod json_schema;
pub mod resources;
pub mod tools;
mod wait;

use std::{net::IpAddr, net::SocketAddr, sync::Arc};

use axum::{
    Extension, Router,
    extract::{ConnectInfo, Request, State},
    http::request::Parts,
    middleware::{Next, from_fn_with_state},
    response::{IntoResponse, Response},
};
use brainstem_domain::{
    Error,
    origin::{self, Origin},
    row_security,
};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
        ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::never::NeverSessionManager,
    },
};
use serde_json::{Value, json};

use crate::{
    auth::Credential,
    error::{self, code_and_message},
    schema,
    state::{self, ACTING_TENANT, ApiState, REQUEST_ID},
};

pub use tools::{Catalogue, ToolDeclarationError};

/// How `/mcp` is served.
#[derive(Clone, Debug, Default)]
pub struct McpConfig {
    /// `Host` values `/mcp` answers (`host` or `host:port`); empty: any.
    /// Every request carries its own credential, so a page that rebinds
    /// a name to this server gains nothing; list hosts to refuse others.
    pub allowed_hosts: Vec<String>,
}

/// The `/mcp` route, to merge into the application's router.
pub fn routes(
    state: ApiState,
    config: &McpConfig,
) -> Result<Router<ApiState>, ToolDeclarationError> {
    let catalogue = Arc::new(Catalogue::new(&schema::sdl())?);
    let server = McpServer {
        state: state.clone(),
        catalogue,
    };
    let transport = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(config.allowed_hosts.clone());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        transport,
    );
    Ok(Router::new()
        .route_service("/mcp", service)
        .route_layer(from_fn_with_state(state, authenticate)))
}

/// Who calls, put in the request's extensions by [`authenticate`] for
/// the tools to read.
#[derive(Clone, Debug)]
struct McpCaller {
    credential: Credential,
    address: Option<IpAddr>,
    request_id: Option<String>,
    traceparent: Option<String>,
}

/// Middleware: refuse a request without a valid credential, as `/graphql`
/// refuses a bad one (anonymous access has no tool to offer).
async fn authenticate(
    State(state): State<ApiState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let authorization = state::authorization(headers);
    let acting = value(ACTING_TENANT).map(str::to_owned);
    let request_id = value(REQUEST_ID).map(str::to_owned);
    let traceparent = value("traceparent").map(str::to_owned);
    let address = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let credential = match state.authenticate(authorization.as_deref(), address).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return refusal(&Error::Unauthenticated(
                "/mcp needs `Authorization: Bearer <token or API key>`".into(),
            ));
        }
        Err(err) => return refusal(&err),
    };
    let credential = match acting {
        Some(tenant) => match state.auth.act_in_tenant(Some(credential), &tenant).await {
            Ok(Some(c)) => c,
            Ok(None) => return refusal(&Error::forbidden("no acting tenant")),
            Err(err) => return refusal(&err),
        },
        None => credential,
    };
    request.extensions_mut().insert(McpCaller {
        credential,
        address,
        request_id,
        traceparent,
    });
    next.run(request).await
}

/// A request refused before MCP: the status its error implies, a JSON
/// body with the code, and the headers HTTP asks for.
fn refusal(err: &Error) -> Response {
    let (code, message) = code_and_message(err);
    let status = error::http_status(err);
    let body = json!({"error": message, "code": code});
    let mut response = (status, axum::Json(body)).into_response();
    error::refusal_headers(err, status, response.headers_mut());
    response
}

/// The MCP server of one request (the transport makes one per request).
#[derive(Clone)]
struct McpServer {
    state: ApiState,
    catalogue: Arc<Catalogue>,
}

impl McpServer {
    /// Run `request` as `caller`, as `/graphql` runs it: the caller's
    /// data, its address for the rate limiter, its tenant's row access,
    /// its request and trace ids.
    async fn execute(
        &self,
        caller: &McpCaller,
        mut request: async_graphql::Request,
    ) -> async_graphql::Response {
        request.data = schema::caller_data(Some(caller.credential.clone()));
        if let Some(address) = caller.address {
            request.data.insert(schema::ClientAddress(address));
        }
        let access = row_security::of_principal(&caller.credential.principal);
        let origin =
            Origin::of_request(caller.request_id.as_deref(), caller.traceparent.as_deref());
        origin::within(
            origin,
            row_security::with(access, self.state.schema.execute(request)),
        )
        .await
    }
}

/// The caller the middleware authenticated. Every request reaching a
/// handler passed it; its absence is a wiring error.
fn caller(context: &RequestContext<RoleServer>) -> Result<McpCaller, ErrorData> {
    context
        .extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<McpCaller>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("the request was not authenticated", None))
}

/// A GraphQL response as a tool's result: the field's value, or the
/// errors with their codes.
fn tool_result(response: async_graphql::Response, field: &str) -> CallToolResult {
    if !response.errors.is_empty() {
        let errors: Vec<Value> = response
            .errors
            .iter()
            .map(|e| {
                json!({
                    "message": e.message,
                    "code": error::code_of(e).unwrap_or(error::INTERNAL),
                })
            })
            .collect();
        return CallToolResult::structured_error(json!({ "errors": errors }));
    }
    let data = response.data.into_json().unwrap_or(Value::Null);
    let value = data.get(field).cloned().unwrap_or(Value::Null);
    CallToolResult::structured(value)
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("brainstem", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Brainstem runs tasks for your tenant: start one (start_task), follow it \
                 (get_task), decide its reviews (answer_review), and read or add the \
                 tenant's memories. Ids are Brainstem's global ids, as in its GraphQL API; \
                 a task and a memory are also resources, brainstem://tasks/{id} and \
                 brainstem://memories/{id}.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        let tools = self
            .catalogue
            .visible_to(&caller.credential.principal)
            .map(|t| t.tool.clone())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context)?;
        let Some(tool) = self
            .catalogue
            .callable(&request.name, &caller.credential.principal)
        else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`", request.name),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        if tool.spec.name == tools::START_TASK {
            return Ok(wait::start_task(self, &caller, tool, arguments, &context)
                .await
                .into());
        }
        Ok(self.run(&caller, tool, arguments).await.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let caller = caller(&context)?;
        let templates = resources::visible_to(&caller.credential.principal)
            .map(resources::Template::listed)
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = caller(&context)?;
        let uri = request.uri;
        let Some((template, id)) = resources::resolve(&uri, &caller.credential.principal) else {
            return Err(resources::not_found(&uri));
        };
        let response = self.execute(&caller, template.request(id)).await;
        resources::read_result(&uri, template.field, response).map(Into::into)
    }
}

impl McpServer {
    /// Run `tool` with `arguments` as `caller`.
    async fn run(
        &self,
        caller: &McpCaller,
        tool: &tools::Prepared,
        arguments: JsonObject,
    ) -> CallToolResult {
        match tool.request(arguments) {
            Ok(request) => tool_result(self.execute(caller, request).await, tool.spec.field),
            Err(message) => CallToolResult::structured_error(json!({
                "errors": [{"message": message, "code": error::BAD_USER_INPUT}]
            })),
        }
    }
}
