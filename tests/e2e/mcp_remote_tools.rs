//! A tenant's MCP servers' tool lists: kept by the process, read again
//! when the server announces a change (`notifications/tools/list_changed`)
//! or on demand, and offered to agent steps that name no tools. The
//! remote is the in-process rmcp server of [`crate::mcp_connections`];
//! the model is the fake OpenAI-compatible server of the agent tests.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::{
    agent::{Turn, fake_model},
    helpers::{Backend, TestApp, poll_until},
    mcp_connections::{Remote, connect_ledger, serve, tool},
};

crate::on_both_backends!(
    a_tool_list_is_kept_until_the_server_announces_a_change,
    a_refresh_asks_the_server_now,
);

crate::for_both_backends!(an_agent_step_naming_no_tools_is_offered_the_mcp_servers_tools);

const LIST: &str =
    "query($c: String!, $r: Boolean!) { mcpTools(connection: $c, refresh: $r) { key } }";

/// `acme`'s task `id`, with its steps' attempts.
async fn read_task(app: &TestApp, id: &str) -> Value {
    app.graphql(
        Some(&app.admin_token("acme")),
        "query($id: ID!) { task(id: $id) { id status error \
            steps { stepId tool status error idempotencyKey } } }",
        json!({"id": id}),
    )
    .await
    .data()["task"]
        .clone()
}

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

/// An agent step with no `tools` is offered the tools of the tenant's MCP
/// servers under their own descriptions and schemas; its call runs as a
/// step (idempotency key sent, guardrails checked). A step that names its
/// tools is offered only those.
async fn an_agent_step_naming_no_tools_is_offered_the_mcp_servers_tools(backend: Backend) {
    let remote = Remote::default();
    let url = serve(remote.clone()).await;
    let (script, model) = fake_model(vec![
        Turn::Calls(vec![
            ("mcp_ledger_echo", r#"{"account": "ACC-9"}"#.to_owned()),
            ("mcp_ledger_fail", "{}".to_owned()),
        ]),
        Turn::Text(vec!["Looked it up."]),
    ])
    .await;
    let app = TestApp::spawn_with(backend, |c| crate::llm::use_fake(c, &model)).await;
    app.create_tenant("acme").await;
    connect_ledger(&app, "acme", &url).await;
    // The existing rules hold: a guardrail blocks the failing tool.
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($input: SaveGuardrailInput!) { saveGuardrail(input: $input) { guardrail { name } } }",
        json!({"input": {"name": "no-fail", "severity": "BLOCK",
                         "condition": {"tool": "mcp:ledger/fail"}}}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "ledger.assist", "steps": [
            {"id": "answer", "tool": "agent", "args": {}}
        ]}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "assist", "input": "Look ACC-9 up."}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let task = poll_until("the agent's task settles", async || {
        app.run_tasks().await;
        let task = read_task(&app, &id).await;
        matches!(task["status"].as_str(), Some("COMPLETED" | "FAILED")).then_some(task)
    })
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");

    let offered = &script.requests()[0]["tools"];
    let echo = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp_ledger_echo")
        .unwrap_or_else(|| panic!("mcp_ledger_echo is offered: {offered}"));
    assert_eq!(
        echo["function"]["description"],
        "answers with its arguments"
    );
    assert_eq!(echo["function"]["parameters"], json!({"type": "object"}));

    let calls = remote.calls_of("echo");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].arguments, json!({"account": "ACC-9"}));
    let key = calls[0].idempotency_header.clone().unwrap();
    let steps = task["steps"].as_array().unwrap();
    assert!(
        steps
            .iter()
            .any(|s| s["idempotencyKey"] == key.as_str() && s["status"] == "COMPLETED"),
        "{key} {task}"
    );
    assert!(
        remote.calls_of("fail").is_empty(),
        "the guardrail blocks it"
    );
    assert!(
        steps.iter().any(|s| s["tool"] == "mcp:ledger/fail"
            && s["error"]
                .as_str()
                .is_some_and(|e| e.contains("GUARDRAIL_BLOCKED"))),
        "{task}"
    );

    // A step that names its tools is offered those only.
    app.publish_plan(
        "acme",
        json!({"key": "narrow", "intent": "ledger.narrow", "steps": [
            {"id": "answer", "tool": "agent", "args": {"tools": ["memory.recall"]}}
        ]}),
    )
    .await
    .data();
    let before = script.requests().len();
    let id = app
        .start_task("acme", json!({"planKey": "narrow", "input": "Hello."}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    poll_until("the narrow task settles", async || {
        app.run_tasks().await;
        let task = read_task(&app, &id).await;
        matches!(task["status"].as_str(), Some("COMPLETED" | "FAILED")).then_some(())
    })
    .await;
    let names: Vec<Value> = script.requests()[before]["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| t["function"]["name"].clone()).collect())
        .unwrap_or_default();
    assert!(
        names
            .iter()
            .all(|n| !n.as_str().unwrap().starts_with("mcp_")),
        "{names:?}"
    );
}
