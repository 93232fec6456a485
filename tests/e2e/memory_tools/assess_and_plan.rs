//! `memory.assess_and_plan`: a warning about the subject injects a review
//! (scenario 16b), and pending work above the limit is chased, not
//! duplicated (scenario 16a).

use serde_json::json;

use super::{
    events, hold, hold_plan, output, plan_ids, publish, read, recalled, remember_steps, run,
    subject, written,
};
use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    memory_warnings_inject_a_review_and_nothing_else_does,
    pending_work_above_the_limit_is_chased_not_duplicated,
);

/// Scenario 16b: a memory that warns about the subject makes
/// `memory.assess_and_plan` inject a human review before the work; with no
/// warning, the work runs straight through.
async fn memory_warnings_inject_a_review_and_nothing_else_does(app: TestApp) {
    app.create_tenant("acme").await;
    let progressive = subject(&app, "acme", "carrier", "Progressive").await;
    let geico = subject(&app, "acme", "carrier", "Geico").await;
    let hartford = subject(&app, "acme", "carrier", "Hartford").await;
    publish(
        &app,
        "acme",
        "warn",
        remember_steps(&[("w", "Warning: Progressive OCR fails on VINs", "warning")]),
    )
    .await;
    let warning = written(&run(&app, "acme", "warn", Some(&progressive)).await, "w");
    publish(
        &app,
        "acme",
        "praise",
        remember_steps(&[("p", "Pays on time, VINs always right", "insight")]),
    )
    .await;
    run(&app, "acme", "praise", Some(&geico)).await;
    publish(
        &app,
        "acme",
        "vin_note",
        remember_steps(&[("n", "Hartford sends bad VIN numbers", "insight")]),
    )
    .await;
    let vin_note = written(&run(&app, "acme", "vin_note", Some(&hartford)).await, "n");

    let work = json!([{"id": "work", "tool": "set_state", "args": {"done": true}}]);
    publish(
        &app,
        "acme",
        "assess",
        json!([{"id": "assess", "tool": "memory.assess_and_plan", "args": {"steps": work}}]),
    )
    .await;

    // Warned: review first, the work after approval.
    let task = run(&app, "acme", "assess", Some(&progressive)).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(plan_ids(&task), ["assess", "assess.review", "work"]);
    assert!(task["state"].get("done").is_none(), "the work waits");
    let review = &task["pendingReview"];
    assert!(
        review["reason"]
            .as_str()
            .unwrap()
            .contains("Progressive OCR fails on VINs"),
        "{review}"
    );
    assert_eq!(review["proposed"]["memory_ids"], json!([warning]));
    let injected = events(&task, "STEPS_INJECTED");
    assert_eq!(injected.len(), 1);
    assert_eq!(
        injected[0]["data"]["injected_steps"],
        json!(["assess.review", "work"])
    );
    assert!(
        injected[0]["data"]["reasoning"]
            .as_str()
            .unwrap()
            .starts_with("Memory warning: 1 memory warns")
    );
    assert_eq!(
        recalled(&task),
        [("assess".to_owned(), vec![warning.clone()])]
    );
    assert_eq!(
        task["state"]["assessment"],
        json!({"chase": false, "open_tasks": 0, "warning_ids": [warning]})
    );
    let id = task["id"].as_str().unwrap();
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }",
        json!({"t": id, "r": review["id"]}),
    )
    .await
    .data();
    app.run_tasks().await;
    let task = read(&app, "acme", id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["state"]["done"], true);

    // Not warned (a good word mentioning VINs is no warning by default):
    // no review, no recall, the work runs.
    let task = run(&app, "acme", "assess", Some(&geico)).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(plan_ids(&task), ["assess", "work"]);
    assert_eq!(task["state"]["done"], true);
    assert!(recalled(&task).is_empty());
    assert!(events(&task, "REVIEW_REQUESTED").is_empty());
    assert!(
        output(&task, "assess")["reasoning"]
            .as_str()
            .unwrap()
            .starts_with("No memory warns")
    );

    // An insight is no warning by its category, but warn_terms make any
    // fact that names the term one (the seed's "bad VINs" rule).
    let task = run(&app, "acme", "assess", Some(&hartford)).await;
    assert_eq!(task["status"], "COMPLETED");
    publish(
        &app,
        "acme",
        "assess_vins",
        json!([{"id": "assess", "tool": "memory.assess_and_plan",
                "args": {"warn_terms": ["bad vin"], "steps": work}}]),
    )
    .await;
    let task = run(&app, "acme", "assess_vins", Some(&hartford)).await;
    assert_eq!(task["status"], "NEEDS_REVIEW");
    assert_eq!(recalled(&task), [("assess".to_owned(), vec![vin_note])]);
    let task = run(&app, "acme", "assess_vins", Some(&geico)).await;
    assert_eq!(
        task["status"], "COMPLETED",
        "`VINs always right` has no `bad vin`"
    );
}

/// Scenario 16a: more open tasks on the subject than the limit → a chase
/// step and no new work (even with a warning); at the limit, the work.
async fn pending_work_above_the_limit_is_chased_not_duplicated(app: TestApp) {
    app.create_tenant("acme").await;
    let busy = subject(&app, "acme", "carrier", "Busy Carrier").await;
    let calm = subject(&app, "acme", "carrier", "Calm Carrier").await;
    hold_plan(&app, "acme").await;
    hold(&app, "acme", &busy, 3).await;
    hold(&app, "acme", &calm, 2).await;
    publish(
        &app,
        "acme",
        "warn",
        remember_steps(&[("w", "Never answers the phone", "warning")]),
    )
    .await;
    run(&app, "acme", "warn", Some(&busy)).await;
    publish(
        &app,
        "acme",
        "intake",
        json!([{"id": "assess", "tool": "memory.assess_and_plan", "args": {
            "max_open_tasks": 2,
            "chase": {"tool": "set_state", "args": {"chased": true}},
            "steps": [{"id": "create", "tool": "set_state", "args": {"created": true}}]
        }}]),
    )
    .await;

    let task = run(&app, "acme", "intake", Some(&busy)).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(plan_ids(&task), ["assess", "assess.chase"]);
    assert_eq!(task["state"]["chased"], true);
    assert!(task["state"].get("created").is_none(), "no new work");
    assert_eq!(task["state"]["assessment"]["chase"], true);
    assert_eq!(task["state"]["assessment"]["open_tasks"], 3);
    let reasoning = events(&task, "STEPS_INJECTED")[0]["data"]["reasoning"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reasoning.starts_with("Found 3 open tasks on this subject (limit 2)"),
        "{reasoning}"
    );
    assert!(events(&task, "REVIEW_REQUESTED").is_empty());

    let task = run(&app, "acme", "intake", Some(&calm)).await;
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(plan_ids(&task), ["assess", "create"]);
    assert_eq!(task["state"]["created"], true);
    assert_eq!(task["state"]["assessment"]["open_tasks"], 2);

    // The default chase step marks the state.
    publish(
        &app,
        "acme",
        "intake_default",
        json!([{"id": "assess", "tool": "memory.assess_and_plan", "args": {}}]),
    )
    .await;
    let task = run(&app, "acme", "intake_default", Some(&busy)).await;
    assert_eq!(task["state"]["chase_mode"], true);
}
