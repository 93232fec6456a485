//! Inbound hooks: a signed delivery to `/hooks/{tenant}/{source}` starts
//! one task (channel WEBHOOK or EMAIL) however often it arrives; a bad
//! signature, a replay, an oversized or malformed body start nothing.

use brainstem_domain::hooks::{REPLAY_WINDOW_SECS, sign};
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    on_both_backends,
};

on_both_backends!(
    a_signed_webhook_starts_one_task_however_often_it_arrives,
    bad_deliveries_start_nothing_and_say_why,
    an_email_hook_starts_a_task_from_the_message,
);
for_both_backends!(deliveries_share_the_tenants_rate);

const SECRET: &str = "whsec-0123456789";

/// A hook named `source` of `kind` in `tenant`, running `plan`.
async fn hook(app: &TestApp, tenant: &str, source: &str, kind: &str, plan: &str) {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
            json!({"input": {"name": source, "kind": kind, "config": {"plan_key": plan},
                             "secret": {"signing_secret": SECRET}}}),
        )
        .await;
    res.data();
}

async fn plan(app: &TestApp, tenant: &str) {
    app.publish_plan(
        tenant,
        json!({"key": "intake", "intent": "t.intake", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"seen": "{{ input.payload.order }}"}}
        ]}),
    )
    .await
    .data();
}

/// POST `body` to the hook with the given headers; status and JSON answer.
async fn deliver(
    app: &TestApp,
    path: &str,
    body: &[u8],
    headers: &[(&str, String)],
) -> (u16, Value) {
    let mut request = app
        .http
        .post(app.url(path))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn signed(body: &[u8], at: i64) -> Vec<(&'static str, String)> {
    vec![
        ("x-brainstem-timestamp", at.to_string()),
        ("x-brainstem-signature", sign(SECRET, at, body)),
    ]
}

async fn task_count(app: &TestApp, tenant: &str) -> usize {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "{ tasks(first: 50) { edges { node { id } } } }",
        json!({}),
    )
    .await
    .data()["tasks"]["edges"]
        .as_array()
        .unwrap()
        .len()
}

async fn a_signed_webhook_starts_one_task_however_often_it_arrives(app: TestApp) {
    app.create_tenant("acme").await;
    plan(&app, "acme").await;
    hook(&app, "acme", "shop", "webhook", "intake").await;
    let body = br#"{"input": "new order", "order": "A-17"}"#;
    let now = chrono::Utc::now().timestamp();
    let mut ids = Vec::new();
    for attempt in 0..3 {
        let (status, answer) = deliver(&app, "/hooks/acme/shop", body, &signed(body, now)).await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(answer["duplicate"], attempt > 0, "{answer}");
        ids.push(answer["taskId"].as_str().unwrap().to_owned());
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    // Another body is another delivery; its repeats are the same one.
    let other = br#"{"input": "new order", "order": "A-18"}"#;
    let mut headers = signed(other, now);
    headers.push(("x-brainstem-delivery", "evt-1".into()));
    let (status, first) = deliver(&app, "/hooks/acme/shop", other, &headers).await;
    assert_eq!((status, &first["duplicate"]), (202, &json!(false)));
    let (_, again) = deliver(&app, "/hooks/acme/shop", other, &headers).await;
    assert_eq!(again["taskId"], first["taskId"]);
    assert_eq!(task_count(&app, "acme").await, 2);

    app.run_tasks().await;
    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ tasks(first: 10) { edges { node { id channel status input state } } } }",
            json!({}),
        )
        .await;
    let tasks = listed.data()["tasks"]["edges"].as_array().unwrap().clone();
    let first_task = tasks
        .iter()
        .map(|e| &e["node"])
        .find(|t| t["id"].as_str().unwrap() == ids[0])
        .unwrap();
    assert_eq!(first_task["channel"], "WEBHOOK");
    assert_eq!(first_task["status"], "COMPLETED", "{first_task}");
    assert_eq!(first_task["state"]["seen"], "A-17");
    assert_eq!(first_task["input"], "new order");
}

async fn bad_deliveries_start_nothing_and_say_why(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    plan(&app, "acme").await;
    hook(&app, "acme", "shop", "webhook", "intake").await;
    // A connection that is not a hook is not one.
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation { createConnection(input: {name: \"crm\", kind: \"http\", secret: {signing_secret: \"x\"}}) { connection { id } } }",
        json!({}),
    )
    .await
    .data();
    let body = br#"{"order": "A-1"}"#;
    let now = chrono::Utc::now().timestamp();
    let refused = |status: u16, answer: &Value, code: &str, words: &str| {
        assert_eq!(status / 100, 4, "{answer}");
        assert_eq!(answer["code"], code, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(words),
            "{answer}"
        );
    };

    let mut forged = signed(body, now);
    forged[1].1 = sign("not-the-secret", now, body);
    let (status, answer) = deliver(&app, "/hooks/acme/shop", body, &forged).await;
    assert_eq!(status, 401);
    refused(status, &answer, "UNAUTHENTICATED", "does not verify");

    let (status, answer) = deliver(&app, "/hooks/acme/shop", body, &[]).await;
    assert_eq!(status, 401);
    refused(status, &answer, "UNAUTHENTICATED", "X-Brainstem-Timestamp");

    let stale = now - REPLAY_WINDOW_SECS - 5;
    let (status, answer) = deliver(&app, "/hooks/acme/shop", body, &signed(body, stale)).await;
    assert_eq!(status, 401);
    refused(status, &answer, "UNAUTHENTICATED", "replay");

    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(300 * 1024));
    let (status, answer) = deliver(
        &app,
        "/hooks/acme/shop",
        big.as_bytes(),
        &signed(big.as_bytes(), now),
    )
    .await;
    assert_eq!(status, 413, "{answer}");

    let not_json = b"order=A-1";
    let (status, answer) =
        deliver(&app, "/hooks/acme/shop", not_json, &signed(not_json, now)).await;
    assert_eq!(status, 400);
    refused(status, &answer, "BAD_USER_INPUT", "JSON object");

    // Unknown tenant, unknown source, another tenant's source, a plain
    // connection: all the answer of a bad signature.
    for path in [
        "/hooks/nobody/shop",
        "/hooks/acme/nothing",
        "/hooks/globex/shop",
        "/hooks/acme/crm",
    ] {
        let (status, answer) = deliver(&app, path, body, &signed(body, now)).await;
        assert_eq!(status, 401, "{path}: {answer}");
        refused(status, &answer, "UNAUTHENTICATED", "does not verify");
    }
    assert_eq!(task_count(&app, "acme").await, 0);
    assert_eq!(task_count(&app, "globex").await, 0);
}

async fn an_email_hook_starts_a_task_from_the_message(app: TestApp) {
    app.create_tenant("acme").await;
    plan(&app, "acme").await;
    hook(&app, "acme", "inbox", "inbound_email", "intake").await;
    let body = serde_json::to_vec(&json!({
        "From": "ann@example.com", "To": "ops@acme.test", "Subject": "Truck 7",
        "TextBody": "Brakes squeal.", "MessageID": "<m-1@example.com>"
    }))
    .unwrap();
    let now = chrono::Utc::now().timestamp();
    let (status, answer) = deliver(&app, "/hooks/acme/inbox", &body, &signed(&body, now)).await;
    assert_eq!(status, 202, "{answer}");
    // The same message, resent by the service with other fields: one task.
    let resent = serde_json::to_vec(&json!({
        "sender": "ann@example.com", "subject": "Truck 7", "body-plain": "Brakes squeal.",
        "Message-Id": "<m-1@example.com>", "attempt": 2
    }))
    .unwrap();
    let (_, again) = deliver(&app, "/hooks/acme/inbox", &resent, &signed(&resent, now)).await;
    assert_eq!(again["taskId"], answer["taskId"]);
    assert_eq!(again["duplicate"], true);

    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ tasks(first: 5) { edges { node { id } } } }",
            json!({}),
        )
        .await;
    let id = &listed.data()["tasks"]["edges"][0]["node"]["id"];
    assert_eq!(id, &answer["taskId"], "the task's GraphQL id");
    let task = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ tasks(first: 5) { edges { node { channel input payload } } } }",
            json!({}),
        )
        .await;
    let task = &task.data()["tasks"]["edges"][0]["node"];
    assert_eq!(task["channel"], "EMAIL");
    assert_eq!(task["input"], "Truck 7\n\nBrakes squeal.");
    assert_eq!(task["payload"]["email"]["from"], "ann@example.com");
    assert_eq!(task["payload"]["email"]["message_id"], "m-1@example.com");
}

/// Deliveries count against their tenant's rate, like its API calls: over
/// it, `429` with `Retry-After`, and no task.
async fn deliveries_share_the_tenants_rate(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.rate_limit_per_tenant_rps = 0.01;
        c.rate_limit_per_tenant_burst = 4;
    })
    .await;
    app.create_tenant("acme").await;
    // Two of the four: the plan and the hook.
    plan(&app, "acme").await;
    hook(&app, "acme", "shop", "webhook", "intake").await;
    let now = chrono::Utc::now().timestamp();
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for n in 0..3 {
        let body = format!("{{\"order\": \"A-{n}\"}}");
        let response = app
            .http
            .post(app.url("/hooks/acme/shop"))
            .header("content-type", "application/json")
            .header("x-brainstem-timestamp", now.to_string())
            .header("x-brainstem-signature", sign(SECRET, now, body.as_bytes()))
            .body(body)
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if let Some(v) = response.headers().get("retry-after") {
            retry_after = v.to_str().ok().map(str::to_owned);
        }
    }
    assert_eq!(statuses, [202, 202, 429]);
    assert!(retry_after.is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
}
