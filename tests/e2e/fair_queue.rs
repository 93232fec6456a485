//! The fair and concurrent executor, on the real server: a process keeps
//! many slow steps in flight at once (slots), one tenant's backlog never
//! stalls another's task, and the limits hold.
//!
//! Slow steps call a local endpoint that holds each request until the test
//! releases it, so what is in flight at any moment is decided by the test,
//! not by timing.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{Router, extract::State, routing::post};
use brainstem::config::Config;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::helpers::{Backend, TestApp, WAIT};

crate::for_both_backends!(a_process_keeps_many_slow_steps_in_flight);

/// An endpoint that answers each request only once the test releases it.
pub struct SlowEndpoint {
    pub url: String,
    state: Arc<Held>,
}

struct Held {
    arrived: AtomicUsize,
    gate: Semaphore,
    changed: Notify,
}

async fn hold(State(held): State<Arc<Held>>) -> axum::Json<Value> {
    held.arrived.fetch_add(1, Ordering::SeqCst);
    held.changed.notify_waiters();
    if let Ok(permit) = held.gate.acquire().await {
        permit.forget();
    }
    axum::Json(json!({"ok": true}))
}

impl SlowEndpoint {
    pub async fn start() -> Self {
        let state = Arc::new(Held {
            arrived: AtomicUsize::new(0),
            gate: Semaphore::new(0),
            changed: Notify::new(),
        });
        let app = Router::new()
            .route("/slow", post(hold))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/slow", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, state }
    }

    /// Requests that have arrived so far (answered or held).
    pub fn arrived(&self) -> usize {
        self.state.arrived.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` requests have arrived.
    pub async fn wait_for_arrivals(&self, n: usize) {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.state.changed.notified();
                if self.arrived() >= n {
                    return;
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} requests should arrive; {} did", self.arrived()));
    }

    /// Answer every request, held or to come.
    pub fn release_all(&self) {
        self.state.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

/// An app driving `slots` tasks at once, with no request rate limits (the
/// tests start hundreds of tasks at once).
pub async fn app_with_slots(
    backend: Backend,
    slots: usize,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    TestApp::spawn_with(backend, |c| {
        c.executor_slots = slots;
        c.rate_limit_per_key_rps = 0.0;
        c.rate_limit_per_tenant_rps = 0.0;
        tweak(c);
    })
    .await
}

/// Publish `tenant`'s plan `slow`: one step posting to `url`, tried once.
pub async fn publish_slow_plan(app: &TestApp, tenant: &str, url: &str) {
    app.publish_plan(
        tenant,
        json!({"key": "slow", "intent": "t.slow", "steps": [
            {"id": "call", "tool": "http_request",
             "args": {"method": "POST", "url": url}, "retry": {"maxAttempts": 1}}
        ]}),
    )
    .await
    .data();
}

/// Start `n` tasks of `plan_key` in `tenant`, a few requests at a time;
/// returns their ids.
pub async fn start_many(app: &TestApp, tenant: &str, plan_key: &str, n: usize) -> Vec<String> {
    use futures_util::StreamExt;
    futures_util::stream::iter(0..n)
        .map(|_| async {
            app.start_task(tenant, json!({"planKey": plan_key})).await["id"]
                .as_str()
                .expect("a task id")
                .to_owned()
        })
        .buffered(16)
        .collect()
        .await
}

/// Wait until `tenant`'s task `id` has `status`.
pub async fn wait_for_status(app: &TestApp, tenant: &str, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let task = app.task(tenant, id).await;
        if task["status"] == status {
            return task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task should become {status}: {}",
            task["status"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Forty tasks whose step waits on the endpoint are all in flight at once
/// in one process (four workers held four).
async fn a_process_keeps_many_slow_steps_in_flight(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 40, |_| {}).await;
    app.create_tenant("acme").await;
    publish_slow_plan(&app, "acme", &slow.url).await;
    let ids = start_many(&app, "acme", "slow", 40).await;
    slow.wait_for_arrivals(40).await;
    slow.release_all();
    for id in &ids {
        wait_for_status(&app, "acme", id, "COMPLETED").await;
    }
}
