//! Automatic persisted queries, in the stock client flow: the hash alone
//! (`PersistedQueryNotFound`), then hash and query, then the hash alone
//! again; over POST and over GET with the extensions in the query string.

use brainstem_domain::Role;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{
    helpers::{Gql, TestApp},
    on_both_backends,
};

on_both_backends!(
    post_follows_the_apollo_flow,
    get_follows_the_apollo_flow,
    a_wrong_hash_is_refused,
    a_persisted_mutation_is_refused_over_get,
);

fn sha256(query: &str) -> String {
    hex::encode(Sha256::digest(query.as_bytes()))
}

fn persisted(hash: &str) -> Value {
    json!({"persistedQuery": {"version": 1, "sha256Hash": hash}})
}

async fn get(app: &TestApp, token: &str, params: &[(&str, String)]) -> Gql {
    Gql::from(
        app.http
            .get(app.url("/graphql"))
            .query(params)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn post(app: &TestApp, token: &str, body: Value) -> Gql {
    app.graphql_with(Some(token), &[], body).await.0
}

fn assert_not_found(res: &Gql) {
    assert_eq!(
        res.error_message(),
        "PersistedQueryNotFound",
        "{}",
        res.body
    );
    assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
}

async fn post_follows_the_apollo_flow(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let query = "query Who { viewer { subject tenant { slug } } }";
    let hash = sha256(query);

    let res = post(&app, &token, json!({"extensions": persisted(&hash)})).await;
    assert_not_found(&res);

    let res = post(
        &app,
        &token,
        json!({"query": query, "extensions": persisted(&hash)}),
    )
    .await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "acme");

    let res = post(
        &app,
        &token,
        json!({"extensions": persisted(&hash), "operationName": "Who"}),
    )
    .await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "acme");
    assert_eq!(res.data()["viewer"]["subject"], "tester");
}

async fn get_follows_the_apollo_flow(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let query = "query($n: Int) { apiKeys(first: $n) { edges { cursor } } viewer { roles } }";
    let member_query = "{ viewer { roles tenant { name } } }";
    let hash = sha256(member_query);
    let extensions = persisted(&hash).to_string();

    let res = get(&app, &token, &[("extensions", extensions.clone())]).await;
    assert_not_found(&res);
    // A miss is 200 even with the GraphQL-over-HTTP media type, where other
    // request errors are 400: clients treat a 400 as "not supported".
    let res = Gql::from(
        app.http
            .get(app.url("/graphql"))
            .query(&[("extensions", extensions.clone())])
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/graphql-response+json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.content_type, "application/graphql-response+json");
    assert_not_found(&res);

    let res = get(
        &app,
        &token,
        &[
            ("query", member_query.to_owned()),
            ("extensions", extensions.clone()),
        ],
    )
    .await;
    assert_eq!(res.data()["viewer"]["tenant"]["name"], "ACME");

    let res = get(&app, &token, &[("extensions", extensions)]).await;
    assert_eq!(res.data()["viewer"]["roles"], json!(["MEMBER"]));

    // Variables travel with the hash, and the cached document is still
    // checked against the caller's rights at execution.
    let hash = sha256(query);
    let admin = app.admin_token("acme");
    let ext = persisted(&hash).to_string();
    let vars = json!({"n": 5}).to_string();
    let res = get(
        &app,
        &admin,
        &[
            ("query", query.to_owned()),
            ("extensions", ext.clone()),
            ("variables", vars.clone()),
        ],
    )
    .await;
    assert_eq!(res.data()["apiKeys"]["edges"], json!([]));
    let res = get(&app, &token, &[("extensions", ext), ("variables", vars)]).await;
    assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
}

async fn a_wrong_hash_is_refused(app: TestApp) {
    let token = app.platform_admin_token();
    let (res, _) = app
        .graphql_with(
            Some(&token),
            &[],
            json!({"query": "{ viewer { roles } }", "extensions": persisted(&"0".repeat(64))}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
    let (res, _) = app
        .graphql_with(
            Some(&token),
            &[],
            json!({"extensions": {"persistedQuery": {"version": 2, "sha256Hash": "x"}}}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
}

async fn a_persisted_mutation_is_refused_over_get(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    let mutation = r#"mutation { createApiKey(input: {name: "apq", scopes: ["tasks:read"]}) { apiKey { id } } }"#;
    let hash = sha256(mutation);
    let (res, _) = app
        .graphql_with(
            Some(&admin),
            &[],
            json!({"query": mutation, "extensions": persisted(&hash)}),
        )
        .await;
    assert!(res.data()["createApiKey"]["apiKey"]["id"].is_string());
    let response = app
        .http
        .get(app.url("/graphql"))
        .query(&[("extensions", persisted(&hash).to_string())])
        .header("authorization", format!("Bearer {admin}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    // Over POST the persisted mutation runs.
    let (res, _) = app
        .graphql_with(Some(&admin), &[], json!({"extensions": persisted(&hash)}))
        .await;
    assert!(res.data()["createApiKey"]["apiKey"]["id"].is_string());
}
