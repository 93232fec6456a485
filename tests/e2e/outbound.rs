//! Outbound calls go through one guarded client: the allow-list names host
//! and port, names that resolve to non-public addresses and non-public IP
//! literals are refused unless the operator lists them, a redirect to
//! another origin is never followed (so a body, a signature or a callback
//! token never reaches a second server), answers are size-capped, a plan
//! cannot set `Host`, and a credential taken from a connection is sent but
//! never stored.
//!
//! The fake servers count every request they get; "refused" is asserted as
//! "the second server got nothing".

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::{
    capabilities::{publish_capability, subscribe},
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(
    http_request_reaches_only_listed_hosts_and_ports,
    redirects_to_another_origin_are_refused_and_carry_nothing,
    names_and_literals_of_private_addresses_are_refused_unless_listed,
    answers_are_capped_and_plans_cannot_set_host,
    partner_tools_are_held_to_the_allow_list_and_the_cap,
    connection_credentials_are_sent_and_never_stored,
);

/// A fake HTTP server on 127.0.0.1 that counts what it gets.
///
/// - `/redirect/<status>/<absolute URL>` answers `<status>` to that URL;
/// - `/big` answers 1 MiB with a length, `/big-chunked` 1 MiB streamed;
/// - `/jobs` answers `{"id": "job-1"}`;
/// - anything else echoes `{"method", "path", "headers", "body"}`.
#[derive(Clone, Default)]
struct Fake {
    hits: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

const BIG: usize = 1024 * 1024;

async fn handle(
    State(fake): State<Fake>,
    method: axum::http::Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    fake.hits.fetch_add(1, Ordering::SeqCst);
    let text = String::from_utf8_lossy(&body).into_owned();
    fake.bodies.lock().unwrap().push(text.clone());
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/redirect/") {
        let (status, to) = rest.split_once('/').unwrap();
        let status = StatusCode::from_u16(status.parse().unwrap()).unwrap();
        return (status, [(header::LOCATION, to.to_owned())]).into_response();
    }
    match path {
        "/big" => vec![b'x'; BIG].into_response(),
        "/big-chunked" => {
            let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![b'x'; BIG / 64]));
            Body::from_stream(futures_util::stream::iter(chunks)).into_response()
        }
        "/jobs" => Json(json!({"id": "job-1"})).into_response(),
        _ => {
            let headers: serde_json::Map<String, Value> = headers
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or_default())))
                .collect();
            Json(json!({"method": method.as_str(), "path": path, "headers": headers, "body": text}))
                .into_response()
        }
    }
}

/// Start a fake server; it and its base URL (`http://127.0.0.1:<port>`).
async fn fake() -> (Fake, String) {
    let fake = Fake::default();
    let app = Router::new().fallback(handle).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fake, base)
}

fn port(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

/// An app in tenant `acme` whose allow-list and private ranges are these.
async fn app_allowing(
    backend: Backend,
    hosts: &[String],
    private: &[&str],
    tweak: impl FnOnce(&mut brainstem::config::Config),
) -> TestApp {
    let hosts = hosts.to_vec();
    let private: Vec<String> = private.iter().map(|s| s.to_string()).collect();
    let app = TestApp::spawn_with(backend, move |c| {
        c.http_allowed_hosts = hosts;
        c.http_allowed_private = private;
        tweak(c);
    })
    .await;
    app.create_tenant("acme").await;
    app
}

/// Publish a one-step plan `key` (tried once) and run a task of it; the
/// task with its steps and events.
async fn run_step(app: &TestApp, key: &str, tool: &str, args: Value) -> Value {
    app.publish_plan(
        "acme",
        json!({"key": key, "intent": format!("t.{key}"), "steps": [
            {"id": "call", "tool": tool, "args": args, "retry": {"maxAttempts": 1}}
        ]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"input": "go", "planKey": key}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status error state \
             steps { stepId status args output summary error } \
             events(first: 1000) { kind summary error data } } }",
            json!({"id": id}),
        )
        .await;
    res.data()["task"].clone()
}

fn assert_failed_with(task: &Value, needle: &str) {
    assert_eq!(task["status"], "FAILED", "{task}");
    let error = task["error"].as_str().unwrap_or_default();
    assert!(error.contains(needle), "`{error}` lacks `{needle}`");
}

/// The allow-list is checked, host and port: removing the check lets the
/// second server be reached.
async fn http_request_reaches_only_listed_hosts_and_ports(backend: Backend) {
    let (a, base_a) = fake().await;
    let (b, base_b) = fake().await;
    let hosts = vec![
        format!("127.0.0.1:{}", port(&base_a)),
        format!("localhost:{}", port(&base_a)),
    ];
    let app = app_allowing(backend, &hosts, &["127.0.0.1/32"], |_| {}).await;

    let ok = run_step(
        &app,
        "a",
        "http_request",
        json!({"url": format!("{base_a}/x")}),
    )
    .await;
    assert_eq!(ok["status"], "COMPLETED", "{ok}");
    assert_eq!(a.hits(), 1);
    // An allowed name on a listed private address.
    let by_name = format!("http://localhost:{}/y", port(&base_a));
    let ok = run_step(&app, "named", "http_request", json!({"url": by_name})).await;
    assert_eq!(ok["status"], "COMPLETED", "{ok}");
    assert_eq!(a.hits(), 2);

    // Same host, another port: refused before any connection.
    let other_port = run_step(
        &app,
        "b",
        "http_request",
        json!({"url": format!("{base_b}/x")}),
    )
    .await;
    assert_failed_with(&other_port, "http_allowed_hosts");
    let other_host = run_step(
        &app,
        "evil",
        "http_request",
        json!({"url": "http://evil.example/x"}),
    )
    .await;
    assert_failed_with(&other_host, "http_allowed_hosts");
    assert_eq!(b.hits(), 0, "the port not listed was reached");
}

/// A 307/308 to another origin fails `http_request`, `delegate` and a
/// webhook delivery; the body, the callback token and the signed event
/// never reach the second server. A redirect within the origin is
/// followed.
async fn redirects_to_another_origin_are_refused_and_carry_nothing(backend: Backend) {
    let (a, base_a) = fake().await;
    let (b, base_b) = fake().await;
    let hosts = vec![format!("127.0.0.1:{}", port(&base_a))];
    let app = app_allowing(backend, &hosts, &["127.0.0.1/32"], |_| {}).await;

    let same = run_step(
        &app,
        "same",
        "http_request",
        json!({"url": format!("{base_a}/redirect/302/{base_a}/landed")}),
    )
    .await;
    assert_eq!(same["status"], "COMPLETED", "{same}");
    assert_eq!(same["steps"][0]["output"]["body"]["path"], "/landed");

    let posted = run_step(
        &app,
        "post",
        "http_request",
        json!({"method": "POST", "url": format!("{base_a}/redirect/307/{base_b}/steal"),
               "body": {"order": "o-1"}}),
    )
    .await;
    assert_failed_with(&posted, "another origin");
    let got = run_step(
        &app,
        "get",
        "http_request",
        json!({"url": format!("{base_a}/redirect/302/{base_b}/steal")}),
    )
    .await;
    assert_failed_with(&got, "another origin");

    let delegated = run_step(
        &app,
        "hand",
        "delegate",
        json!({"url": format!("{base_a}/redirect/307/{base_b}/jobs")}),
    )
    .await;
    assert_failed_with(&delegated, "another origin");
    // The delegation went to the allowed server only, token and all.
    assert!(a.bodies.lock().unwrap().iter().any(|b| b.contains("token")));

    // A webhook whose endpoint redirects its signed event elsewhere.
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret } }",
            json!({"input": {"name": "moved", "url": format!("{base_a}/redirect/308/{base_b}/hook"),
                   "events": ["TASK_COMPLETED"]}}),
        )
        .await;
    res.data();
    let before = a.hits();
    let done = run_step(&app, "done", "set_state", json!({"x": 1})).await;
    assert_eq!(done["status"], "COMPLETED");
    let delivered = app
        .domain
        .webhooks
        .deliver_due(Utc::now() + Duration::days(1))
        .await
        .unwrap();
    assert_eq!(delivered, 0);
    assert_eq!(a.hits(), before + 1, "the endpoint was tried once");

    assert_eq!(b.hits(), 0, "a redirect carried a call to another origin");
}

/// With no private range listed, an allowed name that resolves to
/// loopback, and an allowed loopback literal, are refused.
async fn names_and_literals_of_private_addresses_are_refused_unless_listed(backend: Backend) {
    let (a, base_a) = fake().await;
    let hosts = vec![
        "localhost:*".to_owned(),
        "127.0.0.1:*".to_owned(),
        "[::1]:*".to_owned(),
    ];
    let app = app_allowing(backend, &hosts, &[], |_| {}).await;

    let by_name = format!("http://localhost:{}/x", port(&base_a));
    let named = run_step(&app, "named", "http_request", json!({"url": by_name})).await;
    assert_failed_with(&named, "no public address");
    let literal = run_step(
        &app,
        "literal",
        "http_request",
        json!({"url": format!("{base_a}/x")}),
    )
    .await;
    assert_failed_with(&literal, "not a public address");
    let v6 = format!("http://[::1]:{}/x", port(&base_a));
    let v6 = run_step(&app, "v6", "http_request", json!({"url": v6})).await;
    assert_failed_with(&v6, "not a public address");
    assert_eq!(a.hits(), 0, "a loopback address was called");
}

/// Answers past `http_max_response_bytes` fail the step, with a length or
/// streamed; `Host` and hop-by-hop headers are not the plan's to set.
async fn answers_are_capped_and_plans_cannot_set_host(backend: Backend) {
    let (a, base_a) = fake().await;
    let hosts = vec![format!("127.0.0.1:{}", port(&base_a))];
    let app = app_allowing(backend, &hosts, &["127.0.0.1/32"], |c| {
        c.http_max_response_bytes = 64 * 1024;
    })
    .await;

    for (key, path) in [("big", "/big"), ("chunked", "/big-chunked")] {
        let task = run_step(
            &app,
            key,
            "http_request",
            json!({"url": format!("{base_a}{path}")}),
        )
        .await;
        assert_failed_with(&task, "http_max_response_bytes");
    }
    let hits = a.hits();
    for header in ["Host", "transfer-encoding", "Connection"] {
        let task = run_step(
            &app,
            &format!("h{}", header.len()),
            "http_request",
            json!({"url": format!("{base_a}/x"), "headers": {header: "internal.example"}}),
        )
        .await;
        assert_failed_with(&task, "not by a plan");
    }
    assert_eq!(a.hits(), hits, "a request with a plan's Host went out");
}

/// A partner tool's URL is held to the allow-list (host and port), and its
/// answer to the cap.
async fn partner_tools_are_held_to_the_allow_list_and_the_cap(backend: Backend) {
    let (a, base_a) = fake().await;
    let (b, base_b) = fake().await;
    let hosts = vec![format!("127.0.0.1:{}", port(&base_a))];
    let app = app_allowing(backend, &hosts, &["127.0.0.1/32"], |c| {
        c.http_max_response_bytes = 64 * 1024;
    })
    .await;
    let tool = |key: &str, url: String| {
        json!({"key": key, "description": key, "url": url,
               "inputSchema": {"type": "object"}, "timeoutMs": 5000})
    };
    let plan = |key: &str| {
        json!({"key": key, "intent": key, "steps": [
            {"id": "call", "tool": format!("partner.{key}"), "retry": {"maxAttempts": 1}}
        ]})
    };
    publish_capability(
        &app,
        json!({"key": "calls", "name": "Calls", "tools": [
            tool("partner.echo", format!("{base_a}/echo")),
            tool("partner.elsewhere", format!("{base_b}/echo")),
            tool("partner.big", format!("{base_a}/big")),
        ], "plans": [plan("echo"), plan("elsewhere"), plan("big")]}),
    )
    .await
    .data();
    subscribe(&app, "acme", "calls", None).await.data();
    let mut outcomes = Vec::new();
    for key in ["echo", "elsewhere", "big"] {
        let id = app
            .start_task("acme", json!({"input": "go", "planKey": key}))
            .await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        app.run_tasks().await;
        outcomes.push(app.task("acme", &id).await);
    }
    assert_eq!(outcomes[0]["status"], "COMPLETED", "{}", outcomes[0]);
    assert_failed_with(&outcomes[1], "http_allowed_hosts");
    assert_failed_with(&outcomes[2], "http_max_response_bytes");
    assert_eq!(a.hits(), 2);
    assert_eq!(b.hits(), 0, "a partner tool off the allow-list was called");
}

/// `headers_from_connection` sends a connection's secret; neither it nor
/// credential-looking headers of the plan reach the stored steps, events,
/// state or result, even when the server echoes them. A connection bound
/// to other hosts lends nothing.
async fn connection_credentials_are_sent_and_never_stored(backend: Backend) {
    let (a, base_a) = fake().await;
    let hosts = vec![format!("127.0.0.1:{}", port(&base_a))];
    let app = app_allowing(backend, &hosts, &["127.0.0.1/32"], |_| {}).await;
    let secret = format!("crm-{}", uuid::Uuid::now_v7());
    let cookie = format!("sid-{}", uuid::Uuid::now_v7());
    let session = format!("xs-{}", uuid::Uuid::now_v7());
    let admin = app.admin_token("acme");
    for (name, config) in [
        ("crm", json!({"allowed_hosts": ["127.0.0.1:*"]})),
        ("elsewhere", json!({"allowed_hosts": ["api.example.com"]})),
    ] {
        app.graphql(
            Some(&admin),
            "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
            json!({"input": {"name": name, "kind": "http", "config": config, "secret": {"token": secret}}}),
        )
        .await
        .data();
    }

    let task = run_step(
        &app,
        "crm",
        "http_request",
        json!({
            "url": format!("{base_a}/echo"),
            "headers": {"Cookie": cookie, "X-Session": session, "Accept": "application/json"},
            "headers_from_connection": {
                "Authorization": {"connection": "crm", "field": "token", "prefix": "Bearer "}
            },
            "save_as": "echo"
        }),
    )
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let stored = task.to_string();
    // The server got the credential (and echoed it back).
    let sent = a.bodies.lock().unwrap().len();
    assert_eq!(sent, 1);
    let output = &task["steps"][0]["output"]["body"]["headers"];
    assert_eq!(output["accept"], "application/json");
    assert!(output["authorization"].is_string(), "{output}");
    for value in [&secret, &cookie, &session] {
        assert!(
            !stored.contains(value.as_str()),
            "`{value}` was stored: {stored}"
        );
    }

    let refused = run_step(
        &app,
        "lent",
        "http_request",
        json!({"url": format!("{base_a}/echo"),
               "headers_from_connection": {"X-Api-Key": {"connection": "elsewhere", "field": "token"}}}),
    )
    .await;
    assert_failed_with(&refused, "does not lend");
    assert_eq!(
        a.hits(),
        1,
        "a connection's secret went to a host it is not bound to"
    );
}
