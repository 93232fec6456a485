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

crate::for_both_backends!(
    a_process_keeps_many_slow_steps_in_flight,
    a_tenants_backlog_never_stalls_another,
    reserved_slots_start_a_newcomer_at_once,
    priority_orders_a_tenants_tasks,
    tenant_max_running_holds,
    a_concurrency_key_runs_at_most_max_concurrent,
);

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

    /// Answer `n` more of the held requests (or of those still to come).
    pub fn release(&self, n: usize) {
        self.state.gate.add_permits(n);
    }

    /// Answer every request, held or to come.
    pub fn release_all(&self) {
        self.state.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

/// An app driving `slots` tasks at once, none of them reserved (unless
/// `tweak` says otherwise), with no request rate limits (the tests start
/// hundreds of tasks at once).
pub async fn app_with_slots(
    backend: Backend,
    slots: usize,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    TestApp::spawn_with(backend, |c| {
        c.executor_slots = slots;
        c.executor_reserved_slots = 0;
        c.rate_limit_per_key_rps = 0.0;
        c.rate_limit_per_tenant_rps = 0.0;
        tweak(c);
    })
    .await
}

/// Publish `tenant`'s plan `slow`: one step posting to `url`, tried once.
pub async fn publish_slow_plan(app: &TestApp, tenant: &str, url: &str) {
    publish_slow_plan_as(app, tenant, "slow", url, None).await;
}

/// Publish `tenant`'s plan `key` like [`publish_slow_plan`], with the
/// plan's `maxConcurrent`.
async fn publish_slow_plan_as(
    app: &TestApp,
    tenant: &str,
    key: &str,
    url: &str,
    max_concurrent: Option<u32>,
) {
    app.publish_plan(
        tenant,
        json!({"key": key, "intent": format!("t.{key}"), "maxConcurrent": max_concurrent,
               "steps": [
            {"id": "call", "tool": "http_request",
             "args": {"method": "POST", "url": url}, "retry": {"maxAttempts": 1}}
        ]}),
    )
    .await
    .data();
}

/// Publish `tenant`'s plan `quick`: one `set_state` step.
pub async fn publish_quick_plan(app: &TestApp, tenant: &str) {
    app.publish_plan(
        tenant,
        json!({"key": "quick", "intent": "t.quick", "steps": [
            {"id": "note", "tool": "set_state", "args": {"done": true}}
        ]}),
    )
    .await
    .data();
}

/// Start a task of `plan_key` in `tenant` with more `input` fields;
/// returns its id.
async fn start(app: &TestApp, tenant: &str, input: Value) -> String {
    app.start_task(tenant, input).await["id"]
        .as_str()
        .expect("a task id")
        .to_owned()
}

/// Set `tenant_id`'s settings in the fair queue as a platform admin.
pub async fn set_tenant_queue(app: &TestApp, tenant_id: &str, settings: Value) -> Value {
    let mut input = settings;
    input["tenantId"] = json!(tenant_id);
    app.graphql(
        Some(&app.platform_admin_token()),
        "mutation($input: SetTenantQueueInput!) { setTenantQueue(input: $input) { queue { weight maxRunning llmRpm llmTpm } } }",
        json!({"input": input}),
    )
    .await
    .data()["setTenantQueue"]["queue"]
        .clone()
}

/// `tenant`'s `queueStats`, as its admin.
async fn queue_stats(app: &TestApp, tenant: &str) -> Value {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "{ queueStats { tenantId runnable running waitingOnLimit oldestWaitSeconds } }",
        json!({}),
    )
    .await
    .data()["queueStats"][0]
        .clone()
}

/// The waiting reason of `tenant`'s task `id`.
async fn waiting_reason(app: &TestApp, tenant: &str, id: &str) -> Value {
    app.graphql(
        Some(&app.admin_token(tenant)),
        "query($id: ID!) { task(id: $id) { waitingReason } }",
        json!({"id": id}),
    )
    .await
    .data()["task"]["waitingReason"]
        .clone()
}

/// A task of `tenant` started and seen `COMPLETED`: by then the claiming
/// loop has looked at the queue again, so a task it did not take was held
/// back by the rule, not by chance.
async fn run_one_quick_task(app: &TestApp, tenant: &str) {
    let id = start(app, tenant, json!({"planKey": "quick"})).await;
    wait_for_status(app, tenant, &id, "COMPLETED").await;
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

/// Tenant A fills every slot with steps that wait on the endpoint and has
/// a backlog of 190 more; tenant B's task, started after all of them, takes
/// the first slot that frees (FIFO would put it behind A's backlog).
async fn a_tenants_backlog_never_stalls_another(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 10, |_| {}).await;
    app.create_tenant("acme").await;
    app.create_tenant("beta").await;
    publish_slow_plan(&app, "acme", &slow.url).await;
    publish_quick_plan(&app, "beta").await;
    start_many(&app, "acme", "slow", 200).await;
    slow.wait_for_arrivals(10).await;
    let b = start(&app, "beta", json!({"planKey": "quick"})).await;
    assert_eq!(waiting_reason(&app, "beta", &b).await, "WAITING_FOR_SLOT");
    let before = queue_stats(&app, "acme").await;
    assert_eq!(before["running"], 10, "{before}");
    assert_eq!(before["runnable"], 190, "{before}");
    // One of A's steps ends: its slot goes to B.
    slow.release(1);
    wait_for_status(&app, "beta", &b, "COMPLETED").await;
    assert!(
        slow.arrived() <= 11,
        "A's tasks took the slot B waited for: {} arrived",
        slow.arrived()
    );
    let after = queue_stats(&app, "acme").await;
    assert!(after["runnable"].as_u64().unwrap() >= 188, "{after}");
    slow.release_all();
}

/// With 8 slots, 2 of them reserved, tenant A's 100 slow tasks hold 6
/// and leave the last two: tenant B's task, started after them, completes
/// while every one of A's steps still waits on the endpoint, and A never
/// takes a reserved slot, even once B's task has freed it.
async fn reserved_slots_start_a_newcomer_at_once(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 8, |c| c.executor_reserved_slots = 2).await;
    app.create_tenant("acme").await;
    app.create_tenant("beta").await;
    publish_slow_plan(&app, "acme", &slow.url).await;
    publish_quick_plan(&app, "beta").await;
    start_many(&app, "acme", "slow", 100).await;
    slow.wait_for_arrivals(6).await;
    run_one_quick_task(&app, "beta").await;
    // B's drive has ended and woken the claiming loop, which then looked
    // at A's backlog with two slots free.
    run_one_quick_task(&app, "beta").await;
    let stats = queue_stats(&app, "acme").await;
    assert_eq!(stats["running"], 6, "{stats}");
    assert_eq!(stats["runnable"], 94, "{stats}");
    assert_eq!(slow.arrived(), 6, "A's tasks took a reserved slot");
    // Once one of A's steps ends, A takes its slot again, and only it.
    slow.release(1);
    slow.wait_for_arrivals(7).await;
    run_one_quick_task(&app, "beta").await;
    assert_eq!(slow.arrived(), 7);
    slow.release_all();
}

/// With one slot, a tenant's higher-priority task runs before an older
/// one of lower priority.
async fn priority_orders_a_tenants_tasks(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 1, |_| {}).await;
    app.create_tenant("acme").await;
    publish_slow_plan(&app, "acme", &slow.url).await;
    publish_quick_plan(&app, "acme").await;
    start(&app, "acme", json!({"planKey": "slow"})).await;
    slow.wait_for_arrivals(1).await;
    let low = start(&app, "acme", json!({"planKey": "quick"})).await;
    let high = start(&app, "acme", json!({"planKey": "quick", "priority": 5})).await;
    slow.release_all();
    let low = wait_for_status(&app, "acme", &low, "COMPLETED").await;
    let high = wait_for_status(&app, "acme", &high, "COMPLETED").await;
    assert!(
        completed_at(&app, "acme", &high["id"]).await
            < completed_at(&app, "acme", &low["id"]).await,
        "the priority 5 task should finish first"
    );
}

async fn completed_at(
    app: &TestApp,
    tenant: &str,
    id: &Value,
) -> chrono::DateTime<chrono::FixedOffset> {
    let at = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "query($id: ID!) { task(id: $id) { completedAt } }",
            json!({"id": id}),
        )
        .await
        .data()["task"]["completedAt"]
        .as_str()
        .expect("completed")
        .to_owned();
    chrono::DateTime::parse_from_rfc3339(&at).unwrap()
}

/// A tenant whose `maxRunning` is 3 runs three of its eight slow tasks
/// while slots are free; the rest wait on the limit, visibly.
async fn tenant_max_running_holds(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 20, |_| {}).await;
    let a = app.create_tenant("acme").await;
    app.create_tenant("beta").await;
    let queue = set_tenant_queue(&app, &a, json!({"maxRunning": 3})).await;
    assert_eq!(queue["maxRunning"], 3, "{queue}");
    assert_eq!(app.audit_actions("acme", "tenant_queue.set").await.len(), 1);
    publish_slow_plan(&app, "acme", &slow.url).await;
    publish_quick_plan(&app, "beta").await;
    let ids = start_many(&app, "acme", "slow", 8).await;
    slow.wait_for_arrivals(3).await;
    run_one_quick_task(&app, "beta").await;
    assert_eq!(slow.arrived(), 3, "the limit of 3 did not hold");
    let stats = queue_stats(&app, "acme").await;
    assert_eq!(stats["running"], 3, "{stats}");
    assert_eq!(stats["waitingOnLimit"], 5, "{stats}");
    assert_eq!(stats["runnable"], 0, "{stats}");
    let mut reasons = Vec::new();
    for id in &ids {
        reasons.push(waiting_reason(&app, "acme", id).await);
    }
    let held = reasons
        .iter()
        .filter(|r| **r == "TENANT_MAX_RUNNING")
        .count();
    assert_eq!(held, 5, "{reasons:?}");
    slow.release_all();
    for id in &ids {
        wait_for_status(&app, "acme", id, "COMPLETED").await;
    }
}

/// A plan with `maxConcurrent: 2`: of five tasks keyed `k1` and two keyed
/// `k2`, two of each run; the other k1 tasks wait on their key.
async fn a_concurrency_key_runs_at_most_max_concurrent(backend: Backend) {
    let slow = SlowEndpoint::start().await;
    let app = app_with_slots(backend, 20, |_| {}).await;
    app.create_tenant("acme").await;
    app.create_tenant("beta").await;
    publish_slow_plan_as(&app, "acme", "keyed", &slow.url, Some(2)).await;
    publish_quick_plan(&app, "beta").await;
    let mut ids = Vec::new();
    for key in ["k1", "k1", "k1", "k1", "k1", "k2", "k2"] {
        ids.push(
            start(
                &app,
                "acme",
                json!({"planKey": "keyed", "concurrencyKey": key}),
            )
            .await,
        );
    }
    slow.wait_for_arrivals(4).await;
    run_one_quick_task(&app, "beta").await;
    assert_eq!(slow.arrived(), 4, "a key ran more than its maxConcurrent");
    assert_eq!(
        waiting_reason(&app, "acme", &ids[4]).await,
        "MAX_CONCURRENT"
    );
    let stats = queue_stats(&app, "acme").await;
    assert_eq!(stats["waitingOnLimit"], 3, "{stats}");
    // One k1 task ends: the next k1 task, and only it, starts.
    slow.release(1);
    slow.wait_for_arrivals(5).await;
    run_one_quick_task(&app, "beta").await;
    assert_eq!(slow.arrived(), 5);
    slow.release_all();
    for id in &ids {
        wait_for_status(&app, "acme", id, "COMPLETED").await;
    }
}

/// Two processes (two executors) on one PostgreSQL share one tenant's
/// `maxRunning`: tasks started through both, at once, run four at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_tenants_limit() {
    let slow = SlowEndpoint::start().await;
    let first = app_with_slots(Backend::Postgres, 10, |_| {}).await;
    let second = first.another_process(|_| {}).await;
    let a = first.create_tenant("acme").await;
    first.create_tenant("beta").await;
    set_tenant_queue(&first, &a, json!({"maxRunning": 4})).await;
    publish_slow_plan(&first, "acme", &slow.url).await;
    publish_quick_plan(&first, "beta").await;
    let (one, two) = tokio::join!(
        start_many(&first, "acme", "slow", 8),
        start_many(&second, "acme", "slow", 8)
    );
    slow.wait_for_arrivals(4).await;
    run_one_quick_task(&first, "beta").await;
    run_one_quick_task(&second, "beta").await;
    assert_eq!(
        slow.arrived(),
        4,
        "the two processes ran more than 4 at once"
    );
    // As tasks end, both processes keep the tenant at its limit.
    slow.release(4);
    slow.wait_for_arrivals(8).await;
    run_one_quick_task(&first, "beta").await;
    run_one_quick_task(&second, "beta").await;
    assert_eq!(slow.arrived(), 8);
    slow.release_all();
    for id in one.iter().chain(&two) {
        wait_for_status(&first, "acme", id, "COMPLETED").await;
    }
}
