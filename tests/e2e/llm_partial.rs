//! A streamed model call cut by a timeout keeps what it produced: a local
//! fake OpenAI-compatible server streams a few chunks and then stalls; the
//! step fails with `TIMEOUT` and its output holds the text received so far,
//! marked incomplete.

use std::convert::Infallible;

use axum::{Router, body::Body, response::Response, routing::post};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    llm::use_fake,
};

for_both_backends!(a_stream_cut_by_its_timeout_keeps_its_text_in_the_step);

/// One SSE chunk carrying `content`.
fn chunk(content: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake-model",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]
        })
    )
}

/// A fake model that sends "Tides follow " and then nothing, for ever.
async fn stalling_model() -> String {
    async fn completions() -> Response {
        let sent =
            stream::iter(["Tides ", "follow "].map(|c| Ok::<_, Infallible>(chunk(c).into_bytes())));
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(sent.chain(stream::pending())))
            .unwrap()
    }
    let app = Router::new().route("/v1/chat/completions", post(completions));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

async fn a_stream_cut_by_its_timeout_keeps_its_text_in_the_step(backend: Backend) {
    let url = stalling_model().await;
    let app = TestApp::spawn_with(backend, |c| {
        use_fake(c, &url);
        c.llm_stream_timeout_secs = 1;
        c.llm_retry_max_attempts = 1;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({
            "key": "write",
            "intent": "test.write",
            "steps": [{
                "id": "draft", "tool": "llm.generate",
                "args": {"prompt": "Write about the tides"},
                "retry": {"maxAttempts": 1}
            }]
        }),
    )
    .await
    .data();
    let task = app
        .start_task("acme", json!({"planKey": "write", "input": "tides"}))
        .await;
    app.run_tasks().await;
    let task: Value = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status error steps { stepId status error output } } }",
            json!({"id": task["id"]}),
        )
        .await
        .data()["task"]
        .clone();
    assert_eq!(task["status"], "FAILED", "{task}");
    let step = &task["steps"][0];
    assert_eq!(step["status"], "FAILED", "{task}");
    assert!(
        step["error"].as_str().unwrap().starts_with("TIMEOUT"),
        "{task}"
    );
    assert_eq!(step["output"]["text"], "Tides follow ", "{task}");
    assert_eq!(step["output"]["incomplete"], true, "{task}");
}
