//! What a tenant reads of a failed webhook delivery: the failure of its
//! endpoint (a status, the endpoint's own words), never the server's
//! internal error text.

use chrono::Utc;
use secrecy::SecretString;
use serde_json::json;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(a_servers_own_failure_reaches_the_tenant_without_its_cause);

async fn a_servers_own_failure_reaches_the_tenant_without_its_cause(backend: Backend) {
    let mut app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "ok", "intent": "t.ok", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]}),
    )
    .await
    .data();
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation { createWebhookEndpoint(input: {name: \"crm\", url: \"http://127.0.0.1:9/hook\", \
         events: [TASK_COMPLETED]}) { secret } }",
        json!({}),
    )
    .await
    .data();
    let task = app
        .start_task("acme", json!({"input": "go", "planKey": "ok"}))
        .await;
    app.run_tasks().await;
    assert_eq!(
        app.task("acme", task["id"].as_str().unwrap()).await["status"],
        "COMPLETED"
    );
    // The operator replaces the encryption key without keeping the old
    // one: the endpoint's sealed secret can no longer be opened.
    app.config.connection_encryption_key = Some(SecretString::from(
        brainstem_domain::crypto::EncryptionKey::generate_base64(),
    ));
    let app = app.restart().await;
    assert_eq!(
        app.domain.webhooks.deliver_due(Utc::now()).await.unwrap(),
        0
    );

    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ webhookEndpoints { deliveries { attempts lastError } } }",
            json!({}),
        )
        .await;
    let delivery = &res.data()["webhookEndpoints"][0]["deliveries"][0];
    assert_eq!(delivery["attempts"], 1, "{delivery}");
    let error = delivery["lastError"].as_str().unwrap();
    assert_eq!(error, "internal error (the cause is in the server's log)");
}
