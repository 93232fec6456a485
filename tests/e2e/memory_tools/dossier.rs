//! `memory.dossier`: a subject's pending work, insights, events and recent
//! tasks (scenario 15), and the insight a failed step leaves for the next
//! task on the subject (scenario 17).

use serde_json::json;

use super::{
    contents, events, hold, hold_plan, memory, output, publish, recalled, remember_steps, run, set,
    subject, written,
};
use crate::{
    helpers::{TestApp, uuid_of},
    on_both_backends,
};

on_both_backends!(
    dossier_gathers_a_subjects_state_and_facts,
    a_failure_leaves_an_insight_the_next_task_sees,
);

/// Scenario 15: the dossier gathers the subject's pending work (open tasks),
/// its insights and events, and its recent tasks.
async fn dossier_gathers_a_subjects_state_and_facts(app: TestApp) {
    app.create_tenant("acme").await;
    let carrier = subject(&app, "acme", "carrier", "Progressive").await;
    let other = subject(&app, "acme", "carrier", "Geico").await;
    publish(
        &app,
        "acme",
        "seed",
        remember_steps(&[
            ("vins", "Progressive OCR fails on VINs", "insight"),
            ("email", "Broker prefers email over fax", "preference"),
            ("cargo", "Rejected COI: missing cargo coverage", "event"),
        ]),
    )
    .await;
    let seed = run(&app, "acme", "seed", Some(&carrier)).await;
    assert_eq!(seed["status"], "COMPLETED");
    let (vins, email, cargo) = (
        written(&seed, "vins"),
        written(&seed, "email"),
        written(&seed, "cargo"),
    );
    publish(
        &app,
        "acme",
        "elsewhere",
        remember_steps(&[("fast", "Geico is fast", "insight")]),
    )
    .await;
    run(&app, "acme", "elsewhere", Some(&other)).await;
    hold_plan(&app, "acme").await;
    hold(&app, "acme", &carrier, 3).await;
    hold(&app, "acme", &other, 1).await;

    publish(
        &app,
        "acme",
        "recall",
        json!([{"id": "dossier", "tool": "memory.dossier", "args": {"save_as": "dossier"}}]),
    )
    .await;
    let task = run(&app, "acme", "recall", Some(&carrier)).await;
    assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
    let d = output(&task, "dossier");
    assert_eq!(d["subject"]["name"], "Progressive");
    assert_eq!(d["subject"]["id"], carrier);
    // Pending work: the three waiting tasks on this subject, not the one
    // on Geico, not the finished seed task, not the task asking.
    assert_eq!(d["state"]["open_tasks"], 3);
    assert_eq!(d["state"]["facts"], 3);
    let insights = contents(&d["insights"]);
    assert!(insights.len() >= 2, "{insights:?}");
    assert!(insights.iter().any(|i| i.contains("VIN")));
    assert!(insights.contains(&"Broker prefers email over fax".to_owned()));
    assert!(!insights.contains(&"Geico is fast".to_owned()));
    assert_eq!(
        contents(&d["recent_events"]),
        ["Rejected COI: missing cargo coverage"]
    );
    let recent: Vec<(&str, &str)> = d["recent_tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["status"].as_str().unwrap(),
                t["plan_key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        recent,
        [
            ("NEEDS_REVIEW", "hold"),
            ("NEEDS_REVIEW", "hold"),
            ("NEEDS_REVIEW", "hold"),
            ("COMPLETED", "seed"),
        ],
        "newest first, this subject only"
    );
    assert_eq!(task["state"]["dossier"], d, "save_as keeps it in state");
    // The step reports exactly the memories it included.
    let r = recalled(&task);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, "dossier");
    assert_eq!(set(&r[0].1), set(&[vins, email, cargo]));
    let summary = &events(&task, "STEP_COMPLETED")[0]["summary"];
    assert_eq!(summary, "dossier: 3 open tasks, 2 insights, 1 recent event");

    // A task without a subject has no dossier to build.
    let task = run(&app, "acme", "recall", None).await;
    assert_eq!(task["status"], "FAILED");
    assert!(task["error"].as_str().unwrap().contains("no subject"));
}

/// A local stand-in for an extraction service that cannot read VINs.
async fn failing_extractor() -> String {
    use axum::{Json, Router, http::StatusCode, routing::post};
    let app = Router::new().route(
        "/extract",
        post(|| async {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"error": "VIN unreadable"})),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/extract", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Scenario 17: a failed step leaves an insight (a `memory.remember` step
/// conditioned on the failure), and the next task on the same subject sees
/// it in its dossier; a task on another subject does not.
async fn a_failure_leaves_an_insight_the_next_task_sees(app: TestApp) {
    app.create_tenant("acme").await;
    let carrier = subject(&app, "acme", "carrier", "Progressive").await;
    let other = subject(&app, "acme", "carrier", "Geico").await;
    let url = failing_extractor().await;
    publish(
        &app,
        "acme",
        "intake",
        json!([
            {"id": "extract", "tool": "http_request",
             "args": {"url": url, "method": "POST", "body": {"document": "dec page"}},
             "stopOnFailure": false},
            {"id": "note_failure", "tool": "memory.remember",
             "condition": "{{ not steps.extract.output }}",
             "args": {"content": "Extraction failed for this carrier: its VINs were unreadable",
                      "category": "insight", "importance": 0.9}},
            {"id": "note_done", "tool": "memory.remember",
             "condition": "{{ steps.extract.output }}",
             "args": {"content": "Intake completed", "category": "event"}}
        ]),
    )
    .await;
    let failed = run(&app, "acme", "intake", Some(&carrier)).await;
    assert_eq!(failed["status"], "COMPLETED", "{}", failed["error"]);
    let step_failed = events(&failed, "STEP_FAILED");
    assert_eq!(step_failed.len(), 1);
    assert_eq!(step_failed[0]["stepId"], "extract");
    assert!(step_failed[0]["error"].as_str().unwrap().contains("422"));
    assert_eq!(events(&failed, "STEP_SKIPPED")[0]["stepId"], "note_done");
    let insight = written(&failed, "note_failure");
    let stored = memory(&app, "acme", &insight).await;
    assert_eq!(stored["category"], "insight");
    assert!(stored["content"].as_str().unwrap().contains("VIN"));
    assert_eq!(stored["subject"]["name"], "Progressive");
    assert_eq!(
        stored["sourceTaskId"],
        uuid_of(failed["id"].as_str().unwrap()),
        "provenance: the failed task"
    );
    let artifacts = failed["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1);
    assert_eq!(artifacts[0]["kind"], "memory");
    assert_eq!(artifacts[0]["role"], "created");
    assert_eq!(artifacts[0]["reference"], insight.as_str());

    publish(
        &app,
        "acme",
        "recall",
        json!([{"id": "dossier", "tool": "memory.dossier", "args": {}}]),
    )
    .await;
    let next = run(&app, "acme", "recall", Some(&carrier)).await;
    let d = output(&next, "dossier");
    assert_eq!(
        contents(&d["insights"]),
        ["Extraction failed for this carrier: its VINs were unreadable"]
    );
    assert_eq!(
        d["recent_tasks"][0]["id"],
        uuid_of(failed["id"].as_str().unwrap())
    );
    assert_eq!(recalled(&next), [("dossier".to_owned(), vec![insight])]);

    let elsewhere = run(&app, "acme", "recall", Some(&other)).await;
    assert_eq!(output(&elsewhere, "dossier")["insights"], json!([]));
    assert!(recalled(&elsewhere).is_empty());
}
