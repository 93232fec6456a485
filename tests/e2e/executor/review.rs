//! Human review: a low-confidence step waits and resumes with corrections,
//! a rejection cancels the task, and concurrent resumes have one winner.

use brainstem_domain::Role;
use serde_json::json;

use super::{app, kinds, publish_intake, steps};
use crate::{
    for_both_backends,
    helpers::{Backend, uuid_of},
};

for_both_backends!(
    only_reviewers_decide_reviews_and_decisions_are_audited,
    low_confidence_waits_for_review_and_resumes_with_corrections,
    rejecting_a_review_cancels_the_task,
    concurrent_resumes_have_exactly_one_winner,
    a_waiting_task_keeps_its_frozen_plan_version,
);

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

/// Only reviewers and tenant admins decide reviews; each decision and each
/// plan publish leaves an audit row.
async fn only_reviewers_decide_reviews_and_decisions_are_audited(backend: Backend) {
    let (app, _journal) = app(backend).await;
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
    let review = app.task("acme", &id).await["pendingReview"]["id"].clone();
    let resume = "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }";
    let member = app.token(Some("acme"), &[Role::Member]);
    let refused = app
        .graphql(Some(&member), resume, json!({"t": id, "r": review}))
        .await;
    assert_eq!(refused.error_code(), "FORBIDDEN");
    assert!(refused.error_message().contains("REVIEWER"));
    let reviewer = app.token_for(
        "rita",
        Some("acme"),
        &[Role::Reviewer],
        chrono::Duration::hours(1),
    );
    let approved = app
        .graphql(Some(&reviewer), resume, json!({"t": id, "r": review}))
        .await;
    assert_eq!(approved.data()["resumeTask"]["task"]["status"], "PENDING");

    let audit = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ auditLog(first: 50) { edges { node { action actor target } } } }",
            json!({}),
        )
        .await;
    let rows: Vec<(String, String)> = audit.data()["auditLog"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["node"]["action"].as_str().unwrap().to_owned(),
                e["node"]["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        rows.contains(&("review.approve".into(), "user:rita".into())),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|(action, _)| action == "plan.publish"),
        "{rows:?}"
    );
}

/// A task runs the plan version frozen when it was planned, even when a
/// new version is published while it waits.
async fn a_waiting_task_keeps_its_frozen_plan_version(backend: Backend) {
    let (app, _journal) = app(backend).await;
    let version = |marker: &str| {
        json!({"key": "versioned", "intent": "t.versioned", "steps": [
            {"id": "gate", "tool": "set_state", "args": {"gate": true}, "requiresReview": true},
            {"id": "mark", "tool": "set_state", "args": {"marker": marker}}
        ]})
    };
    app.publish_plan("acme", version("v1")).await.data();
    let id = app
        .start_task("acme", json!({"planKey": "versioned"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let waiting = app.task("acme", &id).await;
    assert_eq!(waiting["status"], "NEEDS_REVIEW");
    app.publish_plan("acme", version("v2")).await.data();
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }",
        json!({"t": id, "r": waiting["pendingReview"]["id"]}),
    )
    .await
    .data();
    app.run_tasks().await;
    let done = app.task("acme", &id).await;
    assert_eq!(done["status"], "COMPLETED");
    assert_eq!(done["plan"]["version"], 1);
    assert_eq!(done["state"]["marker"], "v1", "the frozen version ran");
}
