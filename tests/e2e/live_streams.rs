//! Live token deltas across server processes on PostgreSQL: deltas a task
//! streams on one process reach a subscriber connected to another process
//! on the same database in order and complete (and the producing
//! process's own subscribers too), travelling several per notification;
//! subscribers on either process that fall out of the bounded bus still
//! get every stored event once, in order; and stored events announced
//! apart from the statements that store them (as on Citus) still reach
//! another process, while no statement that writes rows calls `pg_notify`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use brainstem_domain::{
    events::Announce,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};
use sea_orm::sqlx::postgres::PgListener;
use serde_json::{Value, json};

use crate::{
    helpers::{Backend, TestApp, WAIT},
    streams::{EVENTS, connect},
};

/// Small deltas the tool streams, around one long delta.
const DELTAS: usize = 400;
/// Characters of the long delta: more than one notification may carry.
const LONG: usize = 20_000;

/// Streams [`DELTAS`] short deltas with a long one in the middle, in
/// bursts (no await within a burst).
struct Stream;

fn piece(i: usize) -> String {
    if i == DELTAS / 2 {
        "é\"".repeat(LONG / 2)
    } else {
        format!("t{i} ")
    }
}

fn expected_text() -> String {
    (0..DELTAS).map(piece).collect()
}

#[async_trait]
impl Tool for Stream {
    fn key(&self) -> &str {
        "test.stream"
    }
    fn description(&self) -> &str {
        "streams many token deltas in bursts"
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let mut offset = 0;
        for i in 0..DELTAS {
            let text = piece(i);
            ctx.token_delta(offset, &text);
            offset += text.chars().count();
            if i % 64 == 63 {
                tokio::task::yield_now().await;
            }
        }
        Ok(ToolOutput::default())
    }
}

/// A task of tenant `acme` on `app` with `steps`, not run yet.
async fn task_with(app: &TestApp, steps: Value) -> String {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "stream", "intent": "t.stream", "steps": steps}),
    )
    .await
    .data();
    app.start_task("acme", json!({"planKey": "stream"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The stored events' seqs of the task, in order.
async fn stored_seqs(app: &TestApp, id: &str) -> Vec<i64> {
    app.task("acme", id).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

/// The text `events` stream for step `step`, checking that each delta
/// starts where the text so far ends (in order, no gap, no duplicate) and
/// that all come between the step's start and its completion.
fn streamed_text(events: &[Value], step: &str) -> String {
    let mut text = String::new();
    let mut phase = 0; // 0: before StepStarted, 1: streaming, 2: completed
    for e in events {
        match e["__typename"].as_str().unwrap() {
            "StepStarted" if e["stepId"] == step => phase = 1,
            "StepCompleted" if e["stepId"] == step => phase = 2,
            "TokenDelta" => {
                assert_eq!(phase, 1, "a delta outside its step: {e}");
                assert_eq!(
                    e["offset"].as_u64().unwrap() as usize,
                    text.chars().count(),
                    "deltas in order, without gap or overlap"
                );
                text.push_str(e["text"].as_str().unwrap());
            }
            _ => {}
        }
    }
    assert_eq!(phase, 2, "the step completed");
    text
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e["__typename"] != "TokenDelta")
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_produced_on_one_process_reach_a_subscriber_on_another_in_order_and_complete_postgres()
 {
    // The process running the task; its deltas wait for a full
    // notification (or the step's end), never for the clock.
    let worker = TestApp::spawn_full(
        Backend::Postgres,
        |c| c.event_notify_linger_ms = 600_000,
        vec![Arc::new(Stream)],
    )
    .await;
    // Another server process on the same database, running no tasks.
    let server = worker.spawn_beside(Vec::new()).await;
    let id = task_with(&worker, json!([{"id": "stream", "tool": "test.stream"}])).await;
    // What crosses between processes, as any listener hears it.
    let mut listener = PgListener::connect(&worker.config.database_url)
        .await
        .unwrap();
    listener
        .listen(brainstem_domain::events::CHANNEL)
        .await
        .unwrap();
    let mut remote = connect(&server, "acme").await;
    let mut local = connect(&worker, "acme").await;
    for ws in [&mut remote, &mut local] {
        ws.subscribe("1", EVENTS, json!({"id": id})).await;
        let first = ws.next_payload().await.unwrap();
        assert_eq!(first["data"]["taskEvents"]["seq"], 1);
    }
    worker.run_tasks().await;
    let expected = expected_text();
    for (who, ws) in [
        ("another process", &mut remote),
        ("the same process", &mut local),
    ] {
        let events = tokio::time::timeout(WAIT, ws.events_until_complete())
            .await
            .unwrap();
        assert_eq!(
            streamed_text(&events, "stream"),
            expected,
            "every delta, in order, on {who}"
        );
        // After the first event, read above.
        assert_eq!(seqs(&events), stored_seqs(&worker, &id).await[1..]);
        assert_eq!(events.last().unwrap()["status"], "COMPLETED");
    }
    // Several deltas per notification, each under PostgreSQL's limit.
    let (mut notifications, mut deltas) = (0, 0);
    loop {
        let note = tokio::time::timeout(WAIT, listener.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(note.payload().len() < 8000);
        let values: Vec<Value> = serde_json::from_str(note.payload()).unwrap();
        let carried = values.iter().filter(|v| v["kind"] == "TokenDelta").count();
        if carried > 0 {
            notifications += 1;
            deltas += carried;
        }
        if values.iter().any(|v| v["status"] == "COMPLETED") {
            break;
        }
    }
    assert!(deltas >= DELTAS, "every delta crossed: {deltas}");
    assert!(
        notifications * 4 <= deltas,
        "{deltas} deltas in {notifications} notifications"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_fall_out_of_the_bus_on_either_process_get_every_stored_event_once_postgres()
 {
    // A tiny bus: bursts of deltas overflow it, so the subscribers lag and
    // catch up from the store.
    let worker = TestApp::spawn_full(
        Backend::Postgres,
        |c| c.event_bus_capacity = 4,
        vec![Arc::new(Stream)],
    )
    .await;
    let server = worker.spawn_beside(Vec::new()).await;
    let mut steps: Vec<Value> = (0..20)
        .map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"i": i}}))
        .collect();
    steps.insert(10, json!({"id": "stream", "tool": "test.stream"}));
    let id = task_with(&worker, json!(steps)).await;
    let mut remote = connect(&server, "acme").await;
    let mut local = connect(&worker, "acme").await;
    for ws in [&mut remote, &mut local] {
        ws.subscribe("1", EVENTS, json!({"id": id})).await;
    }
    worker.run_tasks().await;
    let stored = stored_seqs(&worker, &id).await;
    assert_eq!(stored, (1..=stored.len() as i64).collect::<Vec<_>>());
    for (who, ws) in [
        ("another process", &mut remote),
        ("the same process", &mut local),
    ] {
        let events = tokio::time::timeout(WAIT, ws.events_until_complete())
            .await
            .unwrap();
        assert_eq!(seqs(&events), stored, "every stored event once on {who}");
        // What deltas arrived never repeat text.
        let mut end = 0;
        for e in events.iter().filter(|e| e["__typename"] == "TokenDelta") {
            let offset = e["offset"].as_u64().unwrap() as usize;
            assert!(offset >= end, "no text twice on {who}");
            end = offset + e["text"].as_str().unwrap().chars().count();
        }
    }
    let metrics = worker.metrics_text().await;
    let catch_ups: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("brainstem_subscription_catch_up_reads_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        catch_ups > 0.0,
        "a subscriber lagged and caught up: {metrics}"
    );
}

/// Announced apart ([`Announce::Apart`], what a process does on a Citus
/// coordinator, where a statement writing a distributed table runs on a
/// worker nobody listens to), a task's stored events still cross to a
/// subscriber on another process, each once and in order; every
/// notification is a statement of its own, and it carries the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_events_announced_apart_still_reach_another_process_postgres() {
    let worker = TestApp::spawn(Backend::Postgres).await;
    worker.domain.tasks.announce(Announce::Apart);
    let sent: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = sent.clone();
    worker
        .domain
        .statements
        .observe(Arc::new(move |sql: &str| {
            if let Ok(mut sent) = recorder.lock() {
                sent.push(sql.to_owned());
            }
        }))
        .unwrap_or_else(|_| panic!("no other observer"));
    let server = worker.spawn_beside(Vec::new()).await;
    let mut listener = PgListener::connect(&worker.config.database_url)
        .await
        .unwrap();
    listener
        .listen(brainstem_domain::events::CHANNEL)
        .await
        .unwrap();
    let id = task_with(
        &worker,
        json!([
            {"id": "one", "tool": "set_state", "args": {"a": 1}},
            {"id": "two", "tool": "set_state", "args": {"b": 2}}
        ]),
    )
    .await;
    let mut remote = connect(&server, "acme").await;
    remote.subscribe("1", EVENTS, json!({"id": id})).await;
    let first = remote.next_payload().await.unwrap();
    assert_eq!(first["data"]["taskEvents"]["seq"], 1);
    worker.run_tasks().await;
    let events = tokio::time::timeout(WAIT, remote.events_until_complete())
        .await
        .unwrap();
    let stored = stored_seqs(&worker, &id).await;
    assert_eq!(seqs(&events), stored[1..]);
    assert_eq!(events.last().unwrap()["status"], "COMPLETED");

    // What the listener heard: every stored event, the last COMPLETED.
    let mut heard = Vec::new();
    while heard.len() < stored.len() {
        let note = tokio::time::timeout(WAIT, listener.recv())
            .await
            .unwrap()
            .unwrap();
        let values: Vec<Value> = serde_json::from_str(note.payload()).unwrap();
        heard.extend(values.iter().filter_map(|v| v["seq"].as_i64()));
    }
    assert_eq!(heard, stored);

    let sent = sent.lock().unwrap().clone();
    let notifying: Vec<&String> = sent.iter().filter(|s| s.contains("pg_notify")).collect();
    assert!(notifying.len() >= 3, "{notifying:#?}");
    for sql in notifying {
        assert!(
            sql.trim_start().starts_with("SELECT pg_notify"),
            "a notification inside a writing statement: {sql}"
        );
    }
}
