//! API keys: shown once, stored hashed, listable, revocable, and confined to
//! their tenant on every path.

use brainstem_domain::Role;
use serde_json::json;

use crate::{helpers::TestApp, on_both_backends};

const NODE: &str =
    "query($id: ID!) { node(id: $id) { id ... on ApiKey { name } ... on Tenant { slug } } }";
const LIST: &str = "{ apiKeys(first: 50) { edges { cursor node { id name prefix scopes revoked } } pageInfo { hasNextPage } } }";
const REVOKE: &str =
    "mutation($id: ID!) { revokeApiKey(input: {id: $id}) { apiKey { id revoked } } }";

on_both_backends!(
    keys_are_listed_without_their_secret,
    another_tenants_key_is_not_found_on_every_path,
    only_admins_manage_keys,
    bad_key_input_is_refused,
    keys_page_with_cursors,
);

async fn keys_are_listed_without_their_secret(app: TestApp) {
    app.create_tenant("acme").await;
    let (id, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    assert!(secret.starts_with("bsk_") && secret.len() == 68, "{secret}");
    let res = app
        .graphql(Some(&app.admin_token("acme")), LIST, json!({}))
        .await;
    let edges = res.data()["apiKeys"]["edges"].as_array().unwrap().clone();
    assert_eq!(edges.len(), 1);
    let node = &edges[0]["node"];
    assert_eq!(node["id"], id.as_str());
    assert_eq!(node["scopes"], json!(["tasks:read"]));
    assert!(secret.starts_with(node["prefix"].as_str().unwrap()));
    assert!(
        !res.body.to_string().contains(&secret[12..]),
        "the secret is never returned again"
    );
    // Only a hash is stored.
    let stored = sea_orm::ConnectionTrait::query_all_raw(
        &app.outside_db().await,
        sea_orm::Statement::from_string(
            app.domain.db.get_database_backend(),
            "SELECT secret_hash FROM api_keys",
        ),
    )
    .await
    .unwrap();
    let hash: String = stored[0].try_get("", "secret_hash").unwrap();
    assert_ne!(hash, secret);
    assert_eq!(hash.len(), 64);
}

async fn another_tenants_key_is_not_found_on_every_path(app: TestApp) {
    let tenant_a = app.create_tenant("tenant-a").await;
    app.create_tenant("tenant-b").await;
    let (key_a, secret_a) = app.create_api_key("tenant-a", &["tasks:read"]).await;
    let (_, secret_b) = app.create_api_key("tenant-b", &["admin"]).await;
    let admin_b = app.admin_token("tenant-b");

    for credential in [secret_b.as_str(), admin_b.as_str()] {
        // Listing shows only B's keys.
        let res = app.graphql(Some(credential), LIST, json!({})).await;
        let listed = res.data()["apiKeys"]["edges"].to_string();
        assert!(!listed.contains(&key_a), "B must not see A's key");
        // node(id:) on A's key and on A's tenant.
        for id in [&key_a, &tenant_a] {
            let res = app.graphql(Some(credential), NODE, json!({"id": id})).await;
            assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
            assert!(res.body["data"]["node"].is_null());
            assert!(!res.body.to_string().contains("tenant-a"));
        }
        // Revoking A's key.
        let res = app
            .graphql(Some(credential), REVOKE, json!({"id": key_a}))
            .await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
    }
    // A's key still works.
    let res = app
        .graphql(Some(&secret_a), "{ viewer { tenant { slug } } }", json!({}))
        .await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "tenant-a");
    // And A's own admin can read it by id.
    let res = app
        .graphql(
            Some(&app.admin_token("tenant-a")),
            NODE,
            json!({"id": key_a}),
        )
        .await;
    assert_eq!(res.data()["node"]["id"], key_a.as_str());
}

async fn only_admins_manage_keys(app: TestApp) {
    app.create_tenant("acme").await;
    let member = app.token(Some("acme"), &[Role::Member]);
    let res = app.graphql(Some(&member), LIST, json!({})).await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let res = app
        .graphql(
            Some(&reader),
            "mutation { createApiKey(input: {name: \"x\", scopes: [\"admin\"]}) { secret } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
}

async fn bad_key_input_is_refused(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    let create = "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { secret } }";
    for input in [
        json!({"name": "k", "scopes": []}),
        json!({"name": "k", "scopes": ["root"]}),
        json!({"name": "  ", "scopes": ["admin"]}),
    ] {
        let res = app
            .graphql(Some(&admin), create, json!({"input": input}))
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
    }
    let res = app
        .graphql(Some(&admin), REVOKE, json!({"id": "garbage"}))
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    let res = app
        .graphql(Some(&admin), NODE, json!({"id": "garbage"}))
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
}

async fn keys_page_with_cursors(app: TestApp) {
    app.create_tenant("acme").await;
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(app.create_api_key("acme", &["tasks:read"]).await.0);
    }
    let admin = app.admin_token("acme");
    let page = "query($after: String) { apiKeys(first: 2, after: $after) { edges { cursor node { id } } pageInfo { hasNextPage endCursor } } }";
    let mut seen = Vec::new();
    let mut after = serde_json::Value::Null;
    loop {
        let res = app
            .graphql(Some(&admin), page, json!({"after": after}))
            .await;
        let conn = res.data()["apiKeys"].clone();
        for edge in conn["edges"].as_array().unwrap() {
            seen.push(edge["node"]["id"].as_str().unwrap().to_owned());
        }
        if !conn["pageInfo"]["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(seen, created, "every key once, oldest first");
    let res = app
        .graphql(Some(&admin), page, json!({"after": "not a cursor"}))
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    let res = app
        .graphql(
            Some(&admin),
            "{ apiKeys(first: 1000) { edges { cursor } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
}
