//! The memory tools in plans, end to end (the seed's scenarios 15–18):
//! plans published and tasks started over GraphQL, the executor driven by
//! its step function, outputs, events and memories read back over GraphQL,
//! on SQLite and PostgreSQL.
//!
//! This module holds the helpers the tools' tests share; the tests are in
//! `dossier` (`memory.dossier`), `assess_and_plan`
//! (`memory.assess_and_plan`), `remember_recall_link` (`memory.remember`,
//! `memory.recall`, `graph.link` and the tools' arguments) and `tenants`
//! (every tool confined to its tenant).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, uuid_of},
    memory::{entity, member},
};

mod assess_and_plan;
mod dossier;
mod remember_recall_link;
mod tenants;

const FIELDS: &str = "id status error subjectId settledStepIds currentStepId state \
    frozenPlan { id tool } \
    pendingReview { id stepId reason proposed } \
    steps { stepId status output error } \
    artifacts { stepId kind role reference } \
    events(first: 1000) { seq kind stepId tool status summary error data ... on MemoryRecalled { memoryIds } }";

async fn publish(app: &TestApp, tenant: &str, key: &str, steps: Value) {
    app.publish_plan(
        tenant,
        json!({"key": key, "intent": format!("test.{key}"), "steps": steps}),
    )
    .await
    .data();
}

async fn read(app: &TestApp, tenant: &str, id: &str) -> Value {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            &format!("query($id: ID!) {{ task(id: $id) {{ {FIELDS} }} }}"),
            json!({"id": id}),
        )
        .await;
    res.data()["task"].clone()
}

/// Start a task of plan `key` about `subject` (a raw UUID), run everything
/// runnable, and read it back.
async fn run(app: &TestApp, tenant: &str, key: &str, subject: Option<&str>) -> Value {
    let mut input = json!({"planKey": key});
    if let Some(s) = subject {
        input["subjectId"] = json!(s);
    }
    let id = app.start_task(tenant, input).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    read(app, tenant, &id).await
}

/// A raw entity id, as tasks and tools use them.
async fn subject(app: &TestApp, tenant: &str, ty: &str, name: &str) -> String {
    uuid_of(&entity(app, &member(app, tenant), ty, name).await)
}

/// The output of the step's completed attempt.
fn output(task: &Value, step: &str) -> Value {
    task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stepId"] == step && s["status"] == "COMPLETED")
        .unwrap_or_else(|| panic!("no completed `{step}` in {}", task["steps"]))["output"]
        .clone()
}

fn events<'a>(task: &'a Value, kind: &str) -> Vec<&'a Value> {
    task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// `MemoryRecalled` events: (step, raw memory ids), after checking that
/// `memoryIds` are the same memories as global ids.
fn recalled(task: &Value) -> Vec<(String, Vec<String>)> {
    events(task, "MEMORY_RECALLED")
        .into_iter()
        .map(|e| {
            let raw: Vec<String> = serde_json::from_value(e["data"]["memory_ids"].clone()).unwrap();
            let global: Vec<String> = e["memoryIds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| uuid_of(g.as_str().unwrap()))
                .collect();
            assert_eq!(raw, global, "memoryIds name the same memories");
            (e["stepId"].as_str().unwrap().to_owned(), raw)
        })
        .collect()
}

fn plan_ids(task: &Value) -> Vec<String> {
    task["frozenPlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

fn contents(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

fn set<'a>(ids: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    ids.into_iter().cloned().collect()
}

/// A plan writing one memory per step: `(step id, content, category)`.
fn remember_steps(facts: &[(&str, &str, &str)]) -> Value {
    Value::Array(
        facts
            .iter()
            .map(|(id, content, category)| {
                json!({"id": id, "tool": "memory.remember",
                       "args": {"content": content, "category": category}})
            })
            .collect(),
    )
}

/// Memory ids written by the remember steps of `task`, by step.
fn written(task: &Value, step: &str) -> String {
    output(task, step)["memory_id"].as_str().unwrap().to_owned()
}

/// A plan whose tasks wait for a review: open work on their subject.
async fn hold_plan(app: &TestApp, tenant: &str) {
    publish(
        app,
        tenant,
        "hold",
        json!([{"id": "wait", "tool": "request_review", "args": {"reason": "waiting on the carrier"}}]),
    )
    .await;
}

async fn hold(app: &TestApp, tenant: &str, subject: &str, n: usize) {
    for _ in 0..n {
        let task = run(app, tenant, "hold", Some(subject)).await;
        assert_eq!(task["status"], "NEEDS_REVIEW");
    }
}

async fn memory(app: &TestApp, tenant: &str, raw_id: &str) -> Value {
    let global = crate::helpers::encode_id("Memory", raw_id);
    let res = app
        .graphql(
            Some(&member(app, tenant)),
            "query($id: ID!) { memory(id: $id) { content category sourceTaskId validTo subject { name } } }",
            json!({"id": global}),
        )
        .await;
    res.data()["memory"].clone()
}
