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
