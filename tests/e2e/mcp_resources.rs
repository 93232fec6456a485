//! `/mcp` resources: a task and a memory as `brainstem://tasks/{id}` and
//! `brainstem://memories/{id}`, listed as templates per the caller's
//! scopes and read as the caller, through rmcp's client against the real
//! server: another tenant's id, or a scope the caller lacks, reads as not
//! found.

use rmcp::{
    model::{ErrorCode, ReadResourceRequestParams, ResourceContents},
    service::{Peer, RoleClient, ServiceError},
};
use serde_json::{Value, json};

use crate::{
    helpers::TestApp,
    mcp::{acme, connect, ok},
};

crate::on_both_backends!(
    templates_are_listed_per_scope,
    a_task_and_a_memory_read_as_the_caller,
);

async fn template_uris(session: &Peer<RoleClient>) -> Vec<String> {
    let mut uris: Vec<String> = session
        .list_resource_templates(None)
        .await
        .expect("resources/templates/list")
        .resource_templates
        .into_iter()
        .map(|t| t.uri_template)
        .collect();
    uris.sort();
    uris
}

/// The JSON a resource reads as.
async fn read(session: &Peer<RoleClient>, uri: &str) -> Result<Value, ServiceError> {
    let result = session
        .read_resource(ReadResourceRequestParams::new(uri))
        .await?;
    assert_eq!(result.contents.len(), 1, "{result:?}");
    let ResourceContents::TextResourceContents {
        uri: read_uri,
        mime_type,
        text,
        ..
    } = &result.contents[0]
    else {
        panic!("{uri} reads as text: {result:?}")
    };
    assert_eq!(read_uri, uri);
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    Ok(serde_json::from_str(text).unwrap())
}

/// A read that fails as MCP's "resource not found".
async fn assert_not_found(session: &Peer<RoleClient>, uri: &str) {
    match read(session, uri).await {
        Err(ServiceError::McpError(error)) => {
            assert_eq!(
                error.code,
                ErrorCode::RESOURCE_NOT_FOUND,
                "{uri}: {error:?}"
            )
        }
        other => panic!("{uri} should not be found: {other:?}"),
    }
}

async fn templates_are_listed_per_scope(app: TestApp) {
    acme(&app).await;
    let (admin, _) = connect(&app, &app.admin_token("acme")).await;
    let info = admin.peer_info().expect("the server's initialize result");
    assert!(info.capabilities.resources.is_some(), "{info:?}");
    assert_eq!(
        template_uris(&admin).await,
        ["brainstem://memories/{id}", "brainstem://tasks/{id}"]
    );
    // `resources/list` names none of its own: the templates do.
    let listed = admin.list_resources(None).await.unwrap();
    assert!(listed.resources.is_empty(), "{listed:?}");

    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let (session, _) = connect(&app, &reader).await;
    assert_eq!(template_uris(&session).await, ["brainstem://tasks/{id}"]);
    let (_, memory) = app.create_api_key("acme", &["memory:read"]).await;
    let (session, _) = connect(&app, &memory).await;
    assert_eq!(template_uris(&session).await, ["brainstem://memories/{id}"]);
}

async fn a_task_and_a_memory_read_as_the_caller(app: TestApp) {
    acme(&app).await;
    app.create_tenant("globex").await;
    let (session, _) = connect(&app, &app.admin_token("acme")).await;
    let started = ok(
        &session,
        "start_task",
        json!({"planKey": "note", "input": "read me"}),
    )
    .await;
    let task_id = started["task"]["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let added = ok(
        &session,
        "add_memory",
        json!({"content": "Ada pays by transfer"}),
    )
    .await;
    let memory_id = added["memory"]["id"].as_str().unwrap().to_owned();
    let task_uri = format!("brainstem://tasks/{task_id}");
    let memory_uri = format!("brainstem://memories/{memory_id}");

    let task = read(&session, &task_uri).await.unwrap();
    assert_eq!(task["id"], task_id.as_str(), "{task}");
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"]["noted"], "read me", "{task}");
    assert!(task.get("result").is_some(), "{task}");
    let memory = read(&session, &memory_uri).await.unwrap();
    assert_eq!(memory["content"], "Ada pays by transfer", "{memory}");

    // An id of the other type, a malformed one, an unknown collection.
    assert_not_found(&session, &format!("brainstem://tasks/{memory_id}")).await;
    assert_not_found(&session, "brainstem://tasks/not-an-id").await;
    assert_not_found(&session, &format!("brainstem://plans/{task_id}")).await;

    // Another tenant's ids are not found, by token or by key.
    let (globex, _) = connect(&app, &app.admin_token("globex")).await;
    assert_not_found(&globex, &task_uri).await;
    assert_not_found(&globex, &memory_uri).await;
    let (_, key) = app
        .create_api_key("globex", &["tasks:read", "memory:read"])
        .await;
    let (globex_key, _) = connect(&app, &key).await;
    assert_not_found(&globex_key, &task_uri).await;
    assert_not_found(&globex_key, &memory_uri).await;

    // A key reads only what its scopes allow.
    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let (reader, _) = connect(&app, &reader).await;
    assert_eq!(
        read(&reader, &task_uri).await.unwrap()["id"],
        task_id.as_str()
    );
    assert_not_found(&reader, &memory_uri).await;
}
