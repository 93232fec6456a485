//! MCP servers as tools: a tenant connection of kind `mcp` lends a remote
//! MCP server's tools to the tenant's plans as `mcp:<connection>/<tool>`.
//! The remote is an rmcp server in this process, over real HTTP, with a
//! tool that answers, one that is too slow and one that fails.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{http::request::Parts, response::IntoResponse};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::{Peer, RequestContext},
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    },
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, poll_until};

/// What the remote saw of one call.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) authorization: Option<String>,
    pub(crate) idempotency_header: Option<String>,
    pub(crate) idempotency_meta: Option<String>,
}

#[derive(Clone, Default)]
pub(crate) struct Remote {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Tools listed after the first three, added by a test.
    added: Arc<Mutex<Vec<Tool>>>,
    /// Each session's peer, to announce a change of the list on.
    peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    /// `tools/list` requests answered.
    pub(crate) lists: Arc<AtomicUsize>,
    /// Streams (`GET /mcp`) opened.
    pub(crate) streams: Arc<AtomicUsize>,
    /// When set, the only bearer token answered; any other is `401`.
    pub(crate) accepted: Arc<Mutex<Option<String>>>,
}

impl Remote {
    /// List `tool` too, from now on (announced only by [`Remote::announce`]).
    pub(crate) fn add(&self, tool: Tool) {
        self.added.lock().unwrap().push(tool);
    }

    /// Send `notifications/tools/list_changed` on every session (a
    /// session no longer served is skipped).
    pub(crate) async fn announce(&self) {
        let peers = self.peers.lock().unwrap().clone();
        for peer in peers {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    pub(crate) fn calls_of(&self, tool: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.tool == tool)
            .cloned()
            .collect()
    }
}

pub(crate) fn tool(name: &'static str, description: &'static str) -> Tool {
    let schema = json!({"type": "object"});
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    Tool::new(name, description, Arc::new(schema))
}

impl ServerHandler for Remote {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.peers.lock().unwrap().push(context.peer.clone());
        let mut tools = vec![
            tool("echo", "answers with its arguments"),
            tool("slow", "answers after 3 s"),
            tool("fail", "always fails"),
        ];
        tools.extend(self.added.lock().unwrap().iter().cloned());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<Parts>();
        let header = |name: &str| {
            parts
                .and_then(|p| p.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let meta = context
            .meta
            .0
            .0
            .get("io.brainstem/idempotencyKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        self.seen.lock().unwrap().push(Seen {
            tool: request.name.to_string(),
            arguments: arguments.clone(),
            authorization: header("authorization"),
            idempotency_header: header("idempotency-key"),
            idempotency_meta: meta,
        });
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::structured(json!({"echoed": arguments})),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                CallToolResult::structured(json!({"late": true}))
            }
            _ => CallToolResult::error(vec![ContentBlock::text("the ledger is closed")]),
        };
        Ok(result.into())
    }
}

/// Serve `remote` over Streamable HTTP (with sessions) on a random
/// loopback port; its URL. The console's browser test lists its tools too.
pub(crate) async fn serve(remote: Remote) -> String {
    let gate = remote.clone();
    let service = StreamableHttpService::new(
        move || Ok(remote.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate, gate_request));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/mcp")
}

/// Count the streams (`GET`) opened, and refuse (`401`) a bearer token
/// other than the accepted one, when there is one.
async fn gate_request(
    axum::extract::State(remote): axum::extract::State<Remote>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request.method() == axum::http::Method::GET {
        remote.streams.fetch_add(1, Ordering::SeqCst);
    }
    let accepted = remote.accepted.lock().unwrap().clone();
    if let Some(token) = accepted {
        let given = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {token}").as_str()) {
            return axum::http::StatusCode::UNAUTHORIZED.into_response();
        }
    }
    next.run(request).await
}

/// `tenant`'s connection `ledger` of kind `mcp` to `url`.
pub(crate) async fn connect_ledger(app: &TestApp, tenant: &str, url: &str) {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
        json!({"input": {"name": "ledger", "kind": "mcp",
            "config": {"url": url, "timeout_ms": 300},
            "secret": {"token": "s3cret"}}}),
    )
    .await
    .data();
}

const STEPS: &str = "id status error steps { stepId attempt status output error idempotencyKey }";

async fn task(app: &TestApp, id: &str) -> Value {
    app.graphql(
        Some(&app.admin_token("acme")),
        &format!("query($id: ID!) {{ task(id: $id) {{ {STEPS} }} }}"),
        json!({"id": id}),
    )
    .await
    .data()["task"]
        .clone()
}

/// Run `tenant`'s plan `key` until the task settles; the task.
async fn run_plan(app: &TestApp, key: &str) -> Value {
    let started = app
        .start_task("acme", json!({"planKey": key, "input": "ACC-7"}))
        .await;
    let id = started["id"].as_str().unwrap().to_owned();
    poll_until("the task settles", async || {
        app.run_tasks().await;
        let task = task(app, &id).await;
        matches!(task["status"].as_str(), Some("COMPLETED" | "FAILED")).then_some(task)
    })
    .await
}

crate::on_both_backends!(
    a_plan_step_calls_a_tool_of_the_tenant_s_mcp_server,
    an_agent_step_calls_a_tool_of_the_tenant_s_mcp_server,
    a_slow_mcp_tool_times_out_and_is_retried_per_policy,
    a_failing_mcp_tool_fails_its_step_once,
    another_tenant_cannot_use_the_connection,
    the_catalogue_lists_a_connection_s_tools_with_their_schemas,
);

/// `mcpTools(connection:)` asks the server now: its tools, their keys
/// for plans and their schemas; another tenant's connection is not found.
async fn the_catalogue_lists_a_connection_s_tools_with_their_schemas(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    connect_ledger(&app, "acme", &url).await;
    let query =
        "query($c: String!) { mcpTools(connection: $c) { key name description inputSchema } }";
    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            query,
            json!({"c": "ledger"}),
        )
        .await;
    let tools = listed.data()["mcpTools"].as_array().unwrap().clone();
    let keys: Vec<&str> = tools.iter().map(|t| t["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["mcp:ledger/echo", "mcp:ledger/slow", "mcp:ledger/fail"]
    );
    assert_eq!(tools[1]["description"], "answers after 3 s");
    assert_eq!(tools[0]["inputSchema"], json!({"type": "object"}));

    let other = app
        .graphql(
            Some(&app.admin_token("globex")),
            query,
            json!({"c": "ledger"}),
        )
        .await;
    assert_eq!(other.error_code(), "NOT_FOUND", "{:?}", other.body);
    let (_, key) = app.create_api_key("acme", &["tasks:read"]).await;
    let member = app.graphql(Some(&key), query, json!({"c": "ledger"})).await;
    assert_eq!(member.error_code(), "FORBIDDEN", "{:?}", member.body);
}

async fn a_plan_step_calls_a_tool_of_the_tenant_s_mcp_server(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    app.publish_plan(
        "acme",
        json!({"key": "lookup", "intent": "ledger.lookup", "steps": [
            {"id": "look", "tool": "mcp:ledger/echo", "args": {"account": "{{ input.text }}"}}
        ]}),
    )
    .await
    .data();
    let task = run_plan(&app, "lookup").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let step = &task["steps"][0];
    assert_eq!(step["output"]["echoed"]["account"], "ACC-7", "{task}");

    let calls = remote.calls_of("echo");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call.arguments, json!({"account": "ACC-7"}));
    assert_eq!(call.authorization.as_deref(), Some("Bearer s3cret"));
    let key = step["idempotencyKey"].as_str().unwrap();
    assert!(key.ends_with(":look"), "{key}");
    assert_eq!(call.idempotency_header.as_deref(), Some(key));
    assert_eq!(call.idempotency_meta.as_deref(), Some(key));

    // The startup check of stored plans accepts the MCP step, and the
    // plan runs after a restart.
    let app = app.restart().await;
    let task = run_plan(&app, "lookup").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(remote.calls_of("echo").len(), 2);
}

/// An agent step that names an MCP tool is offered it (the offline model
/// calls what the message names), and the call is a durable step with its
/// own idempotency key.
async fn an_agent_step_calls_a_tool_of_the_tenant_s_mcp_server(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "ledger.assist", "steps": [
            {"id": "answer", "tool": "agent", "args": {"tools": ["mcp:ledger/echo"]}}
        ]}),
    )
    .await
    .data();
    let started = app
        .start_task(
            "acme",
            json!({"planKey": "assist",
                   "input": "Look it up.\ncall mcp_ledger_echo {\"account\": \"ACC-9\"}"}),
        )
        .await;
    let id = started["id"].as_str().unwrap().to_owned();
    let task = poll_until("the agent's task settles", async || {
        app.run_tasks().await;
        let task = task(&app, &id).await;
        matches!(task["status"].as_str(), Some("COMPLETED" | "FAILED")).then_some(task)
    })
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let calls = remote.calls_of("echo");
    assert_eq!(calls.len(), 1, "{calls:?} {task}");
    assert_eq!(calls[0].arguments, json!({"account": "ACC-9"}));
    let key = calls[0].idempotency_header.clone().unwrap();
    assert!(
        task["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["idempotencyKey"] == key.as_str() && s["status"] == "COMPLETED"),
        "{key} {task}"
    );
}

async fn a_slow_mcp_tool_times_out_and_is_retried_per_policy(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    app.publish_plan(
        "acme",
        json!({"key": "wait", "intent": "ledger.wait", "steps": [
            {"id": "wait", "tool": "mcp:ledger/slow", "args": {},
             "retry": {"maxAttempts": 2, "initialBackoffMs": 10, "maxBackoffMs": 10}}
        ]}),
    )
    .await
    .data();
    let task = run_plan(&app, "wait").await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("timed out"),
        "{task}"
    );
    let attempts: Vec<&Value> = task["steps"].as_array().unwrap().iter().collect();
    assert_eq!(attempts.len(), 2, "{task}");
    // Each attempt reached the server, with the same idempotency key.
    let calls = remote.calls_of("slow");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].idempotency_header, calls[1].idempotency_header);
}

async fn a_failing_mcp_tool_fails_its_step_once(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    app.publish_plan(
        "acme",
        json!({"key": "close", "intent": "ledger.close", "steps": [
            {"id": "close", "tool": "mcp:ledger/fail", "args": {}}
        ]}),
    )
    .await
    .data();
    let task = run_plan(&app, "close").await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("the ledger is closed"),
        "{task}"
    );
    // A tool's own failure is not retried.
    assert_eq!(remote.calls_of("fail").len(), 1);
}

async fn another_tenant_cannot_use_the_connection(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    connect_ledger(&app, "acme", &url).await;
    let plan = json!({"key": "steal", "intent": "ledger.steal", "steps": [
        {"id": "look", "tool": "mcp:ledger/echo", "args": {}}
    ]});
    let refused = app.publish_plan("globex", plan.clone()).await;
    assert_eq!(refused.error_code(), "BAD_USER_INPUT", "{:?}", refused.body);
    assert!(
        refused.error_message().contains("mcp:ledger/echo"),
        "{:?}",
        refused.body
    );
    // A connection of the same name but another kind lends nothing.
    app.graphql(
        Some(&app.admin_token("globex")),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
        json!({"input": {"name": "ledger", "kind": "http", "config": {"url": url}}}),
    )
    .await
    .data();
    let refused = app.publish_plan("globex", plan.clone()).await;
    assert_eq!(refused.error_code(), "BAD_USER_INPUT", "{:?}", refused.body);
    // The owner publishes it.
    app.publish_plan("acme", plan).await.data();
    assert!(remote.calls_of("echo").is_empty());
}
