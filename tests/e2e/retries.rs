//! The specifications' retry policy for calls to other systems: an
//! `http_request` (or partner) step with no `retry` of its own gets 3
//! attempts, about 1 s and then 2 s apart, retrying only retryable
//! failures; each retry is an event, and a final failure names its
//! attempts. A local HTTP sink that refuses a set number of times. Also
//! the task's running-time limit and its trace id on outgoing calls.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, routing::post};
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};

/// Answers 503 to its first `refusals` requests, then 200.
async fn sink(refusals: usize) -> (Arc<AtomicUsize>, String) {
    let seen = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/sink",
            post(
                |State((seen, refusals)): State<(Arc<AtomicUsize>, usize)>| async move {
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    if n < refusals {
                        (StatusCode::SERVICE_UNAVAILABLE, "busy")
                    } else {
                        (StatusCode::OK, "{\"ok\": true}")
                    }
                },
            ),
        )
        .with_state((seen.clone(), refusals));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sink", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, url)
}

/// Run a one-step `http_request` plan against `url` with a worker, waiting
/// for the outcome; the app and the task with its attempts and events.
async fn run(backend: Backend, url: &str) -> (TestApp, Value) {
    let app = TestApp::spawn_with(backend, |c| {
        c.workers = 1;
        c.audit_tool_calls = true;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "call", "intent": "t.call",
               "steps": [{"id": "call", "tool": "http_request",
                          "args": {"url": url, "method": "POST", "body": {}}}]}),
    )
    .await
    .data();
    let res = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation { startTask(input: {planKey: \"call\", mode: ENQUEUE_AND_WAIT, waitTimeoutMs: 20000}) { task { id status error steps { attempt status } events(first: 100) { kind data } } } }",
            json!({}),
        )
        .await;
    let task = res.data()["startTask"]["task"].clone();
    (app, task)
}

fn retries(task: &Value) -> Vec<u64> {
    task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "STEP_FAILED" && e["data"]["will_retry"] == true)
        .map(|e| e["data"]["retry_in_ms"].as_u64().unwrap())
        .collect()
}

crate::for_both_backends!(
    a_refused_call_succeeds_on_its_third_attempt,
    a_call_refused_every_time_fails_naming_its_attempts,
    a_task_past_its_running_time_fails_with_timeout,
    the_tasks_trace_id_reaches_the_called_system,
);

async fn a_refused_call_succeeds_on_its_third_attempt(backend: Backend) {
    let (seen, url) = sink(2).await;
    let (app, task) = run(backend, &url).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    let attempts: Vec<(u64, &str)> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["attempt"].as_u64().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, [(1, "FAILED"), (2, "FAILED"), (3, "COMPLETED")]);
    // Equal jitter: half the delay fixed, half random; 1 s, then 2 s.
    let delays = retries(&task);
    assert_eq!(delays.len(), 2, "{delays:?}");
    assert!((500..=1000).contains(&delays[0]), "{delays:?}");
    assert!((1000..=2000).contains(&delays[1]), "{delays:?}");

    // Each attempt is a `tool.call` audit row.
    let audit = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ auditLog(filter: {actionPrefix: \"tool.\"}, first: 10) { edges { node { actor target data verified } } } }",
            json!({}),
        )
        .await;
    let rows: Vec<Value> = audit.data()["auditLog"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect();
    let statuses: Vec<&str> = rows
        .iter()
        .map(|r| r["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["FAILED", "FAILED", "COMPLETED"]);
    assert!(rows.iter().all(|r| r["data"]["tool"] == "http_request"
        && r["verified"] == true
        && r["actor"].as_str().unwrap().starts_with("executor:")
        && r["target"].as_str().unwrap().ends_with(":call")));
    assert!(rows[0]["data"]["error"].as_str().unwrap().contains("503"));
}

async fn a_call_refused_every_time_fails_naming_its_attempts(backend: Backend) {
    let (seen, url) = sink(usize::MAX).await;
    let (_app, task) = run(backend, &url).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .ends_with("(after 3 attempts)"),
        "{task}"
    );
}

/// Takes 700 ms of work.
struct Busy;

#[async_trait::async_trait]
impl brainstem_domain::tools::Tool for Busy {
    fn key(&self) -> &str {
        "test.busy"
    }
    fn description(&self) -> &str {
        "works for 700 ms"
    }
    async fn call(
        &self,
        _ctx: brainstem_domain::tools::ToolContext,
        _args: Value,
    ) -> Result<brainstem_domain::tools::ToolOutput, brainstem_domain::tools::ToolError> {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        Ok(brainstem_domain::tools::ToolOutput::with_output(
            json!({"done": true}),
            "worked",
        ))
    }
}

/// A task's running time is the sum of its steps' work: with 1 s allowed,
/// the first 700 ms step completes, the second gets the 300 ms left and
/// times out, and the task fails; time spent waiting for review does not
/// count.
async fn a_task_past_its_running_time_fails_with_timeout(backend: Backend) {
    let app = TestApp::spawn_full(
        backend,
        |c| c.task_timeout_secs = 1,
        vec![std::sync::Arc::new(Busy)],
    )
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "busy", "intent": "t.busy", "steps": [
            {"id": "one", "tool": "test.busy"},
            {"id": "wait", "tool": "set_state", "args": {"x": 1}, "requiresReview": true},
            {"id": "two", "tool": "test.busy"}
        ]}),
    )
    .await
    .data();
    let id = app.start_task("acme", json!({"planKey": "busy"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let waiting = app.task("acme", &id).await;
    assert_eq!(waiting["status"], "NEEDS_REVIEW");
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }",
        json!({"t": id, "r": waiting["pendingReview"]["id"]}),
    )
    .await
    .data();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("timed out after"),
        "{task}"
    );
    let steps: Vec<(&str, &str)> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stepId"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("one", "COMPLETED"),
            ("wait", "COMPLETED"),
            ("two", "FAILED")
        ]
    );
}

/// The `(trace id, idempotency key, traceparent)` headers of each request
/// a sink saw.
type Seen = Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// A task's `traceId` reaches the systems its steps call: `http_request`
/// sends it as `X-Brainstem-Trace-Id` and in a W3C `traceparent`, beside
/// the step's idempotency key.
async fn the_tasks_trace_id_reaches_the_called_system(backend: Backend) {
    let seen: Seen = Arc::default();
    let router = Router::new()
        .route(
            "/trace",
            post(
                |State(seen): State<Seen>, headers: axum::http::HeaderMap| async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    seen.lock().unwrap().push((
                        header("x-brainstem-trace-id"),
                        header("idempotency-key"),
                        header("traceparent"),
                    ));
                    "{}"
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/trace", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let (app, task) = run(backend, &url).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let id = task["id"].as_str().unwrap();
    let stored = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { traceId } }",
            json!({"id": id}),
        )
        .await;
    let trace = stored.data()["task"]["traceId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!trace.is_empty());
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let (sent_trace, key, traceparent) = &calls[0];
    assert_eq!(sent_trace, &trace);
    assert_eq!(key, &format!("{}:call", crate::helpers::uuid_of(id)));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!((parts[0], parts[1], parts[3]), ("00", trace.as_str(), "01"));
    assert_eq!(parts[2].len(), 16);
}
