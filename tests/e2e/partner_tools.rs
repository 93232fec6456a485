//! Partner HTTP tools, end to end: a capability registers endpoints of a
//! partner server (a real axum server on 127.0.0.1), the executor calls them
//! signed with the capability's secret, their answers feed later steps, and
//! timeouts and 5xx are retried under the step's policy.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU32, Ordering},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::{
    capabilities::{publish_capability, subscribe},
    helpers::{TestApp, uuid_of},
    on_both_backends,
};

on_both_backends!(
    a_signed_partner_call_feeds_the_next_step,
    a_partner_timeout_is_retried,
    a_capability_sets_its_tools_retry_policy_and_a_step_overrides_it,
    bad_partner_answers_fail_the_step,
    partner_tools_are_for_subscribers_only,
);

/// The partner's side: it knows the capability's signing secret and checks
/// every request before answering.
#[derive(Default)]
struct Partner {
    secret: Mutex<String>,
    bodies: Mutex<Vec<Value>>,
    bad_signatures: AtomicU32,
    slow_calls: AtomicU32,
    busy_calls: AtomicU32,
    /// The `traceparent` header of each admitted call.
    traceparents: Mutex<Vec<String>>,
}

impl Partner {
    /// Whether the request carries a fresh, valid signature.
    fn verify(&self, headers: &HeaderMap, body: &[u8]) -> bool {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let Ok(timestamp) = header("x-brainstem-timestamp").parse::<i64>() else {
            return false;
        };
        if (chrono::Utc::now().timestamp() - timestamp).abs() > 300 {
            return false;
        }
        let secret = self.secret.lock().unwrap().clone();
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{timestamp}.").as_bytes());
        mac.update(body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        header("x-brainstem-signature") == expected
    }

    /// The request's body if its signature checks out; `None` (answer 401)
    /// otherwise.
    fn admit(&self, headers: &HeaderMap, body: &Bytes) -> Option<Value> {
        if !self.verify(headers, body) {
            self.bad_signatures.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        let body: Value = serde_json::from_slice(body).unwrap();
        self.bodies.lock().unwrap().push(body.clone());
        let traceparent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.traceparents.lock().unwrap().push(traceparent);
        Some(body)
    }
}

fn refused() -> Response {
    (StatusCode::UNAUTHORIZED, "bad signature").into_response()
}

async fn rate(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(body) = p.admit(&headers, &body) else {
        return refused();
    };
    let vehicles = body["args"]["vehicles"].as_i64().unwrap_or(0);
    Json(json!({"premium": vehicles * 100, "currency": "EUR"})).into_response()
}

/// The first call never answers; later ones answer at once.
async fn slow(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> Response {
    if p.admit(&headers, &body).is_none() {
        return refused();
    }
    if p.slow_calls.fetch_add(1, Ordering::SeqCst) == 0 {
        std::future::pending::<()>().await;
    }
    Json(json!({"ok": true})).into_response()
}

/// Always busy: 503.
async fn busy(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> Response {
    if p.admit(&headers, &body).is_none() {
        return refused();
    }
    p.busy_calls.fetch_add(1, Ordering::SeqCst);
    (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
}

async fn not_json(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> Response {
    match p.admit(&headers, &body) {
        Some(_) => "plain text".into_response(),
        None => refused(),
    }
}

async fn wrong_shape(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> Response {
    match p.admit(&headers, &body) {
        Some(_) => Json(json!({"price": "a lot"})).into_response(),
        None => refused(),
    }
}

async fn start_partner() -> (Arc<Partner>, String) {
    let partner = Arc::new(Partner::default());
    let app = Router::new()
        .route("/rate", post(rate))
        .route("/slow", post(slow))
        .route("/not-json", post(not_json))
        .route("/busy", post(busy))
        .route("/wrong-shape", post(wrong_shape))
        .with_state(partner.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (partner, base)
}

fn retry() -> Value {
    json!({"maxAttempts": 3, "initialBackoffMs": 1, "maxBackoffMs": 2})
}

/// A capability with four partner tools and a plan per scenario.
fn capability(base: &str) -> Value {
    let tool = |key: &str, path: &str, timeout_ms: u64| {
        json!({
            "key": key,
            "description": format!("{key} at the partner"),
            "url": format!("{base}{path}"),
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "required": ["premium"], "properties": {"premium": {"type": "integer"}}},
            "timeoutMs": timeout_ms,
        })
    };
    let mut rate = tool("partner.rate", "/rate", 5_000);
    rate["inputSchema"] = json!({
        "type": "object", "required": ["vehicles"],
        "properties": {"vehicles": {"type": "integer"}},
    });
    let mut slow = tool("partner.slow", "/slow", 300);
    slow["outputSchema"] = Value::Null;
    let mut not_json = tool("partner.not_json", "/not-json", 5_000);
    not_json["outputSchema"] = Value::Null;
    // The capability's own retry policy for this tool.
    let mut busy = tool("partner.busy", "/busy", 5_000);
    busy["retry"] = json!({"maxAttempts": 2, "initialBackoffMs": 1, "maxBackoffMs": 1});
    json!({
        "key": "fleet.rating",
        "name": "Fleet Rating",
        "tools": [rate, slow, not_json, tool("partner.wrong_shape", "/wrong-shape", 5_000), busy],
        "plans": [
            {"key": "fleet.rate", "intent": "fleet.rate", "steps": [
                {"id": "rate", "tool": "partner.rate", "args": {"vehicles": "{{ input.payload.vehicles }}"}, "retry": retry()},
                {"id": "keep", "tool": "set_state", "args": {"premium": "{{ steps.rate.output.premium }}", "currency": "{{ steps.rate.output.currency }}"}},
            ]},
            {"key": "fleet.slow", "intent": "fleet.slow", "steps": [
                {"id": "slow", "tool": "partner.slow", "retry": retry()},
                {"id": "after", "tool": "set_state", "args": {"done": "{{ steps.slow.output.ok }}"}},
            ]},
            {"key": "fleet.not_json", "intent": "fleet.not_json", "steps": [
                {"id": "call", "tool": "partner.not_json", "retry": retry()},
            ]},
            {"key": "fleet.wrong_shape", "intent": "fleet.wrong_shape", "steps": [
                {"id": "call", "tool": "partner.wrong_shape"},
            ]},
            {"key": "fleet.busy", "intent": "fleet.busy", "steps": [
                {"id": "call", "tool": "partner.busy"},
            ]},
            {"key": "fleet.busy_once", "intent": "fleet.busy_once", "steps": [
                {"id": "call", "tool": "partner.busy", "retry": {"maxAttempts": 1}},
            ]},
        ],
    })
}

/// A partner, a published capability (the partner told its secret) and a
/// subscribed `acme`. Returns the partner and its base URL.
async fn setup(app: &TestApp) -> (Arc<Partner>, String) {
    let (partner, base) = start_partner().await;
    app.create_tenant("acme").await;
    let published = publish_capability(app, capability(&base)).await;
    let secret = published.data()["publishCapability"]["signingSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    *partner.secret.lock().unwrap() = secret;
    subscribe(app, "acme", "fleet.rating", None).await.data();
    (partner, base)
}

/// Drive the executor until the task leaves `PENDING` (retries back off
/// for a millisecond or two), then read it.
async fn run_to_end(app: &TestApp, id: &str) -> Value {
    for _ in 0..1000 {
        app.run_tasks().await;
        if app.task("acme", id).await["status"] != "PENDING" {
            break;
        }
    }
    app.task("acme", id).await
}

async fn start(app: &TestApp, plan: &str, payload: Value) -> String {
    app.start_task("acme", json!({"planKey": plan, "payload": payload}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn a_signed_partner_call_feeds_the_next_step(app: TestApp) {
    let (partner, base) = setup(&app).await;
    let id = start(&app, "fleet.rate", json!({"vehicles": 3})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"], json!({"premium": 300, "currency": "EUR"}));
    assert_eq!(partner.bad_signatures.load(Ordering::SeqCst), 0);
    let bodies = partner.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1);
    let body = &bodies[0];
    assert_eq!(body["tool"], "partner.rate");
    assert_eq!(body["capability"], "fleet.rating");
    assert_eq!(body["tenant"]["slug"], "acme");
    assert_eq!(body["args"], json!({"vehicles": 3}));
    assert_eq!(body["idempotency_key"], format!("{}:rate", uuid_of(&id)));
    let step = &task["steps"][0];
    assert_eq!(step["status"], "COMPLETED");
    // The call carried the task's trace in a W3C traceparent.
    let trace = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { traceId } }",
            json!({"id": id}),
        )
        .await
        .data()["task"]["traceId"]
        .as_str()
        .unwrap()
        .to_owned();
    let traceparents = partner.traceparents.lock().unwrap().clone();
    assert_eq!(traceparents.len(), 1);
    assert!(
        traceparents[0].starts_with(&format!("00-{trace}-")),
        "{traceparents:?} for {trace}"
    );

    // After a rotation the partner's old secret no longer matches: the
    // signature is real, and a refusal (401) is final.
    let mut rotated = capability(&base);
    rotated["rotateSecret"] = json!(true);
    publish_capability(&app, rotated).await.data();
    let id = start(&app, "fleet.rate", json!({"vehicles": 1})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("answered 401"),
        "{}",
        task["error"]
    );
    assert_eq!(partner.bad_signatures.load(Ordering::SeqCst), 1);
}

async fn a_partner_timeout_is_retried(app: TestApp) {
    let (partner, _) = setup(&app).await;
    let id = start(&app, "fleet.slow", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"], json!({"done": true}));
    assert_eq!(partner.slow_calls.load(Ordering::SeqCst), 2);
    let failed: Vec<&Value> = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "STEP_FAILED")
        .collect();
    assert_eq!(failed.len(), 1, "{task}");
    assert_eq!(failed[0]["data"]["will_retry"], true);
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("`partner.slow` timed out after 300 ms"),
        "{}",
        failed[0]["error"]
    );
    let attempts: Vec<(i64, &str)> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stepId"] == "slow")
        .map(|s| {
            (
                s["attempt"].as_i64().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, vec![(1, "FAILED"), (2, "COMPLETED")]);
}

async fn a_capability_sets_its_tools_retry_policy_and_a_step_overrides_it(app: TestApp) {
    let (partner, _) = setup(&app).await;
    // The capability says two attempts (the default would be three, a
    // second apart).
    let id = start(&app, "fleet.busy", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(partner.busy_calls.load(Ordering::SeqCst), 2);
    let error = task["error"].as_str().unwrap();
    assert!(error.contains("(after 2 attempts)"), "{error}");
    // A step's own policy wins: one attempt.
    let id = start(&app, "fleet.busy_once", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(partner.busy_calls.load(Ordering::SeqCst), 3);
    // The catalogue shows each tool's policy.
    let tools = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ capability(key: \"fleet.rating\") { tools { key retry { maxAttempts initialBackoffMs maxBackoffMs } } } }",
            json!({}),
        )
        .await;
    let tools = tools.data()["capability"]["tools"]
        .as_array()
        .unwrap()
        .clone();
    let retry_of = |key: &str| tools.iter().find(|t| t["key"] == key).unwrap()["retry"].clone();
    assert_eq!(
        retry_of("partner.busy"),
        json!({"maxAttempts": 2, "initialBackoffMs": 1, "maxBackoffMs": 1})
    );
    assert_eq!(
        retry_of("partner.rate"),
        json!({"maxAttempts": 3, "initialBackoffMs": 1000, "maxBackoffMs": 30000})
    );
}

async fn bad_partner_answers_fail_the_step(app: TestApp) {
    let (partner, _) = setup(&app).await;
    // Not JSON: final at once, whatever the retry policy.
    let id = start(&app, "fleet.not_json", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("not JSON"),
        "{}",
        task["error"]
    );
    assert_eq!(task["steps"].as_array().unwrap().len(), 1, "not retried");
    // JSON of the wrong shape.
    let id = start(&app, "fleet.wrong_shape", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("does not match its output schema"),
        "{}",
        task["error"]
    );
    // Arguments that break the input schema never reach the partner.
    let calls = partner.bodies.lock().unwrap().len();
    let id = start(&app, "fleet.rate", json!({"vehicles": "many"})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("args.vehicles must be of type integer"),
        "{}",
        task["error"]
    );
    assert_eq!(partner.bodies.lock().unwrap().len(), calls);
}

async fn partner_tools_are_for_subscribers_only(app: TestApp) {
    let (partner, _) = setup(&app).await;
    app.create_tenant("globex").await;
    let own_plan = json!({"key": "my.rate", "intent": "my.rate", "steps": [
        {"id": "rate", "tool": "partner.rate", "args": {"vehicles": 2}},
    ]});
    // A subscriber's own plans may use the capability's tools.
    app.publish_plan("acme", own_plan.clone()).await.data();
    let id = start(&app, "my.rate", json!({})).await;
    assert_eq!(run_to_end(&app, &id).await["status"], "COMPLETED");
    // Anyone else's may not.
    let res = app.publish_plan("globex", own_plan).await;
    assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
    assert!(
        res.error_message().contains("`fleet.rating`"),
        "{}",
        res.body
    );
    // Once the subscription ends, a plan that uses them fails at that step.
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation { cancelSubscription(input: {capabilityKey: \"fleet.rating\"}) { subscription { status } } }",
        json!({}),
    )
    .await
    .data();
    let calls = partner.bodies.lock().unwrap().len();
    let id = start(&app, "my.rate", json!({})).await;
    let task = run_to_end(&app, &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("`fleet.rating`"),
        "{}",
        task["error"]
    );
    assert_eq!(partner.bodies.lock().unwrap().len(), calls);
}
