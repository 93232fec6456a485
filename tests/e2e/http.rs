//! GraphQL over HTTP: content negotiation, GET and POST, and bad input of
//! every kind answered with a 4xx or a coded error, never a 5xx.

use serde_json::{Value, json};

use crate::{
    helpers::{Backend, Gql, TestApp},
    on_both_backends,
};

on_both_backends!(
    get_and_post_follow_graphql_over_http,
    health_and_metrics_answer,
    get_honours_the_operation_name,
    a_request_without_a_document_is_a_bad_request,
    responses_keep_the_selection_order,
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
    // A browser is sent to GraphiQL (see graphiql.rs).
    let page = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.url("/graphql"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert!(page.status().is_redirection(), "{}", page.status());
    assert_eq!(page.headers()["location"], "/console/graphiql.html");
}

async fn health_and_metrics_answer(app: TestApp) {
    for path in ["/healthz", "/readyz"] {
        let res = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
    }
    app.graphql(None, "{ __typename }", json!({})).await;
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(
            "brainstem_http_requests_total{method=\"POST\",route=\"/graphql\",status=\"200\"}"
        ),
        "{metrics}"
    );
}

crate::for_both_backends!(depth_and_cost_limits_are_enforced);

/// Depth and cost limits come from configuration and answer with a
/// coded client error, never a 5xx.
async fn depth_and_cost_limits_are_enforced(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.graphql_max_depth = 3;
        c.graphql_max_cost = 10;
    })
    .await;
    // The embedded store starts with `demo`; a PostgreSQL one starts empty.
    app.domain.tenants.ensure_demo().await.unwrap();
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

/// GET with a query string, as a browser or a CDN-cached client sends it.
async fn get(app: &TestApp, token: &str, params: &[(&str, &str)]) -> (Gql, Option<String>) {
    let response = app
        .http
        .get(app.url("/graphql"))
        .query(params)
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/graphql-response+json")
        .send()
        .await
        .unwrap();
    let allow = response
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned());
    (Gql::from(response).await, allow)
}

const MIXED: &str = "query Who { viewer { roles } } query Kind { __typename } \
                     mutation Key { createApiKey(input: {name: \"by-get\", scopes: [\"tasks:read\"]}) { apiKey { id } } }";

async fn get_honours_the_operation_name(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.admin_token("acme");
    let (who, _) = get(&app, &token, &[("query", MIXED), ("operationName", "Who")]).await;
    assert_eq!(who.data()["viewer"]["roles"], json!(["TENANT_ADMIN"]));
    let (kind, _) = get(&app, &token, &[("query", MIXED), ("operationName", "Kind")]).await;
    assert_eq!(kind.data(), &json!({"__typename": "Query"}));
    // Variables and operation name together.
    let (typed, _) = get(
        &app,
        &token,
        &[
            ("query", "query A { a: __typename } query B($n: Int!) { keys: apiKeys(first: $n) { edges { node { id } } } }"),
            ("operationName", "B"),
            ("variables", r#"{"n": 1}"#),
        ],
    )
    .await;
    assert_eq!(typed.data()["keys"]["edges"], json!([]));
    // Selecting the mutation: 405, `Allow: POST`, and nothing ran.
    let (refused, allow) = get(&app, &token, &[("query", MIXED), ("operationName", "Key")]).await;
    assert_eq!(refused.status, 405, "{}", refused.body);
    assert_eq!(allow.as_deref(), Some("POST"));
    assert_eq!(refused.error_code(), "BAD_USER_INPUT");
    let keys = app
        .graphql(
            Some(&token),
            "{ apiKeys(first: 10) { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(keys.data()["apiKeys"]["edges"], json!([]));
    // No name for a document of several operations, or a name it lacks.
    for params in [
        vec![("query", MIXED)],
        vec![("query", MIXED), ("operationName", "Nope")],
    ] {
        let (res, _) = get(&app, &token, &params).await;
        assert_eq!(res.status, 400, "{}", res.body);
        assert_eq!(res.error_code(), "BAD_USER_INPUT");
    }
}

async fn a_request_without_a_document_is_a_bad_request(app: TestApp) {
    for accept in ["application/graphql-response+json", "application/json"] {
        for body in [
            r#"{"qeury": "{ __typename }"}"#,
            r#"{}"#,
            r#"{"query": ""}"#,
        ] {
            let res = post_raw(&app, "application/json", Some(accept), body).await;
            assert_eq!(res.status, 400, "{body} ({accept}): {}", res.body);
            assert_eq!(res.error_code(), "BAD_USER_INPUT");
            assert!(res.error_message().contains("no document"), "{}", res.body);
            assert!(res.body.get("data").is_none(), "{}", res.body);
        }
    }
    let response = app
        .http
        .get(app.url("/graphql"))
        .query(&[("qeury", "{ __typename }")])
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let res = Gql::from(response).await;
    assert_eq!(res.status, 400, "{}", res.body);
    assert!(res.error_message().contains("no document"), "{}", res.body);
}

/// The keys of a JSON object in the order the server wrote them.
pub(crate) fn keys_in_order(text: &str, object_start: &str) -> Vec<String> {
    let at = text
        .find(object_start)
        .unwrap_or_else(|| panic!("{object_start} in {text}"));
    let rest = &text[at + object_start.len()..];
    let mut depth = 0usize;
    let mut keys = Vec::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' if depth == 0 => break,
            '}' | ']' => depth -= 1,
            '"' => {
                let end = rest[i + 1..].find('"').unwrap() + i + 1;
                if depth == 0 && rest[end + 1..].starts_with(':') {
                    keys.push(rest[i + 1..end].to_owned());
                }
                while chars.peek().is_some_and(|(j, _)| *j <= end) {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    keys
}

async fn responses_keep_the_selection_order(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.admin_token("acme");
    let query = "query { zeta: __typename viewer { tenant { slug name id } roles } \
                 ...F alpha: __typename } \
                 fragment F on Query { middle: __typename ... on Query { beta: __typename } }";
    let text = app
        .http
        .post(app.url("/graphql"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(json!({ "query": query }).to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        keys_in_order(&text, r#""data":{"#),
        ["zeta", "viewer", "middle", "beta", "alpha"],
        "{text}"
    );
    assert_eq!(
        keys_in_order(&text, r#""viewer":{"#),
        ["tenant", "roles"],
        "{text}"
    );
    assert_eq!(
        keys_in_order(&text, r#""tenant":{"#),
        ["slug", "name", "id"],
        "{text}"
    );
    // Over GET alike.
    let response = app
        .http
        .get(app.url("/graphql"))
        .query(&[("query", query)])
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert_eq!(
        keys_in_order(&text, r#""data":{"#),
        ["zeta", "viewer", "middle", "beta", "alpha"],
        "{text}"
    );
}

/// `/readyz` says when the database is gone (PostgreSQL: the server's
/// database is dropped under it); `/healthz` still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_when_the_database_is_gone_postgres() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let url = app.config.database_url.clone();
    let (server, database) = url.rsplit_once('/').unwrap();
    let admin = crate::helpers::connect_single(&crate::helpers::superuser_url(&format!(
        "{server}/postgres"
    )))
    .await;
    sea_orm::ConnectionTrait::execute_unprepared(
        &admin,
        &format!("DROP DATABASE \"{database}\" WITH (FORCE)"),
    )
    .await
    .unwrap();
    let gone = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(gone.status(), 503);
    assert_eq!(gone.text().await.unwrap(), "database unavailable");
    let alive = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), 200, "the process itself is alive");
}
