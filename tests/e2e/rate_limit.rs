//! Rate limits: token buckets per API key and per tenant, enforced on HTTP
//! (`429`, `Retry-After`, code `RATE_LIMITED` with `retryAfter`) and on
//! WebSocket operations; an API key may carry its own rate.

use brainstem_domain::Role;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WsEvent},
};

for_both_backends!(
    an_api_key_over_its_burst_gets_429_with_retry_after,
    a_tenants_callers_share_its_bucket,
    a_key_may_carry_its_own_rate,
    zero_disables_the_limits,
    websocket_operations_are_limited_too,
);

const VIEWER: &str = "{ viewer { subject } }";

/// Limits slow enough that no token comes back while a test runs.
async fn spawn(backend: Backend, key: (f64, u32), tenant: (f64, u32)) -> TestApp {
    TestApp::spawn_with(backend, |c| {
        c.rate_limit_per_key_rps = key.0;
        c.rate_limit_per_key_burst = key.1;
        c.rate_limit_per_tenant_rps = tenant.0;
        c.rate_limit_per_tenant_burst = tenant.1;
    })
    .await
}

async fn viewer(app: &TestApp, credential: &str) -> (u16, Value, Option<String>) {
    let (res, headers) = app
        .graphql_with(Some(credential), &[], json!({"query": VIEWER}))
        .await;
    let retry_after = headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (res.status, res.body, retry_after)
}

async fn an_api_key_over_its_burst_gets_429_with_retry_after(backend: Backend) {
    let app = spawn(backend, (0.01, 2), (0.0, 0)).await;
    app.create_tenant("acme").await;
    let (_, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    for _ in 0..2 {
        let (status, body, _) = viewer(&app, &secret).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body, retry_after) = viewer(&app, &secret).await;
    assert_eq!(status, 429, "{body}");
    let error = &body["errors"][0];
    assert_eq!(error["extensions"]["code"], "RATE_LIMITED", "{body}");
    let secs = error["extensions"]["retryAfter"].as_u64().unwrap();
    // One token at 0.01/s takes up to 100 s to come back.
    assert!((1..=100).contains(&secs), "{secs}");
    assert_eq!(retry_after, Some(secs.to_string()));
    assert!(
        body.get("data").is_none() || body["data"].is_null(),
        "{body}"
    );
    // The same with the GraphQL-over-HTTP media type.
    let res = app
        .http
        .get(app.url("/graphql"))
        .query(&[("query", VIEWER)])
        .header("x-api-key", &secret)
        .header("accept", "application/graphql-response+json")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // Another key of the same tenant has its own bucket.
    let (_, other) = app.create_api_key("acme", &["tasks:read"]).await;
    assert_eq!(viewer(&app, &other).await.0, 200);
}

async fn a_tenants_callers_share_its_bucket(backend: Backend) {
    let app = spawn(backend, (0.0, 0), (0.01, 3)).await;
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    let (_, a) = app.create_api_key("acme", &["tasks:read"]).await;
    let (_, b) = app.create_api_key("acme", &["tasks:read"]).await;
    let member = app.token(Some("acme"), &[Role::Member]);
    // Creating the keys took 2 of acme's 3 tokens.
    assert_eq!(viewer(&app, &a).await.0, 200);
    for credential in [&a, &b, &member] {
        let (status, body, _) = viewer(&app, credential).await;
        assert_eq!(status, 429, "{body}");
        assert!(
            body["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("tenant")
        );
    }
    // Another tenant, and a platform admin without a tenant, are untouched.
    let other = app.token(Some("other"), &[Role::Member]);
    assert_eq!(viewer(&app, &other).await.0, 200);
    for _ in 0..5 {
        assert_eq!(viewer(&app, &app.platform_admin_token()).await.0, 200);
    }
}

async fn a_key_may_carry_its_own_rate(backend: Backend) {
    let app = spawn(backend, (0.01, 50), (0.0, 0)).await;
    app.create_tenant("acme").await;
    let (id, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    let set = "mutation($input: SetApiKeyRateLimitInput!) { setApiKeyRateLimit(input: $input) { apiKey { id rateLimit { perSecond burst } } } }";
    let admin = app.admin_token("acme");
    let res = app
        .graphql(
            Some(&admin),
            set,
            json!({"input": {"id": id, "rateLimit": {"perSecond": 0.01, "burst": 1}}}),
        )
        .await;
    assert_eq!(
        res.data()["setApiKeyRateLimit"]["apiKey"]["rateLimit"],
        json!({"perSecond": 0.01, "burst": 1})
    );
    assert_eq!(viewer(&app, &secret).await.0, 200);
    assert_eq!(viewer(&app, &secret).await.0, 429);
    // Only admins set rates; another tenant's key is not found.
    let (_, plain) = app.create_api_key("acme", &["tasks:read"]).await;
    let res = app
        .graphql(
            Some(&plain),
            set,
            json!({"input": {"id": id, "rateLimit": null}}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
    app.create_tenant("other").await;
    let res = app
        .graphql(
            Some(&app.admin_token("other")),
            set,
            json!({"input": {"id": id, "rateLimit": null}}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
    let res = app
        .graphql(
            Some(&admin),
            set,
            json!({"input": {"id": id, "rateLimit": {"perSecond": -1, "burst": 1}}}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
    // Back to the configured default.
    let res = app
        .graphql(
            Some(&admin),
            set,
            json!({"input": {"id": id, "rateLimit": null}}),
        )
        .await;
    assert!(res.data()["setApiKeyRateLimit"]["apiKey"]["rateLimit"].is_null());
}

async fn zero_disables_the_limits(backend: Backend) {
    let app = spawn(backend, (0.0, 0), (0.0, 0)).await;
    app.create_tenant("acme").await;
    let (_, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    for _ in 0..60 {
        let (status, body, _) = viewer(&app, &secret).await;
        assert_eq!(status, 200, "{body}");
    }
}

async fn websocket_operations_are_limited_too(backend: Backend) {
    let app = spawn(backend, (0.01, 1), (0.0, 0)).await;
    app.create_tenant("acme").await;
    let (_, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&secret)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    let mut answers = Vec::new();
    for id in ["1", "2"] {
        ws.send(json!({"id": id, "type": "subscribe", "payload": {"query": VIEWER}}))
            .await;
        // Each operation ends with `complete` (or an `error` message).
        loop {
            match ws.next_event().await {
                WsEvent::Json(m) if m["type"] == "complete" => break,
                WsEvent::Json(m) if m["type"] == "error" => {
                    answers.push(m);
                    break;
                }
                WsEvent::Json(m) => answers.push(m),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let text = Value::Array(answers.clone()).to_string();
    assert_eq!(
        answers[0]["payload"]["data"]["viewer"]["subject"]
            .as_str()
            .map(|s| s.starts_with("api_key:")),
        Some(true),
        "{text}"
    );
    assert!(text.contains("RATE_LIMITED"), "{text}");
    assert!(text.contains("retryAfter"), "{text}");
}
