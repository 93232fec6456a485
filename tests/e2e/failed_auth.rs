//! Failed authentications are limited per client address: past the
//! configured burst, an address's credentials are refused with `429`
//! (`RATE_LIMITED`, `Retry-After`) before they are looked up, over HTTP
//! and in a WebSocket's `connection_init`; callers without a credential
//! are not affected.

use serde_json::json;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WsEvent},
};

for_both_backends!(bad_credentials_are_limited_per_address);

async fn bad_credentials_are_limited_per_address(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.rate_limit_failed_auth_rps = 0.01;
        c.rate_limit_failed_auth_burst = 3;
    })
    .await;
    app.create_tenant("acme").await;
    let query = json!({"query": "{ __typename }"});
    for bad in ["bsk_0000", "a.b.c", "bsk_1111"] {
        let (res, _) = app.graphql_with(Some(bad), &[], query.clone()).await;
        assert_eq!(res.status, 401, "{}", res.body);
        assert_eq!(res.error_code(), "UNAUTHENTICATED");
    }
    let (res, headers) = app.graphql_with(Some("bsk_2222"), &[], query.clone()).await;
    assert_eq!(res.status, 429, "{}", res.body);
    assert_eq!(res.error_code(), "RATE_LIMITED");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    // Even a good credential from that address is refused unread …
    let token = app.admin_token("acme");
    let (res, _) = app.graphql_with(Some(&token), &[], query.clone()).await;
    assert_eq!(res.status, 429, "{}", res.body);
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&token)).await;
    assert!(matches!(ws.next_event().await, WsEvent::Closed(Some(4403))));
    // … while a caller without one goes on.
    let (res, _) = app.graphql_with(None, &[], query).await;
    assert_eq!(res.status, 200, "{}", res.body);
}
