//! Traces over OTLP: with `otlp_endpoint` set, the request that starts a
//! task, each of its steps and each model call are spans of the task's
//! trace (the id `Task.traceId` shows), exported to a local OTLP/HTTP
//! receiver; an outgoing call carries the trace in its `traceparent`.

use std::sync::{Arc, Mutex};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};

#[derive(Clone, Default)]
struct Collected {
    /// OTLP/JSON export requests.
    exports: Arc<Mutex<Vec<Value>>>,
    /// `traceparent` of each partner call.
    traceparents: Arc<Mutex<Vec<String>>>,
}

/// A local OTLP/HTTP receiver (`/v1/traces`) and a partner (`/call`); the
/// base URL.
async fn receiver(collected: Collected) -> String {
    async fn traces(State(c): State<Collected>, Json(body): Json<Value>) -> StatusCode {
        c.exports.lock().unwrap().push(body);
        StatusCode::OK
    }
    async fn call(State(c): State<Collected>, headers: HeaderMap) -> Json<Value> {
        let parent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        c.traceparents.lock().unwrap().push(parent);
        Json(json!({"ok": true}))
    }
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/call", post(call))
        .with_state(collected);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Every exported span as `(trace id, span id, parent span id, name,
/// attributes)`.
fn spans(exports: &[Value]) -> Vec<(String, String, String, String, Value)> {
    let mut out = Vec::new();
    for export in exports {
        for resource in export["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let text = |k: &str| span[k].as_str().unwrap_or_default().to_lowercase();
                    out.push((
                        text("traceId"),
                        text("spanId"),
                        text("parentSpanId"),
                        text("name"),
                        span["attributes"].clone(),
                    ));
                }
            }
        }
    }
    out
}

fn attribute(attributes: &Value, key: &str) -> String {
    attributes
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"]["stringValue"].as_str())
        .unwrap_or_default()
        .to_owned()
}

crate::for_both_backends!(a_tasks_request_steps_and_model_calls_are_spans_of_its_trace);

async fn a_tasks_request_steps_and_model_calls_are_spans_of_its_trace(backend: Backend) {
    let collected = Collected::default();
    let base = receiver(collected.clone()).await;
    let endpoint = base.clone();
    let app = TestApp::spawn_with(backend, move |c| {
        c.otlp_endpoint = Some(endpoint);
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "traced", "intent": "t.traced", "steps": [
            {"id": "call", "tool": "http_request",
             "args": {"method": "POST", "url": format!("{base}/call")}},
            {"id": "answer", "tool": "agent", "args": {}}
        ]}),
    )
    .await
    .data();
    // The client's own trace: the task joins it.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{client_trace}-00f067aa0ba902b7-01");
    let (res, _) = app
        .graphql_with(
            Some(&app.admin_token("acme")),
            &[("traceparent", traceparent.as_str())],
            json!({"query": "mutation { startTask(input: {planKey: \"traced\", input: \"go\"}) { task { id traceId } } }"}),
        )
        .await;
    let task = &res.data()["startTask"]["task"];
    assert_eq!(task["traceId"], client_trace);
    app.run_tasks().await;
    let id = task["id"].as_str().unwrap();
    assert_eq!(app.task("acme", id).await["status"], "COMPLETED");

    tokio::task::spawn_blocking(brainstem::telemetry::flush_traces)
        .await
        .unwrap();
    let exported = spans(&collected.exports.lock().unwrap());
    let ours: Vec<_> = exported
        .iter()
        .filter(|(trace, ..)| trace == client_trace)
        .collect();
    let names: Vec<&str> = ours.iter().map(|s| s.3.as_str()).collect();
    assert!(names.contains(&"graphql"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "step").count(),
        2,
        "{names:?}"
    );
    assert!(names.contains(&"model call"), "{names:?}");
    let request = ours.iter().find(|s| s.3 == "graphql").unwrap();
    assert_eq!(request.2, "00f067aa0ba902b7", "under the client's span");
    let agent_step = ours
        .iter()
        .find(|s| s.3 == "step" && attribute(&s.4, "tool") == "agent")
        .unwrap();
    let model_call = ours.iter().find(|s| s.3 == "model call").unwrap();
    assert_eq!(model_call.2, agent_step.1, "the model call is in its step");

    // The partner call carried the trace, under the step that made it.
    let parents = collected.traceparents.lock().unwrap().clone();
    assert_eq!(parents.len(), 1);
    let call_step = ours
        .iter()
        .find(|s| s.3 == "step" && attribute(&s.4, "tool") == "http_request")
        .unwrap();
    assert_eq!(
        parents[0],
        format!("00-{client_trace}-{}-01", call_step.1),
        "{exported:?}"
    );
}
