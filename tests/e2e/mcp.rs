//! `/mcp`: Brainstem as an MCP server over Streamable HTTP, driven by
//! rmcp's own client against the real server. Tools list and run per the
//! caller's scopes, run as the GraphQL operations they mirror (same
//! schemas, same tenant walls), and a waiting `start_task` reports the
//! task's events as progress notifications.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use brainstem_domain::Role;
use rmcp::{
    ClientHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        ProgressNotificationParam, Tool,
    },
    service::{NotificationContext, Peer, RoleClient, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, http_client, poll_until};

/// An MCP client that keeps the progress notifications it receives.
#[derive(Clone, Default)]
pub(crate) struct Client {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("brainstem-tests", "1.0.0"),
        )
    }
}

pub(crate) type Session = RunningService<RoleClient, Client>;

/// Connect to the app's `/mcp` with `credential` and initialize.
async fn try_connect(app: &TestApp, credential: &str) -> Result<(Session, Client), String> {
    let client = Client::default();
    let transport = StreamableHttpClientTransport::with_client(
        http_client(),
        StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")).auth_header(credential),
    );
    let session = client
        .clone()
        .serve(transport)
        .await
        .map_err(|e| e.to_string())?;
    Ok((session, client))
}

pub(crate) async fn connect(app: &TestApp, credential: &str) -> (Session, Client) {
    try_connect(app, credential).await.expect("an MCP session")
}

async fn tool_names(session: &Peer<RoleClient>) -> BTreeSet<String> {
    session
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}

async fn call(session: &Peer<RoleClient>, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    session
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

/// The structured result of a successful call.
pub(crate) async fn ok(session: &Peer<RoleClient>, tool: &str, arguments: Value) -> Value {
    let result = call(session, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("structured content")
}

/// The error code of a failed call.
async fn error_code(session: &Peer<RoleClient>, tool: &str, arguments: Value) -> String {
    let result = call(session, tool, arguments).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} should fail: {result:?}"
    );
    result.structured_content.expect("structured errors")["errors"][0]["code"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Tenant `acme` with the plan `note`: two steps that write the state.
pub(crate) async fn acme(app: &TestApp) {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "note", "intent": "notes.take", "description": "take a note",
        "steps": [
            {"id": "write", "tool": "set_state", "args": {"noted": "{{ input.text }}"}},
            {"id": "again", "tool": "set_state", "args": {"twice": true}}
        ]}),
    )
    .await
    .data();
}

pub(crate) const ALL_TOOLS: &[&str] = &[
    "add_memory",
    "answer_review",
    "get_task",
    "list_capabilities",
    "list_plans",
    "read_dossier",
    "search_memories",
    "start_task",
];

crate::on_both_backends!(
    initialize_and_list_the_tools_a_credential_may_use,
    a_missing_or_wrong_credential_is_refused_with_401,
    every_tool_runs_as_the_caller,
    a_waiting_start_reports_progress_and_returns_the_result,
    another_tenant_s_task_is_not_found,
    each_tool_s_schema_is_its_graphql_field_s,
);

crate::for_both_backends!(tool_calls_share_the_caller_s_rate_limit);

/// A tool call is a GraphQL operation of its caller: it spends the key's
/// rate limit like a `/graphql` request, and past it is `RATE_LIMITED`.
async fn tool_calls_share_the_caller_s_rate_limit(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.rate_limit_per_key_rps = 0.01;
        c.rate_limit_per_key_burst = 3;
    })
    .await;
    acme(&app).await;
    let (_, key) = app.create_api_key("acme", &["tasks:read"]).await;
    let (session, _) = connect(&app, &key).await;
    ok(&session, "list_plans", json!({})).await;
    // Two of the burst go to GraphQL directly, the same key.
    for _ in 0..2 {
        let gql = app
            .graphql(Some(&key), "{ plans { nodes { key } } }", json!({}))
            .await;
        gql.data();
    }
    assert_eq!(
        error_code(&session, "list_plans", json!({})).await,
        "RATE_LIMITED"
    );
}

async fn initialize_and_list_the_tools_a_credential_may_use(app: TestApp) {
    acme(&app).await;
    let (admin, _) = connect(&app, &app.admin_token("acme")).await;
    let info = admin.peer_info().expect("the server's initialize result");
    assert_eq!(info.server_info.as_ref().unwrap().name, "brainstem");
    assert!(info.capabilities.tools.is_some());
    let names = tool_names(&admin).await;
    assert_eq!(names, ALL_TOOLS.iter().map(|s| s.to_string()).collect());

    // Annotations say what each tool does.
    let tools: Vec<Tool> = admin.list_all_tools().await.unwrap();
    let hints = |name: &str| {
        let a = tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.annotations.clone())
            .expect("annotations");
        (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
    };
    assert_eq!(hints("get_task"), (Some(true), Some(false), Some(true)));
    assert_eq!(hints("start_task"), (Some(false), Some(false), Some(false)));
    assert_eq!(
        hints("answer_review"),
        (Some(false), Some(true), Some(false))
    );

    // An API key sees the tools of its scopes only, and cannot call others.
    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let (session, _) = connect(&app, &reader).await;
    assert_eq!(
        tool_names(&session).await,
        ["get_task", "list_capabilities", "list_plans"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    let refused = session
        .call_tool(
            CallToolRequestParams::new("start_task")
                .with_arguments(json!({"planKey": "note"}).as_object().unwrap().clone()),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");

    let (_, memory) = app
        .create_api_key("acme", &["memory:read", "memory:write"])
        .await;
    let (session, _) = connect(&app, &memory).await;
    assert_eq!(
        tool_names(&session).await,
        ["add_memory", "read_dossier", "search_memories"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );

    // Deciding reviews needs the reviewer's right, not just a member's.
    let member = app.token(Some("acme"), &[Role::Member]);
    let (session, _) = connect(&app, &member).await;
    assert!(!tool_names(&session).await.contains("answer_review"));
    let reviewer = app.token(Some("acme"), &[Role::Reviewer]);
    let (session, _) = connect(&app, &reviewer).await;
    assert!(tool_names(&session).await.contains("answer_review"));
}

async fn a_missing_or_wrong_credential_is_refused_with_401(app: TestApp) {
    acme(&app).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let post = |credential: Option<&str>| {
        let mut request = app
            .http
            .post(app.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        request.send()
    };
    for credential in [None, Some("bsk_not_a_key"), Some("not.a.jwt")] {
        let response = post(credential).await.unwrap();
        assert_eq!(response.status(), 401, "{credential:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHENTICATED");
    }
    // The same request with a credential is answered.
    let response = post(Some(&app.admin_token("acme"))).await.unwrap();
    assert_eq!(response.status(), 200);

    assert!(try_connect(&app, "bsk_not_a_key").await.is_err());
}

async fn every_tool_runs_as_the_caller(app: TestApp) {
    acme(&app).await;
    let (session, _) = connect(&app, &app.admin_token("acme")).await;

    let plans = ok(&session, "list_plans", json!({})).await;
    assert_eq!(plans["nodes"][0]["key"], "note", "{plans}");
    let capabilities = ok(&session, "list_capabilities", json!({"first": 10})).await;
    assert!(capabilities["nodes"].is_array(), "{capabilities}");

    let started = ok(
        &session,
        "start_task",
        json!({"planKey": "note", "input": "buy milk"}),
    )
    .await;
    assert_eq!(started["task"]["status"], "PENDING", "{started}");
    assert_eq!(started["ok"], false);
    let id = started["task"]["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let task = ok(&session, "get_task", json!({"id": id})).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"]["noted"], "buy milk");
    assert!(
        task["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "STEP_COMPLETED" && e["stepId"] == "again"),
        "{task}"
    );

    // A plan to approve: the review is answered through the tool.
    let planned = ok(
        &session,
        "start_task",
        json!({"planKey": "note", "input": "plan it", "mode": "PLAN"}),
    )
    .await;
    let id = planned["task"]["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let task = ok(&session, "get_task", json!({"id": id})).await;
    assert_eq!(task["status"], "AWAITING_APPROVAL", "{task}");
    let review = task["pendingReview"]["id"].as_str().unwrap();
    let answered = ok(
        &session,
        "answer_review",
        json!({"taskId": id, "reviewId": review, "decision": "APPROVE"}),
    )
    .await;
    assert_ne!(
        answered["task"]["status"], "AWAITING_APPROVAL",
        "{answered}"
    );
    assert_eq!(
        error_code(
            &session,
            "answer_review",
            json!({"taskId": id, "reviewId": review, "decision": "REJECT"}),
        )
        .await,
        "CONFLICT"
    );

    // Memories and the dossier of an entity.
    let entity = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation { upsertEntity(input: {type: \"customer\", name: \"Ada\"}) { entity { id } } }",
            json!({}),
        )
        .await;
    let subject = entity.data()["upsertEntity"]["entity"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let added = ok(
        &session,
        "add_memory",
        json!({"content": "Ada prefers invoices by post", "subjectId": subject}),
    )
    .await;
    assert_eq!(added["memory"]["content"], "Ada prefers invoices by post");
    assert_eq!(added["merged"], false);
    let found = ok(
        &session,
        "search_memories",
        json!({"query": "invoices by post", "limit": 5}),
    )
    .await;
    assert_eq!(
        found["hits"][0]["memory"]["id"], added["memory"]["id"],
        "{found}"
    );
    let dossier = ok(&session, "read_dossier", json!({"subjectId": subject})).await;
    assert_eq!(dossier["subject"]["name"], "Ada", "{dossier}");
    assert_eq!(
        dossier["facts"][0]["content"], "Ada prefers invoices by post",
        "{dossier}"
    );

    // Input GraphQL refuses is a tool error the model can read.
    assert_eq!(
        error_code(&session, "start_task", json!({"mode": "SIDEWAYS"})).await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        error_code(&session, "get_task", json!({"id": "x", "nonsense": 1})).await,
        "BAD_USER_INPUT"
    );
}

async fn a_waiting_start_reports_progress_and_returns_the_result(app: TestApp) {
    acme(&app).await;
    let (session, client) = connect(&app, &app.admin_token("acme")).await;
    let waiting = {
        let session = session.peer().clone();
        tokio::spawn(async move {
            call(
                &session,
                "start_task",
                json!({"planKey": "note", "input": "wait for me", "mode": "ENQUEUE_AND_WAIT"}),
            )
            .await
        })
    };
    // The tests' app has no background workers: run the task while the
    // call waits, until the call returns.
    poll_until("the waiting start returns", async || {
        app.run_tasks().await;
        waiting.is_finished().then_some(())
    })
    .await;
    let result = waiting.await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let payload = result.structured_content.unwrap();
    assert_eq!(payload["ok"], true, "{payload}");
    assert_eq!(payload["task"]["status"], "COMPLETED");
    assert_eq!(payload["task"]["mode"], "ENQUEUE_AND_WAIT");
    assert_eq!(payload["task"]["state"]["noted"], "wait for me");

    let progress = client.progress.lock().unwrap().clone();
    let messages: Vec<&str> = progress
        .iter()
        .filter_map(|p| p.message.as_deref())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("STEP_COMPLETED write")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.starts_with("STATUS_CHANGED")),
        "{messages:?}"
    );
    // One notification per event, its sequence number as the progress.
    // (rmcp's client handles each notification in a task of its own, so
    // the order they reach the handler is not the order they were sent.)
    let mut values: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    values.sort_by(f64::total_cmp);
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

async fn another_tenant_s_task_is_not_found(app: TestApp) {
    acme(&app).await;
    app.create_tenant("globex").await;
    let (acme_session, _) = connect(&app, &app.admin_token("acme")).await;
    let started = ok(
        &acme_session,
        "start_task",
        json!({"planKey": "note", "input": "private"}),
    )
    .await;
    let id = started["task"]["id"].as_str().unwrap();

    let (globex, _) = connect(&app, &app.admin_token("globex")).await;
    assert_eq!(
        error_code(&globex, "get_task", json!({"id": id})).await,
        "NOT_FOUND"
    );
    let (_, key) = app.create_api_key("globex", &["tasks:read"]).await;
    let (globex_key, _) = connect(&app, &key).await;
    assert_eq!(
        error_code(&globex_key, "get_task", json!({"id": id})).await,
        "NOT_FOUND"
    );
    // Its own tenant reads it.
    assert_eq!(
        ok(&acme_session, "get_task", json!({"id": id})).await["id"],
        id
    );
}

/// Each tool's input schema has exactly the fields of the GraphQL input
/// type (or the field's arguments) it mirrors, read from the server's
/// introspection: a field added on one side only fails here.
async fn each_tool_s_schema_is_its_graphql_field_s(app: TestApp) {
    acme(&app).await;
    let token = app.admin_token("acme");
    let (session, _) = connect(&app, &token).await;
    let introspection = app
        .graphql(
            Some(&token),
            "{ query: __type(name: \"Query\") { ...F } mutation: __type(name: \"Mutation\") { ...F } }
             fragment F on __Type { fields { name args { name defaultValue type { kind name ofType { name } } } } }",
            json!({}),
        )
        .await;
    let data = introspection.data().clone();
    let tools = session.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), ALL_TOOLS.len());
    for tool in tools {
        let mirrored = tool
            .meta
            .as_ref()
            .and_then(|m| m.0.get("brainstem/graphql"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{} names its GraphQL field", tool.name))
            .to_owned();
        let (root, field) = mirrored.split_once('.').unwrap();
        let field = data[root.to_lowercase()]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == field)
            .unwrap_or_else(|| panic!("{mirrored} exists"))
            .clone();
        let args = field["args"].as_array().unwrap().clone();
        // A single `input` object argument: the tool takes its fields.
        let (expected, required) = if args.len() == 1 && args[0]["name"] == "input" {
            let type_name = args[0]["type"]["ofType"]["name"].as_str().unwrap();
            let input = app
                .graphql(
                    Some(&token),
                    "query($n: String!) { __type(name: $n) { inputFields { name defaultValue type { kind } } } }",
                    json!({"n": type_name}),
                )
                .await;
            fields_and_required(&input.data()["__type"]["inputFields"])
        } else {
            fields_and_required(&Value::Array(args))
        };
        let schema = Value::Object((*tool.input_schema).clone());
        let properties: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let schema_required: BTreeSet<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        assert_eq!(properties, expected, "{}: properties", tool.name);
        assert_eq!(schema_required, required, "{}: required", tool.name);
    }
}

/// The names of GraphQL input values, and those a caller must give
/// (non-null without a default).
fn fields_and_required(values: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let values = values.as_array().unwrap();
    let name = |v: &Value| v["name"].as_str().unwrap().to_owned();
    (
        values.iter().map(name).collect(),
        values
            .iter()
            .filter(|v| v["type"]["kind"] == "NON_NULL" && v["defaultValue"].is_null())
            .map(name)
            .collect(),
    )
}
