//! The executor's scenarios, end to end: plans published and tasks started
//! over GraphQL, the executor driven by its step function, results read back
//! over GraphQL, on SQLite and PostgreSQL.
//!
//! This module holds the helpers the scenarios share; the scenarios are in
//! `plans` (plans and steps), `review`, `delegation`, `failures` (retries,
//! failures and recovery) and `tasks` (starting, cancelling, refusing and
//! isolating tasks).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{
    helpers::{Backend, TestApp},
    tools::{self, Journal},
};

mod delegation;
mod failures;
mod plans;
mod review;
mod tasks;

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
