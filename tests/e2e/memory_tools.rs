//! The memory tools in plans, end to end (the seed's scenarios 15–18):
//! plans published and tasks started over GraphQL, the executor driven by
//! its step function, outputs, events and memories read back over GraphQL,
//! on SQLite and PostgreSQL.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, uuid_of},
    memory::{entity, member},
    on_both_backends,
};

on_both_backends!(
    dossier_gathers_a_subjects_state_and_facts,
    memory_warnings_inject_a_review_and_nothing_else_does,
    pending_work_above_the_limit_is_chased_not_duplicated,
    a_failure_leaves_an_insight_the_next_task_sees,
    tenants_facts_about_the_same_subject_never_cross,
    remember_recall_and_link_report_what_they_did,
    every_memory_tool_refuses_another_tenants_ids,
    memory_tool_arguments_are_checked_at_publish,
);

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

/// Scenario 18: two tenants link, remember and read facts about "the same"
/// carrier (each its own entity, same key) through the tools; neither ever
/// sees the other's.
async fn tenants_facts_about_the_same_subject_never_cross(app: TestApp) {
    let mut seen = Vec::new();
    for (tenant, fact) in [
        ("alpha", "This carrier is difficult"),
        ("beta", "Great relationship with this carrier"),
    ] {
        app.create_tenant(tenant).await;
        publish(
            &app,
            tenant,
            "link",
            json!([{"id": "link", "tool": "graph.link", "args": {
                "from": {"type": "carrier", "name": "Progressive"},
                "to": {"type": "broker", "name": "Jane Broker"},
                "relation": "works with"}}]),
        )
        .await;
        let linked = run(&app, tenant, "link", None).await;
        let carrier = output(&linked, "link")["from_id"]
            .as_str()
            .unwrap()
            .to_owned();
        publish(
            &app,
            tenant,
            "note",
            remember_steps(&[("n", fact, "insight")]),
        )
        .await;
        let memory = written(&run(&app, tenant, "note", Some(&carrier)).await, "n");
        seen.push((tenant, fact, carrier, memory));
    }
    assert_ne!(seen[0].2, seen[1].2, "each tenant has its own entity");
    for (tenant, fact, carrier, memory) in &seen {
        publish(
            &app,
            tenant,
            "look",
            json!([
                {"id": "dossier", "tool": "memory.dossier", "args": {}},
                {"id": "recall", "tool": "memory.recall",
                 "args": {"query": "carrier", "subject": null}}
            ]),
        )
        .await;
        let task = run(&app, tenant, "look", Some(carrier)).await;
        assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
        let d = output(&task, "dossier");
        assert_eq!(contents(&d["insights"]), [fact.to_string()], "{tenant}");
        assert_eq!(d["neighbors"][0]["name"], "Jane Broker");
        let hits = output(&task, "recall")["hits"].clone();
        assert_eq!(
            contents(&hits),
            [fact.to_string()],
            "{tenant}: whole-tenant search"
        );
        let own = std::slice::from_ref(memory);
        for (_, ids) in recalled(&task) {
            assert_eq!(ids, own, "{tenant} recalls only its own");
        }
    }
}

/// `memory.remember` dedups, `memory.recall` ranks and filters and reports
/// its hits, `graph.link` upserts.
async fn remember_recall_and_link_report_what_they_did(app: TestApp) {
    app.create_tenant("acme").await;
    let carrier = subject(&app, "acme", "carrier", "Progressive").await;
    publish(
        &app,
        "acme",
        "notes",
        json!([
            {"id": "a", "tool": "memory.remember",
             "args": {"content": "Progressive wants loss runs by email", "category": "preference",
                      "tier": "MEMORY_BANK", "importance": 0.8}},
            {"id": "b", "tool": "memory.remember",
             "args": {"content": "Progressive disputed the March invoice", "category": "event"}},
            {"id": "c", "tool": "memory.remember",
             "args": {"content": "Office coffee machine is broken", "subject": null}}
        ]),
    )
    .await;
    let notes = run(&app, "acme", "notes", Some(&carrier)).await;
    assert_eq!(notes["status"], "COMPLETED", "{}", notes["error"]);
    let a = output(&notes, "a");
    assert_eq!(a["merged"], false);
    assert_eq!(a["tier"], "MEMORY_BANK");
    assert_eq!(a["subject_id"], carrier, "the task's subject by default");
    assert_eq!(output(&notes, "c")["subject_id"], Value::Null);
    // The same fact again merges into the same memory.
    let again = run(&app, "acme", "notes", Some(&carrier)).await;
    assert_eq!(output(&again, "a")["merged"], true);
    assert_eq!(output(&again, "a")["memory_id"], a["memory_id"]);
    assert!(
        again["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["role"] == "updated")
    );

    publish(
        &app,
        "acme",
        "ask",
        json!([
            {"id": "about", "tool": "memory.recall",
             "args": {"query": "how does Progressive want loss runs", "limit": 5}},
            {"id": "events", "tool": "memory.recall",
             "args": {"query": "Progressive invoice", "categories": ["event"]}},
            {"id": "anything", "tool": "memory.recall",
             "args": {"query": "coffee machine", "subject": null, "tiers": ["WORKING"], "limit": 1}}
        ]),
    )
    .await;
    let task = run(&app, "acme", "ask", Some(&carrier)).await;
    assert_eq!(task["status"], "COMPLETED", "{}", task["error"]);
    let about = output(&task, "about");
    assert_eq!(
        about["hits"][0]["content"],
        "Progressive wants loss runs by email"
    );
    assert!(
        !contents(&about["hits"]).contains(&"Office coffee machine is broken".to_owned()),
        "the subject filter holds"
    );
    let score = about["hits"][0]["score"].as_f64().unwrap();
    assert!(score > 0.0, "{score}");
    assert_eq!(
        contents(&output(&task, "events")["hits"]),
        ["Progressive disputed the March invoice"]
    );
    assert_eq!(
        contents(&output(&task, "anything")["hits"]),
        ["Office coffee machine is broken"]
    );
    // One MemoryRecalled per step, naming its hits in rank order.
    let r = recalled(&task);
    let steps: Vec<&str> = r.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(steps, ["about", "events", "anything"]);
    for (step, ids) in &r {
        let hits: Vec<String> = output(&task, step)["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, &hits, "{step}");
    }
    // The event follows the step's completion in the same commit.
    let seqs: Vec<(String, Option<String>)> = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["stepId"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let done = seqs
        .iter()
        .position(|k| k == &("STEP_COMPLETED".to_owned(), Some("about".to_owned())))
        .unwrap();
    assert_eq!(
        seqs[done + 1],
        ("MEMORY_RECALLED".to_owned(), Some("about".to_owned()))
    );

    // graph.link: `from` defaults to the subject; a second run updates.
    publish(
        &app,
        "acme",
        "link",
        json!([{"id": "l", "tool": "graph.link", "args": {
            "to": {"type": "broker", "name": "Jane Broker", "properties": {"email": "jane@example.com"}},
            "relation": "BROKERED_BY", "weight": 2}}]),
    )
    .await;
    let first = run(&app, "acme", "link", Some(&carrier)).await;
    assert_eq!(first["status"], "COMPLETED", "{}", first["error"]);
    let out = output(&first, "l");
    assert_eq!(out["from_id"], carrier);
    assert_eq!(out["relation_type"], "BROKERED_BY");
    assert_eq!(
        out["created"],
        json!({"from": false, "to": true, "relation": true})
    );
    let relinked = run(&app, "acme", "link", Some(&carrier)).await;
    let second = output(&relinked, "l");
    assert_eq!(second["to_id"], out["to_id"]);
    assert_eq!(second["relation_id"], out["relation_id"]);
    assert_eq!(
        second["created"],
        json!({"from": false, "to": false, "relation": false})
    );
    let res = app
        .graphql(
            Some(&member(&app, "acme")),
            "query($id: ID!) { neighborhood(entityId: $id) { neighbors { entity { name properties } } relations { type weight provenance } } }",
            json!({"id": crate::helpers::encode_id("KgEntity", &carrier)}),
        )
        .await;
    let n = &res.data()["neighborhood"];
    assert_eq!(n["neighbors"][0]["entity"]["name"], "Jane Broker");
    assert_eq!(
        n["neighbors"][0]["entity"]["properties"]["email"],
        "jane@example.com"
    );
    assert_eq!(n["relations"][0]["type"], "BROKERED_BY");
    assert_eq!(n["relations"][0]["weight"], 2.0);
    assert_eq!(
        n["relations"][0]["provenance"],
        format!("task:{}", uuid_of(relinked["id"].as_str().unwrap())),
        "the task that last linked them"
    );
}

/// Every memory tool, handed another tenant's entity or memory id, fails
/// its step with `not found` and never returns or changes that data.
async fn every_memory_tool_refuses_another_tenants_ids(app: TestApp) {
    app.create_tenant("alpha").await;
    app.create_tenant("beta").await;
    let theirs = subject(&app, "beta", "carrier", "Progressive").await;
    let ours = subject(&app, "alpha", "carrier", "Progressive").await;
    publish(
        &app,
        "beta",
        "secret",
        remember_steps(&[("s", "Beta's secret about Progressive", "warning")]),
    )
    .await;
    let secret = written(&run(&app, "beta", "secret", Some(&theirs)).await, "s");

    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "remember_about",
            json!({"tool": "memory.remember", "args": {"content": "x", "subject": theirs}}),
            None,
        ),
        (
            "remember_task_subject",
            json!({"tool": "memory.remember", "args": {"content": "x"}}),
            Some(&theirs),
        ),
        (
            "remember_mention",
            json!({"tool": "memory.remember", "args": {"content": "x", "mentions": [theirs]}}),
            Some(&ours),
        ),
        (
            "remember_supersede",
            json!({"tool": "memory.remember", "args": {"content": "x", "supersedes": secret}}),
            Some(&ours),
        ),
        (
            "recall",
            json!({"tool": "memory.recall", "args": {"query": "secret Progressive"}}),
            Some(&theirs),
        ),
        (
            "dossier",
            json!({"tool": "memory.dossier", "args": {"subject": theirs}}),
            Some(&ours),
        ),
        (
            "dossier_task_subject",
            json!({"tool": "memory.dossier", "args": {}}),
            Some(&theirs),
        ),
        (
            "link_from",
            json!({"tool": "graph.link", "args": {"from": {"id": theirs}, "to": {"id": ours}, "relation": "KNOWS"}}),
            None,
        ),
        (
            "link_default_from",
            json!({"tool": "graph.link", "args": {"to": {"type": "broker", "name": "Jane"}, "relation": "KNOWS"}}),
            Some(&theirs),
        ),
        (
            "assess",
            json!({"tool": "memory.assess_and_plan", "args": {"steps": [{"id": "w", "tool": "set_state", "args": {}}]}}),
            Some(&theirs),
        ),
    ];
    for (name, step, subject) in cases {
        let mut step = step;
        step["id"] = json!("probe");
        publish(&app, "alpha", name, json!([step])).await;
        let task = run(&app, "alpha", name, subject).await;
        assert_eq!(task["status"], "FAILED", "{name}");
        let error = task["error"].as_str().unwrap();
        assert!(error.contains("not found"), "{name}: {error}");
        assert!(!error.contains("secret"), "{name}: {error}");
        assert!(
            task["steps"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["status"] != "COMPLETED" && s["output"].is_null()),
            "{name}: {}",
            task["steps"]
        );
        assert!(recalled(&task).is_empty(), "{name}");
        assert!(events(&task, "STEPS_INJECTED").is_empty(), "{name}");
        assert_eq!(plan_ids(&task), ["probe"], "{name}");
    }
    // Nothing was written on either side.
    for tenant in ["alpha", "beta"] {
        let res = app
            .graphql(
                Some(&member(&app, tenant)),
                "{ memories(first: 50) { edges { node { content } } } }",
                json!({}),
            )
            .await;
        let n = res.data()["memories"]["edges"].as_array().unwrap().len();
        assert_eq!(n, usize::from(tenant == "beta"), "{tenant}");
    }
    let stored = memory(&app, "beta", &secret).await;
    assert_eq!(stored["validTo"], Value::Null, "not superseded");
    let res = app
        .graphql(
            Some(&member(&app, "beta")),
            "query($id: ID!) { neighborhood(entityId: $id) { neighbors { entity { name } } } }",
            json!({"id": crate::helpers::encode_id("KgEntity", &theirs)}),
        )
        .await;
    assert_eq!(res.data()["neighborhood"]["neighbors"], json!([]));
}

/// The tools' argument schemas are enforced when a plan is published (and
/// again, rendered, when a step runs).
async fn memory_tool_arguments_are_checked_at_publish(app: TestApp) {
    app.create_tenant("acme").await;
    for (step, expected) in [
        (
            json!({"id": "r", "tool": "memory.recall", "args": {"limit": 3}}),
            "args.query is required",
        ),
        (
            json!({"id": "r", "tool": "memory.remember", "args": {"content": "x", "tier": "FOREVER"}}),
            "args.tier must be one of",
        ),
        (
            json!({"id": "r", "tool": "memory.remember", "args": {"content": "x", "importance": 2}}),
            "args.importance must be at most 1",
        ),
        (
            json!({"id": "r", "tool": "graph.link", "args": {"to": {"name": "x", "colour": "red"}, "relation": "KNOWS"}}),
            "args.to.colour is not a known argument",
        ),
        (
            json!({"id": "r", "tool": "memory.assess_and_plan", "args": {"max_open_tasks": -1}}),
            "args.max_open_tasks must be at least 0",
        ),
        (
            json!({"id": "r", "tool": "memory.assess_and_plan", "args": {"steps": [{"tool": "set_state"}]}}),
            "args.steps[0].id is required",
        ),
        (
            json!({"id": "r", "tool": "memory.dossier", "args": {"recent_tasks": 500}}),
            "args.recent_tasks must be at most 50",
        ),
    ] {
        let res = app
            .publish_plan(
                "acme",
                json!({"key": "bad", "intent": "test.bad", "steps": [step]}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{}", res.body);
        let message = res.error_message();
        assert!(message.contains(expected), "{expected}: {message}");
        assert!(message.contains("step `r`"), "{message}");
    }
    // Templates stand in for values at publish time, and are checked again
    // when rendered: a rendered limit out of range fails the step.
    publish(
        &app,
        "acme",
        "templated",
        json!([{"id": "r", "tool": "memory.recall",
                "args": {"query": "x", "limit": "{{ input.payload.limit }}", "subject": null}}]),
    )
    .await;
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "templated", "payload": {"limit": 500}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = read(&app, "acme", &id).await;
    assert_eq!(task["status"], "FAILED");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("args.limit must be at most 50"),
        "{}",
        task["error"]
    );
}
