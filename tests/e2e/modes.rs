//! Task modes on `startTask`: `ENQUEUE_AND_WAIT` (the request waits for the
//! outcome, or returns what is done so far with `ok: false` while the task
//! goes on), `PLAN` (approve, with an edited plan, or reject), `ANSWER` (a
//! dry run that runs no step), and confidence `NONE` (an answer with help
//! text). The real server over HTTP, with workers where a request waits.

use std::sync::Arc;

use brainstem_domain::tools::Tool;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::{
    helpers::{Backend, TestApp},
    streams::Gate,
};

const PAYLOAD: &str = "ok decision { modeUsed reason confidence } \
    task { id status mode state plan { key } frozenPlan { id tool } steps { stepId status } \
           pendingReview { id stepId proposed } result { content model finishReason } }";

/// An app with `workers` workers and the gate tool; the tenant `acme` with
/// the plan `note` (set_state, then the gate).
async fn app_with(backend: Backend, workers: usize, gate: Arc<Semaphore>) -> TestApp {
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Gate(gate))];
    let app = TestApp::spawn_full(backend, |c| c.workers = workers, tools).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "note", "intent": "notes.take", "description": "take a note",
        "patterns": ["note"],
        "steps": [
            {"id": "write", "tool": "set_state", "args": {"noted": "{{ input.text }}"}},
            {"id": "wait", "tool": "test.gate", "args": {}}
        ]}),
    )
    .await
    .data();
    app
}

async fn start(app: &TestApp, input: Value) -> Value {
    app.graphql(
        Some(&app.admin_token("acme")),
        &format!(
            "mutation($input: StartTaskInput!) {{ startTask(input: $input) {{ {PAYLOAD} }} }}"
        ),
        json!({"input": input}),
    )
    .await
    .data()["startTask"]
        .clone()
}

crate::for_both_backends!(
    enqueue_and_wait_returns_the_outcome,
    enqueue_and_wait_times_out_with_what_is_done_and_the_task_goes_on,
    a_plan_waits_for_approval_and_runs_as_edited,
    a_rejected_plan_cancels_the_task,
    answer_mode_answers_and_runs_no_step,
    nothing_to_go_on_is_answered_with_help_text,
    a_task_no_plan_handles_is_answered_by_an_agent_step,
);

async fn enqueue_and_wait_returns_the_outcome(backend: Backend) {
    let gate = Arc::new(Semaphore::new(1));
    let app = app_with(backend, 1, gate).await;
    let payload = start(
        &app,
        json!({"planKey": "note", "input": "buy milk", "mode": "ENQUEUE_AND_WAIT"}),
    )
    .await;
    assert_eq!(payload["ok"], true, "{payload}");
    assert_eq!(payload["task"]["status"], "COMPLETED");
    assert_eq!(payload["task"]["mode"], "ENQUEUE_AND_WAIT");
    assert_eq!(payload["task"]["state"]["noted"], "buy milk");
    assert_eq!(payload["decision"]["modeUsed"], "ENQUEUE_AND_WAIT");
    assert_eq!(payload["decision"]["confidence"], "HIGH");
}

async fn enqueue_and_wait_times_out_with_what_is_done_and_the_task_goes_on(backend: Backend) {
    let gate = Arc::new(Semaphore::new(0));
    let app = app_with(backend, 1, gate.clone()).await;
    let payload = start(
        &app,
        json!({"planKey": "note", "input": "call mum", "mode": "ENQUEUE_AND_WAIT",
               "waitTimeoutMs": 300}),
    )
    .await;
    assert_eq!(payload["ok"], false, "{payload}");
    assert_eq!(payload["task"]["status"], "EXECUTING");
    assert_eq!(
        payload["task"]["steps"][0],
        json!({"stepId": "write", "status": "COMPLETED"}),
        "what completed so far"
    );
    // The task goes on once the gate opens.
    gate.add_permits(1);
    let id = payload["task"]["id"].as_str().unwrap().to_owned();
    let mut events = crate::streams::connect(&app, "acme").await;
    events
        .subscribe("1", crate::streams::EVENTS, json!({"id": id}))
        .await;
    events.events_until_complete().await;
    assert_eq!(app.task("acme", &id).await["status"], "COMPLETED");
}

async fn a_plan_waits_for_approval_and_runs_as_edited(backend: Backend) {
    let app = app_with(backend, 0, Arc::new(Semaphore::new(1))).await;
    let payload = start(
        &app,
        json!({"planKey": "note", "input": "water plants", "mode": "PLAN"}),
    )
    .await;
    assert_eq!(payload["ok"], false);
    let id = payload["task"]["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "AWAITING_APPROVAL", "{task}");
    assert_eq!(task["steps"], json!([]), "nothing ran");
    let review = &task["pendingReview"];
    assert_eq!(review["stepId"], "plan_approval");
    assert_eq!(review["proposed"]["steps"][1]["tool"], "test.gate");

    let resume =
        "mutation($input: ResumeTaskInput!) { resumeTask(input: $input) { task { status } } }";
    // An edited plan is checked like a published one.
    let bad = app
        .graphql(
            Some(&app.admin_token("acme")),
            resume,
            json!({"input": {"taskId": id, "reviewId": review["id"],
                              "plan": [{"id": "x", "tool": "no.such.tool"}]}}),
        )
        .await;
    assert_eq!(
        bad.error_code(),
        "BAD_USER_INPUT",
        "{:?}",
        bad.error_message()
    );
    assert!(bad.error_message().contains("no.such.tool"));
    assert_eq!(app.task("acme", &id).await["status"], "AWAITING_APPROVAL");

    let ok = app
        .graphql(
            Some(&app.admin_token("acme")),
            resume,
            json!({"input": {"taskId": id, "reviewId": review["id"], "decision": "APPROVE",
                              "plan": [{"id": "edited", "tool": "set_state",
                                        "args": {"edited": true}}]}}),
        )
        .await;
    assert_eq!(ok.data()["resumeTask"]["task"]["status"], "PENDING");
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"]["edited"], true);
    assert!(
        task["state"].get("noted").is_none(),
        "the original plan did not run"
    );
    assert_eq!(
        task["frozenPlan"],
        json!([{"id": "edited", "tool": "set_state"}])
    );
}

async fn a_rejected_plan_cancels_the_task(backend: Backend) {
    let app = app_with(backend, 0, Arc::new(Semaphore::new(1))).await;
    let payload = start(
        &app,
        json!({"planKey": "note", "input": "x", "mode": "PLAN"}),
    )
    .await;
    let id = payload["task"]["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let review = app.task("acme", &id).await["pendingReview"]["id"].clone();
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation($input: ResumeTaskInput!) { resumeTask(input: $input) { task { status error } } }",
            json!({"input": {"taskId": id, "reviewId": review, "decision": "REJECT",
                              "reason": "not now"}}),
        )
        .await;
    let task = &res.data()["resumeTask"]["task"];
    assert_eq!(task["status"], "CANCELLED");
    assert!(task["error"].as_str().unwrap().contains("not now"));
    app.run_tasks().await;
    assert_eq!(app.task("acme", &id).await["steps"], json!([]));
}

async fn answer_mode_answers_and_runs_no_step(backend: Backend) {
    let app = app_with(backend, 1, Arc::new(Semaphore::new(1))).await;
    let payload = start(
        &app,
        json!({"input": "note that the gate code is 4411", "mode": "ANSWER"}),
    )
    .await;
    assert_eq!(payload["ok"], true, "{payload}");
    let task = &payload["task"];
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["steps"], json!([]), "no step ran");
    assert_eq!(task["state"], json!({}));
    assert_eq!(task["plan"]["key"], "note", "what would run");
    assert_eq!(task["frozenPlan"][1]["tool"], "test.gate");
    assert_eq!(task["result"]["model"], "offline");
    assert!(
        task["result"]["content"]
            .as_str()
            .unwrap()
            .starts_with("[offline model]"),
        "{task}"
    );
    assert_eq!(payload["decision"]["modeUsed"], "ANSWER");
}

async fn nothing_to_go_on_is_answered_with_help_text(backend: Backend) {
    let app = app_with(backend, 1, Arc::new(Semaphore::new(1))).await;
    let payload = start(&app, json!({"input": "   ", "mode": "ENQUEUE_AND_WAIT"})).await;
    assert_eq!(payload["ok"], true, "{payload}");
    assert_eq!(payload["decision"]["modeUsed"], "ANSWER");
    assert_eq!(payload["decision"]["confidence"], "NONE");
    let content = payload["task"]["result"]["content"].as_str().unwrap();
    assert!(
        content.starts_with("I could not tell what you want done"),
        "{content}"
    );
    assert!(content.contains("- notes.take: take a note"), "{content}");
    assert_eq!(payload["task"]["steps"], json!([]));
}

/// A task no plan handles is answered by the model (an agent step) once it
/// passes the confidence gate.
async fn a_task_no_plan_handles_is_answered_by_an_agent_step(backend: Backend) {
    let app = app_with(backend, 1, Arc::new(Semaphore::new(1))).await;
    let payload = start(
        &app,
        json!({"input": "what is the capital of France?", "mode": "ENQUEUE_AND_WAIT",
               "confidenceThreshold": 0.0}),
    )
    .await;
    assert_eq!(payload["ok"], true, "{payload}");
    assert_eq!(payload["decision"]["confidence"], "LOW");
    let task = &payload["task"];
    assert_eq!(task["plan"]["key"], "general_instruction");
    assert_eq!(
        task["frozenPlan"],
        json!([{"id": "answer", "tool": "agent"}])
    );
    assert_eq!(task["result"]["finishReason"], "COMPLETE");
    assert!(
        task["result"]["content"]
            .as_str()
            .unwrap()
            .contains("capital of France"),
        "{task}"
    );
}
