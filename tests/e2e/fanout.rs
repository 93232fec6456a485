//! `taskEvents` fan-out over WebSocket: subscribers of one task with
//! different selections (and protocols) each get their own shape, those
//! with the same selection get the same events, another tenant gets
//! nothing, and a stopped subscription frees its slot.

use std::sync::Arc;

use async_trait::async_trait;
use brainstem_domain::tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, WsClient, WsEvent, poll_until},
    streams::{EVENTS, connect},
};

/// Token deltas the tool streams, in order.
pub(crate) const TOKENS: [&str; 8] = [
    "Once ", "upon ", "a ", "time ", "there ", "was ", "a ", "task.",
];

/// Waits for a permit, then streams [`TOKENS`] as token deltas.
pub(crate) struct Tokens(pub(crate) Arc<Semaphore>);

#[async_trait]
impl Tool for Tokens {
    fn key(&self) -> &str {
        "test.tokens"
    }
    fn description(&self) -> &str {
        "streams a fixed text once the test opens the gate"
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let permit = self
            .0
            .acquire()
            .await
            .map_err(|_| ToolError::fatal("gate closed"))?;
        permit.forget();
        let mut offset = 0;
        for token in TOKENS {
            ctx.token_delta(offset, token);
            offset += token.chars().count();
        }
        Ok(ToolOutput::default())
    }
}

/// An app whose task `id` (tenant `acme`) waits at the gate before it
/// streams, with the executor running in the background.
async fn gated_task(
    backend: Backend,
    max_subscriptions: usize,
) -> (TestApp, Arc<Semaphore>, String) {
    let gate = Arc::new(Semaphore::new(0));
    let app = TestApp::spawn_full(
        backend,
        |c| c.max_subscriptions_per_connection = max_subscriptions,
        vec![Arc::new(Tokens(gate.clone()))],
    )
    .await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let steps = json!([{"id": "write", "tool": "test.tokens"}]);
    app.publish_plan(
        "acme",
        json!({"key": "story", "intent": "t.story", "steps": steps}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "story"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let executor = app.executor.clone();
    tokio::spawn(async move { executor.run_until_idle().await });
    // Wait until the step has started (the tool waits at the gate).
    poll_until("the step has started", async || {
        let task = app.task("acme", &id).await;
        let events = task["events"].as_array().unwrap();
        events
            .iter()
            .any(|e| e["kind"] == "STEP_STARTED")
            .then_some(())
    })
    .await;
    (app, gate, id)
}

async fn last_stored_seq(app: &TestApp, id: &str) -> i64 {
    app.task("acme", id).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .max()
        .unwrap()
}

/// The next `next` (or legacy `data`) message's payload; `None` on
/// `complete`.
async fn next_data(ws: &mut WsClient) -> Option<Value> {
    loop {
        match ws.next_event().await {
            WsEvent::Json(m) if m["type"] == "next" || m["type"] == "data" => {
                assert!(m["payload"].get("errors").is_none(), "{m}");
                return Some(m["payload"]["data"].clone());
            }
            WsEvent::Json(m) if m["type"] == "complete" => return None,
            WsEvent::Json(_) => continue,
            WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
        }
    }
}

/// Read a subscriber's events (under `field`) until it has the stored
/// event `seq`: from then on it is live.
async fn read_until_seq(ws: &mut WsClient, field: &str, seq: i64) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let data = next_data(ws).await.expect("the stream is open");
        let event = data[field].clone();
        let reached = event["seq"].as_i64() == Some(seq);
        out.push(event);
        if reached {
            return out;
        }
    }
}

async fn read_to_end(ws: &mut WsClient, field: &str) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(data) = next_data(ws).await {
        out.push(data[field].clone());
    }
    out
}

fn text_of(events: &[Value], field: &str) -> String {
    events
        .iter()
        .filter_map(|e| e[field].as_str())
        .collect::<Vec<_>>()
        .concat()
}

/// A counter from `/metrics`.
async fn counter(app: &TestApp, name: &str) -> u64 {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

for_both_backends!(
    subscribers_of_one_task_get_their_own_shapes,
    a_stopped_subscription_frees_its_slot,
);

async fn subscribers_of_one_task_get_their_own_shapes(backend: Backend) {
    let (app, gate, id) = gated_task(backend, 10).await;
    let vars = json!({"id": id});
    // Two subscribers with the same document, one with another selection
    // (and an alias), one on the legacy protocol.
    let mut same_1 = connect(&app, "acme").await;
    let mut same_2 = connect(&app, "acme").await;
    let mut other = connect(&app, "acme").await;
    let mut legacy = app.ws_connect("graphql-ws").await;
    legacy.init(Some(&app.admin_token("acme"))).await;
    assert!(matches!(legacy.next_event().await, WsEvent::Json(m) if m["type"] == "connection_ack"));
    let short = "subscription($id: ID!) { ev: taskEvents(taskId: $id) { kind ... on TokenDelta { t: text } } }";
    same_1.subscribe("1", EVENTS, vars.clone()).await;
    same_2.subscribe("a", EVENTS, vars.clone()).await;
    other.subscribe("1", short, vars.clone()).await;
    legacy
        .send(json!({"id": "1", "type": "start", "payload": {"query": EVENTS, "variables": vars}}))
        .await;
    // Another tenant, with the very same document and variables.
    let mut stranger = connect(&app, "globex").await;
    stranger.subscribe("1", EVENTS, vars.clone()).await;
    let refused = stranger.next_payload().await.unwrap();
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{refused}"
    );
    assert!(stranger.next_payload().await.is_none(), "then complete");

    // Everyone has replayed the stored events, so is live: stream.
    let seq = last_stored_seq(&app, &id).await;
    let mut got_1 = read_until_seq(&mut same_1, "taskEvents", seq).await;
    let mut got_2 = read_until_seq(&mut same_2, "taskEvents", seq).await;
    let mut got_legacy = read_until_seq(&mut legacy, "taskEvents", seq).await;
    // `other` selects no seq: read its replay by count.
    let mut got_other = Vec::new();
    for _ in 0..got_1.len() {
        got_other.push(next_data(&mut other).await.unwrap()["ev"].clone());
    }
    gate.add_permits(1);
    got_1.extend(read_to_end(&mut same_1, "taskEvents").await);
    got_2.extend(read_to_end(&mut same_2, "taskEvents").await);
    got_legacy.extend(read_to_end(&mut legacy, "taskEvents").await);
    got_other.extend(read_to_end(&mut other, "ev").await);

    let story = TOKENS.concat();
    // Each event was rendered once per shape: three subscribers share one
    // shape, one has its own, so four frames cost two renderings.
    let renders = counter(&app, "brainstem_websocket_event_renders_total").await;
    let frames = counter(&app, "brainstem_websocket_event_frames_total").await;
    assert_eq!(frames, 4 * got_1.len() as u64);
    assert_eq!(
        renders,
        2 * got_1.len() as u64,
        "{renders} renders for {frames} frames"
    );
    // The same document: the same events, whatever the protocol.
    assert_eq!(got_1, got_2);
    assert_eq!(got_1, got_legacy);
    assert_eq!(text_of(&got_1, "text"), story);
    let stored: Vec<i64> = app.task("acme", &id).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    let seqs: Vec<i64> = got_1
        .iter()
        .filter(|e| e["__typename"] != "TokenDelta")
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, stored, "every stored event once, in order");
    let mut offset = 0;
    for delta in got_1.iter().filter(|e| e["__typename"] == "TokenDelta") {
        assert_eq!(delta["offset"], offset, "{got_1:?}");
        offset += delta["text"].as_str().unwrap().chars().count();
        let keys: Vec<&String> = delta.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 7, "{delta}");
    }
    // Another selection: its own shape, the same story.
    assert_eq!(got_other.len(), got_1.len());
    assert_eq!(text_of(&got_other, "t"), story);
    for event in &got_other {
        let mut keys: Vec<&str> = event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        if event["kind"] == "TOKEN_DELTA" {
            assert_eq!(keys, ["kind", "t"], "{event}");
        } else {
            assert_eq!(keys, ["kind"], "{event}");
        }
    }
    assert_eq!(got_other.last().unwrap()["kind"], "STATUS_CHANGED");

    // The other tenant's connection received nothing meanwhile: the next
    // thing it hears is the answer to its ping.
    stranger.send(json!({"type": "ping"})).await;
    match stranger.next_event().await {
        WsEvent::Json(m) => assert_eq!(m["type"], "pong", "{m}"),
        other => panic!("expected a pong, got {other:?}"),
    }
}

/// The next message of subscription `id`, skipping the others'.
async fn next_of(ws: &mut WsClient, id: &str) -> Value {
    loop {
        match ws.next_event().await {
            WsEvent::Json(m) if m["id"] == id => return m,
            WsEvent::Json(_) => continue,
            WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
        }
    }
}

async fn a_stopped_subscription_frees_its_slot(backend: Backend) {
    let (app, gate, id) = gated_task(backend, 1).await;
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", EVENTS, json!({"id": id})).await;
    let first = next_of(&mut ws, "1").await;
    assert_eq!(first["payload"]["data"]["taskEvents"]["seq"], 1, "{first}");
    // The one slot is taken.
    ws.subscribe("2", EVENTS, json!({"id": id})).await;
    let refused = next_of(&mut ws, "2").await;
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"], "RATE_LIMITED",
        "{refused}"
    );
    assert_eq!(next_of(&mut ws, "2").await["type"], "complete");
    // Stop the first: the slot is free again at once (the connection reads
    // in order), and nothing more comes for "1".
    ws.send(json!({"type": "complete", "id": "1"})).await;
    ws.subscribe("3", EVENTS, json!({"id": id})).await;
    // Live once it has replayed the stored events; then stream.
    let seq = last_stored_seq(&app, &id).await;
    let mut events = Vec::new();
    while events.last().is_none_or(|e: &Value| e["seq"] != seq) {
        let m = next_of(&mut ws, "3").await;
        assert_eq!(m["type"], "next", "{m}");
        events.push(m["payload"]["data"]["taskEvents"].clone());
    }
    // Whatever "1" had been sent before the stop came before "3"'s replay;
    // the live events that follow are for "3" alone.
    gate.add_permits(1);
    loop {
        let m = match ws.next_event().await {
            WsEvent::Json(m) => m,
            WsEvent::Closed(code) => panic!("socket closed ({code:?})"),
        };
        assert_eq!(m["id"], "3", "a stopped subscription got {m}");
        if m["type"] == "complete" {
            break;
        }
        assert_eq!(m["type"], "next", "{m}");
        assert!(m["payload"].get("errors").is_none(), "{m}");
        events.push(m["payload"]["data"]["taskEvents"].clone());
    }
    assert_eq!(events.first().unwrap()["seq"], 1);
    assert_eq!(events.last().unwrap()["status"], "COMPLETED");
    assert_eq!(text_of(&events, "text"), TOKENS.concat());
    ws.send(json!({"type": "ping"})).await;
    match ws.next_event().await {
        WsEvent::Json(m) => assert_eq!(m["type"], "pong", "{m}"),
        other => panic!("expected a pong, got {other:?}"),
    }
}

for_both_backends!(a_subscriber_joining_mid_step_gets_the_text_so_far_then_the_rest);

/// Token deltas are not stored. A subscriber that joins while a step
/// streams starts with the step's text so far as one delta, then the live
/// ones; one that subscribed before the step streamed gets each delta as
/// it was sent, whether or not it was still replaying when they came.
async fn a_subscriber_joining_mid_step_gets_the_text_so_far_then_the_rest(backend: Backend) {
    let (app, gate, id) = gated_task(backend, 10).await;
    let vars = json!({"id": id});
    let seq = last_stored_seq(&app, &id).await;
    let mut early = connect(&app, "acme").await;
    early.subscribe("1", EVENTS, vars.clone()).await;
    read_until_seq(&mut early, "taskEvents", seq).await;

    // The running step's first deltas, as the executor publishes them.
    let task = crate::helpers::uuid_of(&id);
    let tenant = app.domain.tenants.resolve_claim("acme").await.unwrap().id;
    let delta = |offset: usize, text: &str| brainstem_domain::tasks::TaskEvent {
        id: uuid::Uuid::now_v7(),
        tenant,
        task_id: task.parse::<uuid::Uuid>().unwrap().into(),
        seq,
        kind: brainstem_domain::tasks::EventKind::TokenDelta,
        step_id: Some("write".into()),
        tool: None,
        status: None,
        summary: String::new(),
        error: None,
        data_keys: Vec::new(),
        data: json!({"offset": offset, "text": text}),
        created_at: chrono::Utc::now(),
    };
    app.domain
        .events
        .deliver(&[delta(0, "Once "), delta(5, "upon ")]);

    let mut late = connect(&app, "acme").await;
    late.subscribe("1", EVENTS, vars).await;
    let replayed = read_until_seq(&mut late, "taskEvents", seq).await;
    assert!(replayed.iter().all(|e| e["__typename"] != "TokenDelta"));
    let so_far = next_data(&mut late).await.unwrap()["taskEvents"].clone();
    assert_eq!(so_far["__typename"], "TokenDelta");
    assert_eq!(
        (so_far["offset"].as_i64(), so_far["text"].as_str()),
        (Some(0), Some("Once upon "))
    );

    app.domain.events.deliver(&[delta(10, "a ")]);
    let next = next_data(&mut late).await.unwrap()["taskEvents"].clone();
    assert_eq!(
        (next["offset"].as_i64(), next["text"].as_str()),
        (Some(10), Some("a "))
    );
    // The early subscriber: each delta as it was sent.
    let mut sent = Vec::new();
    for _ in 0..3 {
        let e = next_data(&mut early).await.unwrap()["taskEvents"].clone();
        sent.push((
            e["offset"].as_i64().unwrap(),
            e["text"].as_str().unwrap().to_owned(),
        ));
    }
    assert_eq!(
        sent,
        [
            (0, "Once ".to_owned()),
            (5, "upon ".to_owned()),
            (10, "a ".to_owned())
        ]
    );
    gate.add_permits(1);
}
