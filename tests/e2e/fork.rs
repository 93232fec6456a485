//! Checkpoints, forks and reruns end to end: a five-step plan of
//! `http_request` calls to a local endpoint that counts every call (by
//! step) and keeps what it was sent, so a fork proves which steps ran
//! again and with what; an agent loop on the local fake model, forked at
//! its second iteration; a rerun refused while its task runs; and tenants
//! kept apart.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::HeaderMap,
    routing::post,
};
use brainstem_domain::tools::Tool;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::{
    agent::{Lookup, Turn, fake_model},
    helpers::{Backend, TestApp, poll_until, uuid_of},
    on_both_backends,
};

/// One call the endpoint received.
#[derive(Clone, Debug)]
struct Call {
    step: String,
    body: Value,
    idempotency_key: String,
}

#[derive(Clone, Default)]
struct Endpoint {
    calls: Arc<Mutex<Vec<Call>>>,
    /// The first call to `/hold` waits for this.
    release: Arc<Notify>,
}

impl Endpoint {
    fn count(&self, step: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.step == step)
            .count()
    }

    fn last(&self, step: &str) -> Call {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|c| c.step == step)
            .cloned()
            .unwrap()
    }
}

/// `POST /s/{step}` answers `{"step": …, "got": <the body>}`; `POST /hold`
/// answers the same, the first time only once released.
async fn endpoint() -> (Endpoint, String) {
    async fn record(endpoint: &Endpoint, step: String, headers: &HeaderMap, body: Value) -> Value {
        let idempotency_key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        endpoint.calls.lock().unwrap().push(Call {
            step: step.clone(),
            body: body.clone(),
            idempotency_key,
        });
        json!({"step": step, "got": body})
    }
    let state = Endpoint::default();
    let app = Router::new()
        .route(
            "/s/{step}",
            post(
                |State(e): State<Endpoint>,
                 Path(step): Path<String>,
                 headers: HeaderMap,
                 Json(body): Json<Value>| async move {
                    Json(record(&e, step, &headers, body).await)
                },
            ),
        )
        .route(
            "/hold",
            post(
                |State(e): State<Endpoint>, headers: HeaderMap, Json(body): Json<Value>| async move {
                    if e.count("hold") == 0 {
                        e.release.notified().await;
                    }
                    Json(record(&e, "hold".into(), &headers, body).await)
                },
            ),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, base)
}

/// Five calls; each keeps its answer in the state (`save_as`), and the
/// later ones send what the state holds.
fn five_steps(base: &str) -> Value {
    let call = |id: &str, body: Value, save_as: &str| {
        json!({"id": id, "tool": "http_request", "args": {
            "url": format!("{base}/s/{id}"), "method": "POST", "body": body, "save_as": save_as}})
    };
    let city = "{{ state.profile.got.city }}";
    json!({"key": "five", "intent": "t.five", "steps": [
        call("s1", json!({"city": "{{ input.payload.city }}", "tag": "{{ input.payload.tag }}"}), "profile"),
        call("s2", json!({"city": city}), "two"),
        call("s3", json!({"city": city}), "three"),
        call("s4", json!({"city": city, "tag": "{{ input.payload.tag }}", "three": "{{ state.three.got.city }}"}), "four"),
        call("s5", json!({"city": city}), "five"),
    ]})
}

const SAVED_AS: [(&str, &str); 5] = [
    ("s1", "profile"),
    ("s2", "two"),
    ("s3", "three"),
    ("s4", "four"),
    ("s5", "five"),
];

const FORK_FIELDS: &str = "id status error state settledStepIds frozenPlan { id } \
    steps { stepId status output idempotencyKey } \
    checkpoints { position stepId tool iteration stateDigest state seq sourceTaskId } \
    forkedFrom { task { id } stepId rerun } forks { id } \
    events(first: 1000) { seq kind stepId data dataKeys }";

async fn read(app: &TestApp, tenant: &str, id: &str) -> Value {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!("query($id: ID!) {{ task(id: $id) {{ {FORK_FIELDS} }} }}"),
        json!({"id": id}),
    )
    .await
    .data()["task"]
        .clone()
}

async fn fork(app: &TestApp, tenant: &str, input: Value) -> crate::helpers::Gql {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!(
            "mutation($input: ForkTaskInput!) {{ forkTask(input: $input) {{ task {{ {FORK_FIELDS} }} }} }}"
        ),
        json!({"input": input}),
    )
    .await
}

async fn rerun(app: &TestApp, tenant: &str, input: Value) -> crate::helpers::Gql {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!(
            "mutation($input: RerunTaskInput!) {{ rerunTask(input: $input) {{ task {{ {FORK_FIELDS} }} }} }}"
        ),
        json!({"input": input}),
    )
    .await
}

/// The five-step plan run once in `acme`: the endpoint and the task.
async fn five_step_task(app: &TestApp) -> (Endpoint, Value) {
    let (endpoint, base) = endpoint().await;
    app.create_tenant("acme").await;
    app.publish_plan("acme", five_steps(&base)).await.data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "five", "payload": {"city": "Paris", "tag": "a"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = read(app, "acme", &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    (endpoint, task)
}

fn ids(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn output_of<'t>(task: &'t Value, step: &str) -> &'t Value {
    let steps = task["steps"].as_array().unwrap();
    &steps.iter().rev().find(|s| s["stepId"] == step).unwrap()["output"]
}

fn events_of<'t>(task: &'t Value, kind: &str) -> Vec<&'t Value> {
    task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

on_both_backends!(
    a_fork_from_the_middle_runs_only_the_later_steps_with_the_edits,
    a_fork_onto_a_newer_plan_version_runs_that_version_from_the_fork_step,
    checkpoints_and_state_at_agree_with_the_step_outputs,
    another_tenant_cannot_fork_or_rerun_a_task,
);

async fn a_fork_from_the_middle_runs_only_the_later_steps_with_the_edits(app: TestApp) {
    let (endpoint, original) = five_step_task(&app).await;
    let original_id = original["id"].as_str().unwrap();
    for (step, _) in SAVED_AS {
        assert_eq!(endpoint.count(step), 1, "{step} ran once");
    }

    let res = fork(
        &app,
        "acme",
        json!({"taskId": original_id, "fromStepId": "s3",
               "stateEdits": {"profile": {"got": {"city": "Oslo"}}},
               "inputEdits": {"payload": {"tag": "b"}}}),
    )
    .await;
    let created = &res.data()["forkTask"]["task"];
    assert_eq!(created["status"], "PENDING");
    assert_eq!(created["settledStepIds"], json!(["s1", "s2"]));
    assert_eq!(
        created["state"]["profile"],
        json!({"step": "s1", "got": {"city": "Oslo", "tag": "a"}}),
        "the edit merged into the state as s1 left it"
    );
    let fork_id = created["id"].as_str().unwrap().to_owned();

    app.run_tasks().await;
    let forked = read(&app, "acme", &fork_id).await;
    assert_eq!(forked["status"], "COMPLETED", "{forked}");
    // Nothing before the fork point ran again; everything after did.
    assert_eq!(
        SAVED_AS.map(|(step, _)| endpoint.count(step)),
        [1, 1, 2, 2, 2]
    );
    // The later steps ran with the edited state and input.
    assert_eq!(endpoint.last("s3").body, json!({"city": "Oslo"}));
    assert_eq!(
        endpoint.last("s4").body,
        json!({"city": "Oslo", "tag": "b", "three": "Oslo"})
    );
    assert_eq!(endpoint.last("s5").body, json!({"city": "Oslo"}));
    assert_eq!(
        endpoint.last("s3").idempotency_key,
        format!("{}:s3", uuid_of(&fork_id)),
        "the fork's own steps run under its own keys"
    );
    // The copied steps keep their outputs and the keys they ran under.
    for step in ["s1", "s2"] {
        assert_eq!(output_of(&forked, step), output_of(&original, step));
    }
    let keys: Vec<String> = forked["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["idempotencyKey"].as_str().unwrap().to_owned())
        .collect();
    let (o, f) = (uuid_of(original_id), uuid_of(&fork_id));
    assert_eq!(
        keys,
        [
            format!("{o}:s1"),
            format!("{o}:s2"),
            format!("{f}:s3"),
            format!("{f}:s4"),
            format!("{f}:s5")
        ]
    );
    assert_eq!(forked["state"]["four"]["got"]["tag"], "b");
    assert_eq!(original["state"]["four"]["got"]["tag"], "a");

    // The links, both ways, and an event on each task.
    assert_eq!(
        forked["forkedFrom"],
        json!({"task": {"id": original_id}, "stepId": "s3", "rerun": false})
    );
    let original = read(&app, "acme", original_id).await;
    assert_eq!(original["forks"], json!([{"id": fork_id}]));
    let forked_events = events_of(&original, "TASK_FORKED");
    assert_eq!(forked_events.len(), 1);
    assert_eq!(forked_events[0]["data"]["fork"], uuid_of(&fork_id).as_str());
    assert_eq!(forked_events[0]["data"]["from_step"], "s3");
    let from = events_of(&forked, "FORKED_FROM");
    assert_eq!(from.len(), 1);
    assert_eq!(from[0]["data"]["task"], uuid_of(original_id).as_str());
    assert_eq!(from[0]["data"]["copied_steps"], json!(["s1", "s2"]));
    assert_eq!(from[0]["dataKeys"], json!(["profile"]));

    // The fork's checkpoints: the copied ones name the original.
    let sources = ids(&forked["checkpoints"], "sourceTaskId");
    assert_eq!(
        sources,
        [original_id, original_id, &fork_id, &fork_id, &fork_id]
    );
    assert_eq!(
        ids(&forked["checkpoints"], "stepId"),
        ["s1", "s2", "s3", "s4", "s5"]
    );
    assert_eq!(
        forked["checkpoints"][4]["state"], forked["state"],
        "the last checkpoint is the final state"
    );
}

async fn a_fork_onto_a_newer_plan_version_runs_that_version_from_the_fork_step(app: TestApp) {
    let (endpoint, original) = five_step_task(&app).await;
    let original_id = original["id"].as_str().unwrap();
    // Version 2 fixes s3 (it sends a version mark) and adds s6; version 3
    // renames s2, so what the task ran before s3 is not its own.
    let first_url = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { frozenPlan { args } } }",
            json!({"id": original_id}),
        )
        .await
        .data()["task"]["frozenPlan"][0]["args"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut fixed = five_steps(first_url.trim_end_matches("/s/s1"));
    fixed["steps"][2]["args"]["body"]["fixed"] = json!(true);
    let s6 = {
        let mut s = fixed["steps"][4].clone();
        s["id"] = json!("s6");
        s["args"]["save_as"] = json!("six");
        s["args"]["url"] = json!(s["args"]["url"].as_str().unwrap().replace("/s5", "/s6"));
        s
    };
    fixed["steps"].as_array_mut().unwrap().push(s6);
    assert_eq!(
        app.publish_plan("acme", fixed.clone()).await.data()["publishPlan"]["plan"]["version"],
        2
    );
    let mut renamed = fixed.clone();
    renamed["steps"][1]["id"] = json!("s2b");
    assert_eq!(
        app.publish_plan("acme", renamed).await.data()["publishPlan"]["plan"]["version"],
        3
    );

    let refused = fork(
        &app,
        "acme",
        json!({"taskId": original_id, "fromStepId": "s3", "planVersion": 3}),
    )
    .await;
    assert_eq!(refused.error_code(), "BAD_USER_INPUT");
    assert!(
        refused.error_message().contains("not compatible"),
        "{}",
        refused.error_message()
    );
    let missing = fork(
        &app,
        "acme",
        json!({"taskId": original_id, "fromStepId": "s3", "planVersion": 9}),
    )
    .await;
    assert_eq!(
        missing.error_code(),
        "NOT_FOUND",
        "{}",
        missing.error_message()
    );

    let res = fork(
        &app,
        "acme",
        json!({"taskId": original_id, "fromStepId": "s3", "planVersion": 2}),
    )
    .await;
    let fork_id = res.data()["forkTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let forked = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status plan { version } frozenPlan { id } events(first: 100) { kind data } } }",
            json!({"id": fork_id}),
        )
        .await
        .data()["task"]
        .clone();
    assert_eq!(forked["status"], "COMPLETED", "{forked}");
    assert_eq!(forked["plan"]["version"], 2);
    assert_eq!(
        ids(&forked["frozenPlan"], "id"),
        ["s1", "s2", "s3", "s4", "s5", "s6"]
    );
    // The steps before the fork point did not run again; version 2's did.
    assert_eq!(
        ["s1", "s2", "s3", "s4", "s5", "s6"].map(|s| endpoint.count(s)),
        [1, 1, 2, 2, 2, 1]
    );
    assert_eq!(
        endpoint.last("s3").body,
        json!({"city": "Paris", "fixed": true})
    );
    let from = events_of(&forked, "FORKED_FROM");
    assert_eq!(from[0]["data"]["plan_version"], 2);
}

/// SHA-256 (hex) of `value`'s canonical JSON (keys sorted at every depth).
fn digest(value: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), canonical(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    hex::encode(Sha256::digest(canonical(value).to_string().as_bytes()))
}

async fn checkpoints_and_state_at_agree_with_the_step_outputs(app: TestApp) {
    let (_, task) = five_step_task(&app).await;
    let id = task["id"].as_str().unwrap();
    let checkpoints = task["checkpoints"].as_array().unwrap();
    assert_eq!(
        ids(&task["checkpoints"], "stepId"),
        ["s1", "s2", "s3", "s4", "s5"]
    );
    let completions = events_of(&task, "STEP_COMPLETED");
    for (k, checkpoint) in checkpoints.iter().enumerate() {
        let (step, key) = SAVED_AS[k];
        assert_eq!(checkpoint["position"], k);
        assert_eq!(checkpoint["tool"], "http_request");
        assert_eq!(checkpoint["iteration"], Value::Null);
        assert_eq!(checkpoint["sourceTaskId"], id);
        // The state after step k holds exactly what steps 1..=k saved,
        // each as its step's output shows it.
        let state = checkpoint["state"].as_object().unwrap();
        let saved: Vec<&str> = SAVED_AS[..=k].iter().map(|(_, key)| *key).collect();
        let mut keys: Vec<&str> = state.keys().map(String::as_str).collect();
        keys.sort();
        let mut expected = saved.clone();
        expected.sort();
        assert_eq!(keys, expected, "after {step}");
        for (s, saved_key) in &SAVED_AS[..=k] {
            assert_eq!(&state[*saved_key], &output_of(&task, s)["body"]);
        }
        assert_eq!(state[key]["got"], output_of(&task, step)["body"]["got"]);
        assert_eq!(checkpoint["stateDigest"], digest(&checkpoint["state"]));
        // Its seq is the event that settled the step.
        let settled = completions
            .iter()
            .find(|e| e["stepId"] == step)
            .expect("a completion event");
        assert_eq!(checkpoint["seq"], settled["seq"]);
    }
    assert_eq!(checkpoints[4]["state"], task["state"]);

    let at = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { s2: stateAt(stepId: \"s2\") s5: stateAt(stepId: \"s5\") } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(at.data()["task"]["s2"], checkpoints[1]["state"]);
    assert_eq!(at.data()["task"]["s5"], task["state"]);
    let unknown = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { stateAt(stepId: \"nope\") } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(unknown.error_code(), "BAD_USER_INPUT");

    // A fork's steps have not settled until it runs.
    let res = fork(&app, "acme", json!({"taskId": id, "fromStepId": "s2"})).await;
    let fork_id = res.data()["forkTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pending = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { s1: stateAt(stepId: \"s1\") s2: stateAt(stepId: \"s2\") } }",
            json!({"id": fork_id}),
        )
        .await;
    assert_eq!(pending.data()["task"]["s1"], checkpoints[0]["state"]);
    assert_eq!(pending.data()["task"]["s2"], Value::Null);
}

async fn another_tenant_cannot_fork_or_rerun_a_task(app: TestApp) {
    let (endpoint, task) = five_step_task(&app).await;
    let id = task["id"].as_str().unwrap();
    app.create_tenant("other").await;
    let res = fork(&app, "other", json!({"taskId": id, "fromStepId": "s3"})).await;
    assert_eq!(res.error_code(), "NOT_FOUND", "{:?}", res.error_message());
    let res = rerun(&app, "other", json!({"taskId": id})).await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    // A key that may start tasks but not read them cannot fork either.
    let (_, key) = app.create_api_key("acme", &["tasks:write"]).await;
    let res = app
        .graphql(
            Some(&key),
            "mutation($id: ID!) { forkTask(input: {taskId: $id, fromStepId: \"s3\"}) { task { id } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    assert_eq!(app.run_tasks().await, 0, "nothing was started");
    assert_eq!(endpoint.count("s3"), 1);
    let original = read(&app, "acme", id).await;
    assert_eq!(original["forks"], json!([]));
    assert!(events_of(&original, "TASK_FORKED").is_empty());
}

crate::for_both_backends!(
    a_rerun_waits_for_its_task_to_finish,
    an_agent_loop_forks_at_its_second_iteration,
);

async fn a_rerun_waits_for_its_task_to_finish(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (endpoint, base) = endpoint().await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "held", "intent": "t.held", "steps": [
            {"id": "hold", "tool": "http_request",
             "args": {"url": format!("{base}/hold"), "method": "POST", "body": {}}}]}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "held"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = rerun(&app, "acme", json!({"taskId": id})).await;
    assert_eq!(
        refused.error_code(),
        "CONFLICT",
        "a pending task is unfinished"
    );

    let executor = app.executor.clone();
    let running = tokio::spawn(async move { executor.run_until_idle().await });
    poll_until("the task runs its step", async || {
        (app.task("acme", &id).await["status"] == "EXECUTING").then_some(())
    })
    .await;
    let refused = rerun(&app, "acme", json!({"taskId": id, "fromStepId": "hold"})).await;
    assert_eq!(refused.error_code(), "CONFLICT");
    assert!(
        refused.error_message().contains("only a finished task"),
        "{}",
        refused.error_message()
    );
    let refused = fork(&app, "acme", json!({"taskId": id, "fromStepId": "hold"})).await;
    assert_eq!(
        refused.error_code(),
        "CONFLICT",
        "a worker holds it: {}",
        refused.error_message()
    );

    endpoint.release.notify_one();
    running.await.unwrap().unwrap();
    assert_eq!(app.task("acme", &id).await["status"], "COMPLETED");
    let res = rerun(&app, "acme", json!({"taskId": id})).await;
    let again = &res.data()["rerunTask"]["task"];
    assert_eq!(again["forkedFrom"]["rerun"], true);
    assert_eq!(again["forkedFrom"]["stepId"], "hold");
    app.run_tasks().await;
    let again = read(&app, "acme", again["id"].as_str().unwrap()).await;
    assert_eq!(again["status"], "COMPLETED", "{again}");
    assert_eq!(endpoint.count("hold"), 2);
}

/// The tool messages of a model request: `(call id, content)`.
fn tool_answers(request: &Value) -> Vec<(String, Value)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                serde_json::from_str(m["content"].as_str().unwrap()).unwrap(),
            )
        })
        .collect()
}

async fn an_agent_loop_forks_at_its_second_iteration(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("test_lookup", r#"{"q": "tide"}"#.into())]),
        Turn::Calls(vec![("test_lookup", r#"{"q": "moon"}"#.into())]),
        Turn::Text(vec!["Tide and moon."]),
        Turn::Text(vec!["Tide only."]),
    ])
    .await;
    let lookups = Arc::new(AtomicUsize::new(0));
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Lookup(lookups.clone()))];
    let app = TestApp::spawn_full(backend, |c| crate::llm::use_fake(c, &url), tools).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "t.assist", "steps": [
            {"id": "answer", "tool": "agent", "args": {"tools": ["test.lookup"]}}]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "assist", "input": "Tides?"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let original = read(&app, "acme", &id).await;
    assert_eq!(original["status"], "COMPLETED", "{original}");
    assert_eq!(
        ids(&original["checkpoints"], "stepId"),
        ["answer", "answer:1.1", "answer:2", "answer:2.1", "answer:3"]
    );
    let iterations: Vec<Value> = original["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["iteration"].clone())
        .collect();
    assert_eq!(
        iterations,
        [json!(1), json!(null), json!(2), json!(null), json!(3)]
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    let at = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { stateAt(stepId: \"answer\", iteration: 2) } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(
        at.data()["task"]["stateAt"],
        original["checkpoints"][2]["state"]
    );

    let res = fork(
        &app,
        "acme",
        json!({"taskId": id, "fromStepId": "answer", "iteration": 2}),
    )
    .await;
    let created = &res.data()["forkTask"]["task"];
    assert_eq!(created["settledStepIds"], json!(["answer", "answer:1.1"]));
    assert_eq!(
        ids(&created["frozenPlan"], "id"),
        ["answer", "answer:1.1", "answer:2"],
        "what the second iteration injected is left out"
    );
    let fork_id = created["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let forked = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status result { content iterations toolCalls } steps { stepId } forkedFrom { stepId } } }",
            json!({"id": fork_id}),
        )
        .await
        .data()["task"]
        .clone();
    assert_eq!(forked["status"], "COMPLETED", "{forked}");
    assert_eq!(forked["result"]["content"], "Tide only.");
    assert_eq!(forked["result"]["iterations"], 2);
    assert_eq!(forked["result"]["toolCalls"], 1);
    assert_eq!(forked["forkedFrom"]["stepId"], "answer:2");
    assert_eq!(
        ids(&forked["steps"], "stepId"),
        ["answer", "answer:1.1", "answer:2"]
    );
    // The first iteration's call did not run again: the model was answered
    // with its kept output.
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    let requests = script.requests();
    assert_eq!(requests.len(), 4, "one more model call, for iteration 2");
    assert_eq!(
        tool_answers(&requests[3]),
        [("call_1_0".to_owned(), json!({"found": "TIDE"}))]
    );
}
