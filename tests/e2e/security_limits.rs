//! Limits that keep one tenant's plans from costing the server memory or
//! time, and the protection of secrets at rest: a template's memory
//! budget, bounded intent patterns compiled once per plan version, key
//! rotation that re-seals every kind of sealed secret, and an embedded
//! database readable by its owner only.

use serde_json::json;

use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(a_template_that_multiplies_a_string_fails_its_step);

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
