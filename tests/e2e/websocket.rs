//! `/graphql/ws`: authentication in `connection_init`, for both
//! subprotocols; bad credentials and expired tokens close the socket with a
//! 44xx code.

use brainstem_domain::Role;
use serde_json::json;

use crate::{
    helpers::{TestApp, WsEvent},
    on_both_backends,
};

on_both_backends!(
    valid_token_is_acknowledged_on_both_subprotocols,
    invalid_credentials_close_the_socket_with_4403,
    expired_token_closes_the_socket,
);

async fn valid_token_is_acknowledged_on_both_subprotocols(app: TestApp) {
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        let mut ws = app.ws_connect(protocol).await;
        ws.init(Some(&token)).await;
        match ws.next_event().await {
            WsEvent::Json(msg) => assert_eq!(msg["type"], "connection_ack", "{protocol}"),
            other => panic!("{protocol}: expected an ack, got {other:?}"),
        }
    }
    // An API key is accepted too.
    let (_, secret) = app.create_api_key("acme", &["tasks:read"]).await;
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&secret)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
}

async fn invalid_credentials_close_the_socket_with_4403(app: TestApp) {
    app.create_tenant("acme").await;
    let expired = app.token_for(
        "t",
        Some("acme"),
        &[Role::Member],
        chrono::Duration::hours(-1),
    );
    for credential in [Some("not-a-token"), Some(expired.as_str()), None] {
        let mut ws = app.ws_connect("graphql-transport-ws").await;
        ws.init(credential).await;
        match ws.next_event().await {
            WsEvent::Closed(Some(code)) => {
                assert!((4400..4500).contains(&code), "close code {code}");
                assert_eq!(code, 4403);
            }
            other => panic!("expected a 44xx close for {credential:?}, got {other:?}"),
        }
    }
    // Legacy protocol: a connection_error, then the socket closes with 4403.
    let mut ws = app.ws_connect("graphql-ws").await;
    ws.init(Some("not-a-token")).await;
    match ws.next_event().await {
        WsEvent::Json(msg) => assert_eq!(msg["type"], "connection_error"),
        other => panic!("expected connection_error, got {other:?}"),
    }
    assert!(matches!(ws.next_event().await, WsEvent::Closed(Some(4403))));
}

async fn expired_token_closes_the_socket(app: TestApp) {
    app.create_tenant("acme").await;
    let short = app.token_for(
        "t",
        Some("acme"),
        &[Role::Member],
        chrono::Duration::seconds(2),
    );
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&short)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    // No further message until the server closes the socket at expiry.
    match ws.next_event().await {
        WsEvent::Closed(Some(code)) => assert_eq!(code, 4401),
        other => panic!("expected close 4401 at token expiry, got {other:?}"),
    }
    let _ = json!({});
}
