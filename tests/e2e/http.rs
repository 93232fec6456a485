//! GraphQL over HTTP: content negotiation, GET and POST, and bad input of
//! every kind answered with a 4xx or a coded error, never a 5xx.

use serde_json::{Value, json};

use crate::{
    helpers::{Backend, Gql, TestApp},
    on_both_backends,
};

on_both_backends!(
    get_and_post_follow_graphql_over_http,
    health_and_metrics_answer
);

async fn post_raw(app: &TestApp, content_type: &str, accept: Option<&str>, body: &str) -> Gql {
    let mut req = app
        .http
        .post(app.url("/graphql"))
        .header("content-type", content_type)
        .body(body.to_owned());
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    Gql::from(req.send().await.unwrap()).await
}

fn assert_client_error(res: &Gql) {
    assert!(
        (400..500).contains(&res.status) || res.status == 200,
        "status {} for {}",
        res.status,
        res.body
    );
    let code = res.error_code();
    assert!(
        ["BAD_USER_INPUT", "UNAUTHENTICATED"].contains(&code.as_str()),
        "code {code}"
    );
}

async fn get_and_post_follow_graphql_over_http(app: TestApp) {
    let token = app.platform_admin_token();
    // GET runs queries.
    let res = Gql::from(
        app.http
            .get(app.url("/graphql"))
            .query(&[("query", "{ viewer { roles } }")])
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/graphql-response+json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(res.content_type, "application/graphql-response+json");
    assert_eq!(res.data()["viewer"]["roles"], json!(["PLATFORM_ADMIN"]));
    // GET refuses mutations.
    let response = app
        .http
        .get(app.url("/graphql"))
        .query(&[(
            "query",
            "mutation { createTenant(input: {slug: \"x1\", name: \"x\"}) { tenant { id } } }",
        )])
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    // application/json gets 200 for a validation error; the new media type 400.
    let unknown = json!({"query": "{ viewer { nope } }"}).to_string();
    let res = post_raw(&app, "application/json", Some("application/json"), &unknown).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.content_type, "application/json");
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    let res = post_raw(
        &app,
        "application/json",
        Some("application/graphql-response+json"),
        &unknown,
    )
    .await;
    assert_eq!(res.status, 400);
    assert!(
        res.body.get("data").is_none(),
        "request errors carry no data"
    );
    // Not JSON at all, or the wrong media types.
    let res = post_raw(&app, "application/json", None, "{\"query\": ").await;
    assert_eq!(res.status, 400);
    assert_client_error(&res);
    let res = post_raw(&app, "application/json", None, "[1, 2]").await;
    assert_eq!(res.status, 400);
    let res = post_raw(&app, "text/plain", None, "{ viewer { roles } }").await;
    assert_eq!(res.status, 415);
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("content-type", "application/json")
        .header("accept", "image/png")
        .body(unknown)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 406);
    // A syntax error.
    let res = post_raw(
        &app,
        "application/json",
        None,
        &json!({"query": "{ viewer { "}).to_string(),
    )
    .await;
    assert_client_error(&res);
    // A variable of the wrong type.
    let res = app
        .graphql(
            Some(&token),
            "query($n: Int) { tenants(first: $n) { edges { cursor } } }",
            json!({"n": "many"}),
        )
        .await;
    assert_client_error(&res);
    // A browser gets GraphiQL.
    let page = app
        .http
        .get(app.url("/graphql"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("graphiql"));
}

async fn health_and_metrics_answer(app: TestApp) {
    for path in ["/healthz", "/readyz"] {
        let res = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
    }
    app.graphql(None, "{ __typename }", json!({})).await;
    let metrics = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "brainstem_http_requests_total{method=\"POST\",route=\"/graphql\",status=\"200\"}"
        ),
        "{metrics}"
    );
}

/// Depth and cost limits come from configuration and answer with a
/// coded client error, never a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depth_and_cost_limits_are_enforced() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.graphql_max_depth = 3;
        c.graphql_max_cost = 10;
    })
    .await;
    let token = app.admin_token("demo");
    // Within both limits.
    let ok = app
        .graphql(Some(&token), "{ viewer { tenant { name } } }", json!({}))
        .await;
    assert_eq!(ok.data()["viewer"]["tenant"]["name"], "Demo");
    // Too deep.
    let res = app
        .graphql(
            Some(&token),
            "{ apiKeys(first: 1) { edges { node { name } } } }",
            json!({}),
        )
        .await;
    assert_client_error(&res);
    assert!(
        res.error_message().to_lowercase().contains("deep"),
        "{}",
        res.body
    );
    // Too costly (wide).
    let res = app
        .graphql(
            Some(&token),
            "{ viewer { subject credential roles scopes expiresAt tenant { id name slug createdAt } } }",
            json!({}),
        )
        .await;
    assert_client_error(&res);
    assert!(
        res.error_message()
            .starts_with("query too costly: 11 fields, limit 10"),
        "{}",
        res.body
    );
    let _: &Value = &res.body;
}
