//! Revoked credentials on open WebSockets: a socket that authenticated
//! with an API key closes with `4403` when the key is revoked, on whichever
//! replica it is open, and no operation it sends after the revocation runs,
//! even before the close.

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;

use crate::{
    helpers::{Backend, TestApp, WsClient, WsEvent},
    on_both_backends,
};

on_both_backends!(
    a_revoked_keys_socket_closes_and_tokens_stay_open,
    an_operation_after_a_revocation_never_runs,
);

const REVOKE: &str =
    "mutation($id: ID!) { revokeApiKey(input: {id: $id}) { apiKey { id revoked } } }";
const MINT: &str =
    "mutation { createApiKey(input: {name: \"minted\", scopes: [\"admin\"]}) { secret } }";

/// A socket on `app` acknowledged with `credential`.
async fn open_socket(app: &TestApp, credential: &str) -> WsClient {
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(credential)).await;
    match ws.next_event().await {
        WsEvent::Json(m) if m["type"] == "connection_ack" => ws,
        other => panic!("expected connection_ack, got {other:?}"),
    }
}

/// Run `query` as operation `id` on the socket; its first message.
async fn run(ws: &mut WsClient, id: &str, query: &str) -> WsEvent {
    ws.send(json!({"id": id, "type": "subscribe", "payload": {"query": query}}))
        .await;
    ws.next_event().await
}

/// The socket answers a query with its data, then completes it.
async fn answers(ws: &mut WsClient, id: &str) {
    match run(ws, id, "{ __typename }").await {
        WsEvent::Json(m) if m["type"] == "next" => {
            assert_eq!(m["payload"]["data"]["__typename"], "Query", "{m}");
        }
        other => panic!("expected an answer, got {other:?}"),
    }
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "complete"));
}

/// The keys of `tenant`, as its admin lists them.
async fn key_count(app: &TestApp, tenant: &str) -> usize {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "{ apiKeys(first: 50) { edges { node { id } } } }",
        json!({}),
    )
    .await
    .data()["apiKeys"]["edges"]
        .as_array()
        .unwrap()
        .len()
}

async fn revoke(app: &TestApp, tenant: &str, key: &str) {
    let res = app
        .graphql(Some(&app.admin_token(tenant)), REVOKE, json!({"id": key}))
        .await;
    assert_eq!(res.data()["revokeApiKey"]["apiKey"]["revoked"], true);
}

async fn a_revoked_keys_socket_closes_and_tokens_stay_open(app: TestApp) {
    app.create_tenant("acme").await;
    let (key, secret) = app.create_api_key("acme", &["admin"]).await;
    let (other_key, other_secret) = app.create_api_key("acme", &["admin"]).await;
    let mut by_key = open_socket(&app, &secret).await;
    let mut by_other_key = open_socket(&app, &other_secret).await;
    let mut by_token = open_socket(&app, &app.admin_token("acme")).await;
    answers(&mut by_key, "1").await;

    revoke(&app, "acme", &key).await;
    match by_key.next_event().await {
        WsEvent::Closed(code) => assert_eq!(code, Some(4403)),
        other => panic!("expected the socket to close with 4403, got {other:?}"),
    }
    // Another key's socket and a token's socket go on.
    answers(&mut by_other_key, "2").await;
    answers(&mut by_token, "3").await;
    revoke(&app, "acme", &other_key).await;
    assert!(matches!(
        by_other_key.next_event().await,
        WsEvent::Closed(Some(4403))
    ));
    answers(&mut by_token, "4").await;
}

/// Revoke every key of the database as an operator would by hand: no
/// announcement reaches any socket, so only the per-operation check can
/// stop the next operation.
async fn revoke_unannounced(app: &TestApp) {
    let db = app.outside_db().await;
    let (backend, sql) = match app.backend {
        Backend::Postgres => (
            DbBackend::Postgres,
            "UPDATE api_keys SET revoked_at = $1 WHERE revoked_at IS NULL",
        ),
        Backend::Sqlite => (
            DbBackend::Sqlite,
            "UPDATE api_keys SET revoked_at = ? WHERE revoked_at IS NULL",
        ),
    };
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        sql,
        [chrono::Utc::now().into()],
    ))
    .await
    .unwrap();
}

async fn an_operation_after_a_revocation_never_runs(app: TestApp) {
    app.create_tenant("acme").await;
    let (_, secret) = app.create_api_key("acme", &["admin"]).await;
    let mut ws = open_socket(&app, &secret).await;
    answers(&mut ws, "1").await;

    revoke_unannounced(&app).await;
    // The review's attack: mint a new admin key on the revoked key's socket.
    match run(&mut ws, "2", MINT).await {
        WsEvent::Closed(code) => assert_eq!(code, Some(4403)),
        WsEvent::Json(m) => panic!("the operation ran after the revocation: {m}"),
    }
    assert_eq!(key_count(&app, "acme").await, 1, "no key was minted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_one_replica_closes_sockets_on_another() {
    let first = TestApp::spawn(Backend::Postgres).await;
    let second = first.replica().await;
    first.create_tenant("acme").await;
    let (key, secret) = first.create_api_key("acme", &["admin", "tasks:read"]).await;
    let mut ws = open_socket(&second, &secret).await;
    answers(&mut ws, "1").await;
    // A live subscription on it, to show that the close ends it too.
    ws.send(json!({"id": "live", "type": "subscribe",
                   "payload": {"query": "subscription { taskUpdates { id } }"}}))
        .await;

    revoke(&first, "acme", &key).await;
    loop {
        match ws.next_event().await {
            WsEvent::Closed(code) => {
                assert_eq!(code, Some(4403));
                break;
            }
            // Nothing should come, but a task update would not be a fault.
            WsEvent::Json(m) if m["type"] == "next" => continue,
            WsEvent::Json(m) => panic!("unexpected {m}"),
        }
    }
    // The key is revoked on both, for HTTP too.
    let (res, _) = second
        .graphql_with(Some(&secret), &[], json!({"query": "{ __typename }"}))
        .await;
    assert_eq!(res.status, 401, "{}", res.body);
}
