//! `/graphql/ws` to the letter of `graphql-transport-ws`: each misuse of
//! the protocol closes the socket with its own code, an operation that
//! cannot run answers `error` (and nothing more), and the legacy
//! `graphql-ws` keeps its own messages.

use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WsClient, WsEvent},
    http::keys_in_order,
    streams::connect,
};

for_both_backends!(
    invalid_messages_close_with_4400,
    a_subscribe_before_the_ack_closes_with_4401,
    no_init_in_time_closes_with_4408,
    a_running_id_cannot_be_reused,
    a_second_init_closes_with_4429,
    an_operation_that_cannot_run_answers_error,
    results_keep_the_selection_order,
    the_legacy_protocol_keeps_its_messages,
);

/// Lower limits, so a test sees them quickly and cheaply.
async fn spawn(backend: Backend) -> TestApp {
    let app = TestApp::spawn_with(backend, |c| {
        c.ws_init_timeout_ms = 300;
        c.graphql_max_cost = 40;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "p", "intent": "t.p", "steps": [{"id": "a", "tool": "set_state", "args": {"x": 1}}]}),
    )
    .await
    .data();
    app
}

async fn closed_with(ws: &mut WsClient) -> Option<u16> {
    loop {
        match ws.next_event().await {
            WsEvent::Closed(code) => return code,
            WsEvent::Json(_) => continue,
        }
    }
}

/// The next message, which must not be a close.
async fn next_message(ws: &mut WsClient) -> Value {
    match ws.next_event().await {
        WsEvent::Json(m) => m,
        WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
    }
}

/// Send a ping and expect its pong as the very next message: everything
/// sent before was processed, and nothing else was written in between.
async fn nothing_else_then_pong(ws: &mut WsClient) {
    ws.send(json!({"type": "ping"})).await;
    let m = next_message(ws).await;
    assert_eq!(m["type"], "pong", "expected only a pong, got {m}");
}

/// Start a task (the helper's mutation selects more than the lowered cost
/// limit allows).
async fn start_task(app: &TestApp) {
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation { startTask(input: {planKey: \"p\"}) { task { id } } }",
        json!({}),
    )
    .await
    .data();
}

const UPDATES: &str = "subscription { taskUpdates { id } }";

async fn invalid_messages_close_with_4400(backend: Backend) {
    let app = spawn(backend).await;
    // Before connection_init.
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.send_text("{not json").await;
    assert_eq!(closed_with(&mut ws).await, Some(4400));
    // After the ack, each invalid message on a fresh connection.
    for bad in [
        json!({"type": "hello"}),
        json!({"type": "next", "id": "1", "payload": {}}),
        json!({"type": "subscribe", "id": "1", "payload": {"qeury": UPDATES}}),
        json!({"type": "subscribe", "payload": {"query": UPDATES}}),
        json!({"type": "subscribe", "id": "1", "payload": {"query": UPDATES, "variables": [1]}}),
        // The legacy protocol's names are not this protocol's.
        json!({"type": "start", "id": "1", "payload": {"query": UPDATES}}),
    ] {
        let mut ws = connect(&app, "acme").await;
        ws.send(bad.clone()).await;
        assert_eq!(closed_with(&mut ws).await, Some(4400), "{bad}");
    }
}

async fn a_subscribe_before_the_ack_closes_with_4401(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.subscribe("1", UPDATES, json!({})).await;
    assert_eq!(closed_with(&mut ws).await, Some(4401));
}

async fn no_init_in_time_closes_with_4408(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    // A ping is answered at any time, and does not count as the init.
    nothing_else_then_pong(&mut ws).await;
    assert_eq!(closed_with(&mut ws).await, Some(4408));
    // The limit is on the init only: an acknowledged connection stays.
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", UPDATES, json!({})).await;
    // Answered after the subscribe was taken in: it listens from here.
    nothing_else_then_pong(&mut ws).await;
    start_task(&app).await;
    let m = next_message(&mut ws).await;
    assert_eq!(m["type"], "next", "{m}");
    nothing_else_then_pong(&mut ws).await;
}

async fn a_running_id_cannot_be_reused(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("a", UPDATES, json!({})).await;
    nothing_else_then_pong(&mut ws).await;
    // Once the client completes it, the id is free.
    ws.send(json!({"type": "complete", "id": "a"})).await;
    ws.subscribe("a", UPDATES, json!({})).await;
    nothing_else_then_pong(&mut ws).await;
    // While it runs, it is not.
    ws.subscribe("a", UPDATES, json!({})).await;
    assert_eq!(closed_with(&mut ws).await, Some(4409));
}

async fn a_second_init_closes_with_4429(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = connect(&app, "acme").await;
    ws.init(Some(&app.admin_token("acme"))).await;
    assert_eq!(closed_with(&mut ws).await, Some(4429));
}

async fn an_operation_that_cannot_run_answers_error(backend: Backend) {
    let app = spawn(backend).await;
    let over_cost: String = (0..45).map(|i| format!("f{i}: id ")).collect();
    let over_cost = format!("subscription {{ taskUpdates {{ {over_cost} }} }}");
    let mut ws = connect(&app, "acme").await;
    for (query, message) in [
        ("subscription { nope }", "Unknown field"),
        ("subscription {", "expected"),
        (over_cost.as_str(), "query too costly"),
    ] {
        ws.subscribe("e", query, json!({})).await;
        let m = next_message(&mut ws).await;
        assert_eq!(m["type"], "error", "{query}: {m}");
        assert_eq!(m["id"], "e");
        let errors = m["payload"].as_array().expect("a list of errors");
        assert!(!errors.is_empty(), "{m}");
        for error in errors {
            assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{m}");
        }
        assert!(
            errors[0]["message"]
                .as_str()
                .is_some_and(|t| t.contains(message)),
            "{query}: {m}"
        );
        // No `complete` follows an `error`, and the id is free again.
        nothing_else_then_pong(&mut ws).await;
    }
    // An operation that runs and then fails answers `next` with the error
    // at its path, then `complete`.
    ws.subscribe(
        "e",
        "subscription { taskEvents(taskId: \"VGFzazowMDAwMDAwMC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDA=\") { seq } }",
        json!({}),
    )
    .await;
    let m = next_message(&mut ws).await;
    assert_eq!(m["type"], "next", "{m}");
    assert_eq!(
        m["payload"]["errors"][0]["path"],
        json!(["taskEvents"]),
        "{m}"
    );
    assert!(
        m["payload"]["errors"][0]["extensions"]["code"].is_string(),
        "{m}"
    );
    assert_eq!(
        next_message(&mut ws).await,
        json!({"type": "complete", "id": "e"})
    );
}

async fn results_keep_the_selection_order(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = connect(&app, "acme").await;
    ws.subscribe(
        "1",
        "subscription { taskUpdates { state ... on Task { status } maxSteps id } }",
        json!({}),
    )
    .await;
    nothing_else_then_pong(&mut ws).await;
    start_task(&app).await;
    let text = ws.next_text().await;
    assert_eq!(
        keys_in_order(&text, r#""taskUpdates":{"#),
        ["state", "status", "maxSteps", "id"],
        "{text}"
    );
}

async fn the_legacy_protocol_keeps_its_messages(backend: Backend) {
    let app = spawn(backend).await;
    let mut ws = app.ws_connect("graphql-ws").await;
    ws.init(Some(&app.admin_token("acme"))).await;
    assert_eq!(next_message(&mut ws).await["type"], "connection_ack");
    // An operation that cannot run: `data` with the errors, then `complete`.
    ws.send(json!({"type": "start", "id": "1", "payload": {"query": "subscription { nope }"}}))
        .await;
    let m = next_message(&mut ws).await;
    assert_eq!(m["type"], "data", "{m}");
    assert_eq!(
        m["payload"]["errors"][0]["extensions"]["code"],
        "BAD_USER_INPUT"
    );
    assert_eq!(
        next_message(&mut ws).await,
        json!({"type": "complete", "id": "1"})
    );
    // A running one streams `data`; `stop` ends it. The failing operation
    // again, answered only after the server took in the one before it, so
    // the subscription listens before the task starts.
    ws.send(json!({"type": "start", "id": "2", "payload": {"query": UPDATES}}))
        .await;
    ws.send(json!({"type": "start", "id": "1", "payload": {"query": "subscription { nope }"}}))
        .await;
    assert_eq!(next_message(&mut ws).await["id"], "1");
    assert_eq!(
        next_message(&mut ws).await,
        json!({"type": "complete", "id": "1"})
    );
    start_task(&app).await;
    let m = next_message(&mut ws).await;
    assert_eq!(m["type"], "data", "{m}");
    assert_eq!(m["id"], "2");
    ws.send(json!({"type": "stop", "id": "2"})).await;
    ws.send(json!({"type": "connection_terminate"})).await;
    loop {
        match ws.next_event().await {
            WsEvent::Closed(_) => break,
            WsEvent::Json(m) => assert_eq!(m["id"], "2", "{m}"),
        }
    }
}
