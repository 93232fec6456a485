//! A tenant's MCP servers' tool lists: kept by the process, read again
//! when the server announces a change (`notifications/tools/list_changed`)
//! or on demand. The remote is the in-process rmcp server of
//! [`crate::mcp_connections`].

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::{
    helpers::{TestApp, poll_until},
    mcp_connections::{Remote, connect_ledger, serve, tool},
};

crate::on_both_backends!(
    a_tool_list_is_kept_until_the_server_announces_a_change,
    a_refresh_asks_the_server_now,
);

const LIST: &str =
    "query($c: String!, $r: Boolean!) { mcpTools(connection: $c, refresh: $r) { key } }";

/// The keys `mcpTools` answers for `acme`'s connection `ledger`.
async fn keys(app: &TestApp, refresh: bool) -> Vec<String> {
    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            LIST,
            json!({"c": "ledger", "r": refresh}),
        )
        .await;
    listed.data()["mcpTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_tool_list_is_kept_until_the_server_announces_a_change(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    assert_eq!(keys(&app, false).await.len(), 3);
    // Kept: the server is not asked again.
    assert_eq!(keys(&app, false).await.len(), 3);
    assert_eq!(remote.lists.load(Ordering::SeqCst), 1);

    // The server said it announces changes: the process listens on the
    // session's stream.
    poll_until("the process listens for changes", async || {
        (remote.streams.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    remote.add(tool("audit", "reads the audit trail"));
    // Announced (again until heard: the stream may still be opening).
    let listed = poll_until("the change is heard", async || {
        remote.announce().await;
        let listed = keys(&app, false).await;
        listed
            .contains(&"mcp:ledger/audit".to_owned())
            .then_some(listed)
    })
    .await;
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert_eq!(remote.lists.load(Ordering::SeqCst), 2);
}

async fn a_refresh_asks_the_server_now(app: TestApp) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    assert_eq!(keys(&app, false).await.len(), 3);
    // A change not announced is not seen from the kept list…
    remote.add(tool("audit", "reads the audit trail"));
    assert_eq!(keys(&app, false).await.len(), 3);
    // …until a refresh, which keeps the new list.
    assert!(
        keys(&app, true)
            .await
            .contains(&"mcp:ledger/audit".to_owned())
    );
    assert_eq!(keys(&app, false).await.len(), 4);
    assert_eq!(remote.lists.load(Ordering::SeqCst), 2);
}
