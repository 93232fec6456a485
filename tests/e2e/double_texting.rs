//! Double texting: a second turn of a conversation sent while the first is
//! still being answered, under each strategy. The model is a local fake
//! OpenAI-compatible server that streams the first turn's answer slowly
//! (two chunks, then nothing until the test releases it) and answers later
//! turns at once; the first turn is driven on its own task while the
//! second is sent, as soon as the first has started streaming.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
};

use axum::{Json, Router, body::Body, extract::State, response::Response, routing::post};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::Notify};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(
    reject_refuses_the_second_turn_while_the_first_runs,
    enqueue_runs_the_second_turn_after_the_first,
    enqueue_waits_for_a_turn_paused_for_review,
    two_retried_turns_run_oldest_first_without_waiting_for_each_other,
    interrupt_stops_the_first_turn_and_keeps_its_text,
    rollback_stops_the_first_turn_and_leaves_it_out,
);

/// The fake model: the requests it got, a signal once the first answer
/// has started, and the gate that lets it finish.
#[derive(Clone, Default)]
struct Slow {
    requests: Arc<Mutex<Vec<Value>>>,
    streaming: Arc<Notify>,
    release: Arc<Notify>,
}

/// One server-sent chunk of a streamed completion carrying `delta`.
pub(crate) fn chunk(delta: Value) -> Vec<u8> {
    format!(
        "data: {}\n\n",
        json!({"id": "c", "object": "chat.completion.chunk", "model": "fake-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    )
    .into_bytes()
}

async fn completions(State(slow): State<Slow>, Json(body): Json<Value>) -> Response {
    let first = {
        let mut requests = slow.requests.lock().unwrap();
        requests.push(body);
        requests.len() == 1
    };
    let head = stream::iter([
        chunk(json!({"role": "assistant", "content": "Part "})),
        chunk(json!({"content": "one "})),
    ]);
    let tail = stream::iter([
        chunk(json!({"content": "done."})),
        b"data: [DONE]\n\n".to_vec(),
    ]);
    let gate = {
        let slow = slow.clone();
        stream::once(async move {
            if first {
                slow.streaming.notify_one();
                slow.release.notified().await;
            }
            Vec::new()
        })
    };
    let body = head.chain(gate).chain(tail).map(Ok::<_, Infallible>);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

async fn slow_model() -> (Slow, String) {
    let slow = Slow::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(slow.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (slow, format!("http://{addr}/v1"))
}

/// The app, the model, a conversation and the admin's token.
async fn setup(backend: Backend) -> (TestApp, Slow, String, String) {
    let (slow, url) = slow_model().await;
    let app = TestApp::spawn_with(backend, |c| crate::llm::use_fake(c, &url)).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "chat", "intent": "chat.reply",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": []}}]}),
    )
    .await
    .data();
    let token = app.admin_token("acme");
    let conversation = app
        .graphql(
            Some(&token),
            "mutation { startConversation(input: {title: \"t\"}) { conversation { id multitask } } }",
            json!({}),
        )
        .await
        .data()["startConversation"]["conversation"]
        .clone();
    assert_eq!(conversation["multitask"], "ENQUEUE", "the default");
    let id = conversation["id"].as_str().unwrap().to_owned();
    (app, slow, token, id)
}

async fn send(
    app: &TestApp,
    token: &str,
    conversation: &str,
    text: &str,
    multitask: Option<&str>,
) -> crate::helpers::Gql {
    send_on(app, token, conversation, "chat", text, multitask).await
}

/// Send a turn of plan `plan`.
async fn send_on(
    app: &TestApp,
    token: &str,
    conversation: &str,
    plan: &str,
    text: &str,
    multitask: Option<&str>,
) -> crate::helpers::Gql {
    app.graphql(
        Some(token),
        "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }",
        json!({"input": {"planKey": plan, "input": text, "conversationId": conversation,
                         "multitask": multitask}}),
    )
    .await
}

fn id_of(sent: &crate::helpers::Gql) -> String {
    sent.data()["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Send the first turn and drive it until its answer is mid-stream.
async fn first_turn_streaming(
    app: &TestApp,
    slow: &Slow,
    token: &str,
    conversation: &str,
) -> (String, tokio::task::JoinHandle<()>) {
    let first = id_of(&send(app, token, conversation, "Tell me about tides.", None).await);
    let executor = app.executor.clone();
    let driving = tokio::spawn(async move {
        executor
            .run_once()
            .await
            .unwrap()
            .expect("the first turn runs");
    });
    tokio::time::timeout(crate::helpers::WAIT, slow.streaming.notified())
        .await
        .expect("the first answer starts streaming");
    (first, driving)
}

async fn read(app: &TestApp, token: &str, id: &str) -> Value {
    app.graphql(
        Some(token),
        "query($id: ID!) { task(id: $id) { status error result { content interrupted rolledBack } \
           steps { stepId status output } events(first: 100) { kind data } } }",
        json!({"id": id}),
    )
    .await
    .data()["task"]
        .clone()
}

fn events_of<'a>(task: &'a Value, kind: &str) -> Vec<&'a Value> {
    task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| &e["data"])
        .collect()
}

/// The user and assistant messages of the model's request `n`.
fn history(slow: &Slow, n: usize) -> Vec<(String, String)> {
    slow.requests.lock().unwrap()[n]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

async fn reject_refuses_the_second_turn_while_the_first_runs(backend: Backend) {
    let (app, slow, token, conversation) = setup(backend).await;
    let (first, driving) = first_turn_streaming(&app, &slow, &token, &conversation).await;
    let second = send(&app, &token, &conversation, "And the moon?", Some("REJECT")).await;
    assert_eq!(second.error_code(), "CONFLICT");
    slow.release.notify_one();
    driving.await.unwrap();
    let first = read(&app, &token, &first).await;
    assert_eq!(first["status"], "COMPLETED", "{first}");
    assert_eq!(first["result"]["content"], "Part one done.");
    let turns = app
        .graphql(
            Some(&token),
            "query($id: ID!) { conversation(id: $id) { turns(first: 10) { edges { node { id } } } } }",
            json!({"id": conversation}),
        )
        .await;
    assert_eq!(
        turns.data()["conversation"]["turns"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the rejected turn is not stored"
    );
}

async fn enqueue_runs_the_second_turn_after_the_first(backend: Backend) {
    let (app, slow, token, conversation) = setup(backend).await;
    let (first, driving) = first_turn_streaming(&app, &slow, &token, &conversation).await;
    // No strategy named: the conversation's, ENQUEUE.
    let second = id_of(&send(&app, &token, &conversation, "And the moon?", None).await);
    assert_eq!(
        app.executor.run_once().await.unwrap(),
        None,
        "the second turn waits while the first runs"
    );
    slow.release.notify_one();
    driving.await.unwrap();
    assert_eq!(app.run_tasks().await, 1);
    let (first, second) = (
        read(&app, &token, &first).await,
        read(&app, &token, &second).await,
    );
    assert_eq!(first["status"], "COMPLETED", "{first}");
    assert_eq!(second["status"], "COMPLETED", "{second}");
    assert_eq!(
        history(&slow, 1),
        pairs(&[
            ("user", "Tell me about tides."),
            ("assistant", "Part one done."),
            ("user", "And the moon?"),
        ])
    );
    let queued = events_of(&second, "TURN_QUEUED");
    assert_eq!(queued.len(), 1, "{second}");
    assert_eq!(queued[0]["strategy"], "ENQUEUE");
    assert_eq!(queued[0]["stops"], json!([]));
    assert_eq!(queued[0]["after"].as_array().unwrap().len(), 1);
    assert!(events_of(&first, "TURN_INTERRUPTED").is_empty());
}

/// ENQUEUE keeps the order while a turn waits for a person: a turn paused
/// for review holds its conversation, and the next turn runs only once
/// that one has finished.
async fn enqueue_waits_for_a_turn_paused_for_review(backend: Backend) {
    let (app, _slow, token, conversation) = setup(backend).await;
    app.publish_plan(
        "acme",
        json!({"key": "checked", "intent": "chat.checked", "steps": [
            {"id": "check", "tool": "set_state", "args": {"checked": true}, "requiresReview": true}]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "noted", "intent": "chat.noted", "steps": [
            {"id": "note", "tool": "set_state", "args": {"noted": true}}]}),
    )
    .await
    .data();
    let turn = async |plan: &str, text: &str| {
        id_of(&send_on(&app, &token, &conversation, plan, text, None).await)
    };
    let first = turn("checked", "Check this.").await;
    app.run_tasks().await;
    let paused = app
        .graphql(
            Some(&token),
            "query($id: ID!) { task(id: $id) { status pendingReview { id } } }",
            json!({"id": first}),
        )
        .await
        .data()["task"]
        .clone();
    assert_eq!(paused["status"], "NEEDS_REVIEW", "{paused}");

    let second = turn("noted", "And then?").await;
    assert_eq!(
        app.run_tasks().await,
        0,
        "the second turn waits for the paused one"
    );
    assert_eq!(read(&app, &token, &second).await["status"], "PENDING");

    app.graphql(
        Some(&token),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }",
        json!({"t": first, "r": paused["pendingReview"]["id"]}),
    )
    .await
    .data();
    app.run_tasks().await;
    let finished = |id: String| {
        let (app, token) = (&app, &token);
        async move {
            app.graphql(
                Some(token),
                "query($id: ID!) { task(id: $id) { status completedAt } }",
                json!({"id": id}),
            )
            .await
            .data()["task"]
                .clone()
        }
    };
    let (first, second) = (finished(first).await, finished(second).await);
    assert_eq!(first["status"], "COMPLETED", "{first}");
    assert_eq!(second["status"], "COMPLETED", "{second}");
    assert!(
        first["completedAt"].as_str() < second["completedAt"].as_str(),
        "{first} {second}"
    );
}

/// Two turns of one conversation that both failed and are retried at once
/// have both started before: each waits only for an older one, so the
/// older runs first and neither waits for the other forever.
async fn two_retried_turns_run_oldest_first_without_waiting_for_each_other(backend: Backend) {
    let (app, _slow, token, conversation) = setup(backend).await;
    // Nothing listens on port 1: the call fails at once, without a retry.
    app.publish_plan(
        "acme",
        json!({"key": "broken", "intent": "chat.broken", "steps": [
            {"id": "call", "tool": "http_request", "retry": {"maxAttempts": 1},
             "args": {"url": "http://127.0.0.1:1/", "method": "POST"}}]}),
    )
    .await
    .data();
    let mut turns = Vec::new();
    for text in ["one", "two"] {
        turns.push(id_of(
            &send_on(&app, &token, &conversation, "broken", text, None).await,
        ));
    }
    assert_eq!(app.run_tasks().await, 2);
    let retried = app
        .graphql(
            Some(&token),
            "mutation { retryTasks(input: {filter: {planKey: \"broken\"}}) { job { id matched } } }",
            json!({}),
        )
        .await;
    let job = retried.data()["retryTasks"]["job"].clone();
    assert_eq!(job["matched"], 2, "{job}");
    crate::helpers::poll_until("the bulk retry completes", async || {
        let done = app
            .graphql(
                Some(&token),
                "query($id: ID!) { retryJob(id: $id) { status retried } }",
                json!({"id": job["id"]}),
            )
            .await
            .data()["retryJob"]
            .clone();
        (done["status"] == "COMPLETED").then_some(done)
    })
    .await;
    assert_eq!(app.run_tasks().await, 2, "both retried turns ran");
    for id in &turns {
        let task = read(&app, &token, id).await;
        assert_eq!(task["status"], "FAILED", "{task}");
        let steps = task["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "one attempt per run: {task}");
    }
    let finished = |id: &String| {
        let (app, token) = (&app, &token);
        let id = id.clone();
        async move {
            app.graphql(
                Some(token),
                "query($id: ID!) { task(id: $id) { completedAt } }",
                json!({"id": id}),
            )
            .await
            .data()["task"]["completedAt"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    assert!(
        finished(&turns[0]).await < finished(&turns[1]).await,
        "the older turn ran first"
    );
}

/// INTERRUPT and ROLLBACK: the first turn stops mid-answer without the
/// model finishing it; the second runs after it. Returns both turns.
async fn stop_the_first(backend: Backend, strategy: &str) -> (Slow, Value, Value) {
    let (app, slow, token, conversation) = setup(backend).await;
    let (first, driving) = first_turn_streaming(&app, &slow, &token, &conversation).await;
    let second = id_of(&send(&app, &token, &conversation, "And the moon?", Some(strategy)).await);
    // Never released: the first answer stops because it was interrupted.
    tokio::time::timeout(crate::helpers::WAIT, driving)
        .await
        .expect("the first turn stops mid-answer")
        .unwrap();
    assert_eq!(app.run_tasks().await, 1);
    let (first, second) = (
        read(&app, &token, &first).await,
        read(&app, &token, &second).await,
    );
    assert_eq!(first["status"], "CANCELLED", "{first}");
    assert_eq!(
        first["result"]["content"], "Part one ",
        "the partial text is kept"
    );
    assert_eq!(first["result"]["interrupted"], true, "{first}");
    assert_eq!(
        first["result"]["rolledBack"],
        strategy == "ROLLBACK",
        "{first}"
    );
    assert_eq!(second["result"]["interrupted"], false, "{second}");
    let step = &first["steps"][0];
    assert_eq!(step["output"]["text"], "Part one ", "{first}");
    assert_eq!(step["output"]["interrupted"], true, "{first}");
    let stopped = events_of(&first, "TURN_INTERRUPTED");
    assert_eq!(stopped.len(), 1, "{first}");
    assert_eq!(stopped[0]["strategy"], strategy);
    assert_eq!(stopped[0]["kept_chars"], 9);
    assert_eq!(second["status"], "COMPLETED", "{second}");
    let queued = events_of(&second, "TURN_QUEUED");
    assert_eq!(queued.len(), 1, "{second}");
    assert_eq!(queued[0]["strategy"], strategy);
    assert_eq!(queued[0]["stops"].as_array().unwrap().len(), 1);
    assert_eq!(slow.requests.lock().unwrap().len(), 2);
    (slow, first, second)
}

/// INTERRUPT sent to another process than the one answering the first
/// turn: the answer stops mid-call there too, not only at its step's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_sent_to_another_process_stops_the_answer_mid_call_postgres() {
    let (app, slow, token, conversation) = setup(Backend::Postgres).await;
    let other = app.spawn_beside(Vec::new()).await;
    let (first, driving) = first_turn_streaming(&app, &slow, &token, &conversation).await;
    let second = id_of(
        &send(
            &other,
            &token,
            &conversation,
            "And the moon?",
            Some("INTERRUPT"),
        )
        .await,
    );
    // Never released: the first answer stops because it was interrupted.
    tokio::time::timeout(crate::helpers::WAIT, driving)
        .await
        .expect("the first turn stops mid-answer")
        .unwrap();
    assert_eq!(other.run_tasks().await, 1);
    let (first, second) = (
        read(&app, &token, &first).await,
        read(&app, &token, &second).await,
    );
    assert_eq!(first["status"], "CANCELLED", "{first}");
    assert_eq!(first["steps"][0]["output"]["interrupted"], true, "{first}");
    assert_eq!(first["result"]["content"], "Part one ");
    assert_eq!(second["status"], "COMPLETED", "{second}");
}

async fn interrupt_stops_the_first_turn_and_keeps_its_text(backend: Backend) {
    let (slow, _, _) = stop_the_first(backend, "INTERRUPT").await;
    assert_eq!(
        history(&slow, 1),
        pairs(&[
            ("user", "Tell me about tides."),
            ("assistant", "Part one  [interrupted]"),
            ("user", "And the moon?"),
        ]),
        "the interrupted turn is in the history, marked"
    );
}

async fn rollback_stops_the_first_turn_and_leaves_it_out(backend: Backend) {
    let (slow, _, _) = stop_the_first(backend, "ROLLBACK").await;
    assert_eq!(
        history(&slow, 1),
        pairs(&[("user", "And the moon?")]),
        "the rolled-back turn is not in the history"
    );
}
