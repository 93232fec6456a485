//! Inbound hooks under attack: unsigned floods never spend the tenant's
//! rate (they are limited per address, as failed authentications), an
//! unknown tenant answers exactly like a bad signature (so slugs cannot be
//! probed), and a replayed delivery with a new, unsigned delivery header
//! starts nothing new.

use brainstem_domain::hooks::sign;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    on_both_backends,
};

on_both_backends!(
    unknown_tenants_and_hooks_answer_like_a_bad_signature,
    a_replay_with_a_new_delivery_header_is_a_duplicate,
);
for_both_backends!(unsigned_floods_never_spend_the_tenants_rate);

const SECRET: &str = "whsec-0123456789";

async fn setup(app: &TestApp) {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "intake", "intent": "t.intake", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"seen": "{{ input.payload.order }}"}}
        ]}),
    )
    .await
    .data();
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
        json!({"input": {"name": "shop", "kind": "webhook", "config": {"plan_key": "intake"},
                         "secret": {"signing_secret": SECRET}}}),
    )
    .await
    .data();
}

/// What the server answered: status, `Retry-After` (present or not) and
/// the JSON body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    retry_after: bool,
    body: Value,
}

async fn deliver(app: &TestApp, path: &str, body: &[u8], headers: &[(&str, String)]) -> Answer {
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
    let retry_after = response.headers().contains_key("retry-after");
    let text = response.text().await.unwrap();
    Answer {
        status,
        retry_after,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

fn signed_with(secret: &str, body: &[u8], at: i64) -> Vec<(&'static str, String)> {
    vec![
        ("x-brainstem-timestamp", at.to_string()),
        ("x-brainstem-signature", sign(secret, at, body)),
    ]
}

async fn task_count(app: &TestApp) -> usize {
    app.graphql(
        Some(&app.admin_token("acme")),
        "{ tasks(first: 50) { edges { node { id } } } }",
        json!({}),
    )
    .await
    .data()["tasks"]["edges"]
        .as_array()
        .unwrap()
        .len()
}

async fn unknown_tenants_and_hooks_answer_like_a_bad_signature(app: TestApp) {
    setup(&app).await;
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation { createConnection(input: {name: \"crm\", kind: \"http\", secret: {signing_secret: \"x\"}}) { connection { id } } }",
        json!({}),
    )
    .await
    .data();
    let body = br#"{"order": "A-1"}"#;
    let now = chrono::Utc::now().timestamp();
    let forged = deliver(
        &app,
        "/hooks/acme/shop",
        body,
        &signed_with("not-the-secret", body, now),
    )
    .await;
    assert_eq!(forged.status, 401, "{forged:?}");
    assert_eq!(forged.body["code"], "UNAUTHENTICATED");
    // Signed with the right secret, but for no hook of the tenant named;
    // the non-hook connection even shares its secret's name.
    for path in [
        "/hooks/nobody/shop",
        "/hooks/acme/nothing",
        "/hooks/acme/crm",
    ] {
        let answer = deliver(&app, path, body, &signed_with(SECRET, body, now)).await;
        assert_eq!(answer, forged, "{path}");
    }
    assert_eq!(task_count(&app).await, 0);
}

/// Unsigned deliveries from one address: refused, then limited by that
/// address's failed authentications, alike for a real and an unknown
/// tenant; the tenant's own callers keep their whole rate.
async fn unsigned_floods_never_spend_the_tenants_rate(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.rate_limit_per_tenant_rps = 0.01;
        c.rate_limit_per_tenant_burst = 5;
        c.rate_limit_failed_auth_rps = 0.01;
        c.rate_limit_failed_auth_burst = 6;
    })
    .await;
    // Two of the tenant's five: the plan and the hook.
    setup(&app).await;
    let body = br#"{"order": "A-1"}"#;
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for _ in 0..5 {
        known.push(deliver(&app, "/hooks/acme/shop", body, &[]).await);
        unknown.push(deliver(&app, "/hooks/nobody/shop", body, &[]).await);
    }
    let statuses: Vec<u16> = known.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429], "{known:?}");
    assert!(known[3].retry_after, "{:?}", known[3]);
    assert_eq!(known[3].body["code"], "RATE_LIMITED");
    // Answer for answer the same, whether the tenant exists or not.
    for (k, u) in known.iter().zip(&unknown) {
        assert_eq!((k.status, &k.body["code"]), (u.status, &u.body["code"]));
    }
    // The tenant's own calls, from another address: three left of its
    // five, none spent above.
    brainstem_domain::http_client::install_tls_provider();
    let elsewhere = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    for _ in 0..3 {
        let response = elsewhere
            .post(app.url("/graphql"))
            .bearer_auth(app.admin_token("acme"))
            .json(&json!({"query": "{ __typename }"}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (status, &body["data"]["__typename"]),
            (200, &json!("Query")),
            "{body}"
        );
    }
}

async fn a_replay_with_a_new_delivery_header_is_a_duplicate(app: TestApp) {
    setup(&app).await;
    let body = br#"{"input": "new order", "order": "A-17"}"#;
    let now = chrono::Utc::now().timestamp();
    let mut first = signed_with(SECRET, body, now);
    first.push(("x-brainstem-delivery", "evt-1".into()));
    let original = deliver(&app, "/hooks/acme/shop", body, &first).await;
    assert_eq!(original.status, 202, "{original:?}");
    assert_eq!(original.body["duplicate"], false);
    // The same signed delivery, replayed with delivery ids of the
    // attacker's choosing (or none): the same task.
    for id in [Some("evt-2"), Some("evt-3"), None] {
        let mut replay = signed_with(SECRET, body, now);
        if let Some(id) = id {
            replay.push(("x-brainstem-delivery", id.into()));
        }
        let again = deliver(&app, "/hooks/acme/shop", body, &replay).await;
        assert_eq!(again.status, 202, "{again:?}");
        assert_eq!(again.body["duplicate"], true, "{again:?}");
        assert_eq!(again.body["taskId"], original.body["taskId"]);
    }
    // What tells deliveries apart is in the signed body.
    let other = br#"{"input": "new order", "order": "A-17", "id": "evt-9"}"#;
    let distinct = deliver(
        &app,
        "/hooks/acme/shop",
        other,
        &signed_with(SECRET, other, now),
    )
    .await;
    assert_eq!(distinct.body["duplicate"], false, "{distinct:?}");
    assert_eq!(task_count(&app).await, 2);
}
