//! Tasks as clients see them: idempotent starts, cancelling idle and
//! running tasks, refused input, and tasks invisible to other tenants.

use serde_json::json;

use super::{app, publish_intake, steps};
use crate::{
    for_both_backends,
    helpers::{Backend, uuid_of},
};

for_both_backends!(
    repeated_idempotency_key_returns_the_same_task,
    cancel_stops_idle_and_running_tasks,
    bad_input_is_refused_with_a_reason,
    tasks_are_invisible_to_other_tenants,
);

async fn repeated_idempotency_key_returns_the_same_task(backend: Backend) {
    let (app, _) = app(backend).await;
    publish_intake(&app).await;
    let first = app
        .start_task(
            "acme",
            json!({"input": "dec page", "idempotencyKey": "email:123"}),
        )
        .await;
    let second = app
        .start_task(
            "acme",
            json!({"input": "something else", "idempotencyKey": "email:123"}),
        )
        .await;
    assert_eq!(first["id"], second["id"]);
    // Another tenant may use the same key for its own task.
    app.create_tenant("globex").await;
    let other = app
        .graphql(
            Some(&app.admin_token("globex")),
            "mutation { startTask(input: {input: \"x\", idempotencyKey: \"email:123\"}) { task { id } } }",
            json!({}),
        )
        .await;
    assert_ne!(other.data()["startTask"]["task"]["id"], first["id"]);
}

async fn cancel_stops_idle_and_running_tasks(backend: Backend) {
    let (app, journal) = app(backend).await;
    let plan = steps(&[
        ("a", "test.effect", json!({})),
        ("b", "test.effect", json!({})),
    ]);
    app.publish_plan("acme", json!({"key": "c", "intent": "t.c", "steps": plan}))
        .await
        .data();
    // Pending: cancelled at once, never runs.
    let id = app.start_task("acme", json!({"planKey": "c"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = app.task_mutation("acme", "cancelTask", &id).await;
    assert_eq!(res.data()["cancelTask"]["task"]["status"], "CANCELLED");
    app.run_tasks().await;
    assert_eq!(journal.calls(&format!("{}:a", uuid_of(&id))), 0);
    // Cancelling again is refused.
    assert_eq!(
        app.task_mutation("acme", "cancelTask", &id)
            .await
            .error_code(),
        "CONFLICT"
    );
    // Running (claimed by a worker): honoured before the next step.
    let id = app.start_task("acme", json!({"planKey": "c"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let claimed = app
        .executor
        .claim(chrono::Utc::now())
        .await
        .unwrap()
        .unwrap();
    let res = app.task_mutation("acme", "cancelTask", &id).await;
    assert_eq!(
        res.data()["cancelTask"]["task"]["status"],
        "PENDING",
        "still leased by the worker"
    );
    // The worker's lease expires; the next worker sees the request.
    app.housekeeping
        .reap_expired(chrono::Utc::now() + chrono::Duration::hours(1))
        .await
        .unwrap();
    drop(claimed);
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "CANCELLED");
    assert_eq!(journal.calls(&format!("{}:a", uuid_of(&id))), 0);
}

async fn bad_input_is_refused_with_a_reason(backend: Backend) {
    let (app, _) = app(backend).await;
    let token = app.admin_token("acme");
    let res = app
        .graphql(
            Some(&token),
            "mutation { startTask(input: {planKey: \"nope\"}) { task { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    assert!(res.error_message().contains("unknown plan `nope`"));
    publish_intake(&app).await;
    let id = app.start_task("acme", json!({"planKey": "loss-run"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = app
        .graphql(
            Some(&token),
            "mutation($t: ID!) { resumeTask(input: {taskId: $t, reviewId: \"UmV2aWV3OjAxOWE0YjNlLTAwMDAtNzAwMC04MDAwLTAwMDAwMDAwMDAwMA\"}) { task { id } } }",
            json!({"t": id}),
        )
        .await;
    assert_eq!(res.error_code(), "CONFLICT");
    assert!(res.error_message().contains("not NEEDS_REVIEW"));
    let res = app.task_mutation("acme", "retryTask", &id).await;
    assert_eq!(res.error_code(), "CONFLICT");
    assert!(
        res.error_message()
            .contains("only FAILED tasks can be retried")
    );
    for bad in [json!({"maxSteps": 0}), json!({"confidenceThreshold": 2.0})] {
        let res = app
            .graphql(
                Some(&token),
                "mutation($i: StartTaskInput!) { startTask(input: $i) { task { id } } }",
                json!({"i": bad}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
    }
    // A template that compiles but fails when rendered fails the step,
    // naming the template.
    let plan = steps(&[(
        "a",
        "set_state",
        json!({"x": "{{ state.items | unknown_filter }}"}),
    )]);
    app.publish_plan(
        "acme",
        json!({"key": "tmpl", "intent": "t.tmpl", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "tmpl"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"].as_str().unwrap().contains("unknown_filter"),
        "{}",
        task["error"]
    );
}

async fn tasks_are_invisible_to_other_tenants(backend: Backend) {
    let (app, _) = app(backend).await;
    app.create_tenant("globex").await;
    publish_intake(&app).await;
    let id = app.start_task("acme", json!({"planKey": "loss-run"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = app.admin_token("globex");
    for (query, vars) in [
        (
            "query($id: ID!) { task(id: $id) { id } }",
            json!({"id": id}),
        ),
        (
            "query($id: ID!) { node(id: $id) { id } }",
            json!({"id": id}),
        ),
        (
            "mutation($id: ID!) { cancelTask(input: {id: $id}) { task { id } } }",
            json!({"id": id}),
        ),
        (
            "mutation($id: ID!) { retryTask(input: {id: $id}) { task { id } } }",
            json!({"id": id}),
        ),
        ("{ plan(key: \"loss-run\") { id } }", json!({})),
    ] {
        let res = app.graphql(Some(&other), query, vars).await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{query}: {}", res.body);
    }
    let res = app
        .graphql(
            Some(&other),
            "{ tasks { edges { node { id } } } plans { edges { node { key } } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.data()["tasks"]["edges"], json!([]));
    assert_eq!(res.data()["plans"]["edges"], json!([]));
    // An API key without tasks:write cannot start tasks.
    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let res = app
        .graphql(
            Some(&reader),
            "mutation { startTask(input: {planKey: \"loss-run\"}) { task { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
}
