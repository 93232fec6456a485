//! The executor's scenarios, end to end: plans published and tasks started
//! over GraphQL, the executor driven by its step function, results read back
//! over GraphQL, on SQLite and PostgreSQL.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, uuid_of},
    tools::{self, Journal},
};

async fn app(backend: Backend) -> (TestApp, Arc<Journal>) {
    let journal = Arc::new(Journal::default());
    let app = TestApp::spawn_with_tools(backend, tools::all(&journal)).await;
    app.create_tenant("acme").await;
    (app, journal)
}

fn steps(list: &[(&str, &str, Value)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(id, tool, args)| json!({"id": id, "tool": tool, "args": args}))
            .collect(),
    )
}

fn kinds(task: &Value) -> Vec<(String, Option<String>)> {
    task["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["stepId"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn settled(task: &Value) -> Vec<String> {
    serde_json::from_value(task["settledStepIds"].clone()).unwrap()
}

for_both_backends!(
    crash_recovery_retries_only_the_unsettled_steps,
    partial_failure_without_stop_completes,
    expired_lease_is_reaped_and_the_task_finishes,
    injected_steps_are_validated_run_and_recorded,
    step_cap_stops_endless_injection,
    long_plan_under_its_cap_completes,
    low_confidence_waits_for_review_and_resumes_with_corrections,
    rejecting_a_review_cancels_the_task,
    delegation_completes_or_fails_through_the_callback,
    callback_tokens_are_single_use_and_bound_to_their_task,
    plan_integrity_errors_name_plan_step_and_tool,
    every_step_leaves_events_in_sequence,
    repeated_idempotency_key_returns_the_same_task,
    cancel_stops_idle_and_running_tasks,
    concurrent_resumes_have_exactly_one_winner,
    bad_input_is_refused_with_a_reason,
    retryable_failures_back_off_and_retry,
    conditions_templates_and_review_gates,
    tasks_are_invisible_to_other_tenants,
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
        app.executor.reap_expired(chrono::Utc::now()).await.unwrap(),
        0
    );
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(app.executor.reap_expired(later).await.unwrap(), 1);
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "PENDING");
    let reaped = task["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(reaped["kind"], "STATUS_CHANGED");
    assert_eq!(reaped["data"]["reason"], "lease_expired");
    app.run_tasks().await;
    assert_eq!(app.task("acme", &id).await["status"], "COMPLETED");
}

async fn injected_steps_are_validated_run_and_recorded(backend: Backend) {
    let (app, journal) = app(backend).await;
    let plan = steps(&[
        ("prep", "set_state", json!({"value": "VIN-1"})),
        ("assess", "test.inject", json!({})),
    ]);
    app.publish_plan(
        "acme",
        json!({"key": "dyn", "intent": "t.dyn", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "dyn"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    let ids: Vec<&str> = task["frozenPlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["prep", "assess", "dyn_review_vins", "dyn_notify"]);
    let injected = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEPS_INJECTED")
        .unwrap()
        .clone();
    assert_eq!(
        injected["data"]["injected_steps"],
        json!(["dyn_review_vins", "dyn_notify"])
    );
    assert_eq!(injected["stepId"], "assess");
    // The injected step ran, with its template rendered from state.
    assert_eq!(
        journal.effects(&format!("{}:dyn_review_vins", uuid_of(&id))),
        1
    );
    assert_eq!(task["state"]["notified"], true);

    // An injection that names an unknown tool fails the step, naming it.
    let plan = steps(&[("assess", "test.inject", json!({"bad": true}))]);
    app.publish_plan(
        "acme",
        json!({"key": "dyn-bad", "intent": "t.dynbad", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "dyn-bad"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("tool `no_such_tool` is not registered"),
        "{}",
        task["error"]
    );
}

async fn step_cap_stops_endless_injection(backend: Backend) {
    let (app, _) = app(backend).await;
    let plan = steps(&[("assess", "test.inject", json!({"forever": true}))]);
    app.publish_plan(
        "acme",
        json!({"key": "loop", "intent": "t.loop", "steps": plan}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "loop", "maxSteps": 10}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("Max execution steps exceeded (max_steps = 10)"),
        "{}",
        task["error"]
    );
    let executed = kinds(&task)
        .iter()
        .filter(|(k, _)| k == "STEP_COMPLETED")
        .count();
    assert_eq!(executed, 10, "stopped at the cap");
}

async fn long_plan_under_its_cap_completes(backend: Backend) {
    let (app, _) = app(backend).await;
    let list: Vec<Value> = (0..75)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"last": i}}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "long", "intent": "t.long", "steps": list}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "long", "maxSteps": 100}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(settled(&task).len(), 75);
    assert_eq!(task["state"]["last"], 74);
}

async fn publish_intake(app: &TestApp) {
    let plan = steps(&[(
        "record",
        "set_state",
        json!({"insured": "{{ state.insured }}", "handled": true}),
    )]);
    app.publish_plan(
        "acme",
        json!({"key": "loss-run", "intent": "insurance.loss_run_request", "patterns": ["loss run", "dec page"], "priority": 100, "steps": plan}),
    )
    .await
    .data();
}

async fn low_confidence_waits_for_review_and_resumes_with_corrections(backend: Backend) {
    let (app, _) = app(backend).await;
    publish_intake(&app).await;
    // A unique pattern match runs unattended.
    let sure = app
        .start_task(
            "acme",
            json!({"input": "Here is the dec page, please request a loss run"}),
        )
        .await;
    app.run_tasks().await;
    let sure = app.task("acme", sure["id"].as_str().unwrap()).await;
    assert_eq!(sure["status"], "COMPLETED");
    assert_eq!(sure["intent"], "insurance.loss_run_request");
    assert_eq!(sure["plan"]["key"], "loss-run");

    // Nothing matches: low confidence, a review with the proposal.
    let id = app
        .start_task("acme", json!({"input": "can you look at this?"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(task["currentStepId"], "intent_detection");
    let review = task["pendingReview"].clone();
    assert_eq!(review["stepId"], "intent_detection");
    assert!(
        review["reason"]
            .as_str()
            .unwrap()
            .contains("below threshold 80%"),
        "{}",
        review["reason"]
    );
    assert!(review["confidence"].as_f64().unwrap() < 0.8);
    assert!(kinds(&task).contains(&("REVIEW_REQUESTED".into(), Some("intent_detection".into()))));

    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($t: ID!, $r: ID!, $c: JSON) { resumeTask(input: {taskId: $t, reviewId: $r, corrections: $c}) { task { status state } } }",
            json!({"t": id, "r": review["id"], "c": {"intent": "insurance.loss_run_request", "insured": "Acme Trucking"}}),
        )
        .await;
    let resumed = &res.data()["resumeTask"]["task"];
    assert_eq!(resumed["status"], "PENDING");
    assert_eq!(resumed["state"]["insured"], "Acme Trucking");
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["intent"], "insurance.loss_run_request");
    assert_eq!(
        task["state"]["insured"], "Acme Trucking",
        "corrections reached the steps"
    );
    assert_eq!(task["state"]["handled"], true);
}

async fn rejecting_a_review_cancels_the_task(backend: Backend) {
    let (app, journal) = app(backend).await;
    let mut plan = steps(&[("pay", "test.effect", json!({}))]);
    plan[0]["requiresReview"] = json!(true);
    app.publish_plan(
        "acme",
        json!({"key": "pay", "intent": "t.pay", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "pay"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(task["pendingReview"]["stepId"], "pay");
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($t: ID!, $r: ID!) { rejectTask(input: {taskId: $t, reviewId: $r, reason: \"amount looks wrong\"}) { task { status error } } }",
            json!({"t": id, "r": task["pendingReview"]["id"]}),
        )
        .await;
    let rejected = &res.data()["rejectTask"]["task"];
    assert_eq!(rejected["status"], "CANCELLED");
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("amount looks wrong")
    );
    app.run_tasks().await;
    assert_eq!(
        journal.calls(&format!("{}:pay", uuid_of(&id))),
        0,
        "a rejected step never runs"
    );
}

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

async fn plan_integrity_errors_name_plan_step_and_tool(backend: Backend) {
    let (app, _) = app(backend).await;
    let cases = [
        (
            steps(&[("a", "no.such.tool", json!({}))]),
            "plan `p` step `a`: tool `no.such.tool` is not registered",
        ),
        (
            steps(&[("a", "set_state", json!({})), ("a", "set_state", json!({}))]),
            "plan `p` step `a`: duplicate step id",
        ),
        (
            steps(&[("a", "set_state", json!({"x": "{{ state. }}"}))]),
            "plan `p` step `a` (tool `set_state`): template",
        ),
        (
            steps(&[("a", "http_request", json!({"method": "GET"}))]),
            "plan `p` step `a`: args.url is required (tool `http_request`)",
        ),
    ];
    for (plan, expected) in cases {
        let res = app
            .publish_plan("acme", json!({"key": "p", "intent": "t.p", "steps": plan}))
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT");
        assert!(
            res.error_message().contains(expected),
            "{} should contain {expected}",
            res.error_message()
        );
    }
    // Nothing was stored.
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ plan(key: \"p\") { version } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    // Valid publishes create versions.
    for version in 1..=2 {
        let res = app.publish_plan("acme", json!({"key": "p", "intent": "t.p", "steps": steps(&[("a", "set_state", json!({}))])})).await;
        assert_eq!(res.data()["publishPlan"]["plan"]["version"], version);
    }
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ plan(key: \"p\") { version versions { version } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        res.data()["plan"]["versions"],
        json!([{"version": 2}, {"version": 1}])
    );
}

async fn every_step_leaves_events_in_sequence(backend: Backend) {
    let (app, _) = app(backend).await;
    let list: Vec<(String, &str, Value)> = (1..=10)
        .map(|i| (format!("s{i}"), "test.effect", json!({})))
        .collect();
    let plan = Value::Array(
        list.iter()
            .map(|(id, tool, args)| json!({"id": id, "tool": tool, "args": args}))
            .collect(),
    );
    app.publish_plan(
        "acme",
        json!({"key": "ten", "intent": "t.ten", "steps": plan}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "ten"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    let events = task["events"].as_array().unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as i64).collect::<Vec<_>>(),
        "gapless sequence"
    );
    for i in 1..=10 {
        let step = format!("s{i}");
        let of_step: Vec<&Value> = events
            .iter()
            .filter(|e| e["stepId"] == step.as_str())
            .collect();
        assert_eq!(of_step.len(), 2, "started + completed for {step}");
        assert_eq!(of_step[0]["kind"], "STEP_STARTED");
        assert_eq!(of_step[1]["kind"], "STEP_COMPLETED");
        assert!(of_step.iter().all(|e| e["tool"] == "test.effect"));
        assert_eq!(
            of_step[1]["dataKeys"],
            json!([format!("done_{step}"), "done"])
        );
    }
    assert_eq!(events.last().unwrap()["status"], "COMPLETED");
}

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
    app.executor
        .reap_expired(chrono::Utc::now() + chrono::Duration::hours(1))
        .await
        .unwrap();
    drop(claimed);
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "CANCELLED");
    assert_eq!(journal.calls(&format!("{}:a", uuid_of(&id))), 0);
}

async fn concurrent_resumes_have_exactly_one_winner(backend: Backend) {
    let (app, _) = app(backend).await;
    publish_intake(&app).await;
    let id = app.start_task("acme", json!({"input": "hmm"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let review = app.task("acme", &id).await["pendingReview"]["id"].clone();
    let token = app.admin_token("acme");
    let resume = || {
        app.graphql(
            Some(&token),
            "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r, corrections: {intent: \"insurance.loss_run_request\"}}) { task { status } } }",
            json!({"t": id, "r": review}),
        )
    };
    let (a, b) = tokio::join!(resume(), resume());
    let codes: Vec<Option<String>> = [&a, &b]
        .iter()
        .map(|r| {
            r.body["errors"][0]["extensions"]["code"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        codes.iter().filter(|c| c.is_none()).count(),
        1,
        "{a:?} {b:?}"
    );
    assert!(codes.contains(&Some("CONFLICT".into())), "{codes:?}");
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

async fn conditions_templates_and_review_gates(backend: Backend) {
    let (app, _) = app(backend).await;
    let mut plan = steps(&[
        (
            "init",
            "set_state",
            json!({"count": 2, "flag": false, "who": "{{ input.payload.name }}"}),
        ),
        ("skipped", "set_state", json!({"ran_skipped": true})),
        (
            "typed",
            "set_state",
            json!({"double": "{{ state.count * 2 }}", "greeting": "hi {{ state.who }}"}),
        ),
        (
            "gated",
            "set_state",
            json!({"approved_amount": "{{ state.amount }}"}),
        ),
    ]);
    plan[1]["condition"] = json!("{{ state.flag }}");
    plan[3]["requiresReview"] = json!(true);
    app.publish_plan(
        "acme",
        json!({"key": "cond", "intent": "t.cond", "steps": plan}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "cond", "payload": {"name": "Ada", "ssn": "123-45-6789"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(
        task["state"]["double"], 4,
        "a single expression keeps its type"
    );
    assert_eq!(task["state"]["greeting"], "hi Ada");
    assert!(task["state"].get("ran_skipped").is_none());
    assert!(kinds(&task).contains(&("STEP_SKIPPED".into(), Some("skipped".into()))));
    assert_eq!(task["pendingReview"]["stepId"], "gated");
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r, corrections: {amount: 120}}) { task { status } } }",
            json!({"t": id, "r": task["pendingReview"]["id"]}),
        )
        .await;
    res.data();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["state"]["approved_amount"], 120);
    // PII in the input never reaches the event log.
    assert!(!task["events"].to_string().contains("123-45-6789"));
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
