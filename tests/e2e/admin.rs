//! The admin surface: a platform admin acts in a tenant only by naming it
//! (`X-Acting-Tenant`, audited every time); tenant admins read their own
//! audit log, with each row's hash checked.

use brainstem_domain::Role;
use serde_json::{Value, json};

use crate::{
    helpers::{Gql, TestApp, WsEvent},
    on_both_backends,
};

on_both_backends!(
    a_platform_admin_acts_in_a_named_tenant_and_is_audited,
    only_platform_admins_may_name_an_acting_tenant,
    acting_tenant_over_websocket,
    audit_log_filters_pages_and_verifies,
    audit_log_is_the_tenants_own_and_needs_admin,
);
crate::for_both_backends!(audit_rows_name_their_request_and_trace);

const VIEWER: &str = "{ viewer { roles tenant { slug } } }";
const AUDIT: &str = "query($filter: AuditLogFilter, $first: Int, $after: String) {
  auditLog(filter: $filter, first: $first, after: $after) {
    edges { cursor node { id action actor target data createdAt hash verified } }
    pageInfo { hasNextPage endCursor }
  }
}";

async fn acting(app: &TestApp, token: Option<&str>, tenant: &str, query: &str) -> Gql {
    app.graphql_with(
        token,
        &[("x-acting-tenant", tenant)],
        json!({"query": query}),
    )
    .await
    .0
}

fn nodes(res: &Gql) -> Vec<Value> {
    res.data()["auditLog"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect()
}

async fn audit(app: &TestApp, token: &str, variables: Value) -> Gql {
    app.graphql(Some(token), AUDIT, variables).await
}

async fn a_platform_admin_acts_in_a_named_tenant_and_is_audited(app: TestApp) {
    let acme_id = app.create_tenant("acme").await;
    app.create_api_key("acme", &["tasks:read"]).await;
    let admin = app.token_for(
        "root",
        None,
        &[Role::PlatformAdmin],
        chrono::Duration::hours(1),
    );
    // Without the header the platform admin is in no tenant.
    let res = app.graphql(Some(&admin), VIEWER, json!({})).await;
    assert!(res.data()["viewer"]["tenant"].is_null());
    let res = app
        .graphql(Some(&admin), "{ apiKeys { edges { cursor } } }", json!({}))
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");

    // By slug: in the tenant, with its admin's rights.
    let res = acting(&app, Some(&admin), "acme", VIEWER).await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "acme");
    let roles = res.data()["viewer"]["roles"].to_string();
    assert!(
        roles.contains("PLATFORM_ADMIN") && roles.contains("TENANT_ADMIN"),
        "{roles}"
    );
    let res = acting(
        &app,
        Some(&admin),
        "acme",
        "{ apiKeys { edges { node { name } } } }",
    )
    .await;
    assert_eq!(
        res.data()["apiKeys"]["edges"][0]["node"]["name"],
        "acme key"
    );

    // By id, too (the uuid inside the global id is what the audit row names).
    let tenant_uuid = {
        let res = acting(
            &app,
            Some(&admin),
            "acme",
            "{ auditLog(filter: {actionPrefix: \"tenant.act\"}) { edges { node { target } } } }",
        )
        .await;
        res.data()["auditLog"]["edges"][0]["node"]["target"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let res = acting(&app, Some(&admin), &tenant_uuid, VIEWER).await;
    assert_eq!(res.data()["viewer"]["tenant"]["slug"], "acme");
    assert!(!acme_id.is_empty());

    // Every use is in the tenant's audit log, naming the admin.
    let res = audit(
        &app,
        &app.admin_token("acme"),
        json!({"filter": {"actionPrefix": "tenant.act"}}),
    )
    .await;
    let rows = nodes(&res);
    assert_eq!(rows.len(), 4, "{}", res.body);
    for row in &rows {
        assert_eq!(row["actor"], "user:root");
        assert_eq!(row["target"], tenant_uuid.as_str());
        assert_eq!(row["verified"], true);
    }

    // An unknown tenant is not found, before anything runs.
    let res = acting(&app, Some(&admin), "nope", VIEWER).await;
    assert_eq!(res.status, 404, "{}", res.body);
    assert_eq!(res.error_code(), "NOT_FOUND");
}

async fn only_platform_admins_may_name_an_acting_tenant(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    let (_, key) = app.create_api_key("other", &["admin"]).await;
    let credentials = [
        Some(app.admin_token("other")),
        Some(app.admin_token("acme")),
        Some(app.token(Some("other"), &[Role::Member])),
        Some(key),
        None,
    ];
    for credential in &credentials {
        let res = acting(&app, credential.as_deref(), "acme", VIEWER).await;
        assert_eq!(res.status, 403, "{}", res.body);
        assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
        assert!(res.body.get("data").is_none());
    }
    // Nothing was audited for the refused attempts.
    let res = audit(
        &app,
        &app.admin_token("acme"),
        json!({"filter": {"actionPrefix": "tenant.act"}}),
    )
    .await;
    assert!(nodes(&res).is_empty());
}

async fn acting_tenant_over_websocket(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.platform_admin_token();
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.send(json!({"type": "connection_init", "payload": {
        "Authorization": format!("Bearer {admin}"),
        "X-Acting-Tenant": "acme",
    }}))
    .await;
    assert!(matches!(ws.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    ws.send(json!({"id": "1", "type": "subscribe", "payload": {"query": VIEWER}}))
        .await;
    match ws.next_event().await {
        WsEvent::Json(m) => assert_eq!(
            m["payload"]["data"]["viewer"]["tenant"]["slug"], "acme",
            "{m}"
        ),
        other => panic!("expected data, got {other:?}"),
    }
    // A tenant admin naming a tenant is refused at connection_init.
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.send(json!({"type": "connection_init", "payload": {
        "Authorization": format!("Bearer {}", app.admin_token("acme")),
        "X-Acting-Tenant": "acme",
    }}))
    .await;
    assert!(matches!(ws.next_event().await, WsEvent::Closed(Some(4403))));
}

async fn audit_log_filters_pages_and_verifies(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.token_for(
        "alice",
        Some("acme"),
        &[Role::TenantAdmin],
        chrono::Duration::hours(1),
    );
    let create =
        "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { apiKey { id } } }";
    let mut ids = Vec::new();
    for name in ["one", "two", "three"] {
        let res = app
            .graphql(
                Some(&admin),
                create,
                json!({"input": {"name": name, "scopes": ["tasks:read"]}}),
            )
            .await;
        ids.push(
            res.data()["createApiKey"]["apiKey"]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let revoke = "mutation($id: ID!) { revokeApiKey(input: {id: $id}) { apiKey { revoked } } }";
    app.graphql(Some(&admin), revoke, json!({"id": ids[0]}))
        .await
        .data();
    let between = chrono::Utc::now();
    // A row by another actor.
    app.create_api_key("acme", &["tasks:read"]).await;

    // Everything, oldest first, each row verified.
    let res = audit(&app, &admin, json!({})).await;
    let all = nodes(&res);
    let actions: Vec<&str> = all.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "api_key.create",
            "api_key.create",
            "api_key.create",
            "api_key.revoke",
            "api_key.create"
        ]
    );
    for row in &all {
        assert_eq!(row["verified"], true);
        assert_eq!(row["hash"].as_str().unwrap().len(), 64);
    }
    assert_eq!(
        all[0]["data"],
        json!({"name": "one", "scopes": ["tasks:read"]})
    );

    // By action prefix (LIKE wildcards are literal), actor and time.
    let res = audit(
        &app,
        &admin,
        json!({"filter": {"actionPrefix": "api_key.rev"}}),
    )
    .await;
    assert_eq!(nodes(&res).len(), 1);
    let res = audit(
        &app,
        &admin,
        json!({"filter": {"actionPrefix": "api_key_"}}),
    )
    .await;
    assert!(nodes(&res).is_empty());
    let res = audit(&app, &admin, json!({"filter": {"actor": "user:alice"}})).await;
    assert_eq!(nodes(&res).len(), 4);
    let res = audit(
        &app,
        &admin,
        json!({"filter": {"since": between.to_rfc3339()}}),
    )
    .await;
    assert_eq!(nodes(&res).len(), 1);
    assert_eq!(nodes(&res)[0]["actor"], "user:tester");
    let res = audit(&app, &admin, json!({"filter": {"until": between.to_rfc3339(), "actor": "user:alice", "actionPrefix": "api_key.create"}})).await;
    assert_eq!(nodes(&res).len(), 3);

    // Pages.
    let res = audit(&app, &admin, json!({"first": 2})).await;
    assert_eq!(nodes(&res).len(), 2);
    assert_eq!(res.data()["auditLog"]["pageInfo"]["hasNextPage"], true);
    let after = res.data()["auditLog"]["pageInfo"]["endCursor"].clone();
    let res = audit(&app, &admin, json!({"first": 10, "after": after})).await;
    assert_eq!(nodes(&res).len(), 3);
    assert_eq!(res.data()["auditLog"]["pageInfo"]["hasNextPage"], false);

    // node(id:) finds a row.
    let res = app
        .graphql(
            Some(&admin),
            "query($id: ID!) { node(id: $id) { ... on AuditEntry { action verified } } }",
            json!({"id": all[3]["id"]}),
        )
        .await;
    assert_eq!(res.data()["node"]["action"], "api_key.revoke");

    // A row changed in the database no longer verifies.
    sea_orm::ConnectionTrait::execute_unprepared(
        &app.outside_db().await,
        "UPDATE audit_log SET target = 'forged' WHERE action = 'api_key.revoke'",
    )
    .await
    .unwrap();
    let res = audit(
        &app,
        &admin,
        json!({"filter": {"actionPrefix": "api_key.revoke"}}),
    )
    .await;
    let rows = nodes(&res);
    assert_eq!(rows[0]["target"], "forged");
    assert_eq!(rows[0]["verified"], false);
}

async fn audit_log_is_the_tenants_own_and_needs_admin(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    app.create_api_key("acme", &["tasks:read"]).await;
    let (_, other_admin_key) = app.create_api_key("other", &["admin"]).await;
    let (_, acme_reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let (_, acme_admin_key) = app.create_api_key("acme", &["admin"]).await;

    let res = audit(&app, &app.admin_token("acme"), json!({})).await;
    let acme_rows = nodes(&res);
    assert_eq!(acme_rows.len(), 3);
    // An API key with `admin` sees the same.
    let res = audit(&app, &acme_admin_key, json!({})).await;
    assert_eq!(nodes(&res).len(), 3);

    // Other tenants see only their own rows, and not acme's by id.
    for credential in [app.admin_token("other"), other_admin_key] {
        let res = audit(&app, &credential, json!({})).await;
        let rows = nodes(&res);
        assert_eq!(rows.len(), 1);
        assert!(
            !res.body
                .to_string()
                .contains(acme_rows[0]["id"].as_str().unwrap())
        );
        let res = app
            .graphql(
                Some(&credential),
                "query($id: ID!) { node(id: $id) { id } }",
                json!({"id": acme_rows[0]["id"]}),
            )
            .await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{}", res.body);
    }
    // Members and keys without `admin` are refused.
    for credential in [app.token(Some("acme"), &[Role::Member]), acme_reader] {
        let res = audit(&app, &credential, json!({})).await;
        assert_eq!(res.error_code(), "FORBIDDEN", "{}", res.body);
    }
    let res = app.graphql(None, AUDIT, json!({})).await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}

/// Every audit row names its origin: the request (`X-Request-Id`, echoed
/// or made) and the trace (the client's `traceparent`, which a task started
/// in the request keeps, and under which its steps' rows are written).
async fn audit_rows_name_their_request_and_trace(backend: crate::helpers::Backend) {
    let app = TestApp::spawn_with(backend, |c| c.audit_tool_calls = true).await;
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let (created, headers) = app
        .graphql_with(
            Some(&admin),
            &[("x-request-id", "req-7"), ("traceparent", &traceparent)],
            json!({"query": "mutation { createApiKey(input: {name: \"ci\", scopes: [\"tasks:read\"]}) { apiKey { id } } }"}),
        )
        .await;
    assert!(created.data()["createApiKey"]["apiKey"]["id"].is_string());
    assert_eq!(headers["x-request-id"], "req-7");
    // Without the headers the server makes both ids, and says the request's.
    let (_, made) = app
        .graphql_with(
            Some(&admin),
            &[],
            json!({"query": "mutation { createApiKey(input: {name: \"cd\", scopes: [\"tasks:read\"]}) { apiKey { id } } }"}),
        )
        .await;
    let made = made["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made.len(), 32);

    let rows = |res: &Gql| -> Vec<Value> {
        res.data()["auditLog"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"].clone())
            .collect()
    };
    let keys = app
        .graphql(
            Some(&admin),
            "{ auditLog(filter: {actionPrefix: \"api_key.create\"}) { edges { node { requestId traceId verified } } } }",
            json!({}),
        )
        .await;
    let keys = rows(&keys);
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0]["requestId"], "req-7");
    assert_eq!(keys[0]["traceId"], trace);
    assert_eq!(keys[1]["requestId"], made.as_str());
    assert_eq!(keys[1]["traceId"].as_str().map(str::len), Some(32));
    assert_ne!(keys[1]["traceId"], trace);
    assert!(keys.iter().all(|k| k["verified"] == true), "{keys:?}");

    // A task started in a traced request keeps the trace; its steps' audit
    // rows (written by the executor, not the request) carry it too.
    app.publish_plan(
        "acme",
        json!({"key": "mark", "intent": "mark",
               "steps": [{"id": "one", "tool": "set_state", "args": {"x": 1}}]}),
    )
    .await
    .data();
    let (started, _) = app
        .graphql_with(
            Some(&admin),
            &[("traceparent", &traceparent)],
            json!({"query": "mutation { startTask(input: {planKey: \"mark\"}) { task { id traceId } } }"}),
        )
        .await;
    assert_eq!(started.data()["startTask"]["task"]["traceId"], trace);
    app.run_tasks().await;
    let calls = app
        .graphql(
            Some(&admin),
            "{ auditLog(filter: {actionPrefix: \"tool.call\"}) { edges { node { requestId traceId verified } } } }",
            json!({}),
        )
        .await;
    let calls = rows(&calls);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["traceId"], trace);
    assert_eq!(calls[0]["requestId"], Value::Null);
    assert_eq!(calls[0]["verified"], true);
}
