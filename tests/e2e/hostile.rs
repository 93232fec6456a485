//! Hostile documents: what an attacker can send to `/graphql` with or
//! without a token, and that each is refused before it costs the server
//! more than reading it (`brainstem_api::cost`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Backend, Gql, TestApp};
use crate::{for_both_backends, on_both_backends};

on_both_backends!(
    a_fragment_fan_out_is_refused_before_it_expands,
    the_budget_is_tighter_for_anonymous_callers,
    document_limits_refuse_oversized_text,
    a_fragment_cycle_is_refused,
    persisted_documents_are_measured_too,
    legitimate_documents_pass,
    wrong_argument_values_are_the_callers_mistake,
);

for_both_backends!(every_field_counts_and_pages_multiply);

/// `fragment F<k>` spreads `F<k-1>` ten times; F0 selects `__typename`:
/// `10^levels` fields once expanded, in a few hundred bytes.
fn fan_out(levels: usize) -> String {
    let mut q = format!("query Q {{ ...F{levels} }} fragment F0 on Query {{ __typename }}");
    for k in 1..=levels {
        let spreads = format!("...F{} ", k - 1).repeat(10);
        q.push_str(&format!(" fragment F{k} on Query {{ {spreads}}}"));
    }
    q
}

/// Resident memory of this process (the server runs in it), in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// POST `query` as `application/graphql-response+json`, with `token`.
async fn post(app: &TestApp, token: Option<&str>, query: &str, variables: Value) -> Gql {
    let mut request = app
        .http
        .post(app.url("/graphql"))
        .header("content-type", "application/json")
        .header("accept", "application/graphql-response+json")
        .body(json!({"query": query, "variables": variables}).to_string());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    Gql::from(request.send().await.unwrap()).await
}

/// A token of an admin of a new tenant (PostgreSQL starts with none).
async fn tenant_admin(app: &TestApp) -> String {
    app.create_tenant("acme").await;
    app.admin_token("acme")
}

/// A request error: `400`, `BAD_USER_INPUT`, no `data`, the message given.
fn assert_refused(res: &Gql, message: &str) {
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
    assert!(res.body.get("data").is_none(), "{}", res.body);
    assert!(
        res.error_message().starts_with(message),
        "expected {message:?}, got {}",
        res.body
    );
}

async fn a_fragment_fan_out_is_refused_before_it_expands(app: TestApp) {
    let query = fan_out(10);
    let before = resident_bytes();
    let started = Instant::now();
    let res = post(&app, None, &query, json!({})).await;
    let took = started.elapsed();
    assert_refused(
        &res,
        "query too costly: 10000000000 fields, limit 50000 for anonymous callers",
    );
    // Safety nets, not speed targets (BENCHMARKS.md has the figures):
    // expanding 10^10 fields would take hours and terabytes.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let grown = resident_bytes().saturating_sub(before);
    assert!(grown < 64 << 20, "resident memory grew by {grown} bytes");
    // A token raises the budget, not past this.
    let token = tenant_admin(&app).await;
    let res = post(&app, Some(&token), &query, json!({})).await;
    assert_refused(&res, "query too costly: 10000000000 fields, limit 100000");
    // The server is still there.
    let res = post(&app, None, "{ __typename }", json!({})).await;
    assert_eq!(res.data()["__typename"], "Query");
}

async fn the_budget_is_tighter_for_anonymous_callers(app: TestApp) {
    // 10^5 `__typename`s: within an authenticated caller's budget only.
    let query = fan_out(5);
    let res = post(&app, None, &query, json!({})).await;
    assert_refused(&res, "query too costly: 100000 fields, limit 50000");
    let token = tenant_admin(&app).await;
    let res = post(&app, Some(&token), &query, json!({})).await;
    let data = res.data();
    assert_eq!(data["__typename"], "Query");
}

async fn every_field_counts_and_pages_multiply(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.graphql_max_cost = 60;
        c.graphql_max_cost_anonymous = 60;
    })
    .await;
    let token = tenant_admin(&app).await;
    // tasks 1 + 20 (default page) × (nodes 1 + id 1 + steps 1 + 10 × stepId 1)
    let res = post(
        &app,
        Some(&token),
        "{ tasks { nodes { id steps { stepId } } } }",
        json!({}),
    )
    .await;
    assert_refused(&res, "query too costly: 261 fields, limit 60");
    // The page size counts, from a literal or a variable.
    let query = "query($n: Int) { tasks(first: $n) { nodes { id steps { stepId } } } }";
    let res = post(&app, Some(&token), query, json!({"n": 4})).await; // 53
    assert!(res.data()["tasks"]["nodes"].is_array(), "{}", res.body);
    let res = post(&app, Some(&token), query, json!({"n": 5})).await;
    assert_refused(&res, "query too costly: 66 fields, limit 60");
    // Introspection and `__typename` count like any field.
    let many: String = (0..61).map(|i| format!("t{i}: __typename ")).collect();
    let res = post(&app, Some(&token), &format!("{{ {many} }}"), json!({})).await;
    assert_refused(&res, "query too costly: 61 fields, limit 60");
    let res = post(
        &app,
        Some(&token),
        "{ __schema { types { name fields { name } } } }",
        json!({}),
    )
    .await;
    assert_refused(&res, "query too costly: 122 fields, limit 60");
}

async fn document_limits_refuse_oversized_text(app: TestApp) {
    let token = tenant_admin(&app).await;
    let padding = " ".repeat(64 * 1024);
    let res = post(
        &app,
        Some(&token),
        &format!("{{ __typename }}{padding}"),
        json!({}),
    )
    .await;
    assert_refused(&res, "query too large: 65550 bytes, limit 65536");
    let tokens = "a ".repeat(10_001);
    let res = post(&app, Some(&token), &format!("{{ {tokens} }}"), json!({})).await;
    assert_refused(&res, "query too long: more than 10000 tokens");
    // Deep nesting is refused before the parser recurses into it.
    let deep = format!("{{ a(x: {}1{}) }}", "[".repeat(1000), "]".repeat(1000));
    let res = post(&app, Some(&token), &deep, json!({})).await;
    assert_refused(&res, "query nested too deeply: more than 64 levels");
    let aliases: String = (0..101).map(|i| format!("a{i}: __typename ")).collect();
    let res = post(&app, Some(&token), &format!("{{ {aliases} }}"), json!({})).await;
    assert_refused(&res, "query has too many aliases: more than 100");
    let directives = "@include(if: true) ".repeat(6);
    let res = post(
        &app,
        Some(&token),
        &format!("{{ __typename {directives} }}"),
        json!({}),
    )
    .await;
    assert_refused(&res, "field `__typename` has 6 directives, limit 5");
}

async fn a_fragment_cycle_is_refused(app: TestApp) {
    // Each fragment spreads the other twice: followed blindly, 2^depth.
    let query = "{ ...A } fragment A on Query { __typename ...B ...B } \
                 fragment B on Query { __typename ...A ...A }";
    let res = post(&app, None, query, json!({})).await;
    assert_refused(&res, "fragment `A` spreads itself");
}

/// Automatic persisted queries: a costly document is refused when it is
/// registered and again when its hash alone is sent.
async fn persisted_documents_are_measured_too(app: TestApp) {
    use sha2::{Digest, Sha256};
    let query = fan_out(9);
    let hash = hex::encode(Sha256::digest(query.as_bytes()));
    let persisted = json!({"persistedQuery": {"version": 1, "sha256Hash": hash}});
    for body in [
        json!({"query": query, "extensions": persisted}),
        json!({"extensions": persisted}),
    ] {
        let res = Gql::from(
            app.http
                .post(app.url("/graphql"))
                .header("content-type", "application/json")
                .header("accept", "application/graphql-response+json")
                .body(body.to_string())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_refused(&res, "query too costly: 1000000000 fields");
    }
}

async fn legitimate_documents_pass(app: TestApp) {
    // The introspection query a GraphiQL or codegen client sends, anonymous.
    let introspection = include_str!("../fixtures/introspection.graphql");
    let res = post(&app, None, introspection, json!({})).await;
    assert!(
        res.data()["__schema"]["types"].as_array().unwrap().len() > 50,
        "{}",
        res.body
    );
    // A dashboard's nested page.
    let token = tenant_admin(&app).await;
    let res = post(
        &app,
        Some(&token),
        "{ tasks(first: 50) { edges { node { id status plan { key version } \
         steps { stepId status attempt durationMs } events(last: 5) { seq kind summary } } } } }",
        json!({}),
    )
    .await;
    assert!(res.data()["tasks"]["edges"].is_array(), "{}", res.body);
}

/// Values that fail to coerce to their argument's type while the field
/// resolves: `BAD_USER_INPUT` naming the variable, or the argument of a
/// literal, never a masked `INTERNAL`.
async fn wrong_argument_values_are_the_callers_mistake(app: TestApp) {
    let token = tenant_admin(&app).await;
    let cases = [
        (
            "{ connections(first: 99999999999) { pageInfo { hasNextPage } } }",
            json!({}),
            "invalid value for argument `first` of `connections`",
        ),
        (
            "query($f: MemoryFilter) { memories(filter: $f) { pageInfo { hasNextPage } } }",
            json!({"f": "x"}),
            "invalid value for variable `$f` (argument `filter` of `memories`)",
        ),
        (
            "query($since: DateTime) { auditLog(filter: {since: $since}) { pageInfo { hasNextPage } } }",
            json!({"since": "not a date"}),
            "invalid value for variable `$since` (argument `filter` of `auditLog`)",
        ),
        (
            r#"{ auditLog(filter: {since: "2026-13-45"}) { pageInfo { hasNextPage } } }"#,
            json!({}),
            "invalid value for argument `filter` of `auditLog`",
        ),
    ];
    for (query, variables, message) in cases {
        let res = post(&app, Some(&token), query, variables).await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{query}: {}", res.body);
        assert!(
            res.error_message().starts_with(message),
            "{query}: expected {message:?}, got {}",
            res.body
        );
    }
}
