//! Limits that keep one tenant's plans from costing the server memory or
//! time, and the protection of secrets at rest: a template's memory
//! budget, bounded intent patterns compiled once per plan version, key
//! rotation that re-seals every kind of sealed secret, and an embedded
//! database readable by its owner only.

use serde_json::{Value, json};

use crate::{
    helpers::{self, TestApp},
    on_both_backends,
};

on_both_backends!(
    a_template_that_multiplies_a_string_fails_its_step,
    plans_over_the_pattern_limits_are_refused,
    intent_patterns_compile_once_per_plan_version,
);

async fn a_template_that_multiplies_a_string_fails_its_step(app: TestApp) {
    app.create_tenant("acme").await;
    // The review's exploit: one `set_state` step building 400 MB.
    app.publish_plan(
        "acme",
        json!({"key": "balloon", "intent": "t.balloon", "steps": [
            {"id": "grow", "tool": "set_state", "args": {
                "big": "{{ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 }}"
            }},
            {"id": "after", "tool": "set_state", "args": {"reached": true}},
        ]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"input": "go", "planKey": "balloon"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    let step = &task["steps"][0];
    assert_eq!(step["stepId"], "grow");
    assert_eq!(step["attempt"], 1, "not retried: {task}");
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("template memory limit: a step's templates may create at most 8 MiB"),
        "{error}"
    );
    assert!(task["state"].get("big").is_none() && task["state"].get("reached").is_none());
}

async fn plans_over_the_pattern_limits_are_refused(app: TestApp) {
    app.create_tenant("acme").await;
    let plan = |patterns: Value| {
        json!({"key": "many", "intent": "t.many", "patterns": patterns, "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]})
    };
    let refused = |res: helpers::Gql, expected: &str| {
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{expected}");
        assert!(
            res.error_message().contains(expected),
            "{}",
            res.error_message()
        );
    };
    let too_many: Vec<String> = (0..33).map(|i| format!("word{i}")).collect();
    refused(
        app.publish_plan("acme", plan(json!(too_many))).await,
        "plan `many`: 33 patterns, at most 32 are allowed",
    );
    refused(
        app.publish_plan("acme", plan(json!(["a".repeat(201)])))
            .await,
        "plan `many`: a pattern of 201 characters, at most 200 are allowed",
    );
    // Short, but compiles past the size limit.
    refused(
        app.publish_plan("acme", plan(json!([r"\w{500}\w{500}"])))
            .await,
        r"plan `many`: pattern `\w{500}\w{500}` is invalid",
    );
    // At the limits it is published.
    let at_limit: Vec<String> = (0..32).map(|i| format!("word{i}")).collect();
    app.publish_plan("acme", plan(json!(at_limit))).await.data();
}

/// `brainstem_intent_pattern_compilations_total` as `/metrics` shows it.
async fn compilations(app: &TestApp) -> u64 {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix("brainstem_intent_pattern_compilations_total "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

async fn intent_patterns_compile_once_per_plan_version(app: TestApp) {
    app.create_tenant("acme").await;
    let publish = || {
        app.publish_plan(
            "acme",
            json!({"key": "loss", "intent": "t.loss_run", "patterns": ["loss run", r"dec(laration)?\s+page"],
                   "steps": [{"id": "keep", "tool": "set_state", "args": {"kept": true}}]}),
        )
    };
    let start_and_run = |n: usize| {
        let app = &app;
        async move {
            for _ in 0..n {
                let task = app
                    .start_task("acme", json!({"input": "please send the loss run"}))
                    .await;
                app.run_tasks().await;
                let task = app.task("acme", task["id"].as_str().unwrap()).await;
                assert_eq!(task["intent"], "t.loss_run", "{task}");
                assert_eq!(task["status"], "COMPLETED", "{task}");
            }
        }
    };
    let before = compilations(&app).await;
    publish().await.data();
    start_and_run(3).await;
    assert_eq!(compilations(&app).await - before, 1, "one plan version");
    publish().await.data();
    start_and_run(2).await;
    assert_eq!(compilations(&app).await - before, 2, "two plan versions");
}
