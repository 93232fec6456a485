//! Failures, retries and recovery: a crash retries only the unsettled
//! steps, a partial failure completes, an expired lease is reaped, and
//! retryable failures back off.

use serde_json::{Value, json};

use super::{app, kinds, settled, steps};
use crate::{
    for_both_backends,
    helpers::{Backend, uuid_of},
};

for_both_backends!(
    crash_recovery_retries_only_the_unsettled_steps,
    partial_failure_without_stop_completes,
    expired_lease_is_reaped_and_the_task_finishes,
    retryable_failures_back_off_and_retry,
);

async fn crash_recovery_retries_only_the_unsettled_steps(backend: Backend) {
    let (app, journal) = app(backend).await;
    let plan = steps(&[
        ("step_1", "test.effect", json!({})),
        ("step_2", "test.effect", json!({})),
        ("step_3", "test.effect", json!({"crash_once": true})),
        ("step_4", "test.effect", json!({})),
        ("step_5", "test.effect", json!({})),
    ]);
    app.publish_plan(
        "acme",
        json!({"key": "crash", "intent": "test.crash", "steps": plan}),
    )
    .await
    .data();
    let task = app.start_task("acme", json!({"planKey": "crash"})).await;
    let id = task["id"].as_str().unwrap();
    app.run_tasks().await;
    let task = app.task("acme", id).await;
    assert_eq!(task["status"], "FAILED");
    assert_eq!(settled(&task), ["step_1", "step_2"]);
    assert_eq!(task["currentStepId"], "step_3");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("crashed after the side effect")
    );

    let res = app.task_mutation("acme", "retryTask", id).await;
    assert_eq!(res.data()["retryTask"]["task"]["status"], "PENDING");
    app.run_tasks().await;
    let task = app.task("acme", id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(
        settled(&task),
        ["step_1", "step_2", "step_3", "step_4", "step_5"]
    );
    let uuid = uuid_of(id);
    for (step, calls) in [
        ("step_1", 1),
        ("step_2", 1),
        ("step_3", 2),
        ("step_4", 1),
        ("step_5", 1),
    ] {
        let key = format!("{uuid}:{step}");
        assert_eq!(journal.calls(&key), calls, "{step} calls");
        assert_eq!(journal.effects(&key), 1, "{step} side effects");
    }
    // The attempts are recorded with the same idempotency key.
    let attempts: Vec<(String, i64, String)> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stepId"].as_str().unwrap().into(),
                s["attempt"].as_i64().unwrap(),
                s["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(attempts.contains(&("step_3".into(), 1, "FAILED".into())));
    assert!(
        attempts.contains(&("step_3".into(), 1, "COMPLETED".into())),
        "retry starts a fresh budget: {attempts:?}"
    );
    assert!(
        task["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["idempotencyKey"].as_str().unwrap().starts_with(&uuid))
    );
}

async fn partial_failure_without_stop_completes(backend: Backend) {
    let (app, journal) = app(backend).await;
    let mut plan = steps(&[
        ("s1", "test.effect", json!({})),
        ("s2", "test.effect", json!({})),
        ("s3", "test.fail", json!({})),
        ("s4", "test.effect", json!({})),
        ("s5", "test.effect", json!({})),
    ]);
    plan[2]["stopOnFailure"] = json!(false);
    app.publish_plan(
        "acme",
        json!({"key": "partial", "intent": "t.partial", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "partial"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert!(kinds(&task).contains(&("STEP_FAILED".into(), Some("s3".into()))));
    let uuid = uuid_of(&id);
    assert_eq!(journal.calls(&format!("{uuid}:s4")), 1);
    assert_eq!(journal.calls(&format!("{uuid}:s5")), 1);
}

async fn expired_lease_is_reaped_and_the_task_finishes(backend: Backend) {
    let (app, _) = app(backend).await;
    app.publish_plan("acme", json!({"key": "z", "intent": "t.z", "steps": steps(&[("a", "set_state", json!({"x": 1}))])}))
        .await
        .data();
    let id = app.start_task("acme", json!({"planKey": "z"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A worker claims the task and dies without a word.
    let claimed = app
        .executor
        .claim(chrono::Utc::now())
        .await
        .unwrap()
        .expect("a runnable task");
    assert_eq!(claimed.id.to_string(), uuid_of(&id));
    assert!(
        app.executor
            .claim(chrono::Utc::now())
            .await
            .unwrap()
            .is_none(),
        "a leased task is not claimable"
    );
    // Before the lease ends nothing is reaped; after, the task is back.
    assert_eq!(
        app.housekeeping
            .reap_expired(chrono::Utc::now())
            .await
            .unwrap(),
        0
    );
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(app.housekeeping.reap_expired(later).await.unwrap(), 1);
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "PENDING");
    let reaped = task["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(reaped["kind"], "STATUS_CHANGED");
    assert_eq!(reaped["data"]["reason"], "lease_expired");
    app.run_tasks().await;
    assert_eq!(app.task("acme", &id).await["status"], "COMPLETED");
}

async fn retryable_failures_back_off_and_retry(backend: Backend) {
    let (app, journal) = app(backend).await;
    let mut plan = steps(&[("call", "test.flaky", json!({"succeed_on": 3}))]);
    plan[0]["retry"] = json!({"maxAttempts": 3, "initialBackoffMs": 1, "maxBackoffMs": 2});
    app.publish_plan(
        "acme",
        json!({"key": "flaky", "intent": "t.flaky", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "flaky"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Each failure puts the task back with a short backoff; drive until done.
    for _ in 0..1000 {
        app.run_tasks().await;
        if app.task("acme", &id).await["status"] != "PENDING" {
            break;
        }
    }
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(journal.calls(&format!("{}:call", uuid_of(&id))), 3);
    let failed: Vec<&Value> = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "STEP_FAILED")
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|e| e["data"]["will_retry"] == true));
    // Without a retry policy the first retryable failure is final.
    let plan = steps(&[("call", "test.flaky", json!({"succeed_on": 3}))]);
    app.publish_plan(
        "acme",
        json!({"key": "flaky1", "intent": "t.flaky1", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "flaky1"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    assert_eq!(app.task("acme", &id).await["status"], "FAILED");
}
