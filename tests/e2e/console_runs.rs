//! Forks and double texting in the console, in headless Chromium against
//! the real server on PostgreSQL (`console/tests/runs.mjs`; see
//! `console.rs` for where its packages and the browser come from):
//!
//! - a five-step plan of calls to a local endpoint that counts them (by
//!   step) is forked from its middle step with a state edit from the task
//!   page; the fork runs only the steps from there on, with the edit, and
//!   shows what it was forked from; the original lists it and runs again;
//! - a conversation on a local fake model that streams each answer's first
//!   words and then waits until the check releases it (one answer a
//!   release), so a second message is always sent while a turn runs: the
//!   strategy is changed on the page, `REJECT` refuses the message and
//!   keeps it, `ENQUEUE` queues it and runs it after, `INTERRUPT` (the
//!   conversation's) and `ROLLBACK` (picked for one message) stop the
//!   running turn, marked on the page.

use std::{
    convert::Infallible,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    body::Body,
    extract::{Path, State},
    response::Response,
    routing::{get, post},
};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::{
    console::{browser, node_checks},
    double_texting::chunk,
    helpers::{Backend, TestApp, WAIT},
};

/// What the local fakes saw, and the gate the model's answers wait at.
#[derive(Clone)]
struct Fakes {
    /// Each call to the endpoint: `{"step", "body"}`.
    calls: Arc<Mutex<Vec<Value>>>,
    /// The messages of each request to the model (system ones left out).
    requests: Arc<Mutex<Vec<Value>>>,
    /// An answer takes one permit before its last words; `/release` adds one.
    gate: Arc<Semaphore>,
}

/// "Part one " at once, then "done." once released.
async fn completions(State(fakes): State<Fakes>, Json(body): Json<Value>) -> Response {
    let messages: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| json!({"role": m["role"], "content": m["content"]}))
        .collect();
    fakes.requests.lock().unwrap().push(json!(messages));
    let head = stream::iter([
        chunk(json!({"role": "assistant", "content": "Part "})),
        chunk(json!({"content": "one "})),
    ]);
    let gate = stream::once(async move {
        fakes.gate.acquire().await.unwrap().forget();
        Vec::new()
    });
    let tail = stream::iter([
        chunk(json!({"content": "done."})),
        b"data: [DONE]\n\n".to_vec(),
    ]);
    let body = head.chain(gate).chain(tail).map(Ok::<_, Infallible>);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

/// The endpoint (`POST /s/{step}` answers `{"step", "got": <the body>}`),
/// the model (`/v1`), and for the check: `GET /calls`, `GET /requests`
/// and `POST /release`.
async fn serve() -> (Fakes, String) {
    let fakes = Fakes {
        calls: Arc::default(),
        requests: Arc::default(),
        gate: Arc::new(Semaphore::new(0)),
    };
    let app = Router::new()
        .route(
            "/s/{step}",
            post(
                |State(f): State<Fakes>, Path(step): Path<String>, Json(body): Json<Value>| async move {
                    f.calls
                        .lock()
                        .unwrap()
                        .push(json!({"step": step, "body": body}));
                    Json(json!({"step": step, "got": body}))
                },
            ),
        )
        .route(
            "/calls",
            get(|State(f): State<Fakes>| async move { Json(json!(*f.calls.lock().unwrap())) }),
        )
        .route("/v1/chat/completions", post(completions))
        .route(
            "/requests",
            get(|State(f): State<Fakes>| async move { Json(json!(*f.requests.lock().unwrap())) }),
        )
        .route(
            "/release",
            post(|State(f): State<Fakes>| async move {
                f.gate.add_permits(1);
                Json(json!({"released": 1}))
            }),
        )
        .with_state(fakes.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fakes, base)
}

/// Five calls; the first keeps its answer in the state, the others send
/// the city it holds.
fn five_steps(base: &str) -> Value {
    let call = |id: &str, body: Value, save_as: &str| {
        json!({"id": id, "tool": "http_request", "args": {
            "url": format!("{base}/s/{id}"), "method": "POST", "body": body, "save_as": save_as}})
    };
    let city = json!({"city": "{{ state.profile.got.city }}"});
    json!({"key": "five", "intent": "t.five", "steps": [
        call("s1", json!({"city": "Paris"}), "profile"),
        call("s2", city.clone(), "two"),
        call("s3", city.clone(), "three"),
        call("s4", city.clone(), "four"),
        call("s5", city, "five"),
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_and_double_texting_work_in_a_real_browser() {
    let (dir, chromium) = browser();
    let (fakes, base) = serve().await;
    let app = TestApp::spawn_with(Backend::Postgres, |c| {
        c.executor_slots = 2;
        crate::llm::use_fake(c, &format!("{base}/v1"));
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan("acme", five_steps(&base)).await.data();
    app.publish_plan(
        "acme",
        json!({"key": "assistant", "intent": "t.assistant",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": []}}]}),
    )
    .await
    .data();
    let shots =
        PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
            .join("console-screenshots");
    let mut node = tokio::process::Command::new("node");
    node.arg(dir.join("tests/runs.mjs"))
        .current_dir(&dir)
        .env("BRAINSTEM_URL", format!("http://{}", app.address))
        .env("ACME_TOKEN", app.admin_token("acme"))
        .env("FAKES_URL", &base)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT_DIR", &shots);
    let (results, stdout) = node_checks(
        node,
        WAIT * 9,
        &format!("runs checks (screenshots in {})", shots.display()),
    )
    .await;
    assert_eq!(results.len(), 2, "{stdout}");

    // Seen from the fakes: the fork ran s3 to s5 again, not s1 and s2; the
    // rerun of the original ran all five.
    let counts: Vec<usize> = ["s1", "s2", "s3", "s4", "s5"]
        .map(|step| {
            fakes
                .calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| c["step"] == step)
                .count()
        })
        .into();
    assert_eq!(counts, [2, 2, 3, 3, 3]);
    // Seven turns reached the model; the refused one did not.
    assert_eq!(fakes.requests.lock().unwrap().len(), 7);
}
