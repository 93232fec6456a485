//! Delegation: a step handed to another system completes or fails through
//! its callback, whose tokens are single-use and bound to their task.

use serde_json::json;

use super::{app, kinds, steps};
use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, uuid_of},
};

for_both_backends!(
    delegation_completes_or_fails_through_the_callback,
    callback_tokens_are_single_use_and_bound_to_their_task,
    the_delegate_tool_hands_off_over_http_and_the_callback_completes_it,
    spawn_task_starts_one_child_that_runs_its_own_plan,
);

async fn delegate_plan(app: &TestApp, key: &str) {
    let plan = steps(&[
        ("chase", "test.delegate", json!({})),
        ("after", "set_state", json!({"after": true})),
    ]);
    app.publish_plan(
        "acme",
        json!({"key": key, "intent": format!("t.{key}"), "steps": plan}),
    )
    .await
    .data();
}

async fn delegation_completes_or_fails_through_the_callback(backend: Backend) {
    let (app, journal) = app(backend).await;
    delegate_plan(&app, "chase").await;
    // Success through the HTTP callback: data merged, later steps run.
    let id = app.start_task("acme", json!({"planKey": "chase"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "DELEGATED");
    assert!(kinds(&task).contains(&("DELEGATED".into(), Some("chase".into()))));
    let uuid = uuid_of(&id);
    let response = app
        .http
        .post(app.url(&format!("/callbacks/tasks/{uuid}")))
        .header("authorization", format!("Bearer {}", journal.token(&uuid)))
        .json(&json!({"success": true, "data": {"loss_runs": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["state"]["loss_runs"], 3);
    assert_eq!(task["state"]["after"], true);

    // Failure through the mutation: the message is shown.
    let id = app.start_task("acme", json!({"planKey": "chase"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let uuid = uuid_of(&id);
    let res = app
        .graphql(
            None,
            "mutation($t: ID!, $k: String!) { completeDelegation(input: {taskId: $t, token: $k, success: false, error: \"Bad credentials\"}) { task { status error } } }",
            json!({"t": id, "k": journal.token(&uuid)}),
        )
        .await;
    let failed = &res.data()["completeDelegation"]["task"];
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(failed["error"], "Bad credentials");
}

async fn callback_tokens_are_single_use_and_bound_to_their_task(backend: Backend) {
    let (app, journal) = app(backend).await;
    app.create_tenant("globex").await;
    delegate_plan(&app, "chase").await;
    let plan = steps(&[("chase", "test.delegate", json!({}))]);
    app.publish_plan(
        "globex",
        json!({"key": "chase", "intent": "t.chase", "steps": plan}),
    )
    .await
    .data();
    let a = app.start_task("acme", json!({"planKey": "chase"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = app
        .graphql(
            Some(&app.admin_token("globex")),
            "mutation { startTask(input: {planKey: \"chase\"}) { task { id } } }",
            json!({}),
        )
        .await
        .data()["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let (ua, ub) = (uuid_of(&a), uuid_of(&b));
    let callback = |task: String, token: String| {
        let app = &app;
        async move {
            app.http
                .post(app.url(&format!("/callbacks/tasks/{task}")))
                .json(&json!({"success": true, "token": token}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    // A's token presented for B's task (another tenant) is refused.
    assert_eq!(callback(ub.clone(), journal.token(&ua)).await, 404);
    assert_eq!(callback(ua.clone(), "bdt_forged".into()).await, 404);
    assert_eq!(app.task("acme", &a).await["status"], "DELEGATED");
    // The right token works once.
    assert_eq!(callback(ua.clone(), journal.token(&ua)).await, 200);
    assert_eq!(
        callback(ua.clone(), journal.token(&ua)).await,
        404,
        "single use"
    );
    // B is untouched and still waiting.
    let b_task = app
        .graphql(
            Some(&app.admin_token("globex")),
            "query($id: ID!) { task(id: $id) { status } }",
            json!({"id": b}),
        )
        .await;
    assert_eq!(b_task.data()["task"]["status"], "DELEGATED");
}

/// The built-in `delegate` tool end to end: it POSTs the hand-off to an
/// external system (a local HTTP sink here), which answers with its own
/// reference and later calls back with the result; the next step reads it.
async fn the_delegate_tool_hands_off_over_http_and_the_callback_completes_it(backend: Backend) {
    use std::sync::{Arc, Mutex};
    let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = {
        let received = received.clone();
        axum::Router::new().route(
            "/jobs",
            axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
                let received = received.clone();
                async move {
                    received.lock().unwrap().push(body);
                    axum::Json(json!({"id": "job-42"}))
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_url = format!("http://{}/jobs", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, sink).await.unwrap() });

    let (app, _) = app(backend).await;
    app.publish_plan(
        "acme",
        json!({"key": "inspect", "intent": "t.inspect", "steps": [
            {"id": "hand", "tool": "delegate", "args": {"url": sink_url, "payload": {"vin": "{{ input.payload.vin }}"}}},
            {"id": "after", "tool": "set_state", "args": {"grade": "graded {{ steps.hand.output.grade }}"}}
        ]}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "inspect", "payload": {"vin": "VIN-9"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let waiting = app.task("acme", &id).await;
    assert_eq!(waiting["status"], "DELEGATED", "{waiting}");

    // What the external system was told.
    let handoff = received.lock().unwrap().clone();
    assert_eq!(handoff.len(), 1);
    let handoff = &handoff[0];
    assert_eq!(handoff["task_id"], uuid_of(&id));
    assert_eq!(handoff["step_id"], "hand");
    assert_eq!(handoff["payload"], json!({"vin": "VIN-9"}));
    let token = handoff["token"].as_str().unwrap();
    let callback = handoff["callback_url"].as_str().unwrap();
    let path = &callback[callback.find("/callbacks/").expect("a callback path")..];

    let answer = app
        .http
        .post(app.url(path))
        .header("authorization", format!("Bearer {token}"))
        .json(&json!({"success": true, "data": {"grade": "A"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
    app.run_tasks().await;
    let done = app.task("acme", &id).await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["state"]["grade"], "graded A");
    let hand = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEP_COMPLETED" && e["stepId"] == "hand")
        .cloned()
        .unwrap();
    assert_eq!(hand["data"]["external_ref"], "job-42");
}

/// The built-in `spawn_task`: a step starts a child task (channel SYSTEM,
/// its own plan), keyed by the step, so the child exists once; the child
/// runs to completion on its own.
async fn spawn_task_starts_one_child_that_runs_its_own_plan(backend: Backend) {
    let (app, _) = app(backend).await;
    app.publish_plan(
        "acme",
        json!({"key": "child", "intent": "t.child", "steps": [
            {"id": "work", "tool": "set_state", "args": {"done_for": "{{ input.payload.parent_vin }}"}}
        ]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "parent", "intent": "t.parent", "steps": [
            {"id": "spawn", "tool": "spawn_task", "args": {"plan_key": "child", "input": "do the child work", "payload": {"parent_vin": "VIN-3"}}},
            {"id": "note", "tool": "set_state", "args": {"child": "{{ steps.spawn.output.task_id }}"}}
        ]}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "parent"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let parent = app.task("acme", &id).await;
    assert_eq!(parent["status"], "COMPLETED", "{parent}");
    let child_id = parent["state"]["child"].as_str().unwrap().to_owned();

    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ tasks(first: 10) { edges { node { id channel status state plan { key } parent { id } } } } }",
            json!({}),
        )
        .await;
    let children: Vec<serde_json::Value> = listed.data()["tasks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .filter(|t| t["plan"]["key"] == "child")
        .collect();
    assert_eq!(children.len(), 1, "one child: {children:?}");
    let child = &children[0];
    assert_eq!(uuid_of(child["id"].as_str().unwrap()), child_id);
    assert_eq!(child["channel"], "SYSTEM");
    assert_eq!(child["parent"]["id"], id);
    assert_eq!(child["status"], "COMPLETED");
    assert_eq!(child["state"]["done_for"], "VIN-3");
}
