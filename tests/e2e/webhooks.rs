//! Outbound webhooks: a tenant's endpoint receives its task events, signed,
//! from an outbox written with the change; failures are retried with
//! backoff, across a restart, until delivered or out of attempts.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use brainstem_domain::hooks::sign;
use chrono::{Duration, Utc};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WAIT},
};

for_both_backends!(
    an_endpoint_that_fails_twice_gets_the_event_on_the_third_try_across_a_restart,
    endpoints_get_only_their_events_of_their_tenant_and_are_checked,
    workers_send_deliveries_by_themselves,
);

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Clone)]
struct Receiver {
    /// Answer 500 to this many requests first.
    failures: usize,
    seen: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<Received>>>,
    tx: mpsc::UnboundedSender<Received>,
}

/// A receiving server on 127.0.0.1 that fails `failures` times, then
/// answers 200 to `/hook`; `/broken` always answers 400. Its URL base and
/// a channel of what `/hook` got.
async fn receiver(
    failures: usize,
) -> (
    String,
    Arc<Mutex<Vec<Received>>>,
    mpsc::UnboundedReceiver<Received>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let log = Arc::new(Mutex::new(Vec::new()));
    let state = Receiver {
        failures,
        seen: Arc::default(),
        log: log.clone(),
        tx,
    };
    async fn hook(State(state): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
        let received = Received { headers, body };
        state.log.lock().unwrap().push(received.clone());
        let _ = state.tx.send(received);
        if state.seen.fetch_add(1, Ordering::SeqCst) < state.failures {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    }
    let app = Router::new()
        .route("/hook", post(hook))
        .route("/broken", post(|| async { StatusCode::BAD_REQUEST }))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, log, rx)
}

/// Register an endpoint for `events` in `tenant`; its signing secret.
async fn endpoint(app: &TestApp, tenant: &str, name: &str, url: &str, events: Value) -> String {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { \
             endpoint { name url events } secret } }",
            json!({"input": {"name": name, "url": url, "events": events}}),
        )
        .await;
    let created = &res.data()["createWebhookEndpoint"];
    assert_eq!(created["endpoint"]["url"], url);
    created["secret"].as_str().unwrap().to_owned()
}

/// Publish `ok` (one step that completes) and `broken` (one that fails).
async fn plans(app: &TestApp, tenant: &str, base: &str) {
    app.publish_plan(
        tenant,
        json!({"key": "ok", "intent": "t.ok", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]}),
    )
    .await
    .data();
    app.publish_plan(
        tenant,
        json!({"key": "broken", "intent": "t.broken", "steps": [
            {"id": "call", "tool": "http_request",
             "args": {"method": "POST", "url": format!("{base}/broken")}}
        ]}),
    )
    .await
    .data();
}

/// Start a task of `plan` and run it; its GraphQL id and status.
async fn run(app: &TestApp, tenant: &str, plan: &str) -> (String, String) {
    let task = app
        .start_task(tenant, json!({"input": "go", "planKey": plan}))
        .await;
    app.run_tasks().await;
    let id = task["id"].as_str().unwrap().to_owned();
    let status = app.task(tenant, &id).await["status"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, status)
}

/// The endpoint's deliveries as GraphQL shows them.
async fn deliveries(app: &TestApp, tenant: &str) -> Vec<Value> {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "{ webhookEndpoints { name deliveries { id event taskId status attempts \
             nextAttemptAt lastStatusCode lastError deliveredAt payload } } }",
            json!({}),
        )
        .await;
    res.data()["webhookEndpoints"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["deliveries"].as_array().unwrap().clone())
        .collect()
}

async fn an_endpoint_that_fails_twice_gets_the_event_on_the_third_try_across_a_restart(
    backend: Backend,
) {
    let app = TestApp::spawn(backend).await;
    let (base, log, _rx) = receiver(2).await;
    app.create_tenant("acme").await;
    plans(&app, "acme", &base).await;
    let url = format!("{base}/hook");
    let secret = endpoint(&app, "acme", "crm", &url, json!(["TASK_COMPLETED"])).await;
    let (task, status) = run(&app, "acme", "ok").await;
    assert_eq!(status, "COMPLETED");

    // The outbox holds the event, committed with the task's completion.
    let pending = deliveries(&app, "acme").await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["event"], "task.completed");
    assert_eq!(pending[0]["taskId"], task.as_str());
    assert_eq!(pending[0]["status"], "PENDING");
    assert_eq!(pending[0]["attempts"], 0);

    // First attempt: 500. It is due again after the backoff, not before.
    let now = Utc::now();
    assert_eq!(app.domain.webhooks.deliver_due(now).await.unwrap(), 0);
    let failed = deliveries(&app, "acme").await;
    assert_eq!(failed[0]["attempts"], 1);
    assert_eq!(failed[0]["status"], "PENDING");
    assert_eq!(failed[0]["lastStatusCode"], 500);
    let next: chrono::DateTime<Utc> = failed[0]["nextAttemptAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        next >= now + Duration::seconds(9),
        "backoff: {next} after {now}"
    );
    assert_eq!(app.domain.webhooks.deliver_due(now).await.unwrap(), 0);
    assert_eq!(log.lock().unwrap().len(), 1, "not due yet: not sent");

    // Second attempt: 500 again, then the server restarts.
    let later = now + Duration::seconds(11);
    assert_eq!(app.domain.webhooks.deliver_due(later).await.unwrap(), 0);
    assert_eq!(log.lock().unwrap().len(), 2);
    let app = app.restart().await;

    // Third attempt, by the restarted server: delivered.
    let much_later = later + Duration::hours(1);
    assert_eq!(
        app.domain.webhooks.deliver_due(much_later).await.unwrap(),
        1
    );
    assert_eq!(
        app.domain.webhooks.deliver_due(much_later).await.unwrap(),
        0
    );
    let received = log.lock().unwrap().clone();
    assert_eq!(received.len(), 3);
    let delivery_id = pending[0]["id"].as_str().unwrap();
    for attempt in &received {
        assert_eq!(attempt.header("x-brainstem-delivery"), delivery_id);
        assert_eq!(attempt.header("x-brainstem-event"), "task.completed");
    }
    let third = &received[2];
    let timestamp: i64 = third.header("x-brainstem-timestamp").parse().unwrap();
    assert!((Utc::now().timestamp() - timestamp).abs() < 60);
    assert_eq!(
        third.header("x-brainstem-signature"),
        sign(&secret, timestamp, &third.body),
        "signed with the endpoint's secret"
    );
    assert_ne!(
        third.header("x-brainstem-signature"),
        sign("another secret", timestamp, &third.body)
    );
    let body = third.json();
    assert_eq!(body["event"], "task.completed");
    assert_eq!(body["task"]["id"], task.as_str());
    assert_eq!(body["task"]["status"], "COMPLETED");
    assert_eq!(body["task"]["planKey"], "ok");
    let trace = body["task"]["traceId"].as_str().unwrap();
    assert!(
        third.header("traceparent").contains(trace),
        "the task's trace: {}",
        third.header("traceparent")
    );

    let done = deliveries(&app, "acme").await;
    assert_eq!(done[0]["status"], "DELIVERED");
    assert_eq!(done[0]["attempts"], 3);
    assert_eq!(done[0]["lastStatusCode"], 200);
    assert!(done[0]["deliveredAt"].is_string());
    assert!(done[0]["nextAttemptAt"].is_null());
}

async fn endpoints_get_only_their_events_of_their_tenant_and_are_checked(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.webhook_max_attempts = 1).await;
    let (base, log, _rx) = receiver(0).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    plans(&app, "acme", &base).await;
    plans(&app, "globex", &base).await;
    let url = format!("{base}/hook");
    endpoint(&app, "acme", "failures", &url, json!(["TASK_FAILED"])).await;
    endpoint(
        &app,
        "globex",
        "all",
        &url,
        json!(["TASK_COMPLETED", "TASK_FAILED"]),
    )
    .await;

    let (_, completed) = run(&app, "acme", "ok").await;
    assert_eq!(completed, "COMPLETED");
    assert!(
        deliveries(&app, "acme").await.is_empty(),
        "a completion is not a failure"
    );
    let (failed_task, failed) = run(&app, "acme", "broken").await;
    assert_eq!(failed, "FAILED");
    let acme = deliveries(&app, "acme").await;
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0]["event"], "task.failed");
    assert_eq!(acme[0]["taskId"], failed_task.as_str());
    assert!(acme[0]["payload"]["task"]["error"].is_string());
    assert!(
        deliveries(&app, "globex").await.is_empty(),
        "another tenant's endpoint hears nothing of acme's tasks"
    );

    // One attempt allowed: an endpoint that answers 400 is FAILED at once,
    // and kept for the tenant to see; the other is delivered.
    endpoint(
        &app,
        "globex",
        "down",
        &format!("{base}/broken"),
        json!(["TASK_COMPLETED"]),
    )
    .await;
    run(&app, "globex", "ok").await;
    assert_eq!(
        app.domain.webhooks.deliver_due(Utc::now()).await.unwrap(),
        2
    );
    let globex = deliveries(&app, "globex").await;
    assert_eq!(globex.len(), 2, "{globex:?}");
    let failed = globex.iter().find(|d| d["status"] == "FAILED").unwrap();
    assert_eq!(failed["attempts"], 1);
    assert_eq!(failed["lastStatusCode"], 400);
    assert!(failed["nextAttemptAt"].is_null());
    assert!(globex.iter().any(|d| d["status"] == "DELIVERED"));
    assert_eq!(
        log.lock().unwrap().len(),
        2,
        "acme's failure and globex's completion"
    );
    assert_eq!(
        app.domain
            .webhooks
            .deliver_due(Utc::now() + Duration::days(1))
            .await
            .unwrap(),
        0
    );

    // Checked when registered: host, events, name, role.
    let admin = app.admin_token("acme");
    for (input, why) in [
        (
            json!({"name": "x", "url": "http://evil.example/hook", "events": ["TASK_FAILED"]}),
            "http_allowed_hosts",
        ),
        (
            json!({"name": "x", "url": "file:///etc/passwd", "events": ["TASK_FAILED"]}),
            "http or https",
        ),
        (
            json!({"name": "x", "url": url, "events": []}),
            "at least one event",
        ),
        (
            json!({"name": "failures", "url": url, "events": ["TASK_FAILED"]}),
            "exists",
        ),
    ] {
        let res = app
            .graphql(
                Some(&admin),
                "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret } }",
                json!({"input": input}),
            )
            .await;
        assert!(res.error_message().contains(why), "{why}: {res:?}");
    }
    let member = app.token(Some("acme"), &[brainstem_domain::Role::Member]);
    let res = app
        .graphql(Some(&member), "{ webhookEndpoints { name } }", json!({}))
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");

    // Deleting an endpoint drops its deliveries; it is audited.
    let res = app
        .graphql(
            Some(&admin),
            "mutation { deleteWebhookEndpoint(input: {name: \"failures\"}) { deleted } }",
            json!({}),
        )
        .await;
    assert_eq!(res.data()["deleteWebhookEndpoint"]["deleted"], true);
    assert!(deliveries(&app, "acme").await.is_empty());
    assert_eq!(
        app.audit_actions("acme", "webhook.").await,
        ["webhook.create", "webhook.delete"]
    );
}

async fn workers_send_deliveries_by_themselves(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.workers = 1).await;
    let (base, _log, mut rx) = receiver(0).await;
    app.create_tenant("acme").await;
    plans(&app, "acme", &base).await;
    endpoint(
        &app,
        "acme",
        "crm",
        &format!("{base}/hook"),
        json!(["TASK_COMPLETED"]),
    )
    .await;
    let task = app
        .start_task("acme", json!({"input": "go", "planKey": "ok"}))
        .await;

    // No one drives the executor or the outbox: the workers do both.
    let received = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("delivered by the workers")
        .unwrap();
    assert_eq!(received.json()["task"]["id"], task["id"]);
}
