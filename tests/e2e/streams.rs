//! Live task events over a real WebSocket: replay after a sequence number
//! then live with no gap or duplicate, resumption after dropped
//! connections, slow subscribers, tenant isolation, limits, and (on
//! PostgreSQL) a subscriber on one process watching a worker in another.

use std::{pin::Pin, process::Stdio, sync::Arc, time::Duration};

use async_trait::async_trait;
use brainstem_domain::{
    TaskId, TenantId, TenantScope,
    events::{self, Delivery},
    row_security::{self, RowAccess},
    tasks::EventKind,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::{
    fanout::{TOKENS, Tokens},
    for_both_backends,
    helpers::{Backend, TestApp, WAIT, WsClient, WsEvent, poll_until, uuid_of},
};

pub(crate) const EVENTS: &str = "subscription($id: ID!, $after: Int) { taskEvents(taskId: $id, after: $after) { __typename seq kind stepId status ... on TokenDelta { offset text } } }";

/// Waits for a permit before finishing: lets a test hold a task mid-run.
pub(crate) struct Gate(pub(crate) Arc<Semaphore>);

#[async_trait]
impl Tool for Gate {
    fn key(&self) -> &str {
        "test.gate"
    }
    fn description(&self) -> &str {
        "waits until the test opens the gate"
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let permit = self
            .0
            .acquire()
            .await
            .map_err(|_| ToolError::fatal("gate closed"))?;
        permit.forget();
        Ok(ToolOutput::default())
    }
}

/// Publish `steps` as acme's plan `gated` and start a task of it: its id.
pub(crate) async fn start_gated(app: &TestApp, steps: Vec<Value>) -> String {
    app.publish_plan(
        "acme",
        json!({"key": "gated", "intent": "t.gated", "steps": steps}),
    )
    .await
    .data();
    app.start_task("acme", json!({"planKey": "gated"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Subscribe to the task `id` of `tenant` before it runs (the subscription
/// first replays its stored `PENDING` event), run the tasks, and return
/// every event up to `complete`.
pub(crate) async fn watch_run(app: &TestApp, tenant: &str, id: &str) -> Vec<Value> {
    let mut ws = connect(app, tenant).await;
    ws.subscribe("1", EVENTS, json!({"id": id})).await;
    let first = ws.next_payload().await.unwrap();
    assert_eq!(first["data"]["taskEvents"]["seq"], 1);
    app.run_tasks().await;
    ws.events_until_complete().await
}

pub(crate) async fn connect(app: &TestApp, tenant: &str) -> WsClient {
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&app.admin_token(tenant))).await;
    match ws.next_event().await {
        WsEvent::Json(m) => assert_eq!(m["type"], "connection_ack"),
        other => panic!("expected an ack, got {other:?}"),
    }
    ws
}

impl WsClient {
    pub(crate) async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(json!({"id": id, "type": "subscribe", "payload": {"query": query, "variables": variables}}))
            .await;
    }

    /// The next `next` payload of any subscription; `None` on `complete`.
    pub(crate) async fn next_payload(&mut self) -> Option<Value> {
        loop {
            match self.next_event().await {
                WsEvent::Json(m) if m["type"] == "next" => return Some(m["payload"].clone()),
                WsEvent::Json(m) if m["type"] == "complete" => return None,
                WsEvent::Json(m) if m["type"] == "error" => {
                    return Some(json!({"errors": m["payload"]}));
                }
                WsEvent::Json(_) => continue,
                WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
            }
        }
    }

    /// Read task events until the stream completes.
    pub(crate) async fn events_until_complete(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(p) = self.next_payload().await {
            assert!(p.get("errors").is_none(), "{p}");
            out.push(p["data"]["taskEvents"].clone());
        }
        out
    }
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e["__typename"] != "TokenDelta")
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

async fn stored_seqs(app: &TestApp, tenant: &str, id: &str) -> Vec<i64> {
    app.task(tenant, id).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

for_both_backends!(
    subscribing_after_k_gets_exactly_the_rest_in_order,
    resubscribing_from_the_last_seq_after_random_drops_gets_every_event_once,
    a_stalled_subscriber_does_not_slow_the_task_and_misses_nothing,
    other_tenants_tasks_are_not_found_and_connections_have_limits,
    task_updates_stream_status_changes,
    deltas_read_from_the_bus_while_replaying_go_out_after_their_steps_start,
);

async fn subscribing_after_k_gets_exactly_the_rest_in_order(backend: Backend) {
    let gate = Arc::new(Semaphore::new(0));
    let app = TestApp::spawn_with_tools(backend, vec![Arc::new(Gate(gate.clone()))]).await;
    app.create_tenant("acme").await;
    let steps: Vec<Value> = vec![
        json!({"id": "a", "tool": "set_state", "args": {"x": 1}}),
        json!({"id": "wait", "tool": "test.gate"}),
        json!({"id": "b", "tool": "set_state", "args": {"y": 2}}),
        json!({"id": "c", "tool": "set_state", "args": {"z": 3}}),
    ];
    let id = start_gated(&app, steps).await;
    // Run until the task blocks at the gate.
    let executor = app.executor.clone();
    let running = tokio::spawn(async move { executor.run_until_idle().await });
    poll_until("the task waits at the gate (5 events)", async || {
        (stored_seqs(&app, "acme", &id).await.len() >= 5).then_some(())
    })
    .await;
    let k = 3;
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", EVENTS, json!({"id": id, "after": k}))
        .await;
    gate.add_permits(1);
    let received = ws.events_until_complete().await;
    running.await.unwrap().unwrap();
    let stored = stored_seqs(&app, "acme", &id).await;
    assert_eq!(
        seqs(&received),
        stored[k as usize..].to_vec(),
        "exactly k+1… in order"
    );
    let last = received.last().unwrap();
    assert_eq!(last["__typename"], "StatusChanged");
    assert_eq!(last["status"], "COMPLETED");
}

/// A small deterministic generator, so a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

async fn resubscribing_from_the_last_seq_after_random_drops_gets_every_event_once(
    backend: Backend,
) {
    let app = TestApp::spawn_with(backend, |c| c.workers = 2).await;
    app.create_tenant("acme").await;
    let steps: Vec<Value> = (0..30)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"i": i}}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "many", "intent": "t.many", "steps": steps}),
    )
    .await
    .data();
    for seed in [1u64, 7, 42] {
        let mut rng = Lcg(seed);
        let id = app.start_task("acme", json!({"planKey": "many"})).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut seen: Vec<i64> = Vec::new();
        let mut done = false;
        while !done {
            let mut ws = connect(&app, "acme").await;
            let after = seen.last().copied().unwrap_or(0);
            ws.subscribe("1", EVENTS, json!({"id": id, "after": after}))
                .await;
            // Read a random number of events, then drop the connection.
            let take = 1 + rng.below(12);
            for _ in 0..take {
                match ws.next_payload().await {
                    Some(p) => {
                        let e = &p["data"]["taskEvents"];
                        if e["__typename"] != "TokenDelta" {
                            seen.push(e["seq"].as_i64().unwrap());
                        }
                    }
                    None => {
                        done = true;
                        break;
                    }
                }
            }
            drop(ws);
        }
        let stored = stored_seqs(&app, "acme", &id).await;
        assert_eq!(
            seen, stored,
            "seed {seed}: every event exactly once, in order"
        );
        assert_eq!(seen, (1..=stored.len() as i64).collect::<Vec<_>>());
    }
}

async fn a_stalled_subscriber_does_not_slow_the_task_and_misses_nothing(backend: Backend) {
    // A tiny bus, so the stalled subscriber falls out of it and must catch
    // up from the store.
    let app = TestApp::spawn_with(backend, |c| c.event_bus_capacity = 4).await;
    app.create_tenant("acme").await;
    let steps: Vec<Value> = (0..40)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"i": i}}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "long", "intent": "t.long", "steps": steps}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "long"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", EVENTS, json!({"id": id})).await;
    // The subscriber reads nothing while the task runs to completion.
    app.run_tasks().await;
    assert_eq!(app.task("acme", &id).await["status"], "COMPLETED");
    let received = ws.events_until_complete().await;
    assert_eq!(seqs(&received), stored_seqs(&app, "acme", &id).await);
}

async fn other_tenants_tasks_are_not_found_and_connections_have_limits(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.max_subscriptions_per_connection = 2).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let plan = json!({"key": "p", "intent": "t.p", "steps": [{"id": "a", "tool": "set_state"}]});
    app.publish_plan("acme", plan).await.data();
    let id = app.start_task("acme", json!({"planKey": "p"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut other = connect(&app, "globex").await;
    other.subscribe("1", EVENTS, json!({"id": id})).await;
    let p = other.next_payload().await.unwrap();
    assert_eq!(p["errors"][0]["extensions"]["code"], "NOT_FOUND", "{p}");
    assert!(!p.to_string().contains("STATUS_CHANGED"));

    // Three subscriptions on a connection that may hold two: exactly one is
    // refused. Which one depends on the order their streams take their
    // slots; each accepted one first replays the task's stored `PENDING`
    // event, so every subscription answers once, with a deadline per answer.
    let mut ws = connect(&app, "acme").await;
    for n in 1..=3 {
        ws.subscribe(&n.to_string(), EVENTS, json!({"id": id}))
            .await;
    }
    let is_refusal = |m: &Value| m["type"] == "error" || m["payload"]["errors"].is_array();
    let mut answers: std::collections::BTreeMap<String, Value> = Default::default();
    while answers.len() < 3 {
        match ws.next_event().await {
            WsEvent::Json(m) if m["type"] == "next" || m["type"] == "error" => {
                let sub = m["id"].as_str().unwrap().to_owned();
                let previous = answers.insert(sub, m.clone());
                assert!(previous.is_none(), "a second answer: {m}");
            }
            // A refusal sent as `next` with errors is followed by `complete`.
            WsEvent::Json(m) if m["type"] == "complete" => {
                let answer = &answers[m["id"].as_str().unwrap()];
                assert!(is_refusal(answer), "completed without a refusal: {m}");
            }
            WsEvent::Json(m) if m["type"] == "ping" || m["type"] == "pong" => {}
            WsEvent::Json(m) => panic!("unexpected {m}"),
            WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
        }
    }
    let refused: Vec<&Value> = answers.values().filter(|m| is_refusal(m)).collect();
    assert_eq!(refused.len(), 1, "exactly one refusal: {answers:?}");
    let refusal = refused[0];
    let errors = if refusal["type"] == "error" {
        refusal["payload"].clone()
    } else {
        refusal["payload"]["errors"].clone()
    };
    assert_eq!(errors[0]["extensions"]["code"], "RATE_LIMITED", "{refusal}");
    for m in answers.values().filter(|m| !is_refusal(m)) {
        assert_eq!(m["payload"]["data"]["taskEvents"]["seq"], 1, "{m}");
    }
}

async fn task_updates_stream_status_changes(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.workers = 1).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let plan = json!({"key": "p", "intent": "t.p", "steps": [{"id": "a", "tool": "set_state", "args": {"x": 1}}]});
    app.publish_plan("acme", plan.clone()).await.data();
    app.publish_plan("globex", plan).await.data();
    let mut ws = connect(&app, "acme").await;
    ws.subscribe(
        "1",
        "subscription { taskUpdates(filter: {statuses: [COMPLETED]}) { id status state } }",
        json!({}),
    )
    .await;
    // Let the subscription register before the work starts: a query on the
    // same connection is answered after the subscribe was processed.
    ws.subscribe(
        "ping",
        "subscription { taskUpdates(filter: {statuses: [CANCELLED]}) { id } }",
        json!({}),
    )
    .await;
    let other = app
        .graphql(
            Some(&app.admin_token("globex")),
            "mutation { startTask(input: {planKey: \"p\"}) { task { id } } }",
            json!({}),
        )
        .await;
    other.data();
    let id = app.start_task("acme", json!({"planKey": "p"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let update = tokio::time::timeout(WAIT, ws.next_payload())
        .await
        .unwrap()
        .unwrap();
    let task = &update["data"]["taskUpdates"];
    assert_eq!(
        task["id"],
        id.as_str(),
        "only this tenant's tasks: {update}"
    );
    assert_eq!(task["status"], "COMPLETED");
    assert_eq!(task["state"]["x"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_one_process_sees_a_worker_in_another_postgres() {
    // This process serves the API and runs no workers.
    let app = TestApp::spawn(Backend::Postgres).await;
    app.create_tenant("acme").await;
    let steps: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"i": i}}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "remote", "intent": "t.remote", "steps": steps}),
    )
    .await
    .data();
    let mut ws = connect(&app, "acme").await;
    let id = app.start_task("acme", json!({"planKey": "remote"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ws.subscribe("1", EVENTS, json!({"id": id})).await;
    // A separate `brainstem worker` process runs the task.
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg("worker")
        .env("BRAINSTEM_DATABASE_URL", &app.config.database_url)
        // The offline providers: no models fetched at start.
        .env("BRAINSTEM_LLM_PROVIDER", "offline")
        .env("BRAINSTEM_EMBEDDING_PROVIDER", "offline")
        .env(
            "BRAINSTEM_CONNECTION_ENCRYPTION_KEY",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .env("BRAINSTEM_WORKERS", "2")
        .env("BRAINSTEM_EXECUTOR_POLL_MS", "50")
        .env("BRAINSTEM_LOG", "error")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let received = tokio::time::timeout(Duration::from_secs(60), ws.events_until_complete())
        .await
        .unwrap();
    let _ = worker.start_kill();
    let stored = stored_seqs(&app, "acme", &id).await;
    assert_eq!(seqs(&received), stored);
    assert_eq!(received.last().unwrap()["status"], "COMPLETED");
    // Every step's events crossed processes.
    for i in 0..5 {
        let step = format!("s{i}");
        assert!(
            received
                .iter()
                .any(|e| e["__typename"] == "StepCompleted" && e["stepId"] == step.as_str())
        );
    }
}

/// The domain's event stream of task `id` of `tenant` (global ids) from
/// its first event, as the tenant's row access sees it. It does its work
/// only when polled: a test decides when it reads.
pub(crate) fn deliveries(
    app: &TestApp,
    tenant: &str,
    id: &str,
) -> Pin<Box<dyn Stream<Item = Delivery> + Send>> {
    let scope = TenantScope::new(TenantId::from(
        uuid_of(tenant).parse::<uuid::Uuid>().unwrap(),
    ));
    let stream = events::task_event_deliveries(
        app.domain.tasks.clone(),
        app.domain.events.clone(),
        scope,
        TaskId::from(uuid_of(id).parse::<uuid::Uuid>().unwrap()),
        0,
    );
    Box::pin(row_security::stream(
        Some(RowAccess::Tenant(scope.tenant_id())),
        stream,
    ))
}

async fn deltas_read_from_the_bus_while_replaying_go_out_after_their_steps_start(backend: Backend) {
    // The tokens' gate is open: the task streams as soon as it runs.
    let tokens = Tokens(Arc::new(Semaphore::new(1)));
    let app = TestApp::spawn_with_tools(backend, vec![Arc::new(tokens)]).await;
    let tenant = app.create_tenant("acme").await;
    let id = start_gated(&app, vec![json!({"id": "talk", "tool": "test.tokens"})]).await;
    let mut stream = deliveries(&app, &tenant, &id).map(Delivery::into_event);
    // The stored creation event. The stream is polled again only once the
    // task has run: its next store read then finds the step's start and
    // end, while the step's deltas wait in its queue on the bus.
    assert_eq!(stream.next().await.unwrap().seq, 1);
    app.run_tasks().await;
    let events: Vec<_> = tokio::time::timeout(WAIT, stream.collect()).await.unwrap();
    let at = |kind: EventKind| {
        events
            .iter()
            .position(|e| e.kind == kind)
            .unwrap_or_else(|| panic!("{kind:?} in {events:?}"))
    };
    let (started, completed) = (at(EventKind::StepStarted), at(EventKind::StepCompleted));
    let deltas: Vec<_> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EventKind::TokenDelta)
        .collect();
    assert_eq!(deltas.len(), TOKENS.len(), "{events:?}");
    for (i, delta) in &deltas {
        assert!(
            started < *i && *i < completed,
            "a delta between its step's start and end: {events:?}"
        );
        assert_eq!(delta.seq, events[started].seq, "at the step start's seq");
    }
    let text: String = deltas
        .iter()
        .map(|(_, e)| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, TOKENS.concat());
    assert_eq!(events.last().unwrap().status.as_deref(), Some("COMPLETED"));
}
